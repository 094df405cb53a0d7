"""Groundwork of ladder adaptation and evidence: pure functions against exact answers."""

import math

import pytest
import torch

import pyro.distributions as dist

from pyro_pt.ladder import equal_barrier_betas
from pyro_pt.barrier import cumulative_barrier
from pyro_pt.recorders import stepping_stone


def test_cumulative_barrier():
    assert cumulative_barrier([0.2, 0.5, 0.1]) == pytest.approx([0.0, 0.2, 0.7, 0.8])
    assert cumulative_barrier([]) == [0.0]


def test_equal_barrier_ladder_moves_rungs_to_the_hard_pair():
    betas = [1.0, 0.75, 0.5, 0.25, 0.0]
    # All of the barrier but 0.3 lies between the two coldest rungs.
    new = equal_barrier_betas(betas, [0.9, 0.1, 0.1, 0.1])
    # Targets 0.3, 0.6, 0.9 of the total 1.2 all fall in the first segment [0, 0.9].
    assert new == pytest.approx([1.0, 1 - 0.25 / 3, 1 - 0.5 / 3, 0.75, 0.0])
    # Equal rejections keep an equal-barrier ladder where it is; no rejection changes nothing.
    assert equal_barrier_betas(betas, [0.3] * 4) == pytest.approx(betas)
    assert equal_barrier_betas(betas, [0.0] * 4) == betas


def test_equal_barrier_ladder_equalizes_a_known_barrier():
    # A barrier with density 2 beta, so Lambda(1) - Lambda(beta) = 1 - beta^2. A uniform ladder
    # measures each pair's increment; the new ladder must sit at equal increments of it:
    # beta_j = sqrt(1 - j / 200).
    fine = [1 - k / 200 for k in range(201)]
    rejections = [a**2 - b**2 for a, b in zip(fine, fine[1:])]
    expected = [math.sqrt(1 - j / 200) for j in range(201)]
    assert equal_barrier_betas(fine, rejections) == pytest.approx(expected, abs=2e-3)


def conjugate_draws(betas, y, prior_scale, noise, num_draws, generator):
    """Exact i.i.d. draws of each tempered conjugate posterior and their log-likelihoods."""
    n, d = y.shape
    out = []
    for beta in betas:
        precision = 1 / prior_scale**2 + beta * n / noise**2
        mean = beta * y.sum(0) / noise**2 / precision
        z = mean + torch.randn(num_draws, d, generator=generator, dtype=y.dtype) / precision**0.5
        ll = dist.Normal(z.unsqueeze(1), noise).log_prob(y).sum((-1, -2))
        out.append(ll)
    return torch.stack(out, -1)


def log_evidence(y, prior_scale, noise):
    n, d = y.shape
    cov = noise**2 * torch.eye(n, dtype=y.dtype) + prior_scale**2
    return float(dist.MultivariateNormal(torch.zeros(n, dtype=y.dtype), cov).log_prob(y.T).sum())


def test_stepping_stone_recovers_the_analytic_evidence():
    generator = torch.Generator().manual_seed(0)
    d, n, prior_scale, noise = 10, 20, 1.0, 1.0
    y = 0.5 + torch.randn(n, d, generator=generator, dtype=torch.float64)
    betas = [(1 - k / 11) ** 3 for k in range(12)]  # dense near beta = 0, where ll changes fast
    ll = conjugate_draws(betas, y, prior_scale, noise, 2000, generator)
    estimate, forward, reverse = stepping_stone(betas, ll)
    truth = log_evidence(y, prior_scale, noise)
    assert abs(estimate - truth) < 0.2
    assert forward > truth - 1.0 and reverse < truth + 1.0
    # Samples from the wrong (prior-tempered) targets must fail the same check.
    tempered = [conjugate_draws([b], y, prior_scale / max(b, 1e-3) ** 0.5, noise, 2000,
                                generator)[:, 0] for b in betas]
    wrong, _, _ = stepping_stone(betas, torch.stack(tempered, -1))
    assert abs(wrong - truth) > 1.0
