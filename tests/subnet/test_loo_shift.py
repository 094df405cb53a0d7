"""pyro_subnet.loo with the MAP moved without each point (pyro_subnet.jackknife): the steps and the
ratios against the closed forms of Bayesian linear regression, the elpd against its exact
leave-one-out and, on a logistic regression small enough to refit, against brute-force
leave-one-out with a refit per point. The estimate without the step (map_shift=False) must fail
each comparison: it is what a dropped step would give."""

import math
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace, loo
from pyro_subnet.jackknife import map_shifts
from pyro_subnet.predictive import linearized_outputs
from pyro_subnet.reweighting import shifted_ratios
from subnet_models import SIGMA, linreg, linreg_posterior
from tests.arviz.generation import elpd_parts

pytest.importorskip("arviz")


def test_linear_gaussian_steps_and_elpd_are_exact():
    """S = 2 of 6 weights: the step is the exact leave-one-out MAP, and the elpd is the exact
    leave-one-out of the subnetwork posterior whose other weights sit at that MAP."""
    n, p = 40, 6
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, p, generator=g)
    y = x @ torch.randn(p, generator=g) + SIGMA * torch.randn(n, generator=g)
    guide = SubnetworkLaplace(linreg, subnetwork_size=2, selection=torch.tensor([0, 5]))
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(linreg_posterior(x, y)[0])
    post = guide.laplace_approximation(x, y)
    idx = post.subnetwork_indices
    shifts = map_shifts(post, (x, y), {}, "obs")
    assert shifts.curvature == "full GGN"
    assert float(shifts.step_ratio.max()) < 1e-8  # a quadratic objective: one step lands
    exact = []
    for i in range(n):
        keep = torch.arange(n) != i
        mean, H = linreg_posterior(x[keep], y[keep])
        assert torch.allclose(shifts.delta[:, i], mean - post.loc, atol=1e-10, rtol=0)
        var = SIGMA**2 + x[i, idx] @ torch.linalg.solve(H[idx][:, idx], x[i, idx])
        exact.append(float(dist.Normal(x[i] @ mean, var.sqrt()).log_prob(y[i])))
    exact = np.array(exact)
    # the draws moved to each leave-one-out Gaussian are its exact draws: every ratio is the same
    _, log_ratios, _ = shifted_ratios(post, (x, y), {}, shifts, 200)
    assert float(log_ratios.std(1).max()) < 1e-8

    pyro.set_rng_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SubnetLOOWarning)
        elpd, _, elpd_i = elpd_parts(loo(post, x, y, num_samples=2000))
    # what is left is the Monte Carlo error of each point's predictive integral (0.008 here)
    assert abs(elpd - exact.sum()) < 0.05, (elpd, exact.sum())
    assert np.abs(elpd_i - exact).max() < 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubnetLOOWarning)
        unshifted = elpd_parts(loo(post, x, y, num_samples=2000, map_shift=False))[0]
    assert abs(unshifted - exact.sum()) > 1.0, (unshifted, exact.sum())


def logistic(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Bernoulli(logits=x @ w), obs=y)


def _map(x, y):
    w = torch.zeros(x.shape[1], requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200, tolerance_grad=1e-10, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = -(dist.Bernoulli(logits=x @ w).log_prob(y).sum() + dist.Normal(0.0, 1.0).log_prob(w).sum())
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach()


def _laplace(x, y, selection):
    guide = SubnetworkLaplace(logistic, subnetwork_size=len(selection), selection=selection)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(_map(x, y))
    return guide.laplace_approximation(x, y)


@pytest.mark.slow
def test_logistic_elpd_matches_brute_force_leave_one_out():
    """Refit the MAP and the Laplace posterior without each point and score the point under
    the linearized predictive: the shifted estimate is within 2 of its SE of that sum, and the
    paired difference is small (0.03 of 20 when written); the estimate without the step is 4 off,
    which 2 SE alone would not catch."""
    n, p = 30, 8
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, p, generator=g)
    y = dist.Bernoulli(logits=x @ (0.8 * torch.randn(p, generator=g))).sample()
    selection = torch.tensor([0, 1])
    post = _laplace(x, y, selection)
    pyro.set_rng_seed(0)
    brute = []
    for i in range(n):
        keep = torch.arange(n) != i
        refit = _laplace(x[keep], y[keep], selection)
        dz = refit._offset_draws(4000)
        spec, _, etas = linearized_outputs(refit, (x[i : i + 1], y[i : i + 1]), {}, dz)["obs"]
        brute.append(float(torch.logsumexp(spec.log_prob(etas, y[i : i + 1])[:, 0], 0) - math.log(4000)))
    brute = np.array(brute)
    pyro.set_rng_seed(1)
    elpd, se, elpd_i = elpd_parts(loo(post, x, y, num_samples=4000))
    assert abs(elpd - brute.sum()) < 2 * se
    assert abs(elpd - brute.sum()) < 0.5, (elpd, brute.sum())
    assert np.abs(elpd_i - brute).max() < 0.2  # one Newton step (0.10 at most here)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubnetLOOWarning)
        unshifted = elpd_parts(loo(post, x, y, num_samples=4000, map_shift=False))[0]
    assert abs(unshifted - brute.sum()) > 2.0, (unshifted, brute.sum())


@pytest.mark.parametrize("guide_class", ["subnet", "diagonal"])
def test_diagonal_curvature_is_exact_where_the_curvature_is_diagonal(monkeypatch, guide_class):
    """Above FULL_MAX_DIM the steps use the GGN's diagonal: on orthogonal inputs (a diagonal
    GGN) the steps are still the exact leave-one-out MAPs, with a DiagonalLaplace posterior too."""
    import pyro_subnet.jackknife as jackknife
    from pyro_subnet import DiagonalLaplace

    n, p = 32, 4
    x = torch.linalg.qr(torch.randn(n, p, generator=torch.Generator().manual_seed(2)))[0] * math.sqrt(n)
    y = x @ torch.tensor([0.5, -1.0, 0.2, 0.0]) + SIGMA * torch.randn(n, generator=torch.Generator().manual_seed(3))
    guide = (SubnetworkLaplace(linreg, subnetwork_size=2, selection=torch.tensor([1, 2])) if guide_class == "subnet"
             else DiagonalLaplace(linreg))
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(linreg_posterior(x, y)[0])
    post = guide.laplace_approximation(x, y)
    monkeypatch.setattr(jackknife, "FULL_MAX_DIM", 2)
    shifts = map_shifts(post, (x, y), {}, "obs")
    assert shifts.curvature == "diagonal GGN"
    for i in range(n):
        keep = torch.arange(n) != i
        # without point i the inputs are no longer orthogonal: the step is exact only to first order
        exact = linreg_posterior(x[keep], y[keep])[0] - post.loc
        assert torch.allclose(shifts.delta[:, i], exact, atol=0.05 * float(exact.abs().max()) + 1e-12, rtol=0)
    pyro.set_rng_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SubnetLOOWarning)
        elpd_parts(loo(post, x, y, num_samples=500))


def test_linearization_gap_is_the_model_against_its_linearization():
    """At each moved MAP the gap is the point's log density under the model minus under its
    linearization: zero for a GLM, the closed form for a mean quadratic in the weight."""
    from pyro_subnet.reweighting import linearization_gap

    def square(x, y=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(w[0] ** 2 * x + w[1], SIGMA), obs=y)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(15, generator=g)
    y = 1.5 * x + 0.2 + SIGMA * torch.randn(15, generator=g)
    guide = SubnetworkLaplace(square, subnetwork_size=1, selection=torch.tensor([1]))
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(torch.tensor([1.2, 0.2]))
    post = guide.laplace_approximation(x, y)
    shifts = map_shifts(post, (x, y), {}, "obs")
    gap = linearization_gap(post, (x, y), {}, shifts)
    w = post.loc[:, None] + shifts.delta  # [2, points]: each point's moved MAP
    exact = (dist.Normal(w[0] ** 2 * x + w[1], SIGMA).log_prob(y)
             - dist.Normal(1.44 * x + 0.2 + 2.4 * x * shifts.delta[0] + shifts.delta[1], SIGMA).log_prob(y))
    assert torch.allclose(gap, exact, atol=1e-9, rtol=0)
    assert float(exact.abs().max()) > 1e-4  # not zero by construction

    pyro.clear_param_store()
    x2 = torch.randn(20, 3, generator=g)
    y2 = dist.Bernoulli(logits=x2 @ torch.tensor([1.0, -1.0, 0.5])).sample()
    post = _laplace(x2, y2, torch.tensor([0]))
    glm = linearization_gap(post, (x2, y2), {}, map_shifts(post, (x2, y2), {}, "obs"))
    assert float(glm.abs().max()) < 1e-8  # logits linear in the weights
