"""Items (a)-(c): the subnetwork precision against exact and dense references."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO
from subnet_models import dense_precision, mlp_data, mlp_model, random_loc

from pyro_subnet import SubnetworkLaplace
from pyro_subnet import curvature, prior


def linreg_model(x, y=None, alpha=2.0, sigma=0.5):
    w = pyro.sample("w", dist.Normal(0.0, alpha**-0.5).expand([x.shape[1]]).to_event(1))
    b = pyro.sample("b", dist.Normal(0.0, 2.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w + b, sigma), obs=y)


def test_conjugate_linear_regression():
    n, p, alpha, sigma = 40, 3, 2.0, 0.5
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, p, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 + sigma * torch.randn(n, generator=g)
    X = torch.cat([x, torch.ones(n, 1)], 1)
    prec = X.T @ X / sigma**2 + torch.diag(torch.tensor([alpha] * p + [0.25]))
    mean = torch.linalg.solve(prec, X.T @ y / sigma**2)

    guide = SubnetworkLaplace(linreg_model, subnetwork_size=1.0)
    svi = SVI(linreg_model, guide, pyro.optim.Adam({"lr": 0.05}), Trace_ELBO())
    for _ in range(1500):
        svi.step(x, y)
    post = guide.laplace_approximation(x, y)

    assert torch.allclose(post.loc, mean, atol=1e-4)  # the MAP phase finds the posterior mean
    assert torch.allclose(post.precision, prec, rtol=1e-12, atol=1e-10)
    assert torch.allclose(post.covariance, torch.linalg.inv(prec), rtol=1e-10, atol=1e-12)
    assert post.subnetwork == [("w", 0), ("w", 1), ("w", 2), ("b", 0)]

    # the linearized predictive of a linear-Gaussian model is the exact posterior predictive
    xt = torch.randn(5, p, generator=g)
    Xt = torch.cat([xt, torch.ones(5, 1)], 1)
    pred = post.predict(xt)["obs"]
    var = (Xt @ torch.linalg.inv(prec) * Xt).sum(-1) + sigma**2
    assert torch.allclose(pred.mean, Xt @ post.loc, atol=1e-12)
    assert torch.allclose(pred.variance, var, rtol=1e-10)


@pytest.mark.parametrize("likelihood", ["normal", "categorical"])
def test_full_network_equals_dense_linearized_laplace(likelihood):
    k = 2 if likelihood == "normal" else 3
    x, y = mlp_data(n=12, k=k, likelihood=likelihood)
    guide = SubnetworkLaplace(mlp_model, subnetwork_size=1.0, chunk_size=5)
    guide(x, y, k=k, likelihood=likelihood)
    random_loc(guide)
    post = guide.laplace_approximation(x, y, k=k, likelihood=likelihood)
    G, P = dense_precision(guide.loc.detach(), x, k, likelihood)
    assert post.subnetwork_indices.tolist() == list(range(len(G)))
    assert torch.allclose(post.precision, G + P, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("likelihood", ["normal", "categorical"])
def test_subnetwork_ggn_is_dense_submatrix(likelihood):
    k = 2 if likelihood == "normal" else 3
    x, y = mlp_data(n=15, k=k, likelihood=likelihood, seed=3)
    guide = SubnetworkLaplace(mlp_model, subnetwork_size=1.0, chunk_size=4)
    guide(x, y, k=k, likelihood=likelihood)
    random_loc(guide, seed=2)
    u = guide.loc.detach()
    D = u.numel()
    idx = torch.randperm(D, generator=torch.Generator().manual_seed(4))[:9].sort().values
    if likelihood == "normal":
        idx[-1] = D - 1  # include the noise scale, whose prior Hessian is all log|det J|
    G, P = dense_precision(u, x, k, likelihood)

    guide.selection = idx
    post = guide.laplace_approximation(x, y, k=k, likelihood=likelihood)
    sub = (G + P)[idx][:, idx]
    assert torch.allclose(post.precision, sub, rtol=1e-10, atol=1e-10)

    # the same from explicit minibatches, and without chunking
    batches = [((x[:7], y[:7]), {"k": k, "likelihood": likelihood}), ((x[7:], y[7:]), {"k": k, "likelihood": likelihood})]
    assert torch.allclose(guide.laplace_approximation_batched(batches).precision, sub, rtol=1e-10, atol=1e-10)
    guide.chunk_size = 1000
    assert torch.allclose(guide.laplace_approximation(x, y, k=k, likelihood=likelihood).precision, sub, rtol=1e-10)

    # the GGN diagonal over all D coordinates
    latent = curvature.LatentModel(guide, guide._raw_model, ["obs"], [], {"mc_fisher": True, "num_mc": 16})
    diag = curvature.ggn_diagonal(latent, u, [((x, y), {"k": k, "likelihood": likelihood})])
    assert torch.allclose(diag, G.diagonal(), rtol=1e-10, atol=1e-12)


def hier_model(x, y=None):
    tau = pyro.sample("tau", dist.LogNormal(0.0, 1.0))
    w = pyro.sample("w", dist.Normal(0.0, tau).expand([3]).to_event(1))
    c = pyro.sample("c", dist.Beta(2.0, 3.0))
    z = pyro.sample("z", dist.Gamma(2.0, 1.0).expand([2]).to_event(1))  # separable: diagonal rows
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Bernoulli(logits=x @ w * c + z.sum()), obs=y)
    pyro.factor("penalty", -0.5 * (w**2).sum() * c)


def test_prior_hessian_hierarchical_with_factor():
    from torch.func import hessian

    x = torch.randn(10, 3)
    y = torch.bernoulli(torch.full((10,), 0.5))
    guide = SubnetworkLaplace(hier_model, subnetwork_size=1.0)
    guide(x, y)
    random_loc(guide, scale=0.5)
    u = guide.loc.detach()

    def log_prior(u):  # order: tau, w, c, z
        tau, w, c, z = u[0].exp(), u[1:4], torch.sigmoid(u[4]), u[5:7].exp()
        lp = dist.LogNormal(0.0, 1.0).log_prob(tau) + u[0]
        lp = lp + dist.Normal(0.0, tau).log_prob(w).sum()
        lp = lp + dist.Beta(2.0, 3.0).log_prob(c) + torch.log(c) + torch.log1p(-c)
        return lp + dist.Gamma(2.0, 1.0).log_prob(z).sum() + u[5:7].sum()

    def factor(u):
        return -0.5 * (u[1:4] ** 2).sum() * torch.sigmoid(u[4])

    P, Q = -hessian(log_prior)(u), -hessian(factor)(u)
    # the factor is a likelihood term: prior_scale multiplies P only
    latent = curvature.LatentModel(guide, guide._raw_model, guide._observed, guide._factors, {})
    for batches in ([((x, y), {})], [((x[:4], y[:4]), {}), ((x[4:], y[4:]), {})]):  # factor once per call
        Qb = Q * len(batches)
        assert torch.allclose(prior.prior_hessian(latent, u, torch.arange(7), batches, scale=3.0), 3 * P + Qb,
                              rtol=1e-10)
        assert torch.allclose(prior.prior_hessian_diagonal(latent, u, batches, scale=3.0),
                              (3 * P + Qb).diagonal(), rtol=1e-10)
    P = P + Q
    latent = curvature.LatentModel(guide, guide._raw_model, guide._observed, guide._factors, {"mc_fisher": True, "num_mc": 4})
    assert guide._factors == ["penalty"]
    batches = [((x, y), {})]
    for idx in [torch.tensor([0, 2, 4]), torch.tensor([1, 5]), torch.tensor([2, 4, 5, 6]), torch.arange(7)]:
        assert torch.allclose(prior.prior_hessian(latent, u, idx, batches), P[idx][:, idx], rtol=1e-10)
    assert prior._separable(latent, u, torch.arange(7), (x, y), {}).tolist() == [False] * 5 + [True] * 2
    # the per-site probes are exact for priors that do not couple elements within a site
    assert torch.allclose(prior.prior_hessian_diagonal(latent, u, batches), P.diagonal(), rtol=1e-10)


def styles_model(x, y=None):
    W1 = pyro.sample("W1", dist.Normal(0.0, 1.0).expand([6, 3]).to_event(2))
    W2 = pyro.sample("W2", dist.Normal(0.0, 1.0).expand([6, 6]).to_event(2))
    W3 = pyro.sample("W3", dist.Normal(0.0, 1.0).expand([2, 6]).to_event(2))
    h = torch.tanh(torch.nn.functional.linear(x, W1))
    h = torch.tanh((W2 @ h.T).T) + torch.matmul(h, W2.t()) * W2.sum()  # left, right and a dense use
    f = h @ W3.transpose(0, 1)
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(f, 0.5).to_event(1), obs=y)


def test_sparse_matrix_path_equals_dense_path():
    """Subnetwork entries of weight matrices enter products through SubnetMatrix (O(S) Jacobian
    rows); the result must be the same as with dense index_copy, for every way of multiplying."""
    from pyro_subnet.subnet_tensor import SubnetMatrix

    x, y = torch.randn(9, 3), torch.randn(9, 2)
    guide = SubnetworkLaplace(styles_model, 1.0)
    guide(x, y)
    random_loc(guide, seed=4, scale=0.5)
    u = guide.loc.detach()
    idx = torch.tensor([1, 7, 20, 25, 40, 41, 55, 60, 65])  # a few entries of each matrix
    latent = curvature.LatentModel(guide, guide._raw_model, ["obs"], [], {"mc_fisher": True, "num_mc": 4})
    values, _ = latent.values(u, idx, u[idx].clone())
    assert all(isinstance(v, SubnetMatrix) for v in values.values())
    batches = [((x, y), {})]
    fast = curvature.ggn(latent, u, idx, batches) + prior.prior_hessian(latent, u, idx, batches)
    latent.use_subnet_matrix = False
    slow = curvature.ggn(latent, u, idx, batches) + prior.prior_hessian(latent, u, idx, batches)
    assert torch.allclose(fast, slow, rtol=1e-12, atol=1e-12)
    assert fast.abs().min() >= 0 and (fast != 0).sum() > len(idx)
