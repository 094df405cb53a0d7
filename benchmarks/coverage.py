"""Do the errors a default run states cover the truth? Coverage over seeds, against exact answers.

Each case is run with ``ParallelTempering(model)`` and nothing else (the default: an exact
prior rung, a growing ladder, ``explorer="hmc"``, 8 ladders on a small model with their
errors pooled: ``pyro_pt/ensemble.py``), one torch thread, over many seeds; ``--ladders C``
runs ``ParallelTempering(model, num_ladders=C)`` instead. Per run
it records the stated errors and the exact answers, and prints per case:

- ``regression``, ``regression_wide``: a conjugate Bayesian linear regression (n = 50, 3
  coefficients, known noise 1, prior N(0, 1), or N(0, 10^2), on each): exact log evidence
  (y is multivariate normal) and exact posterior means. How often ``|log Z - exact| <= 2 *
  log_Z_error`` (the stated error, forward/reverse gap included), and the same with the Monte
  Carlo part alone, and with the stepping-stone terms' errors added in variance as if
  independent (what was stated before); how often each coefficient's mean is within 2
  ``diagnostics()["mcse"]`` of the exact one. ``regression12``: the same with 12
  coefficients, prior N(0, 1).
- ``gauss10``: three well-separated Gaussian modes of weights 0.5, 0.3, 0.2 (equal
  covariances, so the weights are the exact shares) under a N(0, 3^2) prior in 10 dimensions
  (benchmarks/_tempering_targets.py, as vs_tempering.py's ``gauss10``): each mode's share
  against its weight, and log Z against its closed form.
- ``square``, ``lopsided``, ``two_components``, ``three_components``: the multimodal battery of
  tests/pt/multimodal.py, whose mode shares are exact (symmetry, quadrature): how often each
  labelling's share is within 2 errors of ``kernel.mcse(indicator)``; how many runs have a
  share more than 0.10 off, and how many of those warned.
- ``logistic``, ``poisson``: GLMs (200 points, 4 coefficients and an intercept), and
  ``schools`` (eight schools, non-centered), unimodal: the largest mean's error over its sd,
  and whether the default run warns.
- Every case: how many runs the review warned, and why.

Target (the issue this answers): 2-error coverage in 90-98 %; no warning on a unimodal model at
the default length; every run with a share more than 0.10 off warned.

Run (results are appended as JSON lines to ``--out``; ``--table`` prints the table of a file)::

    python benchmarks/coverage.py --case regression --runs 30 --warmup 300 --samples 1000
    python benchmarks/coverage.py --case square --runs 30
    python benchmarks/coverage.py --case gauss10 --runs 12
    python benchmarks/coverage.py --case regression12 --runs 20
    python benchmarks/coverage.py --table --out coverage.jsonl
"""

import argparse
import collections
import json
import math
import os
import sys
import time
import warnings

import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyro_pt import ParallelTempering, TemperingWarning  # noqa: E402
from tests.pt.multimodal import CASES  # noqa: E402

NUM_POINTS, NOISE = 50, 1.0
# the regression's (prior scale, coefficients) per case: a wider prior puts the posterior
# further from the prior rung, and the stepping stones' bias grows with that distance
REGRESSIONS = {"regression": (1.0, 3), "regression_wide": (10.0, 3), "regression12": (1.0, 12)}
# unimodal, no exact answer: does a default run warn?
UNIMODAL = ("logistic", "poisson", "schools")
# exact shares and log Z in closed form (benchmarks/_tempering_targets.py): three Gaussian
# modes of weights 0.5, 0.3, 0.2 in 10 dimensions, as benchmarks/vs_tempering.py's gauss10
GAUSSIANS = {"gauss10": dict(name="gauss10", kind="gaussians", prior_scale=3.0, sigma=1.0,
                             radius=8.0, weights=[0.5, 0.3, 0.2], seed=0, dim=10)}


def regression_data(seed=0, num_coefficients=3):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(NUM_POINTS, num_coefficients, generator=generator, dtype=torch.float64)
    w = (torch.tensor([0.8, -0.5, 0.3], dtype=torch.float64) if num_coefficients == 3
         else torch.linspace(-1.0, 1.0, num_coefficients, dtype=torch.float64))
    y = x @ w + NOISE * torch.randn(NUM_POINTS, generator=generator, dtype=torch.float64)
    return x, y


def regression_model(x, y, prior_scale):
    zero = torch.zeros(x.shape[1], dtype=x.dtype)
    w = pyro.sample("w", dist.Normal(zero, prior_scale).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(w @ x.T, NOISE), obs=y)


def glm_data(seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(200, 4, generator=generator, dtype=torch.float64)
    eta = x @ torch.tensor([0.5, -1.0, 0.3, 0.0], dtype=torch.float64) + 0.2
    return x, torch.bernoulli(torch.sigmoid(eta), generator=generator), torch.poisson(
        torch.exp(eta), generator=generator)


def glm_model(x, y, link):
    """A logistic or Poisson regression: intercept and 4 coefficients, N(0, 1) priors."""
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1], dtype=x.dtype), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0, dtype=x.dtype), 1.0))
    eta = w @ x.T + b.unsqueeze(-1)
    with pyro.plate("data", x.shape[0]):
        likelihood = dist.Bernoulli(logits=eta) if link == "logistic" else dist.Poisson(eta.exp())
        pyro.sample("y", likelihood, obs=y)


SCHOOLS_Y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], dtype=torch.float64)
SCHOOLS_SIGMA = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0],
                             dtype=torch.float64)


def schools_model():
    """Eight schools, non-centered (posteriordb's eight_schools_noncentered)."""
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.tensor(5.0, dtype=torch.float64)))
    with pyro.plate("schools", 8):
        theta = pyro.sample("theta_tilde", dist.Normal(torch.tensor(0.0, dtype=torch.float64),
                                                       1.0))
        pyro.sample("y", dist.Normal(mu + tau * theta, SCHOOLS_SIGMA), obs=SCHOOLS_Y)


def gaussians_model(means, log_weights, prior_scale, sigma):
    """x ~ N(0, prior_scale^2 I), likelihood sum_j w_j N(x | m_j, sigma^2 I)."""
    x = pyro.sample("x", dist.Normal(torch.zeros(means.shape[-1], dtype=means.dtype),
                                     prior_scale).to_event(1))
    terms = dist.Normal(means, sigma).log_prob(x.unsqueeze(-2)).sum(-1) + log_weights
    pyro.factor("likelihood", torch.logsumexp(terms, -1))


def run_unimodal(case, seed, warmup, samples):
    """No exact answer: whether a unimodal model's default run warns, and its worst mean."""
    if case == "schools":
        model, args = schools_model, ()
    else:
        x, binary, counts = glm_data()
        model, args = glm_model, (x, binary if case == "logistic" else counts, case)
    kernel, _, said = _run(model, args, seed, warmup, samples)
    d = kernel.diagnostics()
    ratio = max(float((d["mcse"][k] / d["posterior_sd"][k]).max()) for k in d["mcse"])
    return {"worst_mcse_sd": ratio, "restarts": d["restarts"], "rungs": len(kernel.betas),
            "warned": _why(said)}


def regression_exact(x, y, prior_scale):
    """``(log evidence, posterior mean of w)``: y ~ N(0, noise^2 I + prior^2 X X^T)."""
    covariance = NOISE**2 * torch.eye(len(y), dtype=x.dtype) + prior_scale**2 * x @ x.T
    evidence = dist.MultivariateNormal(torch.zeros_like(y), covariance).log_prob(y)
    precision = torch.eye(x.shape[1], dtype=x.dtype) / prior_scale**2 + x.T @ x / NOISE**2
    mean = torch.linalg.solve(precision, x.T @ y / NOISE**2)
    return float(evidence), mean


LADDERS = None  # num_ladders of every run (--ladders; None: the default rule)


def _run(model, args, seed, warmup, samples):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(model, num_ladders=LADDERS)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TemperingWarning)
        mcmc.run(*args)
    said = [str(w.message) for w in caught if issubclass(w.category, TemperingWarning)
            and "at the end of warmup" not in str(w.message)]
    return kernel, mcmc, said


def _why(said):
    """Short reasons of the review's warning: the first words of each problem."""
    return [line.strip()[2:60] for text in said for line in text.splitlines()[1:]]


def _log_z(kernel, exact):
    """The run's log Z, its stated error and its Monte Carlo part alone, against ``exact``."""
    from pyro_pt.health import stepping_stone_error, stepping_stone_errors

    d = kernel.diagnostics()
    # every ladder's every scan's lls: those log Z is estimated from (the tempering record
    # holds MCMC's draws' rows only, pyro_pt.ensemble)
    ll = torch.cat([torch.tensor(run.recorder.round_ll, dtype=torch.float64)
                    for run in kernel.run.together])
    # the Monte Carlo part of the stated error, and the terms' errors added as if independent
    independent = 0.5 * math.hypot(*stepping_stone_errors(kernel.betas, ll))
    return {"log_Z": d["log_Z"], "forward": d["log_Z_forward"], "reverse": d["log_Z_reverse"],
            "error": d["log_Z_error"], "monte_carlo": stepping_stone_error(kernel.betas, ll),
            "independent": independent, "exact": exact,
            "ladders": kernel.explorer_info["num_ladders"]}


def run_regression(case, seed, warmup, samples):
    prior_scale, num_coefficients = REGRESSIONS[case]
    x, y = regression_data(num_coefficients=num_coefficients)
    exact, mean = regression_exact(x, y, prior_scale)
    kernel, mcmc, said = _run(regression_model, (x, y, prior_scale), seed, warmup, samples)
    d = kernel.diagnostics()
    found = mcmc.get_samples()["w"].mean(0)
    return {**_log_z(kernel, exact),
            "mean_off": (found - mean).tolist(), "mcse": d["mcse"]["w"].tolist(),
            "sd": d["posterior_sd"]["w"].tolist(), "restarts": d["restarts"],
            "rungs": len(kernel.betas), "warned": _why(said)}


def run_battery(case, seed, warmup, samples):
    model, args, label, exact = CASES[case]()
    kernel, mcmc, said = _run(model, args, seed, warmup, samples)
    draws = mcmc.get_samples()
    labels = label(draws)
    out = {"shares": {}, "restarts": kernel.diagnostics()["restarts"],
           "rungs": len(kernel.betas), "warned": _why(said)}
    for name, weight in exact.items():
        indicator = torch.tensor([float(lab == name) for lab in labels], dtype=torch.float64)
        error = float(kernel.mcse(indicator))
        out["shares"][str(name)] = (float(indicator.mean()), weight, error)
    return out


def run_gaussians(case, seed, warmup, samples):
    """Shares of well-separated Gaussian modes of unequal weights, and log Z, both exact."""
    from _tempering_targets import target

    t = target(GAUSSIANS[case])
    means = torch.tensor(t.means, dtype=torch.float64)
    log_weights = torch.tensor(t.weights, dtype=torch.float64).log()
    kernel, mcmc, said = _run(gaussians_model, (means, log_weights, t.prior_scale, t.sigma),
                              seed, warmup, samples)
    inside = torch.as_tensor(t.indicators(mcmc.get_samples()["x"].numpy()), dtype=torch.float64)
    out = {**_log_z(kernel, t.log_z()), "shares": {},
           "restarts": kernel.diagnostics()["restarts"], "rungs": len(kernel.betas),
           "warned": _why(said)}
    for j, weight in enumerate(t.shares):
        out["shares"][str(j)] = (float(inside[:, j].mean()), float(weight),
                                 float(kernel.mcse(inside[:, j])))
    return out


def _log_z_cover(records):
    n = len(records)
    z = [abs(r["log_Z"] - r["exact"]) / r["error"] for r in records]
    z_mc = [abs(r["log_Z"] - r["exact"]) / r["monte_carlo"] for r in records]
    z_old = [abs(r["log_Z"] - r["exact"]) / r["independent"] for r in records
             if "independent" in r]
    bias = sum(r["log_Z"] - r["exact"] for r in records) / n
    old = (f", its terms' errors added as if independent {sum(v <= 2 for v in z_old) / n:.0%}"
           if len(z_old) == n else "")
    return (f"log Z {sum(v <= 2 for v in z) / n:.0%} (Monte Carlo part alone "
            f"{sum(v <= 2 for v in z_mc) / n:.0%}{old}; mean error "
            f"{sum(r['error'] for r in records) / n:.3f}, mean found - exact {bias:+.3f})")


def _share_cover(records):
    shares = [s for r in records for s in r["shares"].values()]
    inside = sum(abs(f - w) <= 2 * e for f, w, e in shares)
    off = [r for r in records if any(abs(f - w) > 0.1 for f, w, _ in r["shares"].values())]
    return (f"shares {inside / len(shares):.0%} of {len(shares)}; runs with a share "
            f"> 0.10 off: {len(off)}, warned {sum(bool(r['warned']) for r in off)}; "
            f"mean distance to the exact share "
            f"{sum(abs(f - w) for f, w, _ in shares) / len(shares):.3f}, mean error "
            f"{sum(e for _, _, e in shares) / len(shares):.3f}")


def table(path):
    rows = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            rows[(record["case"], record["warmup"], record["samples"])].append(record)
    print("| case (warmup + samples) | runs | 2-error coverage | runs warned | "
          "mean restarts, rungs |")
    print("|---|---|---|---|---|")
    for (case, warmup, samples), records in sorted(rows.items()):
        n = len(records)
        warned = sum(bool(r["warned"]) for r in records)
        restarts = sum(r["restarts"] for r in records) / n
        rungs = sum(r["rungs"] for r in records) / n
        if case in UNIMODAL:
            cover = (f"(no exact answer) largest mcse / sd "
                     f"{max(r['worst_mcse_sd'] for r in records):.3f}")
        elif case in REGRESSIONS:
            means = [abs(o) / e for r in records for o, e in zip(r["mean_off"], r["mcse"])]
            ratio = max(e / s for r in records for e, s in zip(r["mcse"], r["sd"]))
            cover = (f"{_log_z_cover(records)}; coefficient means "
                     f"{sum(v <= 2 for v in means) / len(means):.0%} of {len(means)} "
                     f"(largest mcse / sd {ratio:.3f})")
        elif case in GAUSSIANS:
            cover = f"{_share_cover(records)}; {_log_z_cover(records)}"
        else:
            cover = _share_cover(records)
        print(f"| {case} ({warmup} + {samples}) | {n} | {cover} | {warned} | "
              f"{restarts:.0f}, {rungs:.1f} |")
    reasons = collections.Counter(w[:45] for rs in rows.values() for r in rs for w in r["warned"])
    for reason, count in reasons.most_common():
        print(f"  warned {count}x: {reason}...")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="regression",
                        choices=[*REGRESSIONS, *UNIMODAL, *GAUSSIANS, *CASES])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--ladders", type=int, default=None,
                        help="num_ladders of every run (default: the default rule's)")
    parser.add_argument("--out", default="coverage.jsonl")
    parser.add_argument("--table", action="store_true", help="only print the table of --out")
    args = parser.parse_args()
    if args.table:
        return table(args.out)
    torch.set_num_threads(1)
    global LADDERS
    LADDERS = args.ladders
    for seed in range(args.first_seed, args.first_seed + args.runs):
        start = time.perf_counter()
        if args.case in REGRESSIONS:
            record = run_regression(args.case, seed, args.warmup, args.samples)
        elif args.case in UNIMODAL:
            record = run_unimodal(args.case, seed, args.warmup, args.samples)
        elif args.case in GAUSSIANS:
            record = run_gaussians(args.case, seed, args.warmup, args.samples)
        else:
            record = run_battery(args.case, seed, args.warmup, args.samples)
        record.update(case=args.case, seed=seed, warmup=args.warmup, samples=args.samples,
                      ladders=args.ladders, seconds=time.perf_counter() - start)
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"{args.case} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
    table(args.out)


if __name__ == "__main__":
    main()
