"""Section (a) of pt_speed.py: the seed BNN's tempered potential and gradient, by hand in plain
torch (the floor), through ModelSplit, FunctionalSplit and its batched paths, and the strategies
not chosen, timed over interleaved rounds."""

import math
import statistics
import time
import warnings

import torch

import pyro

from _bnn import NOISE, CountingModel, initial_params, make_data

from pyro_pt.potential import FunctionalSplit, ModelSplit
from pyro_pt.potential.densities import split_terms


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
    layout = fast.compiled.layout
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


def synchronize():
    """Wait for queued GPU work, so a timer stops when the work is done (no-op on CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def time_rounds(fns, rounds, calls, warmup=3):
    """Median ms per call of each function over interleaved rounds."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(warmup):
                fn()
            synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            synchronize()
            times[name].append((time.perf_counter() - start) / calls * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}, times


def section_a(args):
    print(f"(a) tempered potential + gradient on the seed BNN, float32, "
          f"{torch.get_num_threads()} torch thread(s)")
    x, y = (t.to(args.device) for t in make_data())
    split = ModelSplit(CountingModel(device=args.device), (x, y))
    z = {name: value.to(args.device) for name, value in initial_params().items()}
    start = time.perf_counter()
    fast = FunctionalSplit(split)
    setup = time.perf_counter() - start
    print(f"FunctionalSplit: path={fast.path} engine={fast.compiled.engine} setup {setup:.2f} s "
          f"{fast.reason}")
    looped = FunctionalSplit(split, batched="loop")
    vmapped = FunctionalSplit(split, batched="vmap")
    flat = fast.flatten(z)
    gen = torch.Generator().manual_seed(0)
    batch = flat + 0.01 * torch.randn(8, flat.numel(), generator=gen).to(flat.device)
    betas = torch.linspace(1.0, 0.02, 8, device=flat.device)
    print(f"batched='auto' picks {fast.batched.path}"
          + (f" ({fast.batched.reason})" if fast.batched.reason else ""))
    start = time.perf_counter()
    batched_path = vmapped.batched.path  # decided (and checked) on first use
    why = f" ({vmapped.batched.reason})" if vmapped.batched.reason else ""
    print(f"batched='vmap': {batched_path}{why}, checked in {time.perf_counter() - start:.2f} s")

    def raw():
        lp, ll, grad_lp, grad_ll = fast.evaluate(flat)
        return -(lp + BETA * ll), -(grad_lp + BETA * grad_ll)

    floor, traced, functional = floor_fn(x, y, fast.compiled.layout.names), split_fn(split), split_fn(fast)
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
