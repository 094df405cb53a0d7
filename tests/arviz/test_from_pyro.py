"""pyro_arviz.from_pyro: one call for NUTS, ParallelTempering and subnet posteriors, in both ArviZ
generations. The model is a conjugate regression, so leave-one-out has an exact answer to check
each export's PSIS-LOO against; every expected number is computed here, never read back."""

import warnings

import arviz as az
import pytest
import torch
import xarray as xr

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC, NUTS, SVI, Trace_ELBO

import pyro_arviz
import pyro_pt
import pyro_subnet
from pyro_arviz.convert import datasets
from pyro_pt import ParallelTempering
from pyro_subnet import SubnetworkLaplace
from pyro_subnet.arviz import CONDITIONAL
from tests.arviz import generation

NOISE = 0.5
DRAWS = 300


def model(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(x @ w, NOISE), obs=y)


def data():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(30, 2, generator=g)
    return x, x @ torch.tensor([0.8, -0.5]) + NOISE * torch.randn(30, generator=g)


def exact_elpd_loo(x, y):
    """sum_i log p(y_i | y_-i): the posterior without point i is Gaussian, so is its predictive."""
    x, y = x.double(), y.double()
    total = 0.0
    for i in range(len(y)):
        keep = torch.arange(len(y)) != i
        cov = torch.linalg.inv(torch.eye(2, dtype=x.dtype) + x[keep].T @ x[keep] / NOISE**2)
        mean = cov @ x[keep].T @ y[keep] / NOISE**2
        scale = (x[i] @ cov @ x[i] + NOISE**2).sqrt()
        total += float(torch.distributions.Normal(x[i] @ mean, scale).log_prob(y[i]))
    return total


@pytest.fixture(scope="module")
def runs():
    """A NUTS run, a ParallelTempering run and a full subnet Laplace posterior of one model."""
    x, y = data()
    pyro.set_rng_seed(0)
    nuts = MCMC(NUTS(model), DRAWS, 150, disable_progbar=True)
    nuts.run(x, y)
    pt = MCMC(ParallelTempering(model, num_replicas=2, max_temperature=4.0, adapt_temperatures=False),
              DRAWS, 150, disable_progbar=True)
    pt.run(x, y)
    pyro.clear_param_store()
    guide = SubnetworkLaplace(model, subnetwork_size=1.0)  # all coordinates: the exact posterior here
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(300):
        svi.step(x, y)
    return {"nuts": nuts, "pt": pt, "subnet": guide.laplace_approximation(x, y)}


def export(runs, name, **kwargs):
    if name == "subnet":
        pyro.set_rng_seed(1)  # the posterior's draws come from the global stream
        return pyro_arviz.from_pyro(runs[name], *data(), num_samples=DRAWS, **kwargs)
    return pyro_arviz.from_pyro(runs[name], **kwargs)


def log_likelihood(name):
    """The group of an export's pointwise log-likelihood (a subnet export keeps it out of az.loo's way)."""
    return CONDITIONAL if name == "subnet" else "log_likelihood"


def assert_same_export(a, b):
    """The same groups, variables, coordinates, values and attributes (all but the time stamp)."""
    a, b = datasets(a), datasets(b)
    assert list(a) == list(b)
    for group in a:
        xr.testing.assert_identical(a[group].assign_attrs(created_at=None), b[group].assign_attrs(created_at=None))


@pytest.mark.parametrize("name", ["nuts", "pt", "subnet"])
def test_each_export_has_the_models_variables_and_shapes(runs, name):
    x, y = data()
    idata = export(runs, name)
    groups = set(pyro_arviz.groups_of(idata))
    assert {"posterior", log_likelihood(name), "posterior_predictive", "observed_data"} <= groups
    assert name != "subnet" or "log_likelihood" not in groups  # az.loo would score q's draws as the posterior's
    w = torch.as_tensor(idata["posterior"]["w"].values)
    assert w.shape == (1, DRAWS, 2)
    assert list(idata[log_likelihood(name)].data_vars) == ["y"]
    expected = torch.distributions.Normal(w @ x.T, NOISE).log_prob(y)  # the linear model at each draw
    assert torch.allclose(torch.as_tensor(idata[log_likelihood(name)]["y"].values), expected, rtol=1e-5, atol=1e-6)
    assert idata["posterior_predictive"]["y"].shape == (1, DRAWS, 30)
    assert torch.allclose(torch.as_tensor(idata["observed_data"]["y"].values), y)
    if name != "subnet":
        assert idata["sample_stats"]["diverging"].shape == (1, DRAWS)
    if name == "pt":
        assert idata["sample_stats"]["tempered_log_likelihood"].dims == ("chain", "draw", "temperature")


def test_parallel_tempering_export_is_pyro_pts(runs):
    assert_same_export(pyro_arviz.from_pyro(runs["pt"]), pyro_pt.to_inference_data(runs["pt"]))
    assert_same_export(pyro_arviz.from_pyro(posterior=runs["pt"]), pyro_pt.to_inference_data(runs["pt"]))


def test_subnet_export_is_pyro_subnets(runs):
    pyro.set_rng_seed(3)
    expected = pyro_subnet.to_inference_data(runs["subnet"], *data(), num_samples=20, predictive="network")
    pyro.set_rng_seed(3)
    exported = pyro_arviz.from_pyro(runs["subnet"], *data(), num_samples=20, predictive="network")
    assert_same_export(exported, expected)


def test_compare_ranks_the_three_by_their_loo(runs):
    # the README's az.compare: the MCMC exports, and the subnet posterior's own leave-one-out
    pyro.set_rng_seed(1)
    exports = {name: export(runs, name) for name in ("nuts", "pt")}
    exports["subnet"] = pyro_subnet.loo(runs["subnet"], *data(), num_samples=DRAWS)
    exact = exact_elpd_loo(*data())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pareto k warnings of a few hundred draws
        table = generation.compare(exports)
        loo = {name: generation.elpd(az.loo(idata)) for name, idata in exports.items() if name != "subnet"}
    loo["subnet"] = generation.elpd(exports["subnet"])
    elpd = generation.compare_columns()[0]
    assert sorted(table.index) == sorted(exports)
    assert list(table["rank"]) == [0, 1, 2]
    assert list(table.index) == sorted(loo, key=loo.get, reverse=True)
    for name in exports:
        assert float(table.loc[name, elpd]) == pytest.approx(loo[name], rel=1e-9)
        # three samplers of one posterior: each PSIS-LOO is the exact leave-one-out
        assert loo[name] == pytest.approx(exact, abs=0.3), name


@pytest.mark.parametrize("name", ["nuts", "pt", "subnet"])
def test_without_log_likelihood(runs, name):
    groups = set(pyro_arviz.groups_of(export(runs, name, log_likelihood=False)))
    assert {"posterior", "observed_data"} <= groups
    assert not {"log_likelihood", CONDITIONAL, "posterior_predictive"} & groups


def test_dims_and_coords_name_the_axes(runs):
    dims, coords = {"w": ["feature"], "y": ["point"]}, {"feature": ["slope", "tilt"], "point": list(range(30))}
    for name in runs:
        idata = export(runs, name, dims=dims, coords=coords)
        post, loglik = idata["posterior"], idata[log_likelihood(name)]
        assert post["w"].dims == ("chain", "draw", "feature")
        assert list(post["feature"].values) == ["slope", "tilt"]
        assert loglik["y"].dims == ("chain", "draw", "point")
        assert idata["observed_data"]["y"].dims == ("point",)
        plain = export(runs, name)
        assert (post["w"].values == plain["posterior"]["w"].values).all()
        assert (loglik["y"].values == plain[log_likelihood(name)]["y"].values).all()
    with pytest.raises(ValueError, match=r"dims names \['v'\], which are no variables of the export"):
        export(runs, "nuts", dims={"v": ["a"]})
    with pytest.raises(ValueError, match=r"dims\['w'\] names 2 axes, but 'w' has 1"):
        export(runs, "nuts", dims={"w": ["a", "b"]})
    with pytest.raises(ValueError, match=r"coords\['feature'\] has 3 values, but dimension 'feature' has size 2"):
        export(runs, "nuts", dims=dims, coords={"feature": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"coords names dimensions \['feature'\] that no variable has"):
        export(runs, "nuts", coords={"feature": [1, 2]})


def test_what_is_not_a_result_is_named(runs):
    accepted = (r"from_pyro expects a pyro.infer.MCMC after mcmc.run\(...\) \(any kernel: NUTS, HMC, "
                r"ParallelTempering\) or the SubnetworkLaplacePosterior that "
                r"guide.laplace_approximation\(...\) returns")
    with pytest.raises(TypeError, match=accepted + "; got int$"):
        pyro_arviz.from_pyro(42)
    with pytest.raises(TypeError, match=accepted + "; got dict$"):
        pyro_arviz.from_pyro(runs["nuts"].get_samples())
    with pytest.raises(TypeError, match=accepted + r"; got ParallelTempering; pass the MCMC object that ran"):
        pyro_arviz.from_pyro(runs["pt"].kernel)
    with pytest.raises(TypeError, match=accepted + r"; got SubnetworkLaplace; call posterior = "
                       r"guide.laplace_approximation\(x, y\)"):
        pyro_arviz.from_pyro(SubnetworkLaplace(model, subnetwork_size=1))
    with pytest.raises(TypeError, match=r"from_pyro\(mcmc\) takes only log_likelihood=, dims= and coords=: "
                       r"it evaluates the model with the arguments of mcmc.run\(...\); got 2 positional"):
        pyro_arviz.from_pyro(runs["nuts"], *data())
    with pytest.raises(TypeError, match=r"takes only .*keyword arguments \[.posterior_predictive.\]"):
        pyro_arviz.from_pyro(runs["nuts"], posterior_predictive={})
    with pytest.raises(TypeError, match="log_likelihood must be True or False"):
        pyro_arviz.from_pyro(runs["nuts"], log_likelihood="yes")
    with pytest.raises(ValueError, match=r"it has not run: call mcmc.run\(\*data\) first"):
        pyro_arviz.from_pyro(MCMC(NUTS(model), 5, 5))
