"""The prior rung (beta = 0) samples exactly the prior that lp scores, or is refused.

Model: theta ~ N(0, 1) with its log density scaled by 1/2 (poutine.scale), so the
prior lp scores is N(0, 2); y ~ N(theta, 3^2) observed at y = 0. The exact posterior variance
is 1 / (1/2 + 1/9) = 1.636. Drawing the prior rung from the unscaled N(0, 1) instead biases
the cold chain to about 1.37 (seeds 0 and 1).
"""

import math
import warnings

import pytest
import torch

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.infer import MCMC

from pyro_pt import ParallelTempering, TemperingWarning
from pyro_pt.potential import ModelSplit

EXACT_VARIANCE = 1.0 / (0.5 + 1.0 / 9.0)


def scaled_model(y):
    with poutine.scale(scale=0.5):
        theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(theta, 3.0), obs=y)


def masked_model(y):
    with poutine.mask(mask=torch.tensor(False)):
        pyro.sample("theta", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(0.0, 3.0), obs=y)


def subsampled_model(y):
    # a fixed subsample (a random one is refused at set-up: tests/pt/test_refusals.py)
    with pyro.plate("latents", 10, subsample=torch.arange(5)):
        theta = pyro.sample("theta", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(theta.sum(), 3.0), obs=y)


def run(max_temperature, seed=0, num_samples=4000):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(scaled_model, num_replicas=4, max_temperature=max_temperature,
                               explorer="rwmh")
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=1000, disable_progbar=True)
    mcmc.run(torch.tensor(0.0))
    return mcmc.get_samples()["theta"]


@pytest.mark.slow
def test_scaled_latent_with_a_finite_ladder_matches_the_exact_posterior():
    theta = run(20.0)
    # 4000 draws of RWMH (ESS ~ 1000): the variance's relative error is ~ 4 %; the prior
    # rung's wrong prior gave 1.37, 16 % low.
    assert float(theta.var()) == pytest.approx(EXACT_VARIANCE, rel=0.1)
    assert abs(float(theta.mean())) < 0.15


@pytest.mark.parametrize("model,what", [(scaled_model, "scaled"), (masked_model, "scaled or masked"),
                                        (subsampled_model, "plate subsampling")])
def test_prior_rung_is_refused_for_a_reweighted_latent(model, what):
    kernel = ParallelTempering(model, num_replicas=3, max_temperature=math.inf, explorer="rwmh")
    mcmc = MCMC(kernel, num_samples=2, warmup_steps=2, disable_progbar=True)
    with pytest.raises(ValueError, match=r"latent site 'theta'.*" + what + ".*finite max_temperature"):
        mcmc.run(torch.tensor(0.0))


def test_unit_scale_and_an_all_true_mask_keep_the_prior_rung():
    def model(y):
        with poutine.scale(scale=1.0), poutine.mask(mask=torch.tensor([True, True])):
            theta = pyro.sample("theta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        pyro.sample("y", dist.Normal(theta.sum(), 3.0), obs=y)

    ModelSplit(model, (torch.tensor(0.0),)).check_proper_prior()  # no error


def test_the_default_falls_back_to_a_finite_hot_end_naming_the_site():
    """The default ladder ends at the prior, drawn exactly; where a site's prior cannot be
    drawn, the set-up says which and why, and runs to T = 50 with restarts not counted."""
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(scaled_model, explorer="rwmh")
    assert kernel.temperatures[-1] == math.inf
    mcmc = MCMC(kernel, num_samples=20, warmup_steps=20, disable_progbar=True)
    with pytest.warns(TemperingWarning, match=r"latent site 'theta' has its log density scaled"
                      r".*finite hottest temperature T = 50.*restarts are not counted"):
        mcmc.run(torch.tensor(0.0))
    assert kernel.temperatures[-1] == pytest.approx(50.0)
    assert kernel.diagnostics()["restarts"] is None
    # a finite hot end given by the user is the user's choice: no fallback, no such warning
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        MCMC(ParallelTempering(scaled_model, explorer="rwmh", max_temperature=9.0), 5, 5,
             disable_progbar=True).run(torch.tensor(0.0))
    assert not any("Falling back" in str(w.message) for w in said)
