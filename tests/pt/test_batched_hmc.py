"""BatchedHMC against exact tempered Gaussian posteriors; known bugs it catches; adaptation of
the step size, the mass matrix and the warmup windows; float32. Placement independence, NaN
slots and replaced states are in test_batched_hmc_slots."""

import math

import pytest
import torch

from pyro.ops.welford import WelfordCovariance

from pyro_pt.explorers import hmc as hmc_module
from pyro_pt.explorers.hmc import BatchedHMC
from pyro_pt.explorers.hmc_dynamics import row_sum
from pyro_pt.explorers.hmc_warmup import DualAveraging, warmup_windows

from .tempered_gaussian import (BETAS, F64, SEEDS, TemperedGaussian, assert_matches_posterior,
                                gaussian, run)


# Adapted trajectory lengths (the default), and a fixed jittered count. Three steps without
# jitter no longer: once warmup ends at the target acceptance, 3 steps of the preconditioned
# Gaussian are nearly half a period (omega L eps / pi = 0.96 measured), x -> -x, and x^2 hardly
# mixes; the reason explorer="hmc" jitters a fixed num_steps by default.
@pytest.mark.parametrize("kwargs", [{}, {"num_steps": 3, "num_steps_jitter": 0.5}],
                         ids=["adaptive", "fixed"])
def test_samples_exact_tempered_posteriors(kwargs):
    target = gaussian()
    hmc, draws, _ = run(target, BETAS, SEEDS, warmup=400, samples=4000, **kwargs)
    assert_matches_posterior(target, BETAS, draws)
    assert all(d["divergences"] == [] for d in hmc.diagnostics())


@pytest.mark.parametrize("mutant", ["tempered prior", "accept sign", "kinetic without metric"])
def test_known_bugs_fail_the_posterior_check(mutant, monkeypatch):
    tempered_prior = mutant == "tempered prior"
    if mutant == "accept sign":
        flipped = hmc_module.metropolis_probability
        monkeypatch.setattr(hmc_module, "metropolis_probability", lambda r: flipped(-r))
    if mutant == "kinetic without metric":
        monkeypatch.setattr(BatchedHMC, "_kinetic", lambda self, p: 0.5 * row_sum(p * p))
    target = gaussian(tempered_prior)
    _, draws, _ = run(target, BETAS, SEEDS, warmup=400, samples=1600, num_steps=3)
    with pytest.raises(AssertionError):
        assert_matches_posterior(gaussian(), BETAS, draws)


def test_returned_ll_is_the_ll_of_the_returned_states():
    target = gaussian()
    _, draws, lls = run(target, BETAS, SEEDS, warmup=30, samples=60, num_steps=3)
    betas = torch.tensor(BETAS, dtype=F64)
    for z, ll in zip(draws, lls):
        assert torch.equal(ll, target(z, betas)[2])


def test_step_size_and_mass_matrix_adapt_to_the_target():
    # Posterior standard deviations 0.1, 0.45 and 14 at beta = 1; 0.1, 1 and 28 at beta = 0.1.
    target = TemperedGaussian([0.1, 1.0, 30.0], [1.0, 0.5, 20.0], torch.zeros(2, 3))
    betas = [1.0, 0.1]
    hmc, _, _ = run(target, betas, [5, 6], warmup=1500, samples=300, num_steps=3)
    for r, beta in enumerate(betas):
        # The last slow window has 1000 autocorrelated draws: ~10% noise on each variance.
        ratio = hmc.inverse_mass[r] / target.posterior(beta)[1]
        assert ((ratio > 0.7) & (ratio < 1.3)).all(), (r, ratio)
    for d in hmc.diagnostics():
        # Above the 0.8 target: dual averaging keeps exp(x_bar), and with a fixed number of
        # steps on a Gaussian the energy error is periodic in the trajectory length.
        assert 0.7 < d["acceptance rate"] < 0.99, d
        assert d["divergences"] == []
    assert float(hmc.logging(1)["acc. prob"]) > 0.7


def test_dual_averaging_finds_the_step_size_with_the_target_acceptance():
    # acceptance exp(-(eps / 2)^2) is 0.8 at eps = 2 sqrt(-log 0.8)
    dual = DualAveraging([0.0, 0.0, 0.0], target_accept_prob=0.8)
    log_eps = dual.log_step_size
    for t in range(3000):
        if t == 1000:  # restarting one slot leaves the others' averages alone
            dual.restart([None, None, 2.0], [2])
            log_eps = dual.log_step_size
        log_eps = dual.update([math.exp(-(math.exp(x) / 2) ** 2) for x in log_eps])
    expected = 2 * math.sqrt(-math.log(0.8))
    for x in dual.final_log_step_size():
        assert abs(math.exp(x) / expected - 1) < 0.02
    assert dual.t == [3000, 3000, 2000]


def test_float32_runs_and_keeps_its_dtype():
    target = gaussian()
    hmc = BatchedHMC(target, num_steps=3)
    z = torch.zeros(2, 3)
    ll = hmc.setup(z, [1.0, 0.3], [7, 8], 100)
    assert ll.dtype == torch.float32
    draws = []
    for _ in range(400):
        (z, ll), _ = hmc.step(z)
        draws.append(z)
    assert z.dtype == ll.dtype == hmc.step_sizes.dtype == hmc.inverse_mass.dtype == torch.float32
    draws = torch.stack(draws[100:]).to(F64)
    mean, var = target.posterior(1.0)
    assert ((draws[:, 0].mean(0) - mean).abs() < 0.5 * var.sqrt()).all()


def test_stan_windows_and_regularized_variance():
    assert warmup_windows(1000) == [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    assert warmup_windows(100) == [(15, 90)]
    assert warmup_windows(20) == [(3, 10)]  # 10 iterations left for the final step size
    assert warmup_windows(19) == []
    x = torch.randn(50, 2, 4, dtype=F64)
    welford = WelfordCovariance(diagonal=True)  # as HMCWarmup uses it: rows are slots
    for row in x:
        welford.update(row)
    expected = (50 / 55) * x.var(0) + 1e-3 * (5 / 55)
    assert torch.allclose(welford.get_covariance(regularize=True), expected)
