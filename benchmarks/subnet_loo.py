"""
PSIS-LOO of subnetwork Laplace posteriors on a ReLU classifier, with and without the correction
for drawing from the Laplace Gaussian (pyro_subnet.loo) instead of the posterior.

Two moons (200 training points, noise 0.2, synthesized as scikit-learn's make_moons does), a
2-32-32-2 ReLU network with Normal(0, 1) priors on its 1218 weights and biases, a Categorical
likelihood; MAP by Adam. For each subnetwork posterior (size S, prior scale, the export's
predictive) the script prints, from one export of M draws:

    k(p/q)                    Pareto k of the importance weights p/q over all draws: whether the
                              Laplace Gaussian q is close enough to the posterior p of the exported
                              model for any reweighting of its draws (Yao et al. 2018)
    k>0.7 plain / corrected   share of the 200 points with Pareto k above 0.7 in az.loo and in
                              pyro_subnet.loo (the correction for q)
    elpd plain / corrected    the two elpd_loo
    held-out q / p            200 times the mean log predictive density of 2000 fresh points, from
                              the same draws through the same predictive, averaged plainly (the
                              predictive of q: what plain LOO estimates) or with the Pareto-smoothed
                              weights p/q (the posterior's: what the corrected LOO estimates; only
                              as good as k(p/q))
    warn                      whether pyro_subnet.loo warned that its Pareto k are not to be trusted
                              (on an export it also says, each time, that it cannot move the MAP
                              without each point: benchmarks/subnet_loo_classifier.py measures that)

    python benchmarks/subnet_loo.py [--draws 1000] [--steps 3000] [--seeds 3]   # about 3 minutes

``--ranking N`` instead ranks the README's three results (NUTS, ParallelTempering, a subnet
posterior with S = 1) of a linear regression (40 points, 3 weights, Normal(0, 1) prior, noise
0.5) on N data seeds against leave-one-out refits, computed in closed form: the exact posterior
without each point (what NUTS and PT sample), and the subnet posterior fitted without it (the MAP
of all three weights, the Laplace Gaussian on the subnetwork weight). Per seed it prints the
refits' elpd, az.loo of each MCMC export, pyro_subnet.loo of the posterior (what az.compare is
given), and the PSIS-LOO that az.loo would have made of the subnet export's draws (its
conditional_log_likelihood), with the subnet posterior's elpd minus NUTS's by each.

    python benchmarks/subnet_loo.py --ranking 10 --draws 500   # about 8 minutes
"""

import argparse
import math
import time
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS, SVI, Trace_ELBO

import pyro_arviz
from pyro_pt import ParallelTempering
from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace, loo, to_inference_data
from pyro_subnet.arviz import as_arviz_log_likelihood
from pyro_subnet.cross_validation import approximation_pareto_k

WIDTHS = (2, 32, 32, 2)


def two_moons(n, noise, generator):
    """Two interleaved half circles with Gaussian noise (scikit-learn's make_moons construction)."""
    n_out = n // 2
    t_out = torch.linspace(0, math.pi, n_out)
    t_in = torch.linspace(0, math.pi, n - n_out)
    x = torch.cat([torch.stack([t_out.cos(), t_out.sin()], -1),
                   torch.stack([1 - t_in.cos(), 1 - t_in.sin() - 0.5], -1)])
    y = torch.cat([torch.zeros(n_out, dtype=torch.long), torch.ones(n - n_out, dtype=torch.long)])
    x = x + noise * torch.randn(x.shape, generator=generator)
    perm = torch.randperm(n, generator=generator)
    return x[perm], y[perm]


def model(x, y=None):
    h = x
    for i, (a, b) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        W = pyro.sample(f"W{i}", dist.Normal(0.0, 1.0).expand([b, a]).to_event(2))
        c = pyro.sample(f"b{i}", dist.Normal(0.0, 1.0).expand([b]).to_event(1))
        h = h @ W.T + c
        if i < len(WIDTHS) - 2:
            h = torch.relu(h)
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Categorical(logits=h), obs=y)


def held_out(idata, ll_test):
    """Mean log predictive density of the test points ``ll_test`` ``[M, n]`` at the export's draws,
    under q (equal weights) and under the posterior (Pareto-smoothed weights p/q)."""
    import arviz as az

    log_w = torch.as_tensor((idata.sample_stats.lp - idata.sample_stats.log_q).values[0])
    if pyro_arviz.arviz_generation() == 0:
        log_w = torch.as_tensor(az.psislw((log_w - log_w.max()).numpy())[0])
    else:
        from arviz_stats.base import array_stats

        log_w = torch.as_tensor(array_stats.psislw(-(log_w - log_w.max()).numpy(), r_eff=1.0)[0])
    q = ll_test.logsumexp(0) - math.log(len(ll_test))
    p = (ll_test + log_w[:, None]).logsumexp(0)
    return float(q.mean()), float(p.mean())


CONFIGS = [(61, "marglik", "linearized"), (61, "marglik", "network"), (61, 1.0, "linearized"),
           (61, 10.0, "linearized"), (20, "marglik", "linearized"), (20, 1.0, "linearized"),
           (5, "marglik", "linearized"), (5, 1.0, "linearized")]


def run_seed(seed, opts):
    """One data set and MAP; a row of figures per configuration."""
    import arviz as az

    g = torch.Generator().manual_seed(seed)
    x, y = two_moons(200, 0.2, g)
    x_test, y_test = two_moons(2000, 0.2, g)
    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    guide = SubnetworkLaplace(model, subnetwork_size=61, prior_scale="marglik")
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
    for _ in range(opts.steps):
        svi.step(x, y)
    rows = []
    for S, scale, predictive in CONFIGS:
        guide.subnetwork_size, guide.prior_scale = S, scale
        post = guide.laplace_approximation(x, y)
        pyro.set_rng_seed(seed + 1)
        idata = to_inference_data(post, x, y, num_samples=opts.draws, predictive=predictive)
        pyro.set_rng_seed(seed + 1)  # the same draws on the test points
        test = to_inference_data(post, x_test, y_test, num_samples=opts.draws, predictive=predictive,
                                 log_densities=False)
        assert np.array_equal(test.posterior["W0"].values, idata.posterior["W0"].values)
        truth = [len(y) * v for v in held_out(idata, torch.as_tensor(test.conditional_log_likelihood["obs"].values[0]))]
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            plain = az.loo(as_arviz_log_likelihood(idata), pointwise=True)  # the draws' own PSIS-LOO
            corrected = loo(idata)
        shares, elpds = [], []
        for result in (plain, corrected):
            k = np.asarray(result["pareto_k"] if pyro_arviz.arviz_generation() == 0 else result.pareto_k)
            shares.append(float((k > 0.7).mean()))
            elpds.append(float(result["elpd_loo"] if pyro_arviz.arviz_generation() == 0 else result.elpd))
        rows.append({"c": post.prior_scale, "k_q": approximation_pareto_k(idata), "shares": shares,
                     "elpds": elpds, "truth": truth,
                     # the export's estimate also says it cannot move the MAP; what counts here is k
                     "warned": any(issubclass(r.category, SubnetLOOWarning) and "not moved" not in str(r.message)
                                   for r in record)})
    return rows


NOISE = 0.5


def regression(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(3, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(x @ w, NOISE), obs=y)


def exact_fit(x, y):
    """The regression's exact posterior mean (the MAP) and precision, in float64."""
    x, y = x.double(), y.double()
    precision = x.T @ x / NOISE**2 + torch.eye(3, dtype=x.dtype)
    return torch.linalg.solve(precision, x.T @ y / NOISE**2), precision


def refit_loo(x, y, subnetwork=None):
    """sum_i log p(y_i | y_-i), refitted without each point: the exact posterior, or (``subnetwork``
    the S indices) the MAP of all weights with the Laplace Gaussian on the S weights only."""
    total = 0.0
    for i in range(len(y)):
        keep = torch.arange(len(y)) != i
        mean, precision = exact_fit(x[keep], y[keep])
        xi, s = x[i].double(), subnetwork
        var = (xi @ torch.linalg.solve(precision, xi) if s is None
               else xi[s] @ torch.linalg.solve(precision[s][:, s], xi[s]))
        total += float(torch.distributions.Normal(xi @ mean, (var + NOISE**2).sqrt()).log_prob(y[i].double()))
    return total


def ranking_seed(seed, draws):
    """The README's three results on one data set, against the refits (module docstring)."""
    import arviz as az

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 3, generator=g)
    y = x @ torch.tensor([0.8, -0.5, 0.3]) + NOISE * torch.randn(40, generator=g)
    pyro.set_rng_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tempering review of a unimodal model's short run
        nuts = MCMC(NUTS(regression), draws, 300, disable_progbar=True)
        nuts.run(x, y)
        pt = MCMC(ParallelTempering(regression, num_replicas=4), draws, 300, disable_progbar=True)
        pt.run(x, y)
    pyro.clear_param_store()
    guide = SubnetworkLaplace(regression, subnetwork_size=1)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(exact_fit(x, y)[0])  # the MAP, exactly
    posterior = guide.laplace_approximation(x, y)
    S = posterior.subnetwork_indices.tolist()

    def elpd(result):
        return float(result["elpd_loo"] if pyro_arviz.arviz_generation() == 0 else result.elpd)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row = {"S": S[0], "exact": refit_loo(x, y), "subnet refits": refit_loo(x, y, S),
               "nuts": elpd(az.loo(pyro_arviz.from_pyro(nuts))), "pt": elpd(az.loo(pyro_arviz.from_pyro(pt))),
               "subnet": elpd(loo(posterior, x, y, num_samples=2000)),
               "naive": elpd(az.loo(as_arviz_log_likelihood(pyro_arviz.from_pyro(posterior, x, y,
                                                                                  num_samples=draws))))}
    return row


def ranking(opts):
    print(f"linear regression, 40 points, 3 weights, S = 1; NUTS and PT (4 rungs) {opts.draws} draws (300 warmup); "
          "pyro_subnet.loo 2000 draws; az.loo of the subnet export's draws (naive) "
          f"{opts.draws} draws; ArviZ {__import__('arviz').__version__}")
    print("| seed | S | refits: exact | refits: subnet | az.loo NUTS | az.loo PT | pyro_subnet.loo | naive "
          "| subnet - NUTS: refits | : az.compare's | : naive |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    t0, agree, naive_agree, decided = time.time(), 0, 0, 0
    for seed in range(opts.ranking):
        r = ranking_seed(seed, opts.draws)
        gaps = [r["subnet refits"] - r["exact"], r["subnet"] - r["nuts"], r["naive"] - r["nuts"]]
        if abs(gaps[0]) > 0.2:  # the refits tell the two apart by more than the estimates' noise
            decided += 1
            agree += (gaps[1] > 0) == (gaps[0] > 0)
            naive_agree += (gaps[2] > 0) == (gaps[0] > 0)
        print(f"| {seed} | {r['S']} | {r['exact']:.2f} | {r['subnet refits']:.2f} | {r['nuts']:.2f} | {r['pt']:.2f} "
              f"| {r['subnet']:.2f} | {r['naive']:.2f} | {gaps[0]:+.2f} | {gaps[1]:+.2f} | {gaps[2]:+.2f} |")
    print(f"\n{opts.ranking} seeds ({time.time() - t0:.0f} s); of the {decided} where the refits put subnet and NUTS "
          f"more than 0.2 nats apart, az.compare (pyro_subnet.loo) orders them as the refits do on {agree}, "
          f"the naive export on {naive_agree}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--ranking", type=int, default=0, help="rank the README's three on this many seeds instead")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    if opts.ranking:
        return ranking(opts)
    print(f"M = {opts.draws} draws, n = 200 points, 2000 held-out points, MAP: {opts.steps} Adam steps, "
          f"seeds 0..{opts.seeds - 1}")
    print("| seed | S | prior_scale (c) | predictive | k(p/q) | k>0.7 plain | k>0.7 corrected | elpd plain "
          "| elpd corrected | held-out q | held-out p | warn |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    t0 = time.time()
    table = []
    for seed in range(opts.seeds):
        rows = run_seed(seed, opts)
        table.append(rows)
        for (S, scale, predictive), r in zip(CONFIGS, rows):
            c = f"{scale} ({r['c']:.3g})" if isinstance(scale, str) else f"{scale:g}"
            print(f"| {seed} | {S} | {c} | {predictive} | {r['k_q']:.2f} | {r['shares'][0]:.0%} "
                  f"| {r['shares'][1]:.0%} | {r['elpds'][0]:.1f} | {r['elpds'][1]:.1f} | {r['truth'][0]:.1f} "
                  f"| {r['truth'][1]:.1f} | {'yes' if r['warned'] else 'no'} |")
    print(f"\nmeans over {opts.seeds} seeds ({time.time() - t0:.0f} s); error = |elpd - the held-out figure it "
          "estimates| (plain: held-out q, corrected: held-out p)")
    print("| S | prior_scale | predictive | k(p/q) median | k>0.7 plain | k>0.7 corrected | error plain "
          "| error corrected | warned |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, (S, scale, predictive) in enumerate(CONFIGS):
        rs = [rows[i] for rows in table]
        share = [np.mean([r["shares"][j] for r in rs]) for j in (0, 1)]
        error = [np.mean([abs(r["elpds"][j] - r["truth"][j]) for r in rs]) for j in (0, 1)]
        print(f"| {S} | {scale} | {predictive} | {np.median([r['k_q'] for r in rs]):.2f} | {share[0]:.0%} "
              f"| {share[1]:.0%} | {error[0]:.1f} | {error[1]:.1f} | {sum(r['warned'] for r in rs)}/{len(rs)} |")


if __name__ == "__main__":
    main()
