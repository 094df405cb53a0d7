"""The end-of-run review: each warning fires on a run built to have it, none on a healthy run."""

import math
import warnings

import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning, to_inference_data
from pyro_pt.health import (log_mean_exp_error, review, stepping_stone_error,
                             stepping_stone_errors)
from pyro_pt.recorders import stepping_stone


def conjugate_model(y, noise):
    theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(theta, noise), obs=y)


def run(num_data, noise, seed=0, warmup=200, samples=400, **kwargs):
    """A conjugate run; returns the kernel, the MCMC and the review's warnings (the end of
    warmup's call for more rungs, also a TemperingWarning, is kept in ``run.warmup``)."""
    y = 0.3 + noise * torch.randn(num_data, generator=torch.Generator().manual_seed(1))
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(conjugate_model, explorer="rwmh", **kwargs)
    mcmc = MCMC(kernel, samples, warmup, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(y, noise)
    said = [w for w in caught if issubclass(w.category, TemperingWarning)]
    run.warmup = [w for w in said if "at the end of warmup" in str(w.message)]
    return kernel, mcmc, [w for w in said if w not in run.warmup]


def test_log_mean_exp_error_matches_the_spread_over_repeated_draws():
    # i.i.d. a ~ N(0, 0.5^2): the error claimed from one sample of 400 is the standard
    # deviation of log-mean-exp over repeated samples (a missing 1/mean or sqrt would fail).
    generator = torch.Generator().manual_seed(0)
    draws = 0.5 * torch.randn(2000, 400, generator=generator, dtype=torch.float64)
    spread = float(torch.logsumexp(draws, 1).std())
    claimed = torch.tensor([log_mean_exp_error(row) for row in draws[:100]])
    assert float(claimed.mean()) == pytest.approx(spread, rel=0.15)
    assert log_mean_exp_error(torch.full((50,), -3.0)) == 0.0


def test_stepping_stone_error_matches_the_spread_over_repeated_records():
    """Five rungs whose ll draws share a factor (rho = 0.8), as swaps make them share a state:
    the terms of log Z rise and fall together. The error stated from one record of 400 draws is
    the spread of log Z over 2000 such records (within 12 %); adding the terms' errors in
    variance, as if independent, states about half of it."""
    betas = [1.0, 0.75, 0.5, 0.25, 0.0]
    generator = torch.Generator().manual_seed(0)
    shape = (2000, 400)
    common = torch.randn(*shape, 1, generator=generator, dtype=torch.float64)
    own = torch.randn(*shape, 5, generator=generator, dtype=torch.float64)
    scales = torch.tensor([0.5, 0.7, 1.0, 1.5, 2.5], dtype=torch.float64)
    ll = (torch.tensor([-1.0, -1.5, -2.0, -3.0, -5.0], dtype=torch.float64)
          + scales * (0.8 * common + 0.6 * own))
    spread = float(torch.tensor([stepping_stone(betas, r)[0] for r in ll]).std())
    claimed = torch.tensor([stepping_stone_error(betas, r) for r in ll[:50]])
    assert float(claimed.mean()) == pytest.approx(spread, rel=0.12)
    independent = torch.tensor([0.5 * math.hypot(*stepping_stone_errors(betas, r))
                                for r in ll[:8]])
    assert float(independent.mean()) < 0.6 * spread
    assert stepping_stone_error(betas, torch.full((50, 5), -3.0)) == 0.0
    assert stepping_stone_error(betas, ll[0, :1]) == math.inf


def test_healthy_conjugate_run_does_not_warn():
    kernel, mcmc, caught = run(num_data=10, noise=1.0, num_replicas=4, max_temperature=10.0)
    diag = kernel.diagnostics()
    assert min(diag["swap_acceptance"]) > 0.1 and diag["round_trips"] > 0, diag
    assert caught == [] and diag["warnings"] == []
    assert "UNRELIABLE" not in diag["log_Z_meaning"]
    assert set(kernel.report.warnings) == {""}
    # Its error is what a reliable estimate claims: the exact log Z(1) - log Z(0.1) lies
    # within a few errors (an error too small by a factor of ten would fail).
    y = 0.3 + torch.randn(10, generator=torch.Generator().manual_seed(1))

    def log_z(beta):  # int N(t; 0, 1) prod N(y_i; t, 1)^beta dt, in closed form
        n, s, ss = len(y), float(y.sum()), float((y ** 2).sum())
        precision = 1.0 + beta * n
        return (-0.5 * beta * n * math.log(2 * math.pi) - 0.5 * beta * ss
                + 0.5 * (beta * s) ** 2 / precision - 0.5 * math.log(precision))

    exact = log_z(1.0) - log_z(kernel.betas[-1])
    assert abs(diag["log_Z"] - exact) < 4 * diag["log_Z_error"] + 0.02, (diag["log_Z"], exact)


def test_bottleneck_and_no_round_trip_warn_with_the_pair_and_its_temperatures():
    # 2000 precise observations and one hot rung at T = 10^8 (about the prior): the pair never swaps.
    kernel, mcmc, caught = run(num_data=2000, noise=0.05, temperatures=[1.0, 1e8],
                               adapt_temperatures=False, warmup=100, samples=200)
    diag = kernel.diagnostics()
    assert diag["swap_acceptance"][0] < 0.1 and diag["round_trips"] == 0
    assert len(caught) == 1  # one review per run, every problem in it
    message = str(caught[0].message)
    # the end of warmup called for more rungs by the rule the review applies
    needed = diag["recommended_replicas"]
    assert needed > 2 and len(run.warmup) == 1 and "too few rungs" in str(run.warmup[0].message)
    assert "the ladder has 2: " in message and f"run with num_replicas={needed}" in message
    assert "pair 0 (T = 1 and 1e+08) accepted" in message
    assert "no round trip" in message and "in the 200 swap rounds" in message
    assert "num_replicas" in message and "max_temperature" in message
    assert "log Z" in message and "unreliable" in message
    final = kernel.report.iloc[-1]
    assert final.phase == "sampling" and "pair 0 (T = 1 and 1e+08)" in final.warnings
    assert "no round trip" in final.warnings
    assert "UNRELIABLE" in diag["log_Z_meaning"]
    assert "UNRELIABLE" in to_inference_data(mcmc)["sample_stats"].attrs["log_Z_meaning"]


def test_a_cold_rung_that_does_not_move_warns():
    # No warmup to adapt it: a proposal scale 10^5 times the posterior's width is never taken.
    kernel, _, caught = run(num_data=1000, noise=0.05, num_replicas=3, max_temperature=4.0,
                            explorer_kwargs={"scale": 100.0}, warmup=0, samples=200)
    assert kernel.diagnostics()["local_acceptance"][0] < 0.01
    assert len(caught) == 1
    assert "the cold rung's explorer accepted" in str(caught[0].message)
    assert "explorer_kwargs" in str(caught[0].message)


def _diagnostics(betas, ll, acceptance):
    forward_reverse = stepping_stone(betas, ll)
    return {"temperatures": [1.0 / b if b else math.inf for b in betas],
            "swap_acceptance": acceptance,
            "round_trips": 3, "local_acceptance": [0.5] * len(betas), "barrier": 0.5,
            "recommended_replicas": 2, "log_Z": forward_reverse[0],
            "log_Z_forward": forward_reverse[1], "log_Z_reverse": forward_reverse[2],
            "tempering_record": {"log_likelihood": ll}}


def test_log_z_whose_forward_and_reverse_disagree_is_unreliable():
    betas = [1.0, 0.5]
    generator = torch.Generator().manual_seed(0)
    noise = 0.01 * torch.randn(400, 2, generator=generator, dtype=torch.float64)
    # Rungs whose ll draws sit 4 apart with almost no spread: forward and reverse differ by
    # 4 * (1 - 0.5) = 2, many times their tiny Monte Carlo error; the stated error spans the
    # gap (half of it, with the Monte Carlo part) and is too large to use.
    apart = torch.tensor([-1.0, -5.0], dtype=torch.float64) + noise
    monte_carlo = stepping_stone_error(betas, apart)
    diagnostics = _diagnostics(betas, apart, [0.5])
    gap = diagnostics["log_Z_reverse"] - diagnostics["log_Z_forward"]
    problems, error, why = review(diagnostics, betas, 400)
    assert monte_carlo < 0.01 and gap == pytest.approx(2.0, abs=0.01)
    assert error == pytest.approx(math.hypot(monte_carlo, 0.5 * gap), rel=1e-9)
    assert why is not None and "differ by 2" in why and "above 0.5 nat" in why
    assert len(problems) == 1 and "log Z" in problems[0]
    # The same spread around one value: they agree, and the error is as small.
    together = torch.tensor([-1.0, -1.0], dtype=torch.float64) + noise
    problems, error, why = review(_diagnostics(betas, together, [0.5]), betas, 400)
    assert why is None and problems == [] and error < 0.01


def test_log_zs_error_spans_a_gap_it_can_still_use():
    """Rungs 0.4 apart: forward and reverse differ by 0.2, far beyond their Monte Carlo error
    (the old review called that unreliable); the stated error, half the gap, reaches both from
    their mean and is small enough to use."""
    betas = [1.0, 0.5]
    noise = 0.01 * torch.randn(400, 2, generator=torch.Generator().manual_seed(0),
                               dtype=torch.float64)
    near = torch.tensor([-1.0, -1.4], dtype=torch.float64) + noise
    diagnostics = _diagnostics(betas, near, [0.5])
    problems, error, why = review(diagnostics, betas, 400)
    gap = diagnostics["log_Z_reverse"] - diagnostics["log_Z_forward"]
    assert gap == pytest.approx(0.2, abs=0.01)
    assert why is None and problems == [] and 0.5 * gap <= error < 0.11


def _means(error, sd, tours=40):
    """Hand-made diagnostics of a healthy run whose cold-chain means have these errors."""
    ll = -1.0 + 0.01 * torch.randn(400, 2, generator=torch.Generator().manual_seed(0),
                                   dtype=torch.float64)
    diagnostics = _diagnostics([1.0, 0.0], ll, [0.5])
    diagnostics.update(mcse={"mu": torch.tensor(error, dtype=torch.float64)},
                       posterior_sd={"mu": torch.tensor(sd, dtype=torch.float64)},
                       mcse_tours=tours)
    return diagnostics


def test_means_known_well_against_their_spread_do_not_warn():
    # a unimodal run's errors, ~1 / sqrt(ESS) of the sd; a constant coordinate is not weighed
    diagnostics = _means([0.04, 0.09, 0.0], [1.0, 1.0, 0.0])
    problems, _, _ = review(diagnostics, [1.0, 0.0], 1000, 1000)
    assert problems == []
    # a finite hot end states no error: nothing to review
    diagnostics = _means([0.5], [1.0])
    diagnostics["mcse"] = diagnostics["mcse_tours"] = None
    assert review(diagnostics, [1.0, 0.0], 1000, 1000)[0] == []


def test_a_mean_in_doubt_warns_with_its_error_and_the_length_that_would_shrink_it():
    """A bimodal coordinate (sd 2: modes near +-2) whose mode shares rest on few tours: its
    mean's error 0.5 is 0.25 sd; 1000 draws * (0.25 / 0.1)^2 = 6250 would bring it to 0.1."""
    diagnostics = _means([[0.01, 0.5]], [[1.0, 2.0]], tours=12)
    problems, _, _ = review(diagnostics, [1.0, 0.0], 1000, 1000)
    assert len(problems) == 1
    assert ("the cold chain's mean of mu[0, 1] has a Monte Carlo error of 0.5, 0.25 of its "
            "posterior sd 2 (above 0.1), over the 12 tours of its lineages") in problems[0]
    assert "about 6250 draws (num_samples)" in problems[0]
    # a ladder short of the rungs its barrier calls for is told to add them too
    diagnostics = _means([0.5], [2.0])
    diagnostics["recommended_replicas"] = 5
    assert "num_replicas=2 now" in review(diagnostics, [1.0, 0.0], 1000, 1000)[0][0]
    # too few tours for any error: said, with the draws that would give enough
    problems, _, _ = review(_means([math.inf], [1.0], tours=4), [1.0, 0.0], 1000, 1000)
    assert len(problems) == 1 and "from only 4 tours of its lineages" in problems[0]
    assert "fewer than 10" in problems[0] and "about 2500 draws" in problems[0]


@pytest.mark.parametrize("to_q, warned", [(5.0, True), (1.0, False)])
def test_a_fitted_reference_further_than_the_prior_says_so(to_q, warned):
    """On two legs, the leg to q with the higher barrier tells the user to use the prior."""
    betas = [1.0, 0.5]
    generator = torch.Generator().manual_seed(0)
    ll = -1.0 + 0.01 * torch.randn(400, 2, generator=generator, dtype=torch.float64)
    diagnostics = _diagnostics(betas, ll, [0.5])
    diagnostics["legs"] = {"reference": {"barrier": to_q}, "prior": {"barrier": 2.0}}
    problems, _, _ = review(diagnostics, betas, 400, reference="full-rank Gaussian")
    further = [p for p in problems if "further from this posterior than the prior" in p]
    assert len(further) == warned and problems == further
    if warned:
        assert "Lambda = 5, the leg to the prior 2" in further[0]
        assert "reference='prior'" in further[0]


def test_a_bottleneck_at_the_hot_end_names_q_or_the_prior():
    """The hottest rung's T = inf is q's density with a fitted reference, the prior's
    without: the bottleneck message says which."""
    betas = [1.0, 0.1, 0.0]
    generator = torch.Generator().manual_seed(0)
    ll = -1.0 + 0.01 * torch.randn(400, 3, generator=generator, dtype=torch.float64)
    diagnostics = _diagnostics(betas, ll, [0.5, 0.01])
    for reference, hot in ((None, "inf"), ("diagonal Gaussian", "q")):
        problems, _, _ = review(dict(diagnostics), betas, 400, reference=reference)
        assert f"pair 1 (T = 10 and {hot}) accepted 0.01" in problems[0], problems


def test_a_short_run_warns_by_its_means_error_and_a_long_one_does_not():
    """The prior rung: a healthy conjugate run of 120 draws states its mean to 0.13 of the
    posterior sd (over the tours of its lineages), and warns with the draws that would bring it to
    0.1; with 1000 draws it says nothing; a finite hot end states no such error."""
    short, _, caught = run(num_data=10, noise=1.0, samples=120, num_replicas=3,
                           max_temperature=math.inf)
    diag = short.diagnostics()
    error = float(diag["mcse"]["theta"])
    ratio = error / float(diag["posterior_sd"]["theta"])
    assert ratio > 0.1 and len(caught) == 1
    message = str(caught[0].message)
    assert f"the cold chain's mean of theta has a Monte Carlo error of {error:.3g}" in message
    assert "tours of its lineages its 120 draws come from" in message
    assert f"about {math.ceil(120 * (ratio / 0.1) ** 2)} draws (num_samples)" in message
    assert "max_temperature" not in message
    assert short.report.iloc[-1]["mcse_sd"] == pytest.approx(ratio)
    long, _, caught = run(num_data=10, noise=1.0, samples=1000, num_replicas=3,
                          max_temperature=math.inf)
    diag = long.diagnostics()
    assert float(diag["mcse"]["theta"] / diag["posterior_sd"]["theta"]) < 0.1 and caught == []
    finite, _, caught = run(num_data=10, noise=1.0, samples=120, num_replicas=3,
                            max_temperature=10.0)
    assert finite.diagnostics()["mcse"] is None
    assert math.isnan(finite.report.iloc[-1]["mcse_sd"])
    assert not any("Monte Carlo error" in str(w.message) for w in caught)


def test_a_unimodal_model_with_every_default_at_a_modest_length_does_not_warn():
    """ParallelTempering(model) as a new user runs it (HMC, the prior rung, a growing ladder)
    on the conjugate model at 300 + 500: the mean is known to a few hundredths of its sd over
    the tours, lies within 4 of its errors of the exact posterior mean, and nothing warns,
    neither the end of warmup nor the review (a warning on such a run would teach users to
    ignore it)."""
    y = 0.3 + torch.randn(10, generator=torch.Generator().manual_seed(1))
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(conjugate_model)
    mcmc = MCMC(kernel, num_samples=500, warmup_steps=300, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(y, 1.0)
    said = [str(w.message) for w in caught if issubclass(w.category, TemperingWarning)]
    diag = kernel.diagnostics()
    assert said == [] and diag["warnings"] == []
    error, sd = float(diag["mcse"]["theta"]), float(diag["posterior_sd"]["theta"])
    assert 0.0 < error < 0.1 * sd
    exact = float(y.sum()) / (1.0 + len(y))  # N(0, 1) prior, unit noise
    assert abs(float(mcmc.get_samples()["theta"].mean()) - exact) < 4 * error


def logistic_model(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1], dtype=x.dtype), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0, dtype=x.dtype), 1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=w @ x.T + b.unsqueeze(-1)), obs=y)


@pytest.mark.slow
def test_a_unimodal_model_at_the_default_length_does_not_warn():
    """A logistic regression (200 points, 4 coefficients), ParallelTempering(model) at 1000 +
    1000: every mean known to a few hundredths of its sd, and no warning (the fixed count of
    restarts this rule replaced warned on every such run)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=generator, dtype=torch.float64)
    eta = x @ torch.tensor([0.5, -1.0, 0.3, 0.0], dtype=torch.float64) + 0.2
    y = torch.bernoulli(torch.sigmoid(eta), generator=generator)
    pyro.set_rng_seed(1)
    kernel = ParallelTempering(logistic_model)
    mcmc = MCMC(kernel, num_samples=1000, warmup_steps=1000, disable_progbar=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(x, y)
    said = [str(w.message) for w in caught if issubclass(w.category, TemperingWarning)]
    diag = kernel.diagnostics()
    assert said == [] and diag["warnings"] == []
    for name, error in diag["mcse"].items():
        assert torch.all(error < 0.1 * diag["posterior_sd"][name]), name
