"""pyro_subnet.loo: PSIS-LOO with the importance ratios corrected for drawing from the Laplace
Gaussian, against a dense float64 computation of the same estimator on the same draws and the
closed-form exact LOO of Bayesian linear regression; and the densities the export keeps."""

import math
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_arviz
from tests.arviz.generation import compare_columns
from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace, loo, to_inference_data
from pyro_subnet.arviz import as_arviz_log_likelihood
from pyro_subnet.cross_validation import approximation_pareto_k

az = pytest.importorskip("arviz")

SIGMA = 0.5
N, P, M = 20, 3, 2000


def linreg_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, P, generator=g)
    return x, x @ torch.tensor([1.0, -0.5, 0.3]) + SIGMA * torch.randn(N, generator=g)


def _posterior(x, y, c):
    """Mean and covariance of w under the prior N(0, I / c)."""
    cov = torch.linalg.inv(x.T @ x / SIGMA**2 + c * torch.eye(x.shape[1]))
    return cov @ x.T @ y / SIGMA**2, cov


def exact_loo(x, y, c):
    r"""Closed form: :math:`\sum_i \log p(y_i \mid y_{-i})`, each a Gaussian posterior predictive."""
    total = 0.0
    for i in range(len(y)):
        keep = torch.arange(len(y)) != i
        mean, cov = _posterior(x[keep], y[keep], c)
        total += float(dist.Normal(x[i] @ mean, (x[i] @ cov @ x[i] + SIGMA**2).sqrt()).log_prob(y[i]))
    return total


def _laplace(x, y, c=1.0, widen=1.0, shift=0.0):
    """The Laplace posterior at the model's MAP (exact for c = 1), its Gaussian widened by
    ``widen`` and moved by ``shift`` marginal standard deviations: q is then not the posterior."""
    guide = SubnetworkLaplace(linreg_model, subnetwork_size=1.0, prior_scale=c)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(_posterior(x, y, 1.0)[0])
    post = guide.laplace_approximation(x, y)
    with torch.no_grad():
        post.precision_tril.div_(widen)
        post.loc.add_(shift * post.covariance.diagonal().sqrt())
    return post


def _pointwise(result):
    if pyro_arviz.arviz_generation() == 0:
        return np.asarray(result["loo_i"]), np.asarray(result["pareto_k"]), float(result["elpd_loo"])
    return np.asarray(result.elpd_i), np.asarray(result.pareto_k), float(result.elpd)


def _psis(log_ratios):
    """ArviZ's Pareto smoothing of ``log_ratios`` ``[points, draws]``: normalized log weights, k."""
    if pyro_arviz.arviz_generation() == 0:
        return az.psislw(log_ratios, reff=1.0)
    from arviz_stats.base import array_stats

    return array_stats.psislw(-log_ratios, r_eff=1.0, axis=-1)  # arviz-stats negates its input


def dense_reference(x, y, w, c, mean_q, cov_q):
    """
    The corrected estimator from closed-form densities at the draws ``w``: log ratios
    ``log p(w, y) - log q(w) - log p(y_i | w)``, ArviZ's smoothing, ``log sum_m w_im p(y_i | w_m)``;
    and the Monte Carlo standard error of its sum (delta method on the raw ratios, all points
    together since they share the draws).
    """
    ll = dist.Normal(w @ x.T, SIGMA).log_prob(y)  # [M, N]
    lp = c * dist.Normal(0.0, 1.0).log_prob(w).sum(-1) + ll.sum(-1)
    lq = dist.MultivariateNormal(mean_q, cov_q).log_prob(w)
    log_ratios = ((lp - lq)[:, None] - ll).T
    lw, k = _psis(log_ratios.numpy())
    elpd_i = torch.logsumexp(torch.as_tensor(lw) + ll.T, -1)
    b = (lp - lq - (lp - lq).max()).exp()[:, None]
    a = b / ll.exp()
    influence = ((b - b.mean(0)) / b.mean(0) - (a - a.mean(0)) / a.mean(0)).sum(1)
    return elpd_i.numpy(), np.asarray(k), lp, lq, float(influence.std()) / math.sqrt(len(w))


@pytest.mark.parametrize("c, widen, shift", [(1.0, 1.0, 0.0), (5.0, 1.0, 0.0), (1.0, 1.5, 0.0), (1.0, 1.0, 0.7)],
                         ids=["exact", "prior_scale", "wide_q", "shifted_q"])
def test_corrected_loo_is_the_dense_estimator_and_the_exact_loo(c, widen, shift):
    x, y = _data()
    post = _laplace(x, y, c, widen, shift)
    idata = to_inference_data(post, x, y, num_samples=M)
    w = torch.as_tensor(idata.posterior["w"].values[0])
    elpd_ref, k_ref, lp, lq, mc_se = dense_reference(x, y, w, c, post.loc, post.covariance)
    # what the export keeps is the closed-form log joint (prior scaled by c) and q's density
    stats = idata["sample_stats"]
    assert np.allclose(stats["lp"].values[0], lp.numpy(), rtol=0, atol=1e-9)
    assert np.allclose(stats["log_q"].values[0], lq.numpy(), rtol=0, atol=1e-9)

    with warnings.catch_warnings():
        warnings.simplefilter("error", SubnetLOOWarning)
        result = loo(idata)
    elpd_i, k, elpd = _pointwise(result)
    assert np.allclose(elpd_i, elpd_ref, rtol=0, atol=1e-6)
    assert np.allclose(k, k_ref, rtol=0, atol=1e-6)
    # against the exact LOO of the model with prior N(0, I / c), within Monte Carlo error
    exact = exact_loo(x, y, c)
    assert abs(elpd - exact) < 4 * mc_se
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, _, plain = _pointwise(az.loo(as_arviz_log_likelihood(idata), pointwise=True))
    if widen != 1.0 or shift != 0.0:  # q is not the posterior: the correction is not a no-op
        assert abs(plain - exact) > 5 * mc_se
    elif c == 1.0:  # q is the posterior: log p - log q is constant and the correction changes nothing
        assert abs(plain - elpd) < 1e-8


def hetero_model(x, y=None):
    """A noise scale with a constrained prior (a log-det-Jacobian) and a factor (never scaled)."""
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(-0.5, 0.5))
    pyro.factor("ridge", -0.3 * (w**2).sum())
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, sigma), obs=y)


@pytest.mark.parametrize("predictive", ["linearized", "network"])
def test_log_joint_has_the_scaled_prior_jacobian_and_factor(predictive):
    x, y = _data()
    c = 2.5
    guide = SubnetworkLaplace(hetero_model, subnetwork_size=1.0, prior_scale=c)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(torch.tensor([0.9, -0.4, 0.3, math.log(0.5)]))
    post = guide.laplace_approximation(x, y)
    idata = to_inference_data(post, x, y, num_samples=50, predictive=predictive)
    w = torch.as_tensor(idata.posterior["w"].values[0])
    sigma = torch.as_tensor(idata.posterior["sigma"].values[0])
    prior = dist.Normal(0.0, 1.0).log_prob(w).sum(-1) + dist.LogNormal(-0.5, 0.5).log_prob(sigma)
    expected = c * (prior + sigma.log()) - 0.3 * (w**2).sum(-1)  # log sigma: d sigma / d log sigma
    ll = torch.as_tensor(idata.conditional_log_likelihood["obs"].values[0]).sum(-1)
    lp = torch.as_tensor(idata["sample_stats"]["lp"].values[0])
    assert torch.allclose(lp - ll, expected, rtol=0, atol=1e-9)
    u = torch.cat([w, sigma.log()[:, None]], -1)
    lq = dist.MultivariateNormal(post.loc, post.covariance).log_prob(u)
    assert torch.allclose(torch.as_tensor(idata["sample_stats"]["log_q"].values[0]), lq, rtol=0, atol=1e-9)


@pytest.mark.filterwarnings("ignore:Estimated shape parameter")  # ArviZ's own, on the uncorrected LOO
def test_warnings_and_arguments():
    x, y = _data()
    exact = _laplace(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SubnetLOOWarning)
        result = loo(exact, x, y, num_samples=1000)  # from the posterior: exported, then corrected
    assert bool(result["approx_posterior"] if pyro_arviz.arviz_generation() == 0 else result.approx_posterior)

    # q four times narrower than the posterior: the ratios p / q have heavy tails everywhere
    narrow = to_inference_data(_laplace(x, y, widen=0.25), x, y, num_samples=1000)
    with pytest.warns(SubnetLOOWarning, match="Pareto k above .* after the correction") as record:
        loo(narrow)
    mine = [r for r in record if issubclass(r.category, SubnetLOOWarning)]
    assert len(mine) == 1 and "smaller subnetwork_size" in str(mine[0].message)
    assert "q is too far from the posterior" in str(mine[0].message)
    # the diagnostic of q itself: heavy-tailed p / q when q is narrower, bounded when it is wider
    assert approximation_pareto_k(narrow) > 0.7
    assert approximation_pareto_k(to_inference_data(_laplace(x, y, widen=1.5), x, y, num_samples=1000)) < 0.5

    # an export without the densities: says it cannot correct, and gives ArviZ's plain LOO
    bare = to_inference_data(exact, x, y, num_samples=500, log_densities=False)
    assert "sample_stats" not in pyro_arviz.groups_of(bare) and approximation_pareto_k(bare) is None
    with pytest.warns(SubnetLOOWarning, match="uncorrected"):
        uncorrected = loo(bare)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _pointwise(uncorrected)[2] == pytest.approx(
            _pointwise(az.loo(as_arviz_log_likelihood(bare), pointwise=True))[2], abs=1e-12)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranked = az.compare({"corrected": result, "uncorrected": uncorrected})
    assert set(ranked.index) == {"corrected", "uncorrected"}
    assert not ranked[compare_columns()].isna().any().any()

    with pytest.raises(TypeError, match="model arguments only with a SubnetworkLaplacePosterior"):
        loo(bare, x, y)
    with pytest.raises(ValueError, match="var_name='nope' is not an observed site of the log_likelihood group"):
        loo(to_inference_data(exact, x, y, num_samples=20), var_name="nope")
