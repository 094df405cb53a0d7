"""Speed of the tempered potential and its gradient on the seed BNN (10 -> 64 -> 64 -> 1).

Section (a), 500 points, float32, one torch thread (``--threads``), medians over interleaved
rounds, each timing ``-(lp + beta * ll)`` and its gradient with respect to all 4929 latents:

- floor: the same log density written by hand in plain torch, gradient by autograd;
- traced: ``ModelSplit.log_densities`` (``poutine.condition`` + ``poutine.trace`` +
  ``compute_log_prob`` + log-det-Jacobians), gradient by autograd;
- fast: ``FunctionalSplit.log_densities`` as ``TemperedPotential`` calls it, gradient by autograd
  (the gradients come precomputed from the captured graph);
- fast, raw: the captured graph itself, ``FunctionalSplit.evaluate`` plus the combination;
- batched: ``batched_potential_and_grad`` with K = 1 and K = 8 replicas per call, vmapped
  (``batched="vmap"``) and looped (``batched="loop"``, what ``"auto"`` picks on one CPU thread).

``--options`` adds the other strategies that were measured to choose the fast path: the minimal
substituting messenger without a Trace (eager, autograd), ``torch.func.grad_and_value`` of it,
and ``torch.jit.trace`` of its forward pass with autograd through the traced graph;
``--compile`` adds ``torch.compile`` of the messenger path (about a minute to compile).
Benchmarks print; they never assert.

Run::

    python benchmarks/pt_speed.py            # about a minute on a 2-core CPU
    python benchmarks/pt_speed.py --quick    # smoke test
"""

import argparse
import math
import os
import platform
import statistics
import sys
import time
import warnings

import torch

import pyro

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bnn import NOISE, CountingModel, initial_params, make_data  # noqa: E402

from pyro_pt.capture import split_terms  # noqa: E402
from pyro_pt.functional import FunctionalSplit  # noqa: E402
from pyro_pt.tempering import ModelSplit  # noqa: E402

BETA = 0.5


def floor_fn(x, y, names):
    """The BNN's tempered potential and gradient in hand-written torch."""
    const = 0.5 * math.log(2 * math.pi)

    def run(z):
        z = {k: v.detach().requires_grad_(True) for k, v in z.items()}
        lp = sum((-0.5 * v * v).sum() - const * v.numel() for v in z.values())
        h = torch.relu(x @ z["w0"] + z["b0"])
        h = torch.relu(h @ z["w1"] + z["b1"])
        h = (h @ z["w2"] + z["b2"]).squeeze(-1)
        r = (y - h) / NOISE
        ll = (-0.5 * r * r).sum() - y.numel() * (math.log(NOISE) + const)
        potential = -(lp + BETA * ll)
        return potential, torch.autograd.grad(potential, [z[n] for n in names])

    return run


def split_fn(split):
    """Potential and gradient through anything with ``log_densities(z) -> (lp, ll)``."""

    def run(z):
        z = {k: v.detach().requires_grad_(True) for k, v in z.items()}
        lp, ll = split.log_densities(z)
        potential = -(lp + BETA * ll)
        return potential, torch.autograd.grad(potential, list(z.values()))

    return run


def option_fns(split, fast, z, compile_too):
    """The strategies not chosen, for the record."""
    layout = fast.layout
    flat0 = layout.flatten(z)

    def terms(flat):
        with pyro.validation_enabled(False):
            return split_terms(split, layout, flat)

    def potential(flat, beta):
        lp, ll = terms(flat)
        return -(lp + beta * ll), ll

    def messenger():
        flat = flat0.clone().requires_grad_(True)
        value, _ = potential(flat, BETA)
        return value, torch.autograd.grad(value, flat)

    grad_fn = torch.func.grad_and_value(potential, has_aux=True)
    beta = torch.tensor(BETA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced_forward = torch.jit.trace(terms, (flat0,), check_trace=False)

    def jit_forward():
        flat = flat0.clone().requires_grad_(True)
        lp, ll = traced_forward(flat)
        value = -(lp + BETA * ll)
        return value, torch.autograd.grad(value, flat)

    fns = {
        "messenger, eager": messenger,
        "messenger, torch.func": lambda: grad_fn(flat0, beta),
        "jit.trace forward": jit_forward,
    }
    if compile_too:
        compiled = torch.compile(potential)

        def compiled_fn():
            flat = flat0.clone().requires_grad_(True)
            value, _ = compiled(flat, beta)
            return value, torch.autograd.grad(value, flat)

        start = time.perf_counter()
        compiled_fn()
        print(f"torch.compile: first call (compilation) {time.perf_counter() - start:.1f} s")
        fns["torch.compile"] = compiled_fn
    return fns


def time_rounds(fns, rounds, calls, warmup=3):
    """Median ms per call of each function over interleaved rounds."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(warmup):
                fn()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}, times


def section_a(args):
    print(f"(a) tempered potential + gradient on the seed BNN, float32, "
          f"{torch.get_num_threads()} torch thread(s)")
    x, y = make_data()
    split = ModelSplit(CountingModel(), (x, y))
    z = initial_params()
    start = time.perf_counter()
    fast = FunctionalSplit(split)
    setup = time.perf_counter() - start
    print(f"FunctionalSplit: path={fast.path} engine={fast.engine} setup {setup:.2f} s "
          f"{fast.reason}")
    looped = FunctionalSplit(split, batched="loop")
    vmapped = FunctionalSplit(split, batched="vmap")
    flat = fast.flatten(z)
    gen = torch.Generator().manual_seed(0)
    batch = flat + 0.01 * torch.randn(8, flat.numel(), generator=gen)
    betas = torch.linspace(1.0, 0.02, 8)
    print(f"batched='auto' picks {fast.batched_path}"
          + (f" ({fast.batched_reason})" if fast.batched_reason else ""))
    start = time.perf_counter()
    batched_path = vmapped.batched_path  # decided (and checked) on first use
    why = f" ({vmapped.batched_reason})" if vmapped.batched_reason else ""
    print(f"batched='vmap': {batched_path}{why}, checked in {time.perf_counter() - start:.2f} s")

    def raw():
        lp, ll, grad_lp, grad_ll = fast.evaluate(flat)
        return -(lp + BETA * ll), -(grad_lp + BETA * grad_ll)

    floor, traced, functional = floor_fn(x, y, fast.layout.names), split_fn(split), split_fn(fast)
    fns = {
        "floor (plain torch)": lambda: floor(z),
        "traced (ModelSplit)": lambda: traced(z),
        "fast (FunctionalSplit)": lambda: functional(z),
        "fast, raw graph": raw,
        "batched K=1, vmap": lambda: vmapped.batched_potential_and_grad(batch[:1], betas[:1]),
        "batched K=8, vmap": lambda: vmapped.batched_potential_and_grad(batch, betas),
        "batched K=1, loop": lambda: looped.batched_potential_and_grad(batch[:1], betas[:1]),
        "batched K=8, loop": lambda: looped.batched_potential_and_grad(batch, betas),
    }
    if args.options:
        fns.update(option_fns(split, fast, z, args.compile))
    check = {n: fns[n]()[0] for n in ("floor (plain torch)", "traced (ModelSplit)",
                                       "fast (FunctionalSplit)")}
    print("potentials agree:", {n: round(float(v.detach()), 3) for n, v in check.items()})
    medians, _ = time_rounds(fns, args.rounds, args.calls)
    floor = medians["floor (plain torch)"]
    print(f"\n{'':28s}{'ms/call':>10s}{'/ floor':>10s}")
    for name, value in medians.items():
        print(f"{name:28s}{value:10.3f}{value / floor:10.2f}")
    fast_ms, traced_ms = medians["fast (FunctionalSplit)"], medians["traced (ModelSplit)"]
    print(f"\nfast / floor: {fast_ms / floor:.2f} (target <= 1.5); "
          f"traced / floor: {traced_ms / floor:.2f}; traced / fast: {traced_ms / fast_ms:.2f}")
    for mode in ("vmap", "loop"):
        k1, k8 = medians[f"batched K=1, {mode}"], medians[f"batched K=8, {mode}"]
        print(f"batched ({mode}) K=8 / K=1 per call: {k8 / k1:.2f} ({k8 / 8:.3f} ms per "
              f"replica; K=1 / fast, raw graph: {k1 / medians['fast, raw graph']:.2f})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    parser.add_argument("--calls", type=int, default=40, help="timed calls per round (default 40)")
    parser.add_argument("--options", action="store_true",
                        help="also time the strategies not chosen")
    parser.add_argument("--compile", action="store_true",
                        help="with --options, also torch.compile (slow to compile)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: 2 rounds of 3 calls")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls = 2, 3
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, pyro {pyro.__version__}, "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}")
    section_a(args)


if __name__ == "__main__":
    main()
