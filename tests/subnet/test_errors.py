"""Bad input gets a clear error that names the argument or site and says what to do."""

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from subnet_models import mlp_data, mlp_model, random_loc

from pyro_subnet import SubnetWarning, SubnetworkLaplace


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


@pytest.mark.parametrize("size, error, match", [
    (0, ValueError, r"subnetwork_size as a count \(an int\) must be at least 1, got 0"),
    (-3, ValueError, r"subnetwork_size as a count \(an int\) must be at least 1, got -3"),
    (0.0, ValueError, r"subnetwork_size as a fraction \(a float\) must lie in \(0, 1\], got 0.0"),
    (1.5, ValueError, r"subnetwork_size as a fraction \(a float\) must lie in \(0, 1\], got 1.5; pass a count"),
    ("big", TypeError, r"subnetwork_size must be a count \(an int >= 1\) or a fraction .* got 'big'"),
    (True, TypeError, r"subnetwork_size must be a count \(an int >= 1\) or a fraction .* got True"),
])
def test_subnetwork_size_is_checked_at_construction(size, error, match):
    with pytest.raises(error, match=match):
        SubnetworkLaplace(mlp_model, subnetwork_size=size)


def test_subnetwork_size_above_the_coordinates_is_refused_before_the_map_phase():
    x, y = mlp_data()
    guide = SubnetworkLaplace(mlp_model, subnetwork_size=1000)
    svi = pyro.infer.SVI(mlp_model, guide, pyro.optim.Adam({"lr": 1e-2}), pyro.infer.Trace_ELBO())
    with pytest.raises(ValueError, match=r"subnetwork_size=1000 is more than the model's 28 latent coordinates; "
                       r"pass a count of at most 28"):
        svi.step(x, y)  # the guide's first call traces the model: no optimizer step has run
    assert "SubnetworkLaplace.loc" not in pyro.get_param_store()
    sites = SubnetworkLaplace(line_model, subnetwork_size=4, selection_sites=["w"])
    with pytest.raises(ValueError, match=r"more than the model's 3 coordinates of selection_sites=\['w'\]"):
        sites(*line_data(0))
    assert SubnetworkLaplace(mlp_model, subnetwork_size=np.int64(28)).subnetwork_size == 28


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
    with pytest.warns(SubnetWarning, match="not positive definite; added"):
        post = guide.laplace_approximation(x, y)
    assert torch.allclose(post.precision[:2, :2], x.T @ x + torch.eye(2))


def line_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, 0.1), obs=y)


def line_data(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(50, 3, generator=g)
    return x, x @ torch.tensor([1.0, -2.0, 0.5]) * (1 + seed) + 0.1 * torch.randn(50, generator=g)


def train(guide, x, y, steps, lr=0.05):
    svi = pyro.infer.SVI(line_model, guide, pyro.optim.Adam({"lr": lr}), pyro.infer.Trace_ELBO())
    return [svi.step(x, y) for _ in range(steps)]


def test_untrained_guide_is_refused():
    x, y = line_data(0)
    guide = SubnetworkLaplace(line_model, 1.0)
    with pytest.raises(ValueError, match="needs a trained guide.*svi.step"):
        guide.laplace_approximation(x, y)  # never called
    guide(x, y)
    with pytest.raises(ValueError, match="needs a trained guide"):
        guide.laplace_approximation(x, y)  # set up, never stepped
    train(guide, x, y, 1, lr=0.0)  # an optimizer step counts, even one that leaves the MAP in place
    assert torch.equal(guide.laplace_approximation(x, y).loc, guide._initial[0])


@pytest.mark.parametrize("guide_class", [SubnetworkLaplace, pyro.infer.autoguide.AutoLaplaceApproximation])
def test_stale_param_store_entry_never_freezes_training(guide_class):
    """The case guarded here: an earlier run leaves its MAP in the param store, a new guide's
    laplace_approximation runs before its training. Training must then move the MAP, exactly as
    AutoLaplaceApproximation does (both adopt the stored value, as Pyro guides do)."""
    init = pyro.infer.autoguide.init_to_mean  # deterministic, for a step-by-step comparison
    make = (lambda: SubnetworkLaplace(line_model, 1.0, init_loc_fn=init)) if guide_class is SubnetworkLaplace else \
        (lambda: guide_class(line_model, init_loc_fn=init))
    train(make(), *line_data(0), 100)  # the earlier run
    x, y = line_data(1)
    guide = make()
    guide.laplace_approximation(x, y)
    losses = train(guide, x, y, 300)
    w_map = torch.linalg.solve(x.T @ x / 0.01 + torch.eye(3), x.T @ y / 0.01)
    assert losses[-1] < losses[0] - 1000
    assert torch.allclose(pyro.param(f"{guide_class.__name__}.loc"), w_map, atol=2e-3)
    if guide_class is SubnetworkLaplace:  # the same losses as AutoLaplaceApproximation, step by step
        pyro.clear_param_store()
        auto = pyro.infer.autoguide.AutoLaplaceApproximation
        train(auto(line_model, init_loc_fn=init), *line_data(0), 100)
        reference = auto(line_model, init_loc_fn=init)
        reference.laplace_approximation(x, y)
        assert losses == pytest.approx(train(reference, x, y, 300), rel=1e-10)


def test_param_store_restores_the_map(tmp_path):
    import copy

    x, y = line_data(0)
    guide = SubnetworkLaplace(line_model, 1.0)
    train(guide, x, y, 20)
    post = guide.laplace_approximation(x, y)
    state = copy.deepcopy(pyro.get_param_store().get_state())
    pyro.get_param_store().save(tmp_path / "store.pt")
    train(guide, x, y, 50, lr=0.2)
    assert not torch.allclose(guide.laplace_approximation(x, y).loc, post.loc, atol=1e-3)
    assert torch.equal(post.loc, state["params"]["SubnetworkLaplace.loc"])  # training did not move the posterior
    pyro.get_param_store().set_state(state)
    again = guide.laplace_approximation(x, y)
    assert torch.equal(again.loc, post.loc) and torch.equal(again.precision, post.precision)
    # a new guide, as in a new process, from the saved file
    pyro.clear_param_store()
    pyro.get_param_store().load(tmp_path / "store.pt")
    fresh = SubnetworkLaplace(line_model, 1.0).laplace_approximation(x, y)
    assert torch.equal(fresh.loc, post.loc) and torch.equal(fresh.precision, post.precision)


def test_param_store_entry_of_another_shape():
    train(SubnetworkLaplace(line_model, 1.0), *line_data(0), 2)
    with pytest.raises(ValueError, match="holds 'SubnetworkLaplace.loc' of shape \\(3,\\).*clear_param_store"):
        SubnetworkLaplace(mlp_model, 1.0)(*mlp_data())
