"""Overhead of ParallelTempering on the seed BNN (10 -> 64 -> 64 -> 1, 500 points).

Two figures, measured side by side in one run, in interleaved rounds, reported as medians:

(a) time per iteration of ``ParallelTempering(temperatures=[1.0], explorer="nuts")`` over plain
    Pyro ``NUTS`` with the same settings (target <= 1.15);
(b) with K = 8 replicas, the fraction of ``kernel.sample()`` spent outside the explorers,
    ``1 - timings["explorers"] / timings["total"]``: the log-likelihood evaluations of the
    split, the swaps and the bookkeeping (target < 5%).

So that both samplers do the same work per iteration, the timed runs use a fixed step size (found
once by a short adaptive NUTS warmup, the calibration), an identity mass matrix and a modest
``max_tree_depth``: at that step size every tree grows to full depth, which the script checks
by counting density evaluations per iteration (model executions, plus evaluations of the
captured graph ``pyro_pt`` runs instead of the model). ``--adapt`` keeps step-size adaptation on during the
timed runs' warmup instead. One torch thread. Benchmarks print; they never assert.

Run::

    python benchmarks/pt_overhead.py            # a few minutes on a 2-core CPU
    python benchmarks/pt_overhead.py --rounds 1 --iters 5 --iters-k 2   # smoke test
"""

import argparse
import os
import platform
import statistics
import sys
import time

import torch

import pyro
from pyro.infer import MCMC, NUTS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bnn import CountingModel, initial_params, make_data  # noqa: E402

from pyro_pt import ParallelTempering  # noqa: E402
from pyro_pt.potential import FunctionalSplit  # noqa: E402

# ParallelTempering evaluates the model through its captured graph, without executing the
# model: count those evaluations too, so both samplers' work per iteration can be compared.
GRAPH_CALLS = [0]
_log_densities = FunctionalSplit.log_densities


def _counted_log_densities(self, z):
    GRAPH_CALLS[0] += 1
    return _log_densities(self, z)


FunctionalSplit.log_densities = _counted_log_densities


def timed_run(kernel, model, data, init, warmup, iters):
    """
    Run MCMC; per-iteration wall times of the sampling phase (between consecutive MCMC hook
    calls, so Pyro's own per-iteration work, e.g. ``kernel.logging()``, is in for both), density
    evaluations per iteration, and the run's total seconds.
    """
    stamps = []

    def hook(kernel, params, stage, i):
        stamps.append(time.perf_counter())

    mcmc = MCMC(kernel, num_samples=iters, warmup_steps=warmup, initial_params=init,
                hook_fn=hook, disable_progbar=True)
    model.calls = GRAPH_CALLS[0] = 0
    start = time.perf_counter()
    mcmc.run(*data)
    total = time.perf_counter() - start
    sampling = stamps[max(warmup - 1, 0):] if warmup else [start] + stamps
    deltas = [b - a for a, b in zip(sampling, sampling[1:])]
    return {
        "per_iter": statistics.median(deltas),
        "calls_per_iter": (model.calls + GRAPH_CALLS[0]) / (warmup + iters),
        "total": total,
        "last": {k: v[-1].clone() for k, v in mcmc.get_samples().items()},
    }


def explorer_settings(args, step_size):
    settings = {"max_tree_depth": args.max_tree_depth, "adapt_mass_matrix": False}
    if args.adapt:
        settings.update(step_size=step_size, adapt_step_size=True)
    else:
        settings.update(step_size=step_size, adapt_step_size=False)
    return settings


def calibrate(model, data, args):
    """A short adaptive NUTS run from a small random point: a step size and a starting state."""
    pyro.set_rng_seed(args.seed)
    kernel = NUTS(model, max_tree_depth=args.max_tree_depth, adapt_mass_matrix=False)
    out = timed_run(kernel, model, data, initial_params(), args.calibration, 1)
    return kernel.step_size, out["last"], out["total"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--iters", type=int, default=30,
                        help="timed sampling iterations per run in (a) (default 30)")
    parser.add_argument("--iters-k", type=int, default=10,
                        help="sampling iterations per K-replica run in (b) (default 10)")
    parser.add_argument("--warmup", type=int, default=5,
                        help="warmup iterations of every timed run (default 5)")
    parser.add_argument("--replicas", type=int, default=8, help="K in (b) (default 8)")
    parser.add_argument("--max-temperature", type=float, default=50.0,
                        help="hottest temperature of the ladder in (b) (default 50)")
    parser.add_argument("--max-tree-depth", type=int, default=5, help="NUTS depth (default 5)")
    parser.add_argument("--calibration", type=int, default=100,
                        help="adaptive NUTS warmup that picks the step size (default 100)")
    parser.add_argument("--adapt", action="store_true",
                        help="adapt the step size in the timed runs' warmup too")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    model = CountingModel()
    data = make_data()
    num_latent = sum(v.numel() for v in initial_params().values())
    print(f"BNN 10 -> 64 -> 64 -> 1, ReLU, {num_latent} latents, {data[0].shape[0]} points, "
          f"sigma = 0.1; torch {torch.__version__}, pyro {pyro.__version__}, "
          f"{torch.get_num_threads()} torch thread, {os.cpu_count()} CPUs, {platform.machine()}")

    step_size, start, seconds = calibrate(model, data, args)
    print(f"calibration: {args.calibration} adaptive NUTS warmup steps in {seconds:.1f} s -> "
          f"step size {step_size:.3g}")
    settings = explorer_settings(args, step_size)
    print(f"timed runs: NUTS {settings}, warmup {args.warmup}; (a) {args.iters} draws per run, "
          f"(b) K = {args.replicas}, max temperature {args.max_temperature}, "
          f"{args.iters_k} draws per run; {args.rounds} interleaved rounds\n")

    nuts_iter, pt1_iter, pt1_outside, fractions = [], [], [], []
    calls = {"nuts": [], "pt1": [], "ptk": []}
    ptk_iter, ptk_explorers, ptk_total = [], [], []
    for r in range(args.rounds):
        # Alternate which sampler goes first so drift (thermal, caches) does not favour one.
        order = ("nuts", "pt1") if r % 2 == 0 else ("pt1", "nuts")
        for name in order:
            pyro.set_rng_seed(args.seed + 1000 + r)
            if name == "nuts":
                out = timed_run(NUTS(model, **settings), model, data, start, args.warmup,
                                args.iters)
                nuts_iter.append(out["per_iter"])
            else:
                kernel = ParallelTempering(model, temperatures=[1.0], explorer="nuts",
                                           explorer_kwargs=settings)
                out = timed_run(kernel, model, data, start, args.warmup, args.iters)
                pt1_iter.append(out["per_iter"])
                pt1_outside.append(1 - kernel.timings["explorers"] / kernel.timings["total"])
            calls[name].append(out["calls_per_iter"])

        pyro.set_rng_seed(args.seed + 2000 + r)
        kernel = ParallelTempering(model, num_replicas=args.replicas,
                                   max_temperature=args.max_temperature, explorer="nuts",
                                   explorer_kwargs=settings)
        out = timed_run(kernel, model, data, start, args.warmup, args.iters_k)
        timings = kernel.timings
        fractions.append(1 - timings["explorers"] / timings["total"])
        ptk_iter.append(out["per_iter"])
        ptk_explorers.append(timings["explorers"])
        ptk_total.append(timings["total"])
        calls["ptk"].append(out["calls_per_iter"] / args.replicas)
        swap = kernel.diagnostics()["swap_acceptance"]
        print(f"round {r + 1}/{args.rounds}: NUTS {nuts_iter[-1] * 1e3:7.1f} ms/it, "
              f"PT(K=1) {pt1_iter[-1] * 1e3:7.1f} ms/it, ratio {pt1_iter[-1] / nuts_iter[-1]:.3f}; "
              f"PT(K={args.replicas}) {ptk_iter[-1] * 1e3:7.1f} ms/it, outside explorers "
              f"{fractions[-1]:.2%}, mean swap acc. {sum(swap) / len(swap):.2f}", flush=True)

    med = statistics.median
    ratio = med(p / n for p, n in zip(pt1_iter, nuts_iter))
    fraction = med(fractions)
    print()
    print(f"{'':<56}{'measured':>10}{'target':>10}")
    print(f"{'(a) PT(K=1) / NUTS, time per iteration':<56}{ratio:>10.3f}{'<= 1.15':>10}  "
          f"{'met' if ratio <= 1.15 else 'MISSED'}")
    print(f"{f'(b) K={args.replicas}: time outside the explorers / total':<56}{fraction:>10.2%}"
          f"{'< 5%':>10}  {'met' if fraction < 0.05 else 'MISSED'}")
    print()
    print("raw medians over rounds:")
    print(f"  NUTS              {med(nuts_iter) * 1e3:8.1f} ms/iteration, "
          f"{med(calls['nuts']):.1f} density evaluations/iteration")
    print(f"  PT, K=1           {med(pt1_iter) * 1e3:8.1f} ms/iteration, "
          f"{med(calls['pt1']):.1f} density evaluations/iteration, "
          f"outside explorers {med(pt1_outside):.2%}")
    print(f"  PT, K={args.replicas:<2}          {med(ptk_iter) * 1e3:8.1f} ms/iteration, "
          f"{med(calls['ptk']):.1f} density evaluations/iteration/replica; sample(): "
          f"{med(ptk_total):.2f} s total, {med(ptk_explorers):.2f} s in explorers "
          f"per run of {args.warmup + args.iters_k} iterations")


if __name__ == "__main__":
    main(sys.argv[1:])
