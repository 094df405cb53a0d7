"""Data of another shape than the MAP's name the site, and the argument, where torch would fail
with its bare size mismatch: in laplace_approximation (and its batched form), DiagonalLaplace's,
posterior.predict and Predictive(model, guide=posterior)."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Predictive
from subnet_models import random_loc

from pyro_subnet import DiagonalLaplace, SubnetworkLaplace

N, WIDTH = 50, 5


def sized_weight(x, y=None, fail=False):
    """The weight's shape follows the inputs' width."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    if fail:
        raise ValueError("a failure of the model's own")
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, 1.0), obs=y)


def fixed_weight(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([WIDTH]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, 1.0), obs=y)


def data(n=N, width=WIDTH, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, width, generator=g)
    return x, x.sum(-1) + 0.1 * torch.randn(n, generator=g)


def fitted(guide_class, model):
    """A guide set up on :func:`data` with its MAP at a fixed point (as after SVI)."""
    guide = (guide_class(model, subnetwork_size=3) if guide_class is SubnetworkLaplace
             else guide_class(model))
    guide(*data())
    random_loc(guide)
    return guide


GUIDES = [SubnetworkLaplace, DiagonalLaplace]
NARROW = r"x has shape \(50, 4\) where the MAP's call had \(50, 5\)"


@pytest.mark.parametrize("guide_class", GUIDES)
def test_a_weight_sized_by_the_data_is_named(guide_class):
    guide = fitted(guide_class, sized_weight)
    x, y = data()
    with pytest.raises(ValueError, match=(
            r"latent site 'w' has shape \(4,\) with these arguments but \(5,\) at the MAP: its "
            r"shape follows the data .*; call laplace_approximation with data of the shapes the "
            rf"MAP was fitted with \({NARROW}\), or refit the guide")) as caught:
        guide.laplace_approximation(x[:, :4], y)
    assert isinstance(caught.value.__cause__, RuntimeError)  # torch's size mismatch, kept


@pytest.mark.parametrize("guide_class", GUIDES)
def test_a_model_that_fails_on_narrower_inputs_names_the_last_site_and_the_argument(guide_class):
    guide = fitted(guide_class, fixed_weight)
    x, y = data()
    with pytest.raises(ValueError, match=(
            r"the model fails on these arguments at the MAP after its latent site 'w' "
            r"\(RuntimeError: size mismatch.*\); call laplace_approximation with data of the "
            rf"shapes the MAP was fitted with \({NARROW}\)")):
        guide.laplace_approximation(x[:, :4], y)
    # a later minibatch of the wrong width is named as well
    with pytest.raises(ValueError, match=r"after its latent site 'w' .*x has shape \(10, 4\) where "
                                         r"the MAP's call had \(50, 5\)"):
        guide.laplace_approximation_batched([((x, y), {}), ((x[:10, :4], y[:10]), {})])


@pytest.mark.parametrize("guide_class", GUIDES)
def test_observed_data_of_another_shape_name_the_observed_site(guide_class):
    guide = fitted(guide_class, fixed_weight)
    x, y = data()
    with pytest.raises(ValueError, match=(
            r"the log density of observed site 'obs' fails \(.*\): its Normal has batch_shape "
            r"\(50,\) and event_shape \(\), its value has shape \(40,\); call "
            r"laplace_approximation with data of the shapes the MAP was fitted with, or refit")):
        guide.laplace_approximation(x, y[:40])


@pytest.mark.parametrize("linearized", [True, False])
def test_predict_names_the_site_for_inputs_of_another_width(linearized):
    x, y = data()
    posterior = fitted(SubnetworkLaplace, sized_weight).laplace_approximation(x, y)
    with pytest.raises(ValueError, match=(
            r"latent site 'w' has shape \(4,\) .*; call predict with data of the shapes the MAP "
            r"was fitted with \(x has shape \(7, 4\) where the MAP's call had \(50, 5\)\)")):
        posterior.predict(x[:7, :4], linearized=linearized, num_samples=3)


def test_data_of_the_map_s_widths_and_another_size_are_accepted():
    # The check leaves every call of the MAP's widths alone: predicting on 7 inputs gives the
    # rows of predicting on all 50, and a Laplace fit on 30 points runs.
    x, y = data()
    guide = fitted(SubnetworkLaplace, fixed_weight)
    posterior = guide.laplace_approximation(x, y)
    some, every = posterior.predict(x[:7])["obs"], posterior.predict(x)["obs"]
    assert torch.allclose(some.loc, every.loc[:7], rtol=0, atol=1e-12)
    assert torch.allclose(some.scale, every.scale[:7], rtol=0, atol=1e-12)
    assert guide.laplace_approximation(x[:30], y[:30]).covariance.shape == (3, 3)


def test_a_failure_of_the_model_s_own_passes_unchanged():
    x, y = data()
    posterior = fitted(SubnetworkLaplace, sized_weight).laplace_approximation(x, y)
    with pytest.raises(ValueError, match="^a failure of the model's own"):
        posterior.predict(x, fail=True)


@pytest.mark.parametrize("parallel", [False, True])
def test_predictive_names_the_site_for_inputs_of_another_width_as_predict_does(parallel):
    x, y = data()
    posterior = fitted(SubnetworkLaplace, fixed_weight).laplace_approximation(x, y)
    predictive = Predictive(fixed_weight, guide=posterior, num_samples=4, parallel=parallel)
    with pytest.raises(ValueError, match=(
            r"the model fails on these arguments at the MAP after its latent site 'w' \(RuntimeError: .*\); "
            r"call Predictive\(model, guide=posterior\) with data of the shapes the MAP was fitted with "
            r"\(x has shape \(7, 4\) where the MAP's call had \(50, 5\)\)")) as caught:
        predictive(x[:7, :4])
    causes, error = [], caught.value
    while error is not None:
        causes.append(type(error))
        error = error.__cause__
    assert causes[-1] is RuntimeError  # torch's size mismatch, kept (Pyro's trace re-raises ours)
    with pytest.raises(ValueError, match=r"call predict with data .* \(x has shape \(7, 4\) where the MAP's call "
                                         r"had \(50, 5\)\)"):
        posterior.predict(x[:7, :4])
    if parallel:
        return  # x @ w does not broadcast over Predictive's vectorized draws of w
    # the MAP's widths pass, and the check moves no random stream: the first call on new shapes
    # (checked) draws what the second (already checked) draws
    pyro.set_rng_seed(5)
    first = predictive(x[:7])["obs"]
    pyro.set_rng_seed(5)
    again = predictive(x[:7])["obs"]
    assert first.shape == (4, 7)
    assert torch.equal(first, again)


def first_columns(x, y=None, k=WIDTH):
    """The weight's shape follows a plain int argument, not a tensor's shape."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([k]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x[:, :k] @ w, 1.0), obs=y)


def test_predictive_checks_a_call_whose_plain_arguments_change_the_latent_shapes():
    x, y = data()
    posterior = fitted(SubnetworkLaplace, first_columns).laplace_approximation(x, y)
    predictive = Predictive(first_columns, guide=posterior, num_samples=2)
    assert predictive(x, None, WIDTH)["obs"].shape == (2, N)
    with pytest.raises(ValueError, match=r"latent site 'w' has shape \(4,\) with these arguments but \(5,\) at "
                                         r"the MAP: .*; call Predictive\(model, guide=posterior\) with data"):
        predictive(x, None, 4)  # the same tensors' shapes as the call checked above
