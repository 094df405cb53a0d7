"""Bad input gets a clear error that names the argument or site and says what to do."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from subnet_models import mlp_data, mlp_model, random_loc

from pyro_subnet import SubnetworkLaplace


def no_obs_model(x):
    pyro.sample("w", dist.Normal(0.0, 1.0))


def discrete_model(x, y=None):
    k = pyro.sample("k", dist.Bernoulli(0.5))
    pyro.sample("obs", dist.Normal(k, 1.0), obs=y)


def gamma_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Gamma((x * w).exp(), 1.0), obs=y)


def flat_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    pyro.sample("v", dist.ImproperUniform(dist.constraints.real, (), ()))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, 1.0), obs=y)


def trained(guide, *args, **kwargs):
    """Sets the guide up and puts its MAP at a fixed point (laplace_approximation refuses the initial one)."""
    guide(*args, **kwargs)
    random_loc(guide)
    return guide


def test_model_errors():
    x = torch.randn(5, 2)
    with pytest.raises(ValueError, match="no observed site"):
        SubnetworkLaplace(no_obs_model, subnetwork_size=1)(x)
    with pytest.raises(ValueError, match="latent site 'k' is discrete"):
        SubnetworkLaplace(discrete_model, subnetwork_size=1)(x, torch.tensor(0.3))


@pytest.mark.parametrize("size", [0, -1, 1000, 0.0, 1.5])
def test_subnetwork_size_out_of_range(size):
    x, y = mlp_data()
    guide = trained(SubnetworkLaplace(mlp_model, subnetwork_size=size), x, y)
    with pytest.raises(ValueError, match="subnetwork_size"):
        guide.laplace_approximation(x, y)


def test_argument_errors():
    with pytest.raises(ValueError, match="selection must be one of"):
        SubnetworkLaplace(mlp_model, 3, selection="biggest")
    with pytest.raises(TypeError, match="selection must be"):
        SubnetworkLaplace(mlp_model, 3, selection=3.5)
    with pytest.raises(ValueError, match="needs a subnetwork_size"):
        SubnetworkLaplace(mlp_model)
    with pytest.raises(ValueError, match="variance must be one of"):
        SubnetworkLaplace(mlp_model, 3, variance="kfac")
    with pytest.raises(ValueError, match="prior_scale"):
        SubnetworkLaplace(mlp_model, 3, prior_scale=-1.0)
    with pytest.raises(TypeError, match="subnetwork_size must be an int"):
        trained(SubnetworkLaplace(mlp_model, "3"), *mlp_data()).laplace_approximation(*mlp_data())
    x, y = mlp_data()
    guide = trained(SubnetworkLaplace(mlp_model, 3), x, y)
    with pytest.raises(ValueError, match="call posterior = guide.laplace_approximation"):
        guide.predict(x)
    with pytest.raises(TypeError, match="re-iterable"):
        guide.laplace_approximation_batched(((x, y), {}) for _ in range(2))
    for bad, msg in [(["nope"], "unknown latent sites"), (torch.tensor([0, 0]), "duplicates"),
                     (torch.tensor([99]), r"must lie in \[0, 28\)"), (torch.ones(3, dtype=torch.bool), "shape")]:
        guide.selection = bad
        with pytest.raises(ValueError, match=msg):
            guide.laplace_approximation(x, y)


def test_family_without_fisher():
    x = torch.randn(6)
    y = torch.rand(6) + 0.5
    guide = trained(SubnetworkLaplace(gamma_model, 1, mc_fisher=False), x, y)
    with pytest.raises(ValueError, match="site 'obs' has a Gamma distribution.*mc_fisher=True"):
        guide.laplace_approximation(x, y)
    # with the Monte Carlo Fisher it works, and agrees with the exact Fisher of the Gamma
    guide = trained(SubnetworkLaplace(gamma_model, 1, num_mc=20000), x, y)
    post = guide.laplace_approximation(x, y)
    w = guide.loc.detach()
    conc = (x * w).exp()
    exact = (torch.polygamma(1, conc) * (conc * x) ** 2).sum() + 1.0  # + prior precision
    assert torch.allclose(post.precision[0, 0], exact, rtol=0.05)


def test_not_positive_definite():
    x = torch.randn(5, 2)
    y = torch.randn(5)
    guide = SubnetworkLaplace(flat_model, selection=["v"],
                              init_loc_fn=pyro.infer.autoguide.init_to_value(values={"v": torch.tensor(0.0)}))
    trained(guide, x, y)
    with pytest.raises(ValueError, match="not positive definite even with jitter"):
        guide.laplace_approximation(x, y)  # the precision of v is exactly zero
    guide.selection = ["w", "v"]
    with pytest.warns(RuntimeWarning, match="not positive definite; added"):
        post = guide.laplace_approximation(x, y)
    assert torch.allclose(post.precision[:2, :2], x.T @ x + torch.eye(2))
