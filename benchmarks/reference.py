"""The tempering reference: the prior against a fitted variational Gaussian, same K, same seeds.

For each model, ``ParallelTempering(explorer="hmc")`` with ``reference="prior"``
(``max_temperature=inf``), ``"variational"`` on one leg of K rungs (``temperatures`` given, so
no second leg), ``"stabilized"``: ``reference="variational"`` with its default ladder, two
legs of K/2 rungs, to q and to the prior (pyro_pt.reference.stabilized), and ``"matched"``: one
leg of K rungs to a fixed q, the mean and covariance of the prior run's 1000 cold draws of the
same seed (an AutoMultivariateNormal set to them): the forward-KL Gaussian of far more posterior
draws than a warmup holds, so what a Gaussian reference can do at best. Printed: the global
barrier Lambda of the sampling phase (of the leg to q, and the prior leg's beside it), its
round trips per 1000 sampling scans, log Z (against the analytic evidence where there is one),
the median log-likelihood of 200 exact draws of the hot end (q, or the prior: how close to the
posterior's mass it is) and the cold chain's check against the exact answer where there is
one. Models:

- ``conjugate``: ``theta ~ N(0, 10^2 I_2)``, ``y_i ~ N(theta_1 + theta_2, 1)``, n = 10 000,
  K = 4 (targets: Lambda with the variational reference below half the prior's, exact cold
  moments: the z-scores of theta's mean, with the ESS, and its variance over the exact one);
- ``eight_schools``: the centered eight schools (benchmarks/funnel.py), K = 4;
- ``bnn``: the 1-20-1 tanh BNN of benchmarks/pt_bnn_bottleneck.py, K = 6, or ``--replicas``
  (targets: round trips at least the prior reference's, Lambda lower);
- ``seed_bnn``: the seed BNN of benchmarks/_bnn.py (10-64-64-1 ReLU, 4929 weights, 500 points),
  K = 8, for a GPU (``--device cuda``; not in the default list).

Prints; asserts nothing.

    PYTHONPATH=$PWD python benchmarks/reference.py [--models conjugate bnn] [--seeds 2]
        [--references prior stabilized] [--replicas 12] [--device cuda]
"""

import argparse
import math
import pathlib
import sys
import time
import warnings

import torch

import pyro
from pyro.distributions.transforms import biject_to
from pyro.infer import MCMC
from pyro.infer.autoguide import AutoMultivariateNormal, init_to_value
from pyro.nn import PyroParam
from pyro.ops.stats import effective_sample_size

from pyro_pt import ParallelTempering
from pyro_pt.ladder import geometric_ladder
from pyro_pt.reference import ReferencedSplit

from _bnn import CountingModel, initial_params, make_data
from funnel import SIGMA, Y, eight_schools_centered
from pt_bnn_bottleneck import BNN, data as bnn_data

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the tests' models
from tests.pt.models import SUM_PRIOR_SCALE as PRIOR_SCALE, sum_model as conjugate  # noqa: E402


REFERENCES = ("prior", "variational", "stabilized", "matched")


def conjugate_exact(y):
    """Posterior mean, covariance and log evidence (Sherman-Morrison: y ~ N(0, I + 2 s^2 11^T))."""
    n, c = y.shape[0], 2 * PRIOR_SCALE**2
    ones = torch.ones(n, 2, dtype=y.dtype)
    cov = torch.linalg.inv(torch.eye(2, dtype=y.dtype) / PRIOR_SCALE**2 + ones.T @ ones)
    quad = float(y @ y - c * y.sum() ** 2 / (1 + c * n))
    log_z = -0.5 * (quad + math.log1p(c * n) + n * math.log(2 * math.pi))
    return cov @ (ones.T @ y), cov, log_z


def case(name, device):
    if name == "seed_bnn":
        x, y = (t.to(device) for t in make_data())
        return CountingModel(device=device), (x, y), 8, None
    if name == "conjugate":
        g = torch.Generator().manual_seed(0)
        y = 1.5 + torch.randn(10_000, generator=g, dtype=torch.float64)
        return conjugate, (y,), 4, conjugate_exact(y)
    if name == "eight_schools":
        return eight_schools_centered, (Y, SIGMA), 4, None
    return BNN(), bnn_data(), 6, None


def hot_end_ll(kernel, draws=200):
    """The median log-likelihood of exact draws of the hot end: q (the leg to q's), or the
    prior. A q no closer to the posterior than the prior puts its draws where the prior's
    are."""
    split = kernel.run.split
    with torch.no_grad():
        if kernel.run.reference is None:
            values = [float(split.sample_prior()[1]) for _ in range(draws)]
        else:
            against_q = ReferencedSplit(split, kernel.run.reference)
            values = [split.log_likelihood(against_q.sample_prior()[0]) for _ in range(draws)]
    return float(torch.tensor(values).median())


def matched_guide(model, args, draws):
    """An AutoMultivariateNormal set to the mean and covariance of ``draws`` (a run's cold
    draws, site -> tensor) in the unconstrained space: the forward-KL Gaussian of far more
    posterior draws than a warmup has, fixed."""
    pyro.clear_param_store()
    guide = AutoMultivariateNormal(model)
    guide(*args)
    columns = []
    for name, site in guide.prototype_trace.iter_stochastic_nodes():
        if not site["is_observed"]:
            value = biject_to(site["fn"].support).inv(draws[name])
            columns.append(value.reshape(value.shape[0], -1))
    flat = torch.cat(columns, 1).to(guide.loc.dtype)
    eye = torch.eye(flat.shape[1], dtype=flat.dtype)
    tril = torch.linalg.cholesky(torch.cov(flat.T).reshape(eye.shape) + 1e-9 * eye)
    scale = tril.diagonal()
    with torch.no_grad():
        guide.loc.copy_(flat.mean(0))
    guide.scale = PyroParam(scale, guide.scale_constraint)
    guide.scale_tril = PyroParam(tril / scale[:, None], guide.scale_tril_constraint)
    return guide


def run(name, reference, seed, warmup, samples, device="cpu", draws=None, replicas=None):
    """One run; ``draws``: the prior reference's cold draws of the same seed, which the
    ``"matched"`` reference is the moments of."""
    model, args, default, exact = case(name, device)
    replicas = replicas or default
    matched = reference == "matched" and matched_guide(model, args, draws)
    pyro.set_rng_seed(seed)
    # the seed BNN from the benchmarks' small random point (its prior draws are far out)
    init = ({} if name != "seed_bnn" else {"init_strategy": init_to_value(values={
        k: v.to(device) for k, v in initial_params().items()})})
    ladder = ({"temperatures": geometric_ladder(replicas, math.inf)} if reference != "stabilized"
              else {"num_replicas": replicas})
    kernel = ParallelTempering(model, explorer="hmc", **ladder, **init, reference=(
        matched or ("prior" if reference == "prior" else "variational")))
    began = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(kernel, samples, warmup, disable_progbar=True)
        mcmc.run(*args)
    d = kernel.diagnostics()
    prior_leg = d.get("legs", {}).get("prior")
    line = (f"{name:13s} {reference:11s} seed={seed} Lambda={d['barrier']:.3f} "
            + (f"(prior leg {prior_leg['barrier']:.3f}) " if prior_leg else "") +
            f"round trips/1000 scans={1000 * d['round_trips'] / samples:.1f} "
            f"min swap acc={min(d['swap_acceptance']):.3f} log Z={d['log_Z']:.3f} "
            f"hot-end ll={hot_end_ll(kernel):.4g}")
    if exact is not None:
        mean, cov, log_z = exact
        theta = mcmc.get_samples()["theta"]
        ess = effective_sample_size(theta.unsqueeze(0))
        z = (theta.mean(0) - mean) / (cov.diagonal().sqrt() / ess.sqrt())
        ratio = theta.var(0) / cov.diagonal()
        line += (f" (exact {log_z:.3f}) z={[round(v, 2) for v in z.tolist()]} "
                 f"var/exact={[round(v, 2) for v in ratio.tolist()]}")
    warned = sum("ParallelTempering" in str(w.message) for w in caught)
    print(f"{line} warnings={warned} [{kernel.explorer_info['reference']}; "
          f"{time.perf_counter() - began:.0f} s]", flush=True)
    return d["barrier"], d["round_trips"], mcmc.get_samples()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["conjugate", "eight_schools", "bnn"])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--references", nargs="+", default=list(REFERENCES), choices=REFERENCES)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--device", default="cpu", help="the seed BNN's device, e.g. cuda")
    parser.add_argument("--replicas", type=int, help="K for every model (default: its own)")
    args = parser.parse_args()
    if "matched" in args.references and "prior" not in args.references[
            :args.references.index("matched")]:
        parser.error("--references: 'matched' is fitted to the 'prior' run's draws; list "
                     "'prior' before it")
    torch.set_num_threads(1)
    for name in args.models:
        results = {}
        for seed in range(args.seeds):
            for reference in args.references:
                draws = results["prior"][-1][2] if reference == "matched" else None
                results.setdefault(reference, []).append(
                    run(name, reference, seed, args.warmup, args.samples, args.device, draws,
                        args.replicas))
        prior = [b for b, _, _ in results.get("prior", ())]
        for reference in set(results) - {"prior"}:
            fitted = [b for b, _, _ in results[reference]]
            print(f"{name}: Lambda {reference} / prior per seed: "
                  f"{[round(f / p, 3) for f, p in zip(fitted, prior)]}")
        print(f"{name}: round trips " + ", ".join(
            f"{r} {[t for _, t, _ in results[r]]}" for r in results) + "\n", flush=True)


if __name__ == "__main__":
    main()
