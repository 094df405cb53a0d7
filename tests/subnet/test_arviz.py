"""to_inference_data: groups, shapes and values that az.loo / az.compare can use, from the
linearized model the posterior describes (default) or from the network itself."""

import math
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from subnet_models import mlp, mlp_data, mlp_model, random_loc, unpack

from pyro_subnet import SubnetworkLaplace, to_inference_data
from pyro_subnet.arviz import as_arviz_log_likelihood
from tests.arviz.generation import compare_columns, elpd

az = pytest.importorskip("arviz")


def _draw(idata, name, m=0):
    return torch.as_tensor(idata.posterior[name].values[0, m])


def test_inference_data_groups_and_loo():
    x, y = mlp_data(n=25)
    # six weights (the paper's rule picks no sigma here: the reference below linearizes weights only)
    guide = SubnetworkLaplace(mlp_model, subnetwork_size=6, selection="wasserstein")
    guide(x, y)
    random_loc(guide, seed=3, scale=0.5)
    post = guide.laplace_approximation(x, y)
    assert (post.subnetwork_indices < 27).all()
    idata = to_inference_data(post, x, y, num_samples=200, predictive="network")
    for group in ("posterior", "posterior_predictive", "conditional_log_likelihood", "observed_data"):
        assert hasattr(idata, group)
    assert not hasattr(idata, "log_likelihood")  # not for az.loo: q's draws are no posterior draws
    assert idata.posterior["W1"].shape == (1, 200, 5, 2)
    assert idata.posterior["sigma"].shape == (1, 200)
    assert idata.conditional_log_likelihood["obs"].shape == (1, 200, 25)
    assert idata.posterior_predictive["obs"].shape == (1, 200, 25, 2)
    assert torch.allclose(torch.as_tensor(idata.observed_data["obs"].values), y)
    assert idata.posterior.attrs["predictive"] == "network"

    # the pointwise log-likelihood at a draw equals the model's own log density there
    W1, b1, W2, b2, sigma = (_draw(idata, k) for k in ("W1", "b1", "W2", "b2", "sigma"))
    f = torch.tanh(x @ W1.T + b1) @ W2.T + b2
    ll = torch.distributions.Normal(f, sigma).log_prob(y).sum(-1)
    assert torch.allclose(torch.as_tensor(idata.conditional_log_likelihood["obs"].values[0, 0]), ll)

    # the default export: the same groups and shapes, from the linearized network
    lin = to_inference_data(post, x, y, num_samples=200)
    assert lin.posterior.attrs["predictive"] == "linearized"
    for group, name, shape in [("posterior", "W1", (1, 200, 5, 2)), ("conditional_log_likelihood", "obs", (1, 200, 25)),
                               ("posterior_predictive", "obs", (1, 200, 25, 2)),
                               ("sample_stats", "lp", (1, 200)), ("sample_stats", "log_q", (1, 200))]:
        assert getattr(lin, group)[name].shape == shape
    # its log-likelihood at a draw is that of f(x, u_hat) + J_S (u_S - u_hat_S), J_S by jacrev
    idx, u_hat = post.subnetwork_indices, post.loc
    u = torch.cat([_draw(lin, k, 5).reshape(-1) for k in ("W1", "b1", "W2", "b2")])
    assert torch.allclose(u, u_hat[:-1].index_copy(0, idx, u[idx]), atol=1e-12)  # only S moved

    def f_of(v):
        W1, b1, W2, b2, _ = unpack(u_hat.index_put((idx,), v), 2)
        return mlp(x, W1, b1, W2, b2)

    J = torch.func.jacrev(f_of)(u_hat[idx])
    f_lin = f_of(u_hat[idx]) + J @ (u[idx] - u_hat[idx])
    sigma = _draw(lin, "sigma", 5)
    ll = torch.distributions.Normal(f_lin, sigma).log_prob(y).sum(-1)
    assert torch.allclose(torch.as_tensor(lin.conditional_log_likelihood["obs"].values[0, 5]), ll, rtol=0, atol=1e-10)

    guide.selection, guide.subnetwork_size = "wasserstein", 1
    map_like = to_inference_data(guide.laplace_approximation(x, y), x, y, num_samples=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the draws' own PSIS-LOO, which az.loo gives only to the group renamed (pyro_subnet.loo's reference)
        loo = az.loo(as_arviz_log_likelihood(idata))
        cmp = az.compare({"subnet": as_arviz_log_likelihood(lin), "one_coordinate": as_arviz_log_likelihood(map_like)})
    assert torch.isfinite(torch.tensor(elpd(loo)))
    assert set(cmp.index) == {"subnet", "one_coordinate"}

    with pytest.raises(ValueError, match="pass the model's arguments including the observed values"):
        to_inference_data(post, x, num_samples=5)
    with pytest.raises(TypeError, match="SubnetworkLaplacePosterior"):
        to_inference_data(guide, x, y)
    with pytest.raises(ValueError, match="predictive must be one of"):
        to_inference_data(post, x, y, predictive="sampled")


SIGMA = 0.5


def linreg_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)


@pytest.mark.parametrize("predictive", ["linearized", "network"])
def test_linear_gaussian_exports_are_exact(predictive):
    n, p, M = 20, 3, 4000
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, p, generator=g)
    y = x @ torch.tensor([1.0, -0.5, 0.3]) + SIGMA * torch.randn(n, generator=g)
    prec = x.T @ x / SIGMA**2 + torch.eye(p)
    cov = torch.linalg.inv(prec)
    mean = cov @ x.T @ y / SIGMA**2
    guide = SubnetworkLaplace(linreg_model, subnetwork_size=1.0)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(mean)  # the exact posterior mode: the Laplace approximation is exact here
    post = guide.laplace_approximation(x, y)
    assert torch.allclose(post.covariance, cov, rtol=1e-10)

    idata = to_inference_data(post, x, y, num_samples=M, predictive=predictive, chunk_size=6)
    w = torch.as_tensor(idata.posterior["w"].values[0])  # [M, p]
    ll = torch.as_tensor(idata.conditional_log_likelihood["obs"].values[0])  # [M, n]
    # each draw's pointwise log-likelihood is the closed form log N(y | x w, sigma^2) at its w
    exact = torch.distributions.Normal(w @ x.T, SIGMA).log_prob(y)
    assert torch.allclose(ll, exact, rtol=0, atol=1e-10)
    # the draws are N(mean, cov)
    assert ((w.mean(0) - mean).abs() < 5 * (cov.diagonal() / M).sqrt()).all()
    # the mean pointwise likelihood is the exact posterior predictive density, within MC error
    var = (x @ cov * x).sum(-1) + SIGMA**2
    density = torch.distributions.Normal(x @ mean, var.sqrt()).log_prob(y).exp()
    lik = ll.exp()
    assert ((lik.mean(0) - density).abs() < 5 * lik.std(0) / math.sqrt(M)).all()
    # and the posterior predictive draws are N(x mean, var)
    rep = torch.as_tensor(idata.posterior_predictive["obs"].values[0])
    assert ((rep.mean(0) - x @ mean).abs() < 5 * (var / M).sqrt()).all()
    assert ((rep.var(0) / var - 1).abs() < 5 * math.sqrt(2 / M)).all()


def bnn_model(x, y=None):
    """A 1-20-1 tanh network with unit noise."""
    W1 = pyro.sample("W1", dist.Normal(0.0, 1.0).expand([20, 1]).to_event(2))
    b1 = pyro.sample("b1", dist.Normal(0.0, 1.0).expand([20]).to_event(1))
    W2 = pyro.sample("W2", dist.Normal(0.0, 1.0).expand([1, 20]).to_event(2))
    b2 = pyro.sample("b2", dist.Normal(0.0, 1.0).expand([1]).to_event(1))
    f = (torch.tanh(x @ W1.T + b1) @ W2.T + b2).squeeze(-1)
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(f, 1.0), obs=y)


def _bnn_map(x, y, g):
    """The MAP by L-BFGS on the log joint written by hand (the MAP phase is not under test)."""
    u = torch.randn(61, generator=g).requires_grad_()
    opt = torch.optim.LBFGS([u], max_iter=500, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        W1, b1, W2, b2 = u[:20].reshape(20, 1), u[20:40], u[40:60].reshape(1, 20), u[60:]
        f = (torch.tanh(x @ W1.T + b1) @ W2.T + b2).squeeze(-1)
        value = 0.5 * (u**2).sum() + 0.5 * ((y - f) ** 2).sum()
        value.backward()
        return value

    opt.step(loss)
    assert u.grad.abs().max() < 1e-4  # a stationary point of the log joint
    return u.detach()


@pytest.mark.slow
def test_small_bnn_loo_agrees_with_the_linearized_predictive():
    """
    ``elpd_loo`` is the export's lppd minus ``p_loo``: the lppd must be the linearized
    predictive's (to Monte Carlo error), the importance weights well behaved, and with 60 points
    of unit noise ``p_loo`` a few per cent of the lppd.
    """
    g = torch.Generator().manual_seed(0)
    x = 4 * torch.rand(60, 1, generator=g) - 2
    y = torch.sin(2 * x[:, 0]) + torch.randn(60, generator=g)
    u_map = _bnn_map(x, y, g)
    exports = {}
    for S in (20, 10):
        guide = SubnetworkLaplace(bnn_model, selection=torch.randperm(61, generator=g)[:S].sort().values)
        guide(x, y)
        with torch.no_grad():
            guide.loc.copy_(u_map)
        post = guide.laplace_approximation(x, y)
        lppd_lin = float(post.predict(x)["obs"].log_prob(y).sum())
        idata = exports[S] = to_inference_data(post, x, y, num_samples=2000)
        ll = torch.as_tensor(idata.conditional_log_likelihood["obs"].values[0])
        lppd = float((ll.logsumexp(0) - math.log(len(ll))).sum())
        assert abs(lppd - lppd_lin) < 0.005 * abs(lppd_lin)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loo = az.loo(as_arviz_log_likelihood(idata), pointwise=True)
        assert (np.asarray(loo.pareto_k) < 0.7).mean() >= 0.9
        assert abs(elpd(loo) - lppd_lin) < 0.05 * abs(lppd_lin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = az.compare({f"S={S}": as_arviz_log_likelihood(e) for S, e in exports.items()})
    assert set(cmp.index) == {"S=20", "S=10"}
    assert not cmp[compare_columns()].isna().any().any()
