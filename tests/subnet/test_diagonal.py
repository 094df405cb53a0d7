"""DiagonalLaplace against a dense torch.func reference: precision, predictive, draws, exports."""

from unittest.mock import patch

import pytest
import torch
from pyro.infer import Predictive
from subnet_models import dense_precision, mlp, mlp_data, mlp_model, random_loc, unpack
from torch.func import jacrev

from pyro_subnet import DiagonalLaplace, DiagonalLaplacePosterior, SubnetworkLaplace, SubnetworkLaplacePosterior

WEIGHTS = ["W1", "b1", "W2", "b2"]  # sigma stays at the MAP


def _fit(**kw):
    x, y = mlp_data(n=14, seed=3)
    guide = DiagonalLaplace(mlp_model, **kw)
    guide(x, y)
    random_loc(guide, seed=4, scale=0.6)
    return guide, x, y


def test_precision_and_predictive_match_dense_reference():
    guide, x, y = _fit(selection_sites=WEIGHTS, prior_scale=0.7)
    post = guide.laplace_approximation(x, y)
    assert isinstance(post, DiagonalLaplacePosterior)
    u = guide.loc.detach()
    D = u.numel()
    assert post.subnetwork_indices.tolist() == list(range(D - 1))
    G, P = dense_precision(u, x, 2, "normal")
    lam = (G + 0.7 * P).diagonal()[: D - 1]
    assert torch.allclose(post.precision_diagonal, lam, rtol=1e-10)
    assert torch.allclose(post.covariance, torch.diag(1 / lam), rtol=1e-10)

    xt = torch.randn(5, 2)
    J = jacrev(lambda u: mlp(xt, *unpack(u, 2)[:4]))(u)[..., : D - 1]  # [5, 2, D-1]
    sigma = 0.1 + 1.9 * torch.sigmoid(u[-1])
    var = (J.pow(2) / lam).sum(-1) + sigma**2
    pred = post.predict(xt)["obs"]
    assert torch.allclose(pred.mean, mlp(xt, *unpack(u, 2)[:4]), atol=1e-12)
    assert torch.allclose(pred.variance, var, rtol=1e-10)


def test_same_as_a_full_posterior_with_the_diagonal_precision():
    """The diagonal posterior is the full-covariance one with its off-diagonal terms dropped."""
    guide, x, y = _fit()
    diag = guide.laplace_approximation(x, y)
    full = SubnetworkLaplace(mlp_model, subnetwork_size=1.0)
    full(x, y)
    with torch.no_grad():
        full.loc.copy_(guide.loc)
    ref = full.laplace_approximation(x, y)
    assert torch.equal(ref.subnetwork_indices, diag.subnetwork_indices)
    assert torch.allclose(ref.precision.diagonal(), diag.precision_diagonal, rtol=1e-10)
    # with sigma at the MAP the predictive is closed form; the parent's dense code path
    # (precision_tril as a diagonal matrix) gives the same answer as the diagonal one
    guide.selection_sites = WEIGHTS
    diag = guide.laplace_approximation(x, y)
    xt = torch.randn(3, 2)
    with patch.object(DiagonalLaplacePosterior, "_whiten", SubnetworkLaplacePosterior._whiten), \
            patch.object(DiagonalLaplacePosterior, "_offset_draws", SubnetworkLaplacePosterior._offset_draws):
        expect = diag.predict(xt)["obs"]
    got = diag.predict(xt)["obs"]
    assert isinstance(got, torch.distributions.Independent)
    assert torch.allclose(got.variance, expect.variance, rtol=1e-10)


def test_draws_density_predictive_and_arviz():
    guide, x, y = _fit(selection_sites=["W2", "b2"])
    post = guide.laplace_approximation(x, y)
    d = post.get_posterior()
    idx, sd = post.subnetwork_indices, post.variance.sqrt()
    draws = d.sample((4000,))
    rest = torch.ones(draws.shape[-1], dtype=torch.bool)
    rest[idx] = False
    assert (draws[:, rest] == post.loc[rest]).all()
    assert ((draws[:, idx].std(0) / sd - 1).abs() < 0.08).all()
    v = draws[:3]
    ref = torch.distributions.Normal(post.loc[idx], sd).log_prob(v[:, idx]).sum(-1)
    assert torch.allclose(d.log_prob(v), ref, rtol=1e-12)
    q = post.quantiles([0.5])
    assert torch.allclose(q["W2"][0], guide.median()["W2"])
    samples = Predictive(mlp_model, guide=post, num_samples=7)(x)
    assert samples["obs"].shape == (7, 14, 2)
    pytest.importorskip("arviz")
    from pyro_subnet import to_inference_data

    idata = to_inference_data(post, x, y, num_samples=5)
    assert idata.conditional_log_likelihood["obs"].shape[:2] == (1, 5)


def test_errors():
    guide, x, y = _fit(selection_sites=["nope"])
    with pytest.raises(ValueError, match="unknown latent sites"):
        guide.laplace_approximation(x, y)
    with pytest.raises(TypeError, match="selection_sites"):
        DiagonalLaplace(mlp_model, selection_sites="W1")
