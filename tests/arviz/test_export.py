"""The ArviZ bridge: the same groups and numbers under ArviZ < 1 (InferenceData) and >= 1 (DataTree).

This file runs in both suites (`make test` on ArviZ 0.x, `make test-arviz1` on ArviZ 1.x); every
expected number is computed here from the draws, never read back from the export.
"""

import math
import warnings

import arviz as az
import pytest
import torch
import xarray as xr

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC, NUTS
from pyro.nn import PyroModule, PyroSample

import pyro_arviz
from tests.arviz import generation
from pyro_pt import ParallelTempering, to_inference_data


class Net(PyroModule):
    """A 1-4-1 tanh BNN with PyroSample priors (az.from_pyro's vectorized trace fails on it)."""

    def __init__(self):
        super().__init__()
        self.hidden = PyroModule[torch.nn.Linear](1, 4)
        self.hidden.weight = PyroSample(dist.Normal(0.0, 1.0).expand([4, 1]).to_event(2))
        self.hidden.bias = PyroSample(dist.Normal(0.0, 1.0).expand([4]).to_event(1))
        self.out = PyroModule[torch.nn.Linear](4, 1)
        self.out.weight = PyroSample(dist.Normal(0.0, 1.0).expand([1, 4]).to_event(2))
        self.out.bias = PyroSample(dist.Normal(0.0, 1.0).expand([1]).to_event(1))

    def forward(self, x, y=None):
        f = self.out(torch.tanh(self.hidden(x))).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            return pyro.sample("obs", dist.Normal(f, 0.3), obs=y)


def xw_model(x, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(2), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(x @ w, 0.5), obs=y)


def toy_data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.linspace(-2, 2, n)[:, None]
    return x, torch.sin(2 * x[:, 0]) + 0.3 * torch.randn(n, generator=g)


def is_expected_container(data):
    if pyro_arviz.arviz_generation() >= 1:
        return isinstance(data, xr.DataTree)
    return isinstance(data, az.InferenceData)


def test_pyromodule_network_gets_its_pointwise_log_likelihood(tmp_path):
    x, y = toy_data()
    net = Net()
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(net, num_replicas=2, max_temperature=3.0, explorer="rwmh",
                               adapt_temperatures=False)
    mcmc = MCMC(kernel, num_samples=40, warmup_steps=10, disable_progbar=True)
    mcmc.run(x, y)
    state = torch.get_rng_state()
    data = to_inference_data(mcmc)
    assert torch.equal(torch.get_rng_state(), state)  # the export draws from a forked stream
    assert is_expected_container(data)
    assert {"posterior", "log_likelihood", "posterior_predictive", "sample_stats",
            "observed_data"} <= set(pyro_arviz.groups_of(data))
    post = data["posterior"]
    loglik = data["log_likelihood"]["obs"].values
    assert loglik.shape == (1, 40, 12)
    for d in (0, 20, 39):
        w1 = torch.as_tensor(post["hidden.weight"].values[0, d])
        b1 = torch.as_tensor(post["hidden.bias"].values[0, d])
        w2 = torch.as_tensor(post["out.weight"].values[0, d])
        b2 = torch.as_tensor(post["out.bias"].values[0, d])
        f = (torch.tanh(x @ w1.T + b1) @ w2.T + b2).squeeze(-1)
        expected = torch.distributions.Normal(f, 0.3).log_prob(y)
        assert torch.allclose(torch.as_tensor(loglik[0, d]), expected, rtol=1e-5, atol=1e-6)
    # The cold rung's recorded ll is the sum over points of the same draw's pointwise ll.
    record = data["sample_stats"]["tempered_log_likelihood"].values[..., 0]
    assert loglik.sum(-1) == pytest.approx(record, rel=1e-4)
    assert data["posterior_predictive"]["obs"].shape == (1, 40, 12)
    assert torch.allclose(torch.as_tensor(data["observed_data"]["obs"].values), y)
    assert data["sample_stats"]["swap_accepted"].dims == ("chain", "draw", "swap_pair")
    assert list(data["sample_stats"]["beta"].values) == pytest.approx([1.0, 1 / 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        elpd = az.loo(data)
    # PSIS-LOO is below the in-sample lppd = sum_n log mean_d p(y_n | theta_d), computed here
    lppd = float((torch.logsumexp(torch.as_tensor(loglik[0]), 0) - torch.log(torch.tensor(40.0))).sum())
    elpd_loo = generation.elpd(elpd)
    assert math.isfinite(elpd_loo) and elpd_loo < lppd
    path = tmp_path / "net.nc"
    data.to_netcdf(str(path))
    loaded = az.from_netcdf(str(path))
    assert (loaded["log_likelihood"]["obs"].values == loglik).all()
    # netCDF stores a one-element attribute as a scalar
    assert float(loaded["sample_stats"].attrs["log_Z"]) == pytest.approx(float(data["sample_stats"].attrs["log_Z"][0]))


def test_generic_mcmc_bridge_on_an_x_at_w_regression():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 2, generator=g)
    y = x @ torch.tensor([0.5, -1.0]) + 0.5 * torch.randn(9, generator=g)
    pyro.set_rng_seed(0)
    mcmc = MCMC(NUTS(xw_model, max_tree_depth=3), num_samples=10, warmup_steps=10,
                num_chains=2, disable_progbar=True, mp_context=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(x, y)
    data = pyro_arviz.build(pyro_arviz.mcmc_groups(mcmc))
    assert is_expected_container(data)
    w = torch.as_tensor(data["posterior"]["w"].values)
    assert w.shape == (2, 10, 2)
    expected = torch.distributions.Normal(w @ x.T, 0.5).log_prob(y)
    assert torch.allclose(torch.as_tensor(data["log_likelihood"]["y"].values), expected, rtol=1e-6)
    assert data["sample_stats"]["diverging"].shape == (2, 10)
    assert "inference_library" in data["posterior"].attrs


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="no posterior samples"):
        pyro_arviz.pointwise_log_likelihood(xw_model, {}, (torch.zeros(3, 2), torch.zeros(3)))
    with pytest.raises(ValueError, match="no observed site"):
        pyro_arviz.pointwise_log_likelihood(
            xw_model, {"w": torch.zeros(1, 2, 2)}, (torch.zeros(3, 2), None))
    with pytest.raises(ValueError, match="dims of 'a' name 2 axes"):
        pyro_arviz.dataset({"a": torch.zeros(1, 2, 3).numpy()}, dims={"a": ["p", "q"]})


def test_plot_tempering_reads_either_container(tmp_path):
    pytest.importorskip("matplotlib")
    from pyro_pt import plot_tempering

    x, y = toy_data(n=6)
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(xw_model, num_replicas=3, max_temperature=4.0, explorer="rwmh",
                               adapt_temperatures=False)
    mcmc = MCMC(kernel, num_samples=10, warmup_steps=5, disable_progbar=True)
    mcmc.run(torch.cat([x, x], -1), y)
    data = to_inference_data(mcmc)
    assert is_expected_container(data)
    plot_tempering(data, path=str(tmp_path / "t.png"))
    assert (tmp_path / "t.png").stat().st_size > 0
    # what the export gives the picture is what the run itself gives it
    from pyro_pt.plot import _tempering_data

    exported, direct = _tempering_data(data), _tempering_data(mcmc)
    for key in ("temperatures", "acceptance", "local", "barrier", "recommended"):
        assert torch.allclose(torch.as_tensor(exported[key]), torch.as_tensor(direct[key]), rtol=1e-12), key


def test_an_ensemble_exports_a_chain_per_ladder():
    """num_ladders=3, num_samples=30: three chains of 10 draws (ArviZ's R-hat then compares
    the ladders), under either ArviZ generation."""
    x, y = toy_data(n=6)
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(xw_model, num_replicas=3, num_ladders=3)
    mcmc = MCMC(kernel, num_samples=30, warmup_steps=15, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(torch.cat([x, x], -1), y)
    data = to_inference_data(mcmc)
    assert is_expected_container(data)
    assert data["posterior"]["w"].shape == (3, 10, 2)
    assert data["sample_stats"]["tempered_log_likelihood"].shape == (3, 10, 3)
    # ladder c's block of MCMC's draws is chain c
    exported = torch.as_tensor(data["posterior"]["w"].values).reshape(30, 2)
    assert torch.equal(exported, mcmc.get_samples()["w"].to(exported.dtype))


def two_site_model(x, y, counts):
    w = pyro.sample("w", dist.Normal(torch.zeros(2), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(x @ w, 0.5), obs=y)
    with pyro.plate("visits", counts.shape[0]):
        pyro.sample("counts", dist.Poisson(torch.exp(w[0]).expand(counts.shape)), obs=counts)


def test_two_observed_sites_each_get_their_pointwise_log_likelihood():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 2, generator=g)
    y = x @ torch.tensor([0.3, 0.8]) + 0.5 * torch.randn(8, generator=g)
    counts = torch.tensor([1.0, 0.0, 2.0, 1.0, 3.0])
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(two_site_model, num_replicas=2, max_temperature=2.0, explorer="rwmh",
                               adapt_temperatures=False)
    mcmc = MCMC(kernel, num_samples=40, warmup_steps=10, disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(x, y, counts)
    data = to_inference_data(mcmc)
    w = torch.as_tensor(data["posterior"]["w"].values)
    expected_y = torch.distributions.Normal(w @ x.T, 0.5).log_prob(y)
    expected_counts = torch.distributions.Poisson(torch.exp(w[..., :1])).log_prob(counts)
    assert torch.allclose(torch.as_tensor(data["log_likelihood"]["y"].values), expected_y, rtol=1e-6)
    assert torch.allclose(torch.as_tensor(data["log_likelihood"]["counts"].values), expected_counts, rtol=1e-6)
    total = expected_y.sum(-1) + expected_counts.sum(-1)
    record = torch.as_tensor(data["sample_stats"]["tempered_log_likelihood"].values[..., 0])
    assert torch.allclose(total.to(record.dtype), record, rtol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for site in ("y", "counts"):
            assert math.isfinite(generation.elpd(az.loo(data, var_name=site)))
