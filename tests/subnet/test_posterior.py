"""Item (d): the posterior guide draws from N(u_S, Sigma_S), holds the rest at the MAP, and its
log_prob is the multivariate normal density; plus median, quantiles and Predictive."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Predictive
from subnet_models import mlp_data, mlp_model, random_loc

from pyro_subnet import SubnetworkLaplace, SubnetworkLaplacePosterior


@pytest.fixture
def fitted():
    x, y = mlp_data(n=20)
    guide = SubnetworkLaplace(mlp_model, subnetwork_size=6, selection="wasserstein")
    guide(x, y)
    random_loc(guide, seed=5, scale=0.5)
    return guide.laplace_approximation(x, y), x, y


def test_samples_and_log_prob(fitted):
    post, x, y = fitted
    assert isinstance(post, SubnetworkLaplacePosterior)
    idx, loc, cov = post.subnetwork_indices, post.loc, post.covariance
    assert idx.dtype == torch.long and len(idx) == 6 and cov.shape == (6, 6)
    assert torch.allclose(cov @ post.precision, torch.eye(6), atol=1e-9)

    n = 40000
    z = post.get_posterior().sample((n,))
    rest = torch.ones(loc.numel(), dtype=torch.bool)
    rest[idx] = False
    assert torch.equal(z[:, rest], loc[rest].expand(n, -1))
    zs = z[:, idx]
    # sample mean and covariance within 5 Monte Carlo standard errors
    sd = cov.diagonal().sqrt()
    assert ((zs.mean(0) - loc[idx]).abs() < 5 * sd / math.sqrt(n)).all()
    emp = torch.cov(zs.T)
    se = ((cov.diagonal()[:, None] * cov.diagonal()[None, :] + cov**2) / n).sqrt()
    assert ((emp - cov).abs() < 5 * se).all()

    mvn = torch.distributions.MultivariateNormal(loc[idx], covariance_matrix=cov)
    assert torch.allclose(post.get_posterior().log_prob(z[:50]), mvn.log_prob(zs[:50]), rtol=1e-10)


def test_median_quantiles_and_predictive(fitted):
    post, x, y = fitted
    med = post.median()
    assert set(med) == {"W1", "b1", "W2", "b2", "sigma"}
    sig_u = post.loc[-1]
    assert torch.allclose(med["sigma"], 0.1 + 1.9 * torch.sigmoid(sig_u))

    q = post.quantiles([0.05, 0.5, 0.95])
    flat = torch.cat([q["W1"].reshape(3, -1), q["b1"], q["W2"].reshape(3, -1), q["b2"]], -1)
    sd = torch.zeros_like(post.loc)
    sd[post.subnetwork_indices] = post.covariance.diagonal().sqrt()
    z = 1.6448536269514722
    assert torch.allclose(flat[0], (post.loc - z * sd)[:-1], atol=1e-10)
    assert torch.allclose(flat[2], (post.loc + z * sd)[:-1], atol=1e-10)
    assert torch.allclose(flat[1], post.loc[:-1])

    samples = Predictive(mlp_model, guide=post, num_samples=7)(x)
    assert samples["obs"].shape == (7, 20, 2)
    # Predictive pads latent sites with the plate dims, as for Pyro's own autoguides
    W1 = samples["W1"].reshape(7, 10)
    in_w1 = post.subnetwork_indices[post.subnetwork_indices < 10]
    fixed = torch.ones(10, dtype=torch.bool)
    fixed[in_w1] = False
    assert torch.equal(W1[:, fixed], post.loc[:10][fixed].expand(7, -1))


def vector_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal((w.unsqueeze(-2) * x).sum(-1), 0.5), obs=y)


def test_parallel_predictive_and_map_guide_quantiles():
    x, y = torch.randn(6, 2), torch.randn(6)
    guide = SubnetworkLaplace(vector_model, subnetwork_size=1)
    guide(x, y)
    random_loc(guide)  # a trained guide: laplace_approximation refuses the initial point
    q = guide.quantiles([0.1, 0.9])  # the MAP guide is a point mass
    assert torch.equal(q["w"][0], guide.median()["w"]) and torch.equal(q["w"][1], guide.median()["w"])
    post = guide.laplace_approximation(x, y)
    s = Predictive(vector_model, guide=post, num_samples=5000, parallel=True)(x)
    w = s["w"].reshape(5000, 2)
    i = int(post.subnetwork_indices)
    assert torch.equal(w[:, 1 - i], post.loc[1 - i].expand(5000))
    assert abs(w[:, i].var() / post.covariance[0, 0] - 1) < 5 * (2 / 5000) ** 0.5
    assert s["obs"].shape == (5000, 6)
