"""Tempered restarts per second against ``num_ladders`` (pyro_pt/ensemble.py).

Per case of ``benchmarks/explorers.py`` and per C in ``--ladders``, one run of
``ParallelTempering(model, num_replicas=8, num_ladders=C, compile="inductor")`` under
``MCMC(warmup_steps=W, num_samples=N)`` (each ladder runs W and about N scans; MCMC holds
each ladder's every C-th cold draw), one torch thread, a warm Inductor cache (an untimed run first), seeds
``--seeds``. Printed per run: the sampling phase's wall seconds (from the first sampling call's
hook to the end of ``MCMC.run``: the scans and the draws handed out), its milliseconds per
scan, the pooled tempered restarts and restarts per second, the whole run's seconds after
set-up, and the ratio of restarts per second to C = 1's of the same seed. Prints; asserts
nothing.

    PYTHONPATH=$PWD python benchmarks/ensemble.py [--cases mix2 mix3] [--ladders 1 2 4 8]
        [--warmup 1000] [--samples 1000] [--seeds 1 2]

``--defaults``: the default run a user makes, ``ParallelTempering(model)`` under ``MCMC(1000,
1000)`` (``--warmup``, ``--samples``), against the same with ``num_ladders=1``, on
``vs_tempering.py``'s mixtures (exact shares and log Z by quadrature), seeds ``--seeds``, one
thread: the ladders the default rule chose, the whole run's seconds, the tempered restarts,
the worst labelling's share error, the log Z error and the run's warnings. The target: every
labelling within 0.05 of exact with no warning.

    PYTHONPATH=$PWD python benchmarks/ensemble.py --defaults [--cases mix2 mix3]
        [--seeds 1 2 3 4]
"""

import argparse
import os
import sys
import time
import warnings

import torch

import pyro
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prior_draws import case  # noqa: E402

from pyro_pt import ParallelTempering  # noqa: E402


def one_run(model, args, ladders, warmup, samples, seed):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(model, num_replicas=8, num_ladders=ladders, compile="inductor")
    marks = {}

    def hook(k, params, stage, i):
        marks.setdefault(stage, time.perf_counter())

    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True,
                hook_fn=hook)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(*args)
    end = time.perf_counter()
    sampling = end - marks["Sample"]
    after_setup = end - marks["Warmup"] if "Warmup" in marks else sampling
    scans = -(-samples // ladders) * ladders  # each ladder's sampling scans
    restarts = kernel.diagnostics()["restarts"] or 0
    return sampling, 1e3 * sampling / scans, restarts, restarts / sampling, after_setup


def default_run(model, args, site, target, seed, samples, warmup, ladders=None):
    """One ``--defaults`` run: its printed line's numbers."""
    from vs_tempering import timed_pyro_pt

    kernel, draws, seconds, d, warned = timed_pyro_pt(model, args, site, seed, warmup, samples,
                                                      ladders)
    problems = [p[:60] for text in warned for p in text.split("\n  - ")[1:]]
    return dict(ladders=kernel.explorer_info["num_ladders"], seconds=seconds,
                restarts=d["restarts"], share=target.share_error(draws),
                log_z=float(d["log_Z"]) - target.log_z(), warned="; ".join(problems) or "no")


def defaults(opts):
    from _tempering_targets import target
    from vs_tempering import pyro_model, specs

    print(f"MCMC({opts.warmup}, {opts.samples}), one thread; load "
          f"{tuple(round(v, 2) for v in os.getloadavg())}")
    print("| target | run | seed | ladders | s | restarts | share error | log Z error | warned |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in opts.cases:
        spec = specs()[name]
        t = target(spec)
        model, args, site = pyro_model(t, spec)
        for seed in opts.seeds:
            for run, ladders in (("default", None), ("num_ladders=1", 1)):
                r = default_run(model, args, site, t, seed, opts.samples, opts.warmup, ladders)
                print(f"| {name} | {run} | {seed} | {r['ladders']} | {r['seconds']:.1f} | "
                      f"{r['restarts']} | {r['share']:.3f} | {r['log_z']:+.2f} | {r['warned']} |",
                      flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["mix2", "mix3"])
    parser.add_argument("--ladders", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--defaults", action="store_true",
                        help="the default run against num_ladders=1 (see the module)")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    if opts.defaults:
        return defaults(opts)
    print(f"warmup {opts.warmup}, samples "
          f"{opts.samples} (draws); load {tuple(round(v, 2) for v in os.getloadavg())}")
    for name in opts.cases:
        model, args = case(name)
        for c in opts.ladders:  # warm the cache of every batch size
            one_run(model, args, c, 20, 20, 0)
        for seed in opts.seeds:
            base = None
            for c in opts.ladders:
                sampling, per_scan, restarts, rate, whole = one_run(
                    model, args, c, opts.warmup, opts.samples, seed)
                base = rate if c == 1 else base
                ratio = f"{rate / base:.2f}" if base else "-"
                print(f"{name} seed {seed} C {c}: sampling {sampling:.2f} s ({per_scan:.2f} ms "
                      f"a scan), {restarts} restarts, {rate:.1f} restarts/s (x{ratio} C = 1), "
                      f"whole run after set-up {whole:.2f} s", flush=True)


if __name__ == "__main__":
    main()
