"""Every export's log_likelihood (a subnet export's conditional_log_likelihood) holds data only: on
one model with a pyro.deterministic site and masked observations, the exports of ParallelTempering,
NUTS (pyro_arviz.from_pyro) and a subnet Laplace posterior (linearized and network) hold one
log-likelihood array, of the kept points, equal to the Normal's log density at the draws; az.loo
(pyro_subnet.loo for a subnet export) gives every point a finite Pareto k; the
deterministic sites are in posterior at each draw. Runs in both ArviZ suites; every expected
number is computed here from the draws, never read back from the export."""

import warnings

import arviz as az
import numpy as np
import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from pyro.infer import MCMC, NUTS, SVI, Trace_ELBO

import pyro_arviz
import pyro_subnet
from pyro_pt import ParallelTempering, to_inference_data
from pyro_subnet import SubnetworkLaplace
from pyro_subnet.arviz import CONDITIONAL

NOISE = 0.5
MASK = torch.tensor([True, True, False, True, True, True, False, True, True, False])
KEPT = [0, 1, 3, 4, 5, 7, 8]
EXPORTS = ["pt", "nuts", "subnet_linearized", "subnet_network"]


def model(x, y=None, mask=MASK):
    """A line through masked observations, its squared norm and its mean as deterministic sites."""
    w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
    pyro.deterministic("w_norm_sq", (w**2).sum())
    with pyro.plate("data", x.shape[0]), poutine.mask(mask=mask):
        mean = w[0] * x + w[1]
        pyro.deterministic("mean", mean)  # in the plate and under the mask: a record of every point
        pyro.sample("y", dist.Normal(mean, NOISE), obs=y)


def data():
    g = torch.Generator().manual_seed(4)
    x = torch.linspace(-1.5, 1.5, len(MASK), dtype=torch.float64)
    y = 0.8 * x - 0.3 + NOISE * torch.randn(len(MASK), generator=g, dtype=torch.float64)
    # placeholders, not data: outliers that would be the worst points of loo if they counted
    y[~MASK] = torch.tensor([50.0, -50.0, 1e3], dtype=torch.float64)
    return x, y


def _subnet_posterior(x, y):
    # the mask is an argument, so that the linearization's chunks of the data split it too
    pyro.clear_param_store()
    guide = SubnetworkLaplace(model, subnetwork_size=1.0)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(200):
        svi.step(x, y, MASK)
    return guide.laplace_approximation(x, y, MASK)


@pytest.fixture(scope="module")
def exports():
    x, y = data()
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the short runs' tempering and step-size warnings
        pyro.set_rng_seed(0)
        pt = MCMC(ParallelTempering(model, num_replicas=2, max_temperature=4.0, adapt_temperatures=False),
                  num_samples=60, warmup_steps=40, disable_progbar=True)
        pt.run(x, y)
        out["pt"] = to_inference_data(pt)
        nuts = MCMC(NUTS(model, max_tree_depth=3), num_samples=60, warmup_steps=40, disable_progbar=True)
        nuts.run(x, y)
        out["nuts"] = pyro_arviz.from_pyro(nuts)
        posterior = _subnet_posterior(x, y)
        for predictive in ("linearized", "network"):
            pyro.set_rng_seed(1)
            out[f"subnet_{predictive}"] = pyro_subnet.to_inference_data(
                posterior, x, y, MASK, num_samples=60, predictive=predictive)
    return out


def _log_likelihood(name):
    """The group of the pointwise log-likelihood: the subnet exports keep theirs out of az.loo's way."""
    return CONDITIONAL if name.startswith("subnet") else "log_likelihood"


def _draws(idata):
    return torch.as_tensor(idata["posterior"]["w"].values)  # (chain, draw, 2)


@pytest.mark.parametrize("name", EXPORTS)
def test_log_likelihood_is_the_kept_points_of_the_observed_site(exports, name):
    idata = exports[name]
    x, y = data()
    assert list(idata[_log_likelihood(name)].data_vars) == ["y"]
    w = _draws(idata)
    mean = w[..., :1] * x + w[..., 1:]
    expected = torch.distributions.Normal(mean, NOISE).log_prob(y)[..., KEPT]
    loglik = idata[_log_likelihood(name)]["y"]
    assert loglik.dims == ("chain", "draw", "y_dim_0")
    assert list(loglik["y_dim_0"].values) == KEPT  # maps each point back to the data
    assert torch.allclose(torch.as_tensor(loglik.values), expected, rtol=1e-6, atol=1e-8)
    # the groups that pair with it hold the same points
    assert list(idata["observed_data"]["y"]["y_dim_0"].values) == KEPT
    assert torch.equal(torch.as_tensor(idata["observed_data"]["y"].values), y[KEPT])
    assert idata["posterior_predictive"]["y"].shape == w.shape[:2] + (len(KEPT),)


@pytest.mark.parametrize("name", EXPORTS)
def test_loo_gives_every_kept_point_a_finite_pareto_k(exports, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # high k warnings of 60 draws
        # a subnet export's leave-one-out is pyro_subnet.loo's (az.loo refuses it: no log_likelihood)
        loo = pyro_subnet.loo(exports[name]) if name.startswith("subnet") else az.loo(exports[name], pointwise=True)
    k = np.asarray(loo.pareto_k)
    assert k.shape == (len(KEPT),)
    assert np.isfinite(k).all()


@pytest.mark.parametrize("name", EXPORTS)
def test_deterministic_sites_are_in_the_posterior_at_each_draw(exports, name):
    idata = exports[name]
    x, _ = data()
    w = _draws(idata)
    post = idata["posterior"]
    assert torch.allclose(torch.as_tensor(post["w_norm_sq"].values), (w**2).sum(-1), rtol=1e-12)
    # the mask does not reach a record: every point's mean is there
    assert post["mean"].shape == w.shape[:2] + (len(MASK),)
    assert torch.allclose(torch.as_tensor(post["mean"].values), w[..., :1] * x + w[..., 1:], rtol=1e-12)
    for group in (_log_likelihood(name), "posterior_predictive", "observed_data"):
        assert not {"w_norm_sq", "mean"} & set(idata[group].data_vars), group


def test_subnet_lp_counts_the_kept_points_only(exports):
    """lp, the log joint the subnet export keeps for its LOO, sums the exported points: the
    prior of w plus the Normal log density of the kept observations (here u = w, no Jacobian)."""
    x, y = data()
    for name in ("subnet_linearized", "subnet_network"):
        idata = exports[name]
        w = _draws(idata)[0]
        expected = (dist.Normal(0.0, 1.0).log_prob(w).sum(-1)
                    + torch.distributions.Normal(w[:, :1] * x + w[:, 1:], NOISE).log_prob(y)[:, KEPT].sum(-1))
        assert torch.allclose(torch.as_tensor(idata["sample_stats"]["lp"].values[0]), expected, rtol=1e-9), name


def test_subnet_network_export_refuses_a_mask_that_moves_with_the_draws():
    """The network's points at a draw must be the MAP's (those the curvature and the linearized
    export keep); a mask computed from a latent keeps others at some draws."""

    def sign_mask(x, y):
        w = pyro.sample("w", dist.Normal(torch.zeros(2, dtype=x.dtype), 1.0).to_event(1))
        with pyro.plate("data", x.shape[0]), poutine.mask(mask=w[0] * x > 0):
            pyro.sample("y", dist.Normal(w[1], NOISE), obs=y)

    x = torch.linspace(-1, 1, 6, dtype=torch.float64)
    pyro.clear_param_store()
    guide = SubnetworkLaplace(sign_mask, subnetwork_size=1.0)
    svi = SVI(sign_mask, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(20):
        svi.step(x, x)
    posterior = guide.laplace_approximation(x, x)
    pyro.set_rng_seed(0)
    linearized = pyro_subnet.to_inference_data(posterior, x, x, num_samples=40)
    assert linearized[CONDITIONAL]["y"].shape == (1, 40, 3)  # the MAP's half of the points
    with pytest.raises(ValueError, match=r"the mask of observed site 'y' keeps other points at draw \d+ \(3 of 6\) "
                                         r"than at the MAP \(3\): it depends on the latents.*predictive='linearized'"):
        pyro_subnet.to_inference_data(posterior, x, x, num_samples=40, predictive="network")


def test_subnetwork_laplace_fits_a_model_with_a_deterministic_site():
    """The deterministic sites are records, not data: the posterior's one likelihood is y, and
    its leave-one-out covers the kept points with finite k."""
    x, y = data()
    posterior = _subnet_posterior(x, y)
    assert posterior._latent.observed == ["y"]
    result = pyro_subnet.loo(posterior, x, y, MASK, num_samples=300)
    k = np.asarray(result["pareto_k"] if pyro_arviz.arviz_generation() == 0 else result.pareto_k)
    assert len(k) == len(KEPT) and np.isfinite(k).all()
