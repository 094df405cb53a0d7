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

With ``--defaults`` each run is instead as a user would write it, on the battery's mixtures and
a logistic regression: ``"prior"`` is ``ParallelTempering(model)`` (its growing ladder),
``"stabilized"`` ``ParallelTempering(model, reference="variational")`` (its default ladder: two
legs of 4 rungs), ``"variational"`` the same with one leg of 8 rungs to q (``temperatures``
given); MCMC ``--warmup`` + ``--samples`` (1000 + 1000), seeds from 1. Printed per run: wall
seconds, K per leg, Lambda (each leg's), the sampling phase's tempered restarts (from either
leg's hot end) and those per second, the worst labelling's share error (mixtures; exact shares
1/k!), log Z - exact (quadrature, benchmarks/_tempering_targets.py), whether a TemperingWarning
was raised, and on the logistic regression the min ESS over coordinates per second.
``--replicas K`` sets K of every run (the prior's ladder then does not grow). Models:

- ``mix2``, ``mix3``: the battery's two- and three-component mixtures (benchmarks/vs_tempering.py);
- ``logistic``: the logistic regression of benchmarks/explorers.py (500 points, 10 features).

Prints; asserts nothing.

    PYTHONPATH=$PWD python benchmarks/reference.py [--models conjugate bnn] [--seeds 2]
        [--references prior stabilized] [--replicas 12] [--device cuda]
    PYTHONPATH=$PWD python benchmarks/reference.py --defaults [--models mix2 mix3 logistic]
        [--seeds 4] [--references prior stabilized variational]
"""

import argparse
import math
import os
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

from pyro_pt import ParallelTempering, TemperingWarning
from pyro_pt.ladder import geometric_ladder
from pyro_pt.reference import ReferencedSplit

from _bnn import CountingModel, initial_params, make_data
from funnel import SIGMA, Y, eight_schools_centered
from pt_bnn_bottleneck import BNN, data as bnn_data

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the tests' models
from tests.pt.models import SUM_PRIOR_SCALE as PRIOR_SCALE, sum_model as conjugate  # noqa: E402


REFERENCES = ("prior", "variational", "stabilized", "matched")
DEFAULT_MODELS = ("mix2", "mix3", "logistic")


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


def default_case(name):
    """``(model, args, site, target)`` of a ``--defaults`` model; ``target`` (exact shares and
    log Z) is None for the logistic regression."""
    if name == "logistic":
        from _explorers_models import logistic, logistic_data

        return logistic, logistic_data(), None, None
    from _tempering_targets import target
    from vs_tempering import pyro_model, specs

    spec = specs()[name]
    t = target(spec)
    model, args, site = pyro_model(t, spec)
    return model, args, site, t


def run_default(name, reference, seed, warmup, samples, cache, replicas=None):
    """One run as a user writes it (see the module); ``cache`` keeps each model's case and its
    exact log Z (quadrature) across runs; ``replicas``: K of every run (default: the prior's
    ladder grows as it does by default, the fitted references' have 8 rungs)."""
    if name not in cache:
        model, args, site, t = default_case(name)
        cache[name] = (model, args, site, t, None if t is None else t.log_z())
    model, args, site, t, exact = cache[name]
    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    options = {"reference": "prior" if reference == "prior" else "variational"}
    if reference == "prior" and replicas:
        options["num_replicas"] = replicas
    elif reference == "variational":
        options["temperatures"] = geometric_ladder(replicas or 8, math.inf)
    elif reference == "stabilized" and replicas:
        options["num_replicas"] = replicas
    kernel = ParallelTempering(model, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        began = time.perf_counter()
        mcmc = MCMC(kernel, samples, warmup, disable_progbar=True)
        mcmc.run(*args)
        seconds = time.perf_counter() - began
        d = kernel.diagnostics()
    warned = sorted({str(w.message)[:60] for w in caught
                     if issubclass(w.category, TemperingWarning)})
    legs = d.get("legs") or {}
    sizes = "+".join(str(len(leg["temperatures"])) for leg in legs.values()) or str(
        kernel.num_replicas)
    barrier = f"{d['barrier']:.2f}" + (
        f" ({legs['prior']['barrier']:.2f})" if "prior" in legs else "")
    restarts = d.get("restarts") or 0
    draws = mcmc.get_samples()
    row = dict(model=name, reference=reference, seed=seed, seconds=seconds, K=sizes,
               barrier=barrier, restarts=restarts, rate=restarts / seconds, warned=bool(warned))
    line = (f"{name:8s} {reference:11s} seed={seed} {seconds:6.1f} s K={sizes:5s} "
            f"Lambda={barrier} restarts={restarts} ({restarts / seconds:.2f}/s) "
            f"log Z={d['log_Z']:.3f}")
    if t is not None:
        row["share_error"] = t.share_error(draws[site].double().numpy())
        row["log_z_error"] = float(d["log_Z"]) - exact
        line += f" (err {row['log_z_error']:+.3f}) share err={row['share_error']:.3f}"
    else:
        flat = torch.cat([draws["w"], draws["b"].unsqueeze(-1)], -1)
        ess = effective_sample_size(flat.unsqueeze(0).double())
        row["ess_rate"] = float(ess.min()) / seconds
        line += f" min ESS={float(ess.min()):.0f} ({row['ess_rate']:.2f}/s)"
    print(f"{line} warned={warned or 'no'}", flush=True)
    return row


def main_defaults(args):
    cache, rows = {}, []
    print(f"torch {torch.__version__}, pyro {pyro.__version__}, one thread; load average "
          f"{tuple(round(v, 2) for v in os.getloadavg())}", flush=True)
    for seed in range(1, args.seeds + 1):  # seed outermost: a cut-short run has whole seeds
        for name in args.models:
            for reference in args.references:
                rows.append(run_default(name, reference, seed, args.warmup, args.samples, cache,
                                        args.replicas))
    print("\n| model | reference | seeds | s | K | Lambda (prior leg) | restarts | restarts/s | share error | "
          "log Z error | min ESS/s | warned |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def span(values, fmt):
        values = [v for v in values if v is not None]
        if not values:
            return ""
        return (fmt.format(min(values)) if min(values) == max(values)
                else f"{fmt.format(min(values))} to {fmt.format(max(values))}")

    for name in args.models:
        for reference in args.references:
            mine = [r for r in rows if r["model"] == name and r["reference"] == reference]
            print(f"| {name} | {reference} | {len(mine)} | {span([r['seconds'] for r in mine], '{:.0f}')} "
                  f"| {', '.join(sorted({r['K'] for r in mine}))} "
                  f"| {'; '.join(r['barrier'] for r in mine)} "
                  f"| {span([r['restarts'] for r in mine], '{}')} "
                  f"| {span([r['rate'] for r in mine], '{:.2f}')} "
                  f"| {span([r.get('share_error') for r in mine], '{:.3f}')} "
                  f"| {span([r.get('log_z_error') for r in mine], '{:+.2f}')} "
                  f"| {span([r.get('ess_rate') for r in mine], '{:.1f}')} "
                  f"| {sum(r['warned'] for r in mine)}/{len(mine)} |")
    print(f"load average {tuple(round(v, 2) for v in os.getloadavg())}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--defaults", action="store_true",
                        help="each reference as a user writes it, on mix2, mix3, logistic")
    parser.add_argument("--models", nargs="+")
    parser.add_argument("--seeds", type=int)
    parser.add_argument("--references", nargs="+", choices=REFERENCES)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--device", default="cpu", help="the seed BNN's device, e.g. cuda")
    parser.add_argument("--replicas", type=int, help="K for every model (default: its own)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.defaults:
        args.models = args.models or list(DEFAULT_MODELS)
        args.seeds = args.seeds or 4
        args.references = args.references or ["prior", "stabilized", "variational"]
        args.warmup = args.warmup or 1000
        if "matched" in args.references:
            parser.error("--references: 'matched' is not among the --defaults runs")
        return main_defaults(args)
    args.models = args.models or ["conjugate", "eight_schools", "bnn"]
    args.seeds = args.seeds or 2
    args.references = args.references or list(REFERENCES)
    args.warmup = args.warmup or 500
    if "matched" in args.references and "prior" not in args.references[
            :args.references.index("matched")]:
        parser.error("--references: 'matched' is fitted to the 'prior' run's draws; list "
                     "'prior' before it")
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
