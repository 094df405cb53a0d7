"""Which explorer should ``ParallelTempering`` use by default? ``nuts``, ``hmc`` and ``rwmh``
side by side on four cases, with everything else at its default.

Each run is ``ParallelTempering(model, explorer=E)`` with the default ladder (8 rungs ending at
the exact prior, beta = 0, grown in warmup to about 2 x barrier rungs, at most 32), under
``MCMC(warmup_steps, num_samples)``: 1000 + 1000 for ``logistic``, ``mix2`` and ``mix3``, 500 +
500 for ``schools`` (the dearest case per scan under ``nuts``); ``--warmup`` and ``--samples``
set them for every case. Each seed of ``--seeds`` seeds a run by ``pyro.set_rng_seed(seed)``.
Seconds are the wall time of the whole ``MCMC.run`` (model capture, compilation, warmup,
sampling). One torch thread (``torch.set_num_threads(1)``); within a case and a seed the runs
alternate between the explorers (and baselines), so all see the same load. Data come from fixed
``torch.Generator`` seeds; nothing is downloaded or written into the repository.

1. ``logistic`` (the target workload): Bernoulli logistic regression, 10 coefficients ``w ~
   Normal(0, 1)`` (i.i.d., ``to_event(1)``) and an intercept ``b ~ Normal(0, 1)``, 500 points,
   ``x ~ Normal(0, 1)``, labels drawn from a teacher with ``torch.Generator().manual_seed(0)``.
   Per run: min bulk ESS (``arviz.ess`` of the cold chain) over the 11 coordinates, min ESS per
   second, and ``max |z|``: the largest posterior mean difference against a long reference run
   in units of the combined MCSE (``arviz.mcse``), ``(mean - ref) / sqrt(mcse^2 + mcse_ref^2)``.
   The reference is NumPyro NUTS, 4 chains x ``--reference-draws`` (default 2500) after 1000
   warmup; without NumPyro, Pyro ``NUTS``, one chain of 4000 draws (the script says which).
   Baselines in the same run, on the same model: Pyro's plain ``NUTS`` (one chain, its
   defaults) and NumPyro ``NUTS`` (one chain, single-threaded XLA, its jit compilation counted
   in its seconds, as in ``vs_numpyro_ess.py``). ``vs NumPyro/K`` is PT's min ESS/s divided by
   (NumPyro's min ESS/s / K), K the rungs the PT run ended with: PT on one core pays K rungs
   per scan, so >= 1 (the target) means PT's cold chain is as efficient as NumPyro's chain
   per rung's worth of work.
2. ``mix2``: ``mu ~ Normal(0, 10^2 I_2)`` (``to_event(1)``), 60 points at -3 and 60 at +3 plus
   unit noise, likelihood ``pyro.factor`` of ``sum_n logsumexp_k(log 1/2 + log N(y_n | mu_k,
   1))``. The posterior is symmetric under swapping the labels, so the exact share of draws
   with ``mu_0 < mu_1`` is 0.5. Per run: that share, ``|share - 0.5|``, ``z`` (that error
   over ``sqrt(0.5 / restarts)``, the kernel's own bound on a share's standard error: |z| > 3
   means the share is wrong, not noisy), the tempered restarts of the sampling phase (prior
   draws that reached the cold chain) and per second of the whole run, round trips, the
   global barrier, K at the end, seconds, and whether a ``TemperingWarning`` fired.
3. ``mix3``: ``mu ~ Normal(0, 5^2 I_3)``, 50 points at each of -4, 0, 4 plus unit noise, weights
   1/3; the six orderings of ``mu`` each have exact share 1/6. Per run: ``max |share - 1/6|``
   over the orderings, ``z`` with the same bound, and the same other columns.
4. ``schools``: the non-centered eight schools (the classic data; ``mu ~ Normal(0, 5)``,
   ``tau ~ HalfCauchy(5)``, ``theta_tilde ~ Normal(0, 1)``, ``y ~ Normal(mu + tau
   theta_tilde, sigma)``). Per run: min bulk ESS and ESS/s over its 10 coordinates, the cold
   chain's divergences in the sampling phase, seconds.

NumPyro runs in a worker process under its own interpreter (``start_worker`` of
``vs_numpyro.py``; its venv is built as ``benchmarks/README.md`` says), given the data in a
temporary file. Every distinct warning a run raises, TemperingWarnings included, is printed
under its line. At the end a markdown table gives,
per explorer and case, the main figure averaged over the seeds (worst share error over them).

How to read it: the default explorer should have ``vs NumPyro/K`` >= 1 on ``logistic``, shares
within noise (|z| < 3) on the mixtures with many restarts per second, and no divergences on
``schools``. A share error with a large |z| and no warning is the worst outcome: a wrong answer
the user is not told about.

Command (2 seeds, 3 explorers, 4 cases and the baselines; about 30 minutes on one idle core,
estimated from ``--quick`` runs, most of it ``explorer="nuts"``; ``--seeds 1`` halves it):

    .venv/bin/python benchmarks/explorers.py [--seeds 1 2] [--warmup N] [--samples N]
        [--cases logistic mix2 mix3 schools] [--explorers nuts hmc rwmh] [--quick]
        [--numpyro-python .venv-numpyro/bin/python]

``--quick`` (200 warmup + 200 draws for every case, a shorter reference; about 5 minutes per
seed on a loaded 2-core machine) is a smoke run: fewer than 100 restarts make every run warn, and
its figures mean little.
"""

import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_numpyro import add_numpyro_arguments, ask, start_worker  # noqa: E402

from _explorers_models import logistic, logistic_data, logistic_draws, numpyro_worker  # noqa: E402
from _explorers_runs import (logistic_case, mixture_case, nuts_run, per_coordinate,  # noqa: E402
                             schools_case, sizes)

CASES = ("logistic", "mix2", "mix3", "schools")
EXPLORERS = ("nuts", "hmc", "rwmh")
REFERENCE_CHAINS, REFERENCE_WARMUP, PYRO_REFERENCE_DRAWS = 4, 1000, 4000


def reference_run(args, worker):
    """Mean and MCSE per coordinate of the logistic regression's long reference run."""
    if worker is not None:
        reply = ask(worker, json.dumps({"seed": 0, "warmup": REFERENCE_WARMUP,
                                        "samples": args.reference_draws,
                                        "chains": REFERENCE_CHAINS}))
        draws, what = np.load(reply["path"]), (
            f"NumPyro NUTS, {REFERENCE_CHAINS} chains x {args.reference_draws} draws after "
            f"{REFERENCE_WARMUP} warmup, {reply['seconds']:.0f} s")
    else:
        samples, seconds, _ = nuts_run(logistic, logistic_data(), 0, REFERENCE_WARMUP,
                                       args.pyro_reference_draws)
        draws, what = logistic_draws(samples)[None], (
            f"Pyro NUTS, 1 chain x {args.pyro_reference_draws} draws after {REFERENCE_WARMUP} "
            f"warmup (NumPyro not available), {seconds:.0f} s")
    ess, mean, mcse = per_coordinate(draws)
    print(f"logistic reference: {what}; min bulk ESS {ess.min():.0f}, max MCSE {mcse.max():.4f}")
    return mean, mcse


def summary(results, args):
    """The markdown table: per explorer, per case, the main figure over the seeds."""
    def cell(name, case):
        runs = results.get((name, case))
        if not runs:
            return ""
        mean = lambda key: float(np.mean([r[key] for r in runs]))  # noqa: E731
        ks = sorted({r["k"] for r in runs if r["k"]})
        k = "" if not ks else f", K {ks[0]}" if len(ks) == 1 else f", K {ks[0]}-{ks[-1]}"
        if case == "logistic":
            ratio = "" if math.isnan(mean("ratio")) else f", vs NumPyro/K {mean('ratio'):.2f}"
            return f"{mean('ess/s'):.1f} ESS/s{ratio}, max z {max(r['z'] for r in runs):.1f}{k}"
        if case in ("mix2", "mix3"):
            warned = sum(r["warned"] for r in runs)
            return (f"err {max(r['error'] for r in runs):.3f} (z {max(r['z'] for r in runs):.1f}),"
                    f" {mean('restarts') / mean('seconds'):.2f} restarts/s{k}, warned "
                    f"{warned}/{len(runs)}")
        return (f"{mean('ess/s'):.1f} ESS/s, {sum(r['divergences'] for r in runs)} div.{k}, "
                f"warned {sum(r['warned'] for r in runs)}/{len(runs)}")

    names = ["NumPyro NUTS", "Pyro NUTS"] + [f"PT {e}" for e in args.explorers]
    names = [n for n in names if any((n, c) in results for c in args.cases)]
    heads = {"logistic": "logistic: min ESS/s", "mix2": "mix2: max share err",
             "mix3": "mix3: max share err", "schools": "schools: min ESS/s"}
    runs = ", ".join(f"{c} {'+'.join(map(str, sizes(args, c)))}" for c in args.cases)
    print(f"\n## Summary (seeds {' '.join(map(str, args.seeds))}; warmup + draws: {runs}; "
          "means over seeds, worst share error and z)\n")
    print("| run | " + " | ".join(heads[c] for c in args.cases) + " |")
    print("|---" * (len(args.cases) + 1) + "|")
    for name in names:
        print(f"| {name} | " + " | ".join(cell(name, c) for c in args.cases) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--warmup", type=int, default=None,
                        help="every case's warmup (default 1000, schools 500; --quick 200)")
    parser.add_argument("--samples", type=int, default=None,
                        help="every case's draws (default 1000, schools 500; --quick 200)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--explorers", nargs="+", choices=EXPLORERS, default=list(EXPLORERS))
    parser.add_argument("--reference-draws", type=int, default=None,
                        help="per chain of NumPyro's reference (default 2500, --quick 1000)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer draws")
    add_numpyro_arguments(parser)
    args = parser.parse_args(argv)
    if args.worker:
        return numpyro_worker(args.worker)
    if args.reference_draws is None:
        args.reference_draws = 1000 if args.quick else 2500
    args.pyro_reference_draws = 1000 if args.quick else PYRO_REFERENCE_DRAWS

    import torch
    import pyro

    from vs_numpyro_ess import preload

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(f"explorers {args.explorers}, cases {args.cases}, seeds {args.seeds}; torch "
          f"{torch.__version__}, pyro {pyro.__version__}, one thread; load average "
          f"{tuple(round(v, 2) for v in os.getloadavg())}")
    print(f"torch's Dynamo and Inductor imported and Inductor's CPU probe run before the timed "
          f"runs (untimed, as jax's start on NumPyro's side): {preload('auto'):.1f} s")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        worker = None
        if "logistic" in args.cases:
            x, y = logistic_data()
            data_path = os.path.join(tmp, "logistic.npz")
            np.savez(data_path, x=x.numpy(), y=y.numpy())
            try:
                worker, versions = start_worker(args, __file__, data_path)
                print(f"NumPyro: jax {versions['jax']}, numpyro {versions['numpyro']} "
                      f"({args.numpyro_python})")
            except (OSError, ValueError) as error:  # no interpreter, or it could not start
                print(f"NumPyro not available ({args.numpyro_python}: {error}): no NumPyro "
                      "baseline, Pyro NUTS reference")
                worker = None
            reference = reference_run(args, worker)
        for case in args.cases:
            if case == "logistic":
                logistic_case(args, worker, reference, args.seeds, results)
            elif case == "schools":
                schools_case(args, args.seeds, results)
            else:
                mixture_case(case, args, args.seeds, results)
        if worker is not None:
            worker.stdin.close()
            worker.wait()
    summary(results, args)
    print(f"\nload average at the end {tuple(round(v, 2) for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
