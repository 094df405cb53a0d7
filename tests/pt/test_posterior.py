"""The cold chain samples the right posterior: exact answers, and bugs that must fail them."""

import math

import pytest
import torch

import pyro
from pyro.infer import MCMC, NUTS
from pyro.ops.stats import effective_sample_size

from pyro_pt import ParallelTempering, explorers, swap
from pyro_pt.potential import TemperedPotential

from .models import (
    bimodal_mass_above_zero,
    bimodal_model,
    linear_data,
    linear_model,
    linear_posterior,
)
from .mutations import temper_the_prior_in_batched_hmc


def conjugate_errors(max_temperature, swap_scheme, explorer="rwmh", explorer_kwargs=None,
                     num_samples=2000, num_replicas=3, seed=0):
    """
    Errors of the cold chain against the exact posterior of ``linear_model``, in units of
    their Monte Carlo standard errors: (mean z-scores, covariance z-scores, swap acceptance).
    """
    x, y = linear_data()
    mean, cov = linear_posterior(x, y)
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(linear_model, num_replicas=num_replicas,
                               max_temperature=max_temperature, explorer=explorer,
                               explorer_kwargs=explorer_kwargs, swap_scheme=swap_scheme)
    mcmc = MCMC(kernel, num_samples, num_samples // 2, disable_progbar=True)
    mcmc.run(x, y)
    w = mcmc.get_samples()["w"]
    ess = effective_sample_size(w.unsqueeze(0)).min()
    sd = cov.diagonal().sqrt()
    mean_z = (w.mean(0) - mean) / (sd / ess.sqrt())
    # Relative covariance error; its standard error is about sqrt(2 / ess) for variances.
    cov_z = (torch.cov(w.T) - cov) / sd.outer(sd) / math.sqrt(2 / ess)
    swaps = mcmc.diagnostics()["swap_acceptance"]["chain 0"]
    return mean_z.abs().max().item(), cov_z.abs().max().item(), swaps


def assert_posterior_ok(mean_z, cov_z):
    assert mean_z < 4.0, f"mean off by {mean_z:.1f} standard errors"
    assert cov_z < 4.0, f"covariance off by {cov_z:.1f} standard errors"


@pytest.mark.parametrize(
    "max_temperature, swap_scheme", [(10.0, "deo"), (math.inf, "sequential"), (10.0, "seo")]
)
def test_cold_chain_matches_the_conjugate_posterior(max_temperature, swap_scheme):
    # 1000 draws (the bound is in Monte Carlo standard errors): seeds 0-5 of each scheme gave
    # at most 2.8; a sign flip in the swap log-ratio gives 5.8-50 (seeds 0-2 of each scheme).
    # A tempered prior stands out only over 2000 draws: its own test below.
    mean_z, cov_z, swaps = conjugate_errors(max_temperature, swap_scheme, num_samples=1000)
    assert min(swaps) > 0.2  # the swaps really move states
    assert_posterior_ok(mean_z, cov_z)


@pytest.mark.slow
def test_tempering_the_prior_fails_the_conjugate_check(monkeypatch):
    # A known bug: tempering the prior too while keeping the likelihood-only swap ratio.
    def tempered_prior(self, z):
        lp, ll = self.split.log_densities(z)
        return -self.beta * (lp + ll)

    monkeypatch.setattr(TemperedPotential, "__call__", tempered_prior)
    mean_z, cov_z, _ = conjugate_errors(10.0, "deo")
    assert max(mean_z, cov_z) > 6.0


def test_a_flipped_swap_ratio_fails_the_conjugate_check(monkeypatch):
    # A known bug: the swap log-ratio's sign flipped. Over the 1000 draws of the check above,
    # seeds 0-2 of each scheme were off by 5.8-50 standard errors (9.2 here, deo at seed 0).
    monkeypatch.setattr(swap, "swap_log_ratio", lambda bi, bj, li, lj: (bi - bj) * (li - lj))
    mean_z, cov_z, _ = conjugate_errors(10.0, "deo", num_samples=1000)
    assert max(mean_z, cov_z) > 6.0


@pytest.mark.parametrize("max_temperature", [pytest.param(10.0, marks=pytest.mark.slow), math.inf])
def test_batched_hmc_explorer_matches_the_conjugate_posterior(max_temperature):
    mean_z, cov_z, swaps = conjugate_errors(max_temperature, "deo", explorer="hmc",
                                            explorer_kwargs={"num_steps": 4}, num_samples=1000)
    assert min(swaps) > 0.2
    assert_posterior_ok(mean_z, cov_z)


@pytest.mark.slow
def test_batched_hmc_with_adapted_lengths_matches_the_conjugate_posterior():
    # explorer="hmc" as a user gets it: ChEES-adapted trajectory lengths, run a share h_t of
    # them that every rung shares (hmc_trajectory.shared_fraction). Seeds 0-5: at most 1.7
    # standard errors off; with the swap log-ratio's sign flipped, 9.0-9.2 (seeds 0-2).
    mean_z, cov_z, swaps = conjugate_errors(10.0, "deo", explorer="hmc", num_samples=1000)
    assert min(swaps) > 0.2
    assert_posterior_ok(mean_z, cov_z)


@pytest.mark.slow
def test_batched_hmc_with_a_tempered_prior_fails_the_conjugate_check(monkeypatch):
    temper_the_prior_in_batched_hmc(monkeypatch)
    # The cold rung's own target is untouched (beta = 1); the bias comes in through the swaps
    # only, so it takes 2000 draws to stand out: over seeds 0-3, 7-14 standard errors
    # (1000 draws: 5.2-8.5, too close to the bound).
    mean_z, cov_z, _ = conjugate_errors(10.0, "deo", explorer="hmc",
                                        explorer_kwargs={"num_steps": 4}, num_samples=2000)
    assert max(mean_z, cov_z) > 6.0


@pytest.mark.slow
def test_nuts_explorer_matches_the_conjugate_posterior():
    mean_z, cov_z, swaps = conjugate_errors(
        10.0, "deo", explorer="nuts", explorer_kwargs={"max_tree_depth": 3}, num_samples=800
    )
    assert min(swaps) > 0.2
    assert_posterior_ok(mean_z, cov_z)


@pytest.mark.slow
def test_bimodal_mode_weights_and_plain_nuts_stuck():
    truth = bimodal_mass_above_zero()
    assert truth == pytest.approx(0.75, abs=1e-3)
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(bimodal_model, num_replicas=4, max_temperature=100.0,
                               explorer="rwmh")
    mcmc = MCMC(kernel, 8000, 1000, disable_progbar=True)
    mcmc.run()
    theta = mcmc.get_samples()["theta"]
    assert abs(float((theta > 0).double().mean()) - truth) < 0.05
    assert mcmc.diagnostics()["round_trips"]["chain 0"] > 500

    pyro.set_rng_seed(0)
    nuts = MCMC(NUTS(bimodal_model, max_tree_depth=3), 300, 150, disable_progbar=True,
                initial_params={"theta": torch.tensor(-2.0)})
    nuts.run()
    assert (nuts.get_samples()["theta"] < 0).all()  # never leaves the small mode


def first_cold_evaluations_after_swaps(monkeypatch, clear_cache=True):
    """
    Run NUTS explorers step by step, spying on the cold potential. Returns, for every scan
    that swapped a new state into the cold rung, (that state, the first point the cold NUTS
    evaluated in the next scan).
    """
    evaluations = []

    def spying(original):
        def spy(self, z):
            if self.beta == 1.0:
                evaluations.append(z["w"].detach().clone())
            return original(self, z)
        return spy

    # Both ways the NUTS explorer evaluates its potential: through autograd, and the leapfrog
    # steps' gradients from the captured graph.
    for method in ("__call__", "potential_and_grad"):
        monkeypatch.setattr(TemperedPotential, method, spying(getattr(TemperedPotential, method)))
    if not clear_cache:
        monkeypatch.setattr(explorers.PyroKernelExplorer, "target_changed", lambda self: None)
    x, y = linear_data()
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, temperatures=[1.0, 1.5], explorer="nuts",
                               swap_scheme="sequential",
                               explorer_kwargs={"max_tree_depth": 2, "step_size": 0.1,
                                                "adapt_step_size": False})
    kernel.setup(0, x, y)
    params, pairs = kernel.initial_params, []
    for _ in range(40):
        evaluations.clear()
        params = kernel.sample(params)
        first = evaluations[0] if evaluations else None
        if pairs and pairs[-1][1] is None:
            pairs[-1] = (pairs[-1][0], first)
        record = kernel.diagnostics()["tempering_record"]["swap_accepted"]
        if record[-1, 0] == 1:
            pairs.append((params["w"].clone(), None))
    return [p for p in pairs if p[1] is not None]


def test_explorer_restarts_from_the_swapped_in_state(monkeypatch):
    pairs = first_cold_evaluations_after_swaps(monkeypatch)
    assert len(pairs) >= 5
    for swapped_in, first_evaluated in pairs:
        assert torch.equal(swapped_in, first_evaluated)


def test_explorer_cache_not_invalidated_on_swap_is_detected(monkeypatch):
    # A known bug: Pyro's NUTS keeps integrating from its cached state after a swap.
    pairs = first_cold_evaluations_after_swaps(monkeypatch, clear_cache=False)
    assert sum(not torch.equal(a, b) for a, b in pairs) >= 5
