"""pyro_subnet.kfold against the closed-form K-fold cross-validation of Bayesian linear regression
(the linearized predictive of a full-subnetwork Laplace posterior is its exact predictive there),
and its result in az.compare beside a PSIS-LOO result."""

import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import pyro_arviz
from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace, kfold, loo
from subnet_models import SIGMA, linreg
from subnet_models import linreg_posterior as _exact_mean_precision

az = pytest.importorskip("arviz")


def _exact_posterior(x, y):
    mean, precision = _exact_mean_precision(x, y)
    return mean, torch.linalg.inv(precision)


def fit(x, y):
    guide = SubnetworkLaplace(linreg, subnetwork_size=1.0)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(_exact_posterior(x, y)[0])
    return guide.laplace_approximation(x, y)


def _elpd(result):
    if pyro_arviz.arviz_generation() == 0:
        return float(result["elpd_loo"]), np.asarray(result["loo_i"])
    return float(result.elpd), np.asarray(result.elpd_i)


def _p_loo(result):
    return float(result["p_loo"] if pyro_arviz.arviz_generation() == 0 else result.p)


@pytest.mark.parametrize("folds", [4, 20])
def test_kfold_is_the_closed_form_kfold(folds):
    torch.set_default_dtype(torch.float64)
    try:
        n = 20
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, 3, generator=g)
        y = x @ torch.tensor([1.0, -0.5, 0.3]) + SIGMA * torch.randn(n, generator=g)
        pyro.set_rng_seed(0)
        result = kfold(fit, x, y, folds=folds, num_samples=4000, seed=3)
        elpd, elpd_i = _elpd(result)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(3))
        exact = np.zeros(n)
        for f in range(folds):
            held = order[f::folds]
            keep = torch.ones(n, dtype=torch.bool)
            keep[held] = False
            mean, cov = _exact_posterior(x[keep], y[keep])
            for i in held.tolist():
                exact[i] = float(dist.Normal(x[i] @ mean, (x[i] @ cov @ x[i] + SIGMA**2).sqrt()).log_prob(y[i]))
        assert np.abs(elpd_i - exact).max() < 0.02
        assert abs(elpd - exact.sum()) < 0.05
        # p_loo as ArviZ has it: the lppd of the posterior on all the points, minus the elpd
        mean, cov = _exact_posterior(x, y)
        lppd = float(dist.Normal(x @ mean, ((x @ cov * x).sum(-1) + SIGMA**2).sqrt()).log_prob(y).sum())
        assert abs(_p_loo(result) - (lppd - exact.sum())) < 0.05
        assert lppd - exact.sum() > 1.0  # three weights fitted to 15-19 points: well away from 0
        if folds == 4:  # fewer training points per fit: a lower elpd than leave-one-out's, by more than the noise
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SubnetLOOWarning)
                shifted = loo(fit(x, y), x, y, num_samples=2000)
            assert _elpd(shifted)[0] - elpd > 0.5
            cv = kfold(fit, x, y, folds=4, num_samples=500, posterior=fit(x, y))
            table = az.compare({"kfold": cv, "loo": shifted})
            assert set(table.index) == {"kfold", "loo"}
            assert np.isfinite(table["p_loo" if pyro_arviz.arviz_generation() == 0 else "p"]).all()
    finally:
        torch.set_default_dtype(torch.float32)


def test_kfold_refuses_what_it_cannot_split():
    x, y = torch.randn(10, 3), torch.randn(10)
    with pytest.raises(ValueError, match="folds must be"):
        kfold(fit, x, y, folds=1)
    with pytest.raises(TypeError, match="fit must be a function"):
        kfold("fit", x, y)
    with pytest.raises(ValueError, match="num_samples must be"):
        kfold(fit, x, y, num_samples=0)
    with pytest.raises(TypeError, match="posterior must be the SubnetworkLaplacePosterior fitted on all the data"):
        kfold(fit, x, y, posterior=SubnetworkLaplace(linreg, subnetwork_size=1.0))
    with pytest.raises(ValueError, match="num_data="):
        kfold(fit, torch.randn(10, 3), torch.randn(12))
