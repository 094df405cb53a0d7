import math

import pytest
import torch

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.infer.autoguide.initialization import init_to_value
from pyro.infer.mcmc.util import initialize_model

from pyro_pt.potential import ModelSplit, TemperedPotential

from .models import constrained_model


def random_point(split, seed):
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn((), generator=generator) for name in split.latent_names}


def test_lp_plus_ll_is_minus_pyros_potential_on_constrained_latents():
    pyro.set_rng_seed(0)
    y = torch.randn(7) + 1.0
    split = ModelSplit(constrained_model, (y,))
    assert split.latent_names == ["frac", "loc", "scale"]
    assert split.observed_names == ["y", "penalty"]
    _, potential_fn, transforms, _ = initialize_model(constrained_model, (y,))
    for seed in range(5):
        z = random_point(split, seed)
        lp, ll = split.log_densities(z)
        assert float(lp + ll) == pytest.approx(-float(potential_fn(z)), rel=1e-6, abs=1e-6)


def test_split_matches_hand_computation_with_jacobian_and_factor():
    y = torch.tensor([0.5, 1.5, -0.2])
    split = ModelSplit(constrained_model, (y,))
    z = {"loc": torch.tensor(0.3), "scale": torch.tensor(-0.4), "frac": torch.tensor(0.8)}
    scale, frac = z["scale"].exp(), torch.sigmoid(z["frac"])
    expected_lp = (
        dist.Normal(0.0, 5.0).log_prob(z["loc"])
        + dist.LogNormal(0.0, 1.0).log_prob(scale) + z["scale"]  # log|d exp(u)/du| = u
        + dist.Beta(2.0, 3.0).log_prob(frac) + torch.log(frac * (1 - frac))
    )
    expected_ll = dist.Normal(z["loc"], scale).log_prob(y).sum() - (frac - 0.3) ** 2
    lp, ll = split.log_densities(z)
    assert float(lp) == pytest.approx(float(expected_lp), rel=1e-6)
    assert float(ll) == pytest.approx(float(expected_ll), rel=1e-6)


def test_subsample_and_scale_are_respected_in_ll():
    y = torch.arange(10.0)
    idx = torch.tensor([1, 4, 7])

    def model(y):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("data", 10, subsample=idx) as i:
            pyro.sample("y", dist.Normal(mu, 2.0), obs=y[i])
        with poutine.scale(scale=0.5):
            pyro.sample("extra", dist.Normal(mu, 1.0), obs=torch.tensor(3.0))

    split = ModelSplit(model, (y,))
    z = {"mu": torch.tensor(0.7)}
    _, ll = split.log_densities(z)
    expected = (10 / 3) * dist.Normal(0.7, 2.0).log_prob(y[idx]).sum()
    expected = expected + 0.5 * dist.Normal(0.7, 1.0).log_prob(torch.tensor(3.0))
    assert float(ll) == pytest.approx(float(expected), rel=1e-6)


def test_tempered_potential_tempers_only_the_likelihood():
    y = torch.tensor([0.5, 1.5, -0.2])
    split = ModelSplit(constrained_model, (y,))
    z = random_point(split, 3)
    lp, ll = split.log_densities(z)
    assert float(TemperedPotential(split, 0.25)(z)) == pytest.approx(-float(lp + 0.25 * ll))


def test_prior_draw_and_its_log_likelihood():
    y = torch.tensor([0.5, 1.5, -0.2])
    split = ModelSplit(constrained_model, (y,))
    pyro.set_rng_seed(1)
    draws = [split.sample_prior() for _ in range(2000)]
    z, ll = draws[0]
    assert float(ll) == pytest.approx(float(split.log_densities(z)[1]), rel=1e-5)
    frac = torch.stack([torch.sigmoid(d[0]["frac"]) for d in draws])
    assert abs(float(frac.mean()) - 0.4) < 0.02  # Beta(2, 3) mean, sd 0.2 / sqrt(2000)


def test_deterministic_sites_are_not_counted():
    def model():
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        pyro.deterministic("twice", 2 * mu)
        pyro.sample("y", dist.Normal(mu, 1.0), obs=torch.tensor(0.0))

    split = ModelSplit(model)
    assert split.latent_names == ["mu"] and split.observed_names == ["y"]


def test_bad_models_are_named():
    def no_obs():
        pyro.sample("mu", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="no observed site"):
        ModelSplit(no_obs)

    def discrete():
        k = pyro.sample("k", dist.Bernoulli(0.5))
        pyro.sample("y", dist.Normal(k, 1.0), obs=torch.tensor(0.0))

    with pytest.raises(TypeError, match="'k' is discrete"):
        ModelSplit(discrete)

    def improper():
        mu = pyro.sample("mu", dist.ImproperUniform(dist.constraints.real, (), ()))
        pyro.sample("y", dist.Normal(mu, 1.0), obs=torch.tensor(0.0))

    split = ModelSplit(improper, init_strategy=init_to_value(values={"mu": torch.tensor(0.0)}))
    with pytest.raises(ValueError, match="'mu' has an improper prior"):
        split.check_proper_prior()


def test_nan_latent_with_validation_is_a_nan_density_not_an_error():
    def model(y):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        pyro.sample("y", dist.Normal(w[1], 1.0), obs=y)

    split = ModelSplit(model, (torch.tensor(0.0),))
    z = {"w": torch.tensor([math.nan, 0.0], requires_grad=True)}
    with pyro.validation_enabled(True):
        lp, ll = split.log_densities(z)
    assert math.isnan(float(lp)) and math.isnan(float(ll))
    (grad,) = torch.autograd.grad(lp, [z["w"]])  # still differentiable: HMC rejects, no crash
    assert torch.isnan(grad).all()
