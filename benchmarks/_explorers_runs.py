"""The runs of explorers.py: a default ParallelTempering run per explorer and Pyro's plain
NUTS, timed with the warnings they raise, and each case's table of them over the seeds."""

import itertools
import json
import math
import time
import warnings

import numpy as np

from vs_numpyro import ask

from _explorers_models import (NUM_DATA, NUM_FEATURES, SCHOOLS_SIGMA, SCHOOLS_Y, logistic,
                               logistic_data, logistic_draws, mix2, mix3, mixture_data, schools,
                               schools_draws)

# (warmup, draws) per case by default; --warmup / --samples set every case, --quick 200 + 200
SIZES = {"logistic": (1000, 1000), "mix2": (1000, 1000), "mix3": (1000, 1000),
         "schools": (500, 500)}


def sizes(args, case):
    """``(warmup, draws)`` of a case's runs."""
    warmup, samples = (200, 200) if args.quick else SIZES[case]
    return (warmup if args.warmup is None else args.warmup,
            samples if args.samples is None else args.samples)


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
