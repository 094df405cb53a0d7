"""num_replicas="auto": the ladder grows in warmup to the rungs its barrier calls for.

Model: test_kernel_barrier's sufficient statistic of n points, theta ~ N(0, 1), ybar = 0 ~
N(theta, 1/n): the posterior is N(0, 1/(n + 1)) and the barrier between two rungs has the
closed form of test_barrier.py (quadrature of lambda(beta)).
"""

import math

import numpy as np
import pytest
import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.barrier import cumulative_barrier, recommended_replicas
from pyro_pt.comm import LocalComm
from pyro_pt.growth import Growth, growth_round_ends, positions
from pyro_pt.ladder import equal_barrier_betas
from pyro_pt.random import grown_seed, stream_seeds

from .test_barrier import exact_increment
from .test_kernel_barrier import sufficient_model


def run(n, seed=0, warmup=1000, samples=2000, **kwargs):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(sufficient_model, explorer="rwmh", **kwargs)
    mcmc = MCMC(kernel, samples, warmup, disable_progbar=True)
    mcmc.run(n)
    return kernel, mcmc


@pytest.mark.slow
def test_too_few_rungs_grow_to_the_recommended_number():
    n, temperatures = 10**6, [1.0, 1e3, 1e6]
    exact = exact_increment(1e-6, 1.0, n, 0.0)  # Lambda = 4.18: 9 rungs
    kernel, mcmc = run(n, num_replicas="auto", temperatures=temperatures)
    grown = [h["grown_to"] for h in kernel.adaptation_history if "grown_to" in h]
    assert grown and abs(kernel.num_replicas - recommended_replicas(exact)) <= 1
    assert kernel.temperatures[0] == 1.0 and kernel.temperatures[-1] == pytest.approx(1e6)
    # Every rung's explorer targets its ladder's beta, new ones included.
    explorers = kernel.run.rungs.explorers
    assert len(explorers) == len(kernel.betas) == kernel.num_replicas
    assert [e.beta for e in explorers] == pytest.approx(kernel.betas, rel=1e-12)
    diag = kernel.diagnostics()
    assert len(diag["swap_acceptance"]) == kernel.num_replicas - 1
    assert diag["tempering_record"]["log_likelihood"].shape == (2000, kernel.num_replicas)
    assert diag["round_trips"] > 0
    # The cold chain is the posterior N(0, 1/(n+1)): a rung at the wrong beta, or swaps with
    # the wrong betas, would move its variance by more than the 25 % allowed (ESS ~ 300).
    theta = mcmc.get_samples()["theta"] * math.sqrt(n + 1)
    assert abs(float(theta.mean())) < 0.25
    assert float(theta.var()) == pytest.approx(1.0, rel=0.25)


def test_growth_is_reproducible_and_an_auto_run_with_enough_rungs_does_not_grow():
    grown = [run(10**4, warmup=200, samples=50, num_replicas="auto", temperatures=[1.0, 1e4])
             for _ in range(2)]
    assert grown[0][0].num_replicas > 2
    a, b = (mcmc.get_samples()["theta"] for _, mcmc in grown)
    assert torch.equal(a, b)
    # Enough rungs: "auto" changes nothing, the draws are those of the fixed ladder, bitwise.
    fixed = run(1, warmup=100, samples=100, temperatures=[1.0, 2.0, 4.0])[1]
    kernel, auto = run(1, warmup=100, samples=100, num_replicas="auto",
                       temperatures=[1.0, 2.0, 4.0])
    assert kernel.num_replicas == 3
    assert not [h for h in kernel.adaptation_history if "grown_to" in h]
    assert torch.equal(auto.get_samples()["theta"], fixed.get_samples()["theta"])


def test_grown_seeds_depend_on_the_birth_index_only():
    base = 12345
    seeds = [grown_seed(base, b) for b in range(3, 40)]
    assert seeds == [grown_seed(base, b) for b in range(3, 40)]
    assert len(set(seeds)) == len(seeds) and not set(seeds) & set(stream_seeds(base, 40))
    assert all(0 <= s < 2**63 for s in seeds)
    # A starting ladder's rung k has the same seed whatever K (the swaps' seed is the last).
    assert stream_seeds(base, 4)[:4] == stream_seeds(base, 9)[:4]


def test_equal_barrier_betas_for_a_given_number_of_rungs():
    betas, pairs = [1.0, 0.5, 0.1, 0.0], [0.5, 2.0, 1.5]
    new = equal_barrier_betas(betas, pairs, 9)
    assert len(new) == 9 and new[0] == 1.0 and new[-1] == 0.0
    # The cumulative barrier, linear between the old rungs, at each new rung: k Lambda / 8.
    cum = cumulative_barrier(pairs)
    at = np.interp(new, list(reversed(betas)), list(reversed(cum)))
    assert at == pytest.approx([4.0 * k / 8 for k in range(9)], abs=1e-12)
    assert equal_barrier_betas(betas, pairs) == equal_barrier_betas(betas, pairs, 4)
    assert equal_barrier_betas(betas, [0.0] * 3, 5) == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    # The old rungs go to the new indices nearest their barrier, in order, ends fixed.
    assert positions(cum, 9) == [0, 1, 5, 8]
    assert positions([0.0, 0.0, 0.0, 3.0], 5) == [0, 1, 2, 4]


def test_growth_round_ends():
    # Warmup 1000: rounds end at 4, 12, 28, 60, 124, 252, 508; the last two may grow.
    assert growth_round_ends(1000) == {252, 508}
    assert growth_round_ends(100) == {60}
    assert growth_round_ends(50) == set()


class _TwoRanks(LocalComm):
    world_size = 2


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(num_replicas="Auto"), ValueError, "'auto'"),
    (dict(num_replicas="auto", max_replicas=1), ValueError, "at least 2"),
    (dict(num_replicas="auto", max_replicas="8"), TypeError, "max_replicas must be an int"),
    (dict(num_replicas=4, max_replicas=8), ValueError, "num_replicas='auto'"),
    (dict(num_replicas="auto", adapt_temperatures=False), ValueError, "adapt_temperatures"),
    (dict(num_replicas="auto", temperatures=[1.0, 2.0, 3.0], max_replicas=2), ValueError,
     "raise max_replicas"),
])
def test_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        ParallelTempering(sufficient_model, **kwargs)


def test_auto_is_refused_across_ranks():
    with pytest.raises(ValueError, match="one process.*2 ranks"):
        Growth(32, _TwoRanks(), 100, 8)
