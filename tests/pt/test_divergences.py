"""Divergences: warmup raises the target acceptance of the rungs that diverge, and the review
warns, with the numbers, when the cold chain still diverges while sampling."""

import math
import warnings

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning
from pyro_pt.explorers import hmc_warmup
from pyro_pt.explorers.hmc_step_size import DualAveraging
from pyro_pt.explorers import kind_of
from pyro_pt.health import review

Y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], dtype=torch.float64)
SIGMA = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], dtype=torch.float64)


def eight_schools_centered(y, sigma):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.tensor(5.0, dtype=y.dtype)))
    with pyro.plate("schools", len(y)):
        theta = pyro.sample("theta", dist.Normal(mu, tau))
        pyro.sample("y", dist.Normal(theta, sigma), obs=y)


def gaussian(y):
    theta = pyro.sample("theta", dist.Normal(torch.zeros(3, dtype=y.dtype), 1.0).to_event(1))
    pyro.sample("y", dist.Normal(theta, 1.0).to_event(1), obs=y)


def run(model, args, warmup, samples, seed=0, **kwargs):
    pyro.set_rng_seed(seed)
    # one ladder: the counts and shares of transitions below are one ladder's
    kernel = ParallelTempering(model, num_replicas=4, max_temperature=10.0, explorer="hmc",
                               num_ladders=1, **kwargs)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(*args)
    said = [str(w.message) for w in caught if issubclass(w.category, TemperingWarning)]
    # the review's, not the end of warmup's call for more rungs
    return kernel, [m for m in said if not m.startswith("ParallelTempering, at the end of warmup")]


def _targets(kernel, given=0.8):
    return [e.diagnostics().get("target accept prob", given) for e in kernel.run.rungs.explorers]


def _ladder(target, steps):
    for _ in range(steps):
        target = min(hmc_warmup.MAX_TARGET_ACCEPT_PROB, 1.0 - 0.5 * (1.0 - target))
    return target


@pytest.fixture(scope="module")
def funnel_run():
    return run(eight_schools_centered, (Y, SIGMA), warmup=300, samples=300)


@pytest.mark.slow
def test_warmup_raises_the_targets_of_the_rungs_that_diverge(funnel_run):
    kernel, _ = funnel_run
    targets = _targets(kernel)
    # Each raise halves the distance to 1: the rungs sit on that ladder from 0.8.
    allowed = [_ladder(0.8, k) for k in range(8)]
    assert all(min(abs(t - a) for a in allowed) < 1e-12 for t in targets), targets
    assert max(targets) > 0.8, "the funnel's rungs diverged in warmup; some target must rise"
    assert kernel.diagnostics()["raised_target_accept_probs"] == [
        t if t != 0.8 else None for t in targets]
    engine = kernel.run.rungs.explorers[0].group.engine
    assert engine.target_accept_probs == targets


def test_each_slot_averages_its_step_size_to_its_own_target():
    # With the acceptance exp(-step), each slot's averaged step must accept at its own target:
    # slot 1, raised to 0.95, not at slot 0's 0.8 (as one shared target would make it).
    dual = DualAveraging([0.0, 0.0])
    dual.targets[1] = 0.95
    for _ in range(3000):
        dual.update([math.exp(-math.exp(x)) for x in dual.log_step_size])
    accept = [math.exp(-math.exp(x)) for x in dual.final_log_step_size()]
    assert accept == pytest.approx([0.8, 0.95], abs=0.01)


def test_a_run_that_does_not_diverge_keeps_its_target_bitwise():
    y = torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64)
    kernel, caught = run(gaussian, (y,), warmup=200, samples=100)
    assert _targets(kernel) == [0.8] * 4
    assert kernel.diagnostics()["raised_target_accept_probs"] == [None] * 4
    assert not any("diverged" in m for m in caught)


def test_no_raise_without_step_size_adaptation():
    kernel, _ = run(eight_schools_centered, (Y, SIGMA), warmup=200, samples=50,
                    explorer_kwargs={"adapt_step_size": False, "step_size": 0.5})
    assert _targets(kernel) == [0.8] * 4


@pytest.mark.slow
def test_the_review_warns_once_with_counts_temperatures_and_what_to_do(funnel_run):
    kernel, caught = funnel_run
    d = kernel.diagnostics()
    cold = len(d["divergences"])
    assert cold > 0, "the centered funnel's cold chain diverges while sampling"
    messages = [m for m in caught if "diverged" in m]
    assert len(caught) == 1 and len(messages) == 1
    message = messages[0]
    assert f"diverged {cold} times ({cold / 300:.1%} of its 300 transitions)" in message
    assert "explorer='nuts'" in message
    assert "LocScaleReparam" in message


def _diagnostics(divergences, per_temperature, raised):
    return {"temperatures": [1.0, 3.0, math.inf], "swap_acceptance": [0.5, 0.5],
            "round_trips": 3, "local_acceptance": [0.9, 0.9, 0.9], "divergences": divergences,
            "divergences_per_temperature": per_temperature,
            "raised_target_accept_probs": raised, "barrier": 1.0, "recommended_replicas": 2,
            "tempering_record": {"log_likelihood": torch.zeros(0, 3)},
            "log_Z": 0.0, "log_Z_forward": 0.0, "log_Z_reverse": 0.0}


HMC = kind_of("hmc").on_divergence  # the default explorer's advice


def test_the_message_names_each_diverging_temperature_and_each_raised_target():
    d = _diagnostics([3, 17], [2, 0, 5], [0.9, None, 0.95])
    problems, _, _ = review(d, [1.0, 1 / 3, 0.0], num_rounds=10, num_scans=200,
                            on_divergence=HMC)
    (message,) = problems
    assert "diverged 2 times (1.0% of its 200 transitions)" in message
    assert "T = 1: 2, T = inf: 5" in message and "T = 3: 0" not in message
    assert "(T = 1: 0.9, T = inf: 0.95)" in message
    assert "{'target_accept_prob': 0.975}" in message  # above the highest target reached
    d = _diagnostics([3], [1, 0, 0], [0.99, None, None])
    (message,), _, _ = review(d, [1.0, 1 / 3, 0.0], num_rounds=10, num_scans=200,
                              on_divergence=HMC)
    assert "target_accept_prob'" not in message and "LocScaleReparam" in message
    d = _diagnostics([3], [1, 0, 0], [None, None, None])
    (message,), _, _ = review(d, [1.0, 1 / 3, 0.0], num_rounds=10, num_scans=200,
                              on_divergence=HMC)
    assert "{'target_accept_prob': 0.95}" in message and "warmup raised" not in message
    assert message.endswith(", or try explorer='nuts'")
    (message,), _, _ = review(d, [1.0, 1 / 3, 0.0], num_rounds=10, num_scans=200,
                              on_divergence=kind_of("nuts").on_divergence)  # already NUTS
    assert "explorer='nuts'" not in message
    assert message.endswith("LocScaleReparam), or pass explorer_kwargs={'target_accept_prob': 0.95}")
    (message,), _, _ = review(d, [1.0, 1 / 3, 0.0], num_rounds=10, num_scans=200,
                              on_divergence=kind_of("rwmh").on_divergence)  # no target to raise
    assert message.endswith("LocScaleReparam), or try explorer='nuts'")
    (message,), _, _ = review(d, [1.0, 1 / 3, 0.0], num_rounds=10, num_scans=200)  # no kind's
    assert message.endswith("biased there; reparametrize the model (e.g. a non-centered "
                            "hierarchy, pyro.infer.reparam.LocScaleReparam)")


def test_no_divergence_no_message():
    d = _diagnostics([], [0, 4, 5], [None, 0.9, 0.95])
    problems, _, _ = review(d, [1.0, 1 / 3, 0.0], num_rounds=10, num_scans=200)
    assert problems == []
