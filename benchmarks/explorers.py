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
import itertools
import json
import math
import os
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_numpyro import XLA_FLAGS, add_numpyro_arguments, ask, start_worker  # noqa: E402

CASES = ("logistic", "mix2", "mix3", "schools")
EXPLORERS = ("nuts", "hmc", "rwmh")
NUM_DATA, NUM_FEATURES = 500, 10
SCHOOLS_Y = (28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0)
SCHOOLS_SIGMA = (15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0)
REFERENCE_CHAINS, REFERENCE_WARMUP, PYRO_REFERENCE_DRAWS = 4, 1000, 4000
# (warmup, draws) per case by default; --warmup / --samples set every case, --quick 200 + 200
SIZES = {"logistic": (1000, 1000), "mix2": (1000, 1000), "mix3": (1000, 1000),
         "schools": (500, 500)}


# ----- the NumPyro side (no torch) -----

def numpyro_worker(data_path):
    """One NumPyro NUTS run of the logistic regression per stdin line (JSON: seed, warmup,
    samples, chains); replies with its seconds and the path of its draws ``[chains, draws,
    11]`` (the coefficients, then the intercept)."""
    os.environ["XLA_FLAGS"] = XLA_FLAGS
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(x, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)

    data = np.load(data_path)
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
    print(json.dumps({"jax": jax.__version__, "numpyro": numpyro.__version__}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        begin = time.perf_counter()
        mcmc = MCMC(NUTS(model), num_warmup=job["warmup"], num_samples=job["samples"],
                    num_chains=job["chains"], chain_method="sequential", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(job["seed"]), x, y, extra_fields=("num_steps",))
        draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
        seconds = time.perf_counter() - begin
        out = os.path.join(os.path.dirname(data_path), f"numpyro_{job['seed']}_{job['chains']}.npy")
        np.save(out, np.concatenate([np.asarray(draws["w"]), np.asarray(draws["b"])[..., None]],
                                    -1))
        steps = np.asarray(mcmc.get_extra_fields()["num_steps"])
        print(json.dumps({"seconds": seconds, "path": out, "leapfrogs": float(steps.mean())}),
              flush=True)


# ----- models and data (Pyro) -----

def logistic_data():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_DATA, NUM_FEATURES, generator=g)
    w, b = torch.randn(NUM_FEATURES, generator=g), 0.5
    y = torch.bernoulli(torch.sigmoid(x @ w + b), generator=g)
    return x, y


def logistic(x, y):
    import torch
    import pyro
    import pyro.distributions as dist

    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0), 1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)


def logistic_draws(samples):
    """``[draws, 11]``: the coefficients, then the intercept."""
    return np.concatenate([samples["w"].numpy(), samples["b"].numpy()[:, None]], -1)


def mixture_data(centers, per_center, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.cat([c + torch.randn(per_center, generator=g) for c in centers])


def mixture(y, scale, k):
    """Equal-weight mixture of ``k`` unit-variance components, ``mu ~ Normal(0, scale^2 I_k)``."""
    import torch
    import pyro
    import pyro.distributions as dist

    mu = pyro.sample("mu", dist.Normal(torch.zeros(k), scale).to_event(1))
    components = dist.Normal(mu, 1.0).log_prob(y[:, None]) - math.log(k)
    pyro.factor("mixture", torch.logsumexp(components, -1).sum())


def mix2(y):
    mixture(y, 10.0, 2)


def mix3(y):
    mixture(y, 5.0, 3)


def schools(y, sigma):
    import torch
    import pyro
    import pyro.distributions as dist

    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.tensor(5.0)))
    with pyro.plate("schools", y.shape[0]):
        theta_tilde = pyro.sample("theta_tilde", dist.Normal(torch.tensor(0.0), 1.0))
        pyro.sample("y", dist.Normal(mu + tau * theta_tilde, sigma), obs=y)


def schools_draws(samples):
    return np.concatenate([samples["mu"].numpy()[:, None], samples["tau"].numpy()[:, None],
                           samples["theta_tilde"].numpy()], -1)


# ----- runs -----

def timed(mcmc, *model_args):
    """``MCMC.run`` timed, with the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        begin = time.perf_counter()
        mcmc.run(*model_args)
        seconds = time.perf_counter() - begin
    return seconds, caught


def pt_run(model, model_args, explorer, seed, warmup, samples):
    """One default PT run: ``(cold draws, seconds, diagnostics, K, caught warnings)``."""
    import pyro
    from pyro.infer import MCMC

    from pyro_pt import ParallelTempering

    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    kernel = ParallelTempering(model, explorer=explorer)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    seconds, caught = timed(mcmc, *model_args)
    with warnings.catch_warnings(record=True) as more:
        warnings.simplefilter("always")
        diagnostics = kernel.diagnostics()
    return mcmc.get_samples(), seconds, diagnostics, kernel.num_replicas, caught + more


def nuts_run(model, model_args, seed, warmup, samples):
    """Pyro's plain ``NUTS``, one chain, its defaults."""
    import pyro
    from pyro.infer import MCMC, NUTS

    pyro.set_rng_seed(seed)
    mcmc = MCMC(NUTS(model), num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    seconds, caught = timed(mcmc, *model_args)
    return mcmc.get_samples(), seconds, caught


def tempering_warned(caught):
    from pyro_pt import TemperingWarning

    return any(issubclass(w.category, TemperingWarning) for w in caught)


def print_warnings(caught, width=150):
    """Each distinct warning a run raised (TemperingWarnings too: what fired), a line per
    problem it names, each cut to ``width`` characters."""
    seen = set()
    for w in caught:
        lines = [" ".join(line.split()) for line in str(w.message).splitlines() if line.strip()]
        key = (w.category.__name__, tuple(lines))
        if key in seen or not lines:
            continue
        seen.add(key)
        for i, line in enumerate(lines):
            line = line if len(line) <= width else line[:width - 3] + "..."
            print(f"    {w.category.__name__}: {line}" if i == 0 else f"      {line}")


def per_coordinate(draws):
    """Bulk ESS, mean and MCSE per coordinate of ``draws`` ``[chains, draws, d]``."""
    import arviz as az

    d = draws.shape[-1]
    ess = np.array([float(az.ess(draws[..., j], method="bulk")) for j in range(d)])
    mcse = np.array([float(az.mcse(draws[..., j])) for j in range(d)])
    return ess, draws.mean(axis=(0, 1)), mcse


# ----- cases -----

def logistic_case(args, worker, reference, seeds, results):
    x, y = logistic_data()
    ref_mean, ref_mcse = reference
    warmup, samples = sizes(args, "logistic")
    print(f"\n## logistic: {NUM_FEATURES} coefficients + intercept, Normal(0, 1) priors, "
          f"{NUM_DATA} points; {warmup} warmup + {samples} draws")
    print(f"{'run':14s} {'seed':>4s} {'K':>3s} {'s':>7s} {'min ESS':>8s} {'ESS/s':>8s} "
          f"{'max|z|':>7s} {'vs NumPyro/K':>12s} {'warned':>6s}")

    def row(name, seed, k, seconds, draws, warned, numpyro_rate=None):
        ess, mean, mcse = per_coordinate(draws)
        z = np.abs(mean - ref_mean) / np.sqrt(mcse ** 2 + ref_mcse ** 2)
        rate = ess.min() / seconds
        ratio = rate / (numpyro_rate / k) if numpyro_rate and k else math.nan
        shown = "" if math.isnan(ratio) else f"{ratio:.2f}"
        print(f"{name:14s} {seed:4d} {k or '':>3} {seconds:7.1f} {ess.min():8.0f} {rate:8.2f} "
              f"{z.max():7.2f} {shown:>12s} {warned:>6}", flush=True)
        results.setdefault((name, "logistic"), []).append(
            {"ess/s": rate, "ratio": ratio, "z": z.max(), "k": k, "seconds": seconds})
        return rate

    for seed in seeds:
        numpyro_rate = None
        if worker is not None:
            reply = ask(worker, json.dumps({"seed": seed, "warmup": warmup,
                                            "samples": samples, "chains": 1}))
            numpyro_rate = row("NumPyro NUTS", seed, None, reply["seconds"],
                               np.load(reply["path"]), "")
        draws, seconds, caught = nuts_run(logistic, (x, y), seed, warmup, samples)
        row("Pyro NUTS", seed, None, seconds, logistic_draws(draws)[None], "")
        print_warnings(caught)
        for explorer in args.explorers:
            draws, seconds, _, k, caught = pt_run(logistic, (x, y), explorer, seed, warmup,
                                                  samples)
            row(f"PT {explorer}", seed, k, seconds, logistic_draws(draws)[None],
                str(tempering_warned(caught)), numpyro_rate)
            print_warnings(caught)


def mixture_case(name, args, seeds, results):
    import torch

    if name == "mix2":
        model, k, y = mix2, 2, mixture_data((-3.0, 3.0), 60, 1)
        title = "mu ~ Normal(0, 10^2 I_2), 60 points at each of -3, +3; exact share 1/2"
    else:
        model, k, y = mix3, 3, mixture_data((-4.0, 0.0, 4.0), 50, 2)
        title = "mu ~ Normal(0, 5^2 I_3), 50 points at each of -4, 0, 4; exact shares 1/6"
    exact = 1.0 / math.factorial(k)
    warmup, samples = sizes(args, name)
    print(f"\n## {name}: {title}; {warmup} warmup + {samples} draws; share: "
          + ("of mu_0 < mu_1" if k == 2 else "the largest ordering's"))
    print(f"{'explorer':8s} {'seed':>4s} {'share':>6s} {'|err|':>6s} {'z':>6s} {'restarts':>8s} "
          f"{'/s':>6s} {'trips':>5s} {'barrier':>7s} {'K':>3s} {'s':>7s} {'warned':>6s}")
    for seed in seeds:
        for explorer in args.explorers:
            draws, seconds, diag, num, caught = pt_run(model, (y,), explorer, seed, warmup,
                                                       samples)
            mu = draws["mu"]
            if k == 2:
                share = float((mu[:, 0] < mu[:, 1]).double().mean())
                error = abs(share - 0.5)
            else:
                order = torch.argsort(mu, -1)  # per draw, the labels from lowest mu up
                shares = [float((order == torch.tensor(p)).all(-1).double().mean())
                          for p in itertools.permutations(range(k))]
                share, error = max(shares), max(abs(s - exact) for s in shares)
            restarts = diag.get("restarts")
            z = error / math.sqrt(0.5 / restarts) if restarts else math.inf
            print(f"{explorer:8s} {seed:4d} {share:6.3f} {error:6.3f} {z:6.2f} "
                  f"{restarts if restarts is not None else 'n/a':>8} "
                  f"{(restarts or 0) / seconds:6.2f} {diag['round_trips']:5d} "
                  f"{diag['barrier']:7.2f} {num:3d} {seconds:7.1f} "
                  f"{str(tempering_warned(caught)):>6s}", flush=True)
            print_warnings(caught)
            results.setdefault((f"PT {explorer}", name), []).append(
                {"error": error, "z": z, "restarts": restarts or 0, "k": num,
                 "seconds": seconds, "warned": tempering_warned(caught)})


def schools_case(args, seeds, results):
    import torch

    y, sigma = torch.tensor(SCHOOLS_Y), torch.tensor(SCHOOLS_SIGMA)
    warmup, samples = sizes(args, "schools")
    print(f"\n## schools: non-centered eight schools; {warmup} warmup + {samples} draws; ESS "
          "over mu, tau, theta_tilde[8]")
    print(f"{'explorer':8s} {'seed':>4s} {'K':>3s} {'s':>7s} {'min ESS':>8s} {'ESS/s':>8s} "
          f"{'div.':>5s} {'warned':>6s}")
    for seed in seeds:
        for explorer in args.explorers:
            draws, seconds, diag, num, caught = pt_run(schools, (y, sigma), explorer, seed,
                                                       warmup, samples)
            ess, _, _ = per_coordinate(schools_draws(draws)[None])
            divergences = len(diag["divergences"])
            print(f"{explorer:8s} {seed:4d} {num:3d} {seconds:7.1f} {ess.min():8.0f} "
                  f"{ess.min() / seconds:8.2f} {divergences:5d} "
                  f"{str(tempering_warned(caught)):>6s}", flush=True)
            print_warnings(caught)
            results.setdefault((f"PT {explorer}", "schools"), []).append(
                {"ess/s": ess.min() / seconds, "divergences": divergences, "k": num,
                 "seconds": seconds, "warned": tempering_warned(caught)})


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


def sizes(args, case):
    """``(warmup, draws)`` of a case's runs."""
    warmup, samples = (200, 200) if args.quick else SIZES[case]
    return (warmup if args.warmup is None else args.warmup,
            samples if args.samples is None else args.samples)


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
