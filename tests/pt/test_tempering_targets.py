"""The exact answers of benchmarks/vs_tempering.py's targets: the closed forms against the
posterior written out by hand, the Gauss-Hermite evidence against a full grid, the labellings'
shares against exact posterior draws, and the Pyro models against the numpy densities."""

import math
import os
import sys

import numpy as np
import pytest
from scipy import stats

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import vs_tempering  # noqa: E402
from _tempering_targets import target  # noqa: E402

DRAWS = 200_000


@pytest.fixture(scope="module")
def specs():
    return vs_tempering.specs()


def posterior_draws(t, rng):
    """Exact posterior draws of a closed-form target (module docstring of the targets)."""
    s2, v2 = t.prior_scale ** 2, t.sigma ** 2
    tau = math.sqrt(s2 * v2 / (s2 + v2))
    if t.kind == "gaussians":
        comp = rng.choice(len(t.weights), size=DRAWS, p=t.weights)
        return t.centres[comp] + tau * rng.standard_normal((DRAWS, t.dim))
    c = t.offset * s2 / (s2 + v2)
    up = rng.random((DRAWS, t.dim)) < t.weights
    return np.where(up, c, -c) + tau * rng.standard_normal((DRAWS, t.dim))


def posterior_log_density(t, x):
    s2, v2 = t.prior_scale ** 2, t.sigma ** 2
    tau = math.sqrt(s2 * v2 / (s2 + v2))
    if t.kind == "gaussians":
        terms = [math.log(w) + stats.norm.logpdf(x, m, tau).sum(-1)
                 for w, m in zip(t.weights, t.centres)]
        return np.logaddexp.reduce(terms, axis=0)
    c = t.offset * s2 / (s2 + v2)
    return np.logaddexp(np.log(t.weights) + stats.norm.logpdf(x, c, tau),
                        np.log1p(-t.weights) + stats.norm.logpdf(x, -c, tau)).sum(-1)


@pytest.mark.parametrize("name", ["gauss10", "signs20", "gauss100"])
def test_closed_forms(specs, name):
    t = target(specs[name])
    rng = np.random.default_rng(0)
    draws = posterior_draws(t, rng)
    # log prior + log likelihood - log Z is the posterior's log density, exactly
    x = draws[:20]
    np.testing.assert_allclose(t.log_joint(x) - t.log_z(), posterior_log_density(t, x),
                               atol=1e-8)
    # exact draws meet the exact shares within Monte Carlo noise (4 sd of the largest share)
    assert t.share_error(draws) < 4 * math.sqrt(0.25 / DRAWS)
    # prior draws are in no Gaussian mode, or a coordinate's sign is a coin
    assert t.share_error(t.prior_draws(rng, 1000)) > 0.15


@pytest.mark.parametrize("name", ["mix2", "mix3"])
def test_mixture_evidence(specs, name):
    t = target(specs[name])
    assert abs(t.gauss_hermite_log_z(30) - t.gauss_hermite_log_z(40)) < 1e-8
    if name == "mix2":
        assert abs(t.log_z() - t.grid_log_z(step=0.1)) < 1e-6
    orderings = t.indicators(np.array([[0.0, 1.0, 2.0][:t.k], [2.0, 1.0, 0.0][:t.k]]))
    assert orderings.sum(1).tolist() == [1, 1] and not (orderings[0] == orderings[1]).all()


@pytest.mark.parametrize("name", vs_tempering.TARGETS)
def test_pyro_models_match(specs, name):
    t = target(specs[name])
    vs_tempering.check_model(t, *vs_tempering.pyro_model(t, specs[name]))
