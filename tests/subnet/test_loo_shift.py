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

import pyro_arviz
from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace, loo
from pyro_subnet.jackknife import map_shifts
from pyro_subnet.predictive import linearized_outputs
from pyro_subnet.reweighting import shifted_ratios

pytest.importorskip("arviz")
SIGMA = 0.5


def _elpd(result):
    if pyro_arviz.arviz_generation() == 0:
        return float(result["elpd_loo"]), float(result["se"]), np.asarray(result["loo_i"])
    return float(result.elpd), float(result.se), np.asarray(result.elpd_i)


def linreg(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)


def _linreg_posterior(x, y):
    H = x.T @ x / SIGMA**2 + torch.eye(x.shape[1], dtype=x.dtype)
    return torch.linalg.solve(H, x.T @ y / SIGMA**2), H


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def test_linear_gaussian_steps_and_elpd_are_exact(float64):
    """S = 2 of 6 weights: the step is the exact leave-one-out MAP, and the elpd is the exact
    leave-one-out of the subnetwork posterior whose other weights sit at that MAP."""
    n, p = 40, 6
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, p, generator=g)
    y = x @ torch.randn(p, generator=g) + SIGMA * torch.randn(n, generator=g)
    guide = SubnetworkLaplace(linreg, subnetwork_size=2, selection=torch.tensor([0, 5]))
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(_linreg_posterior(x, y)[0])
    post = guide.laplace_approximation(x, y)
    idx = post.subnetwork_indices
    shifts = map_shifts(post, (x, y), {}, "obs")
    assert shifts.curvature == "full GGN"
    assert float(shifts.step_ratio.max()) < 1e-8  # a quadratic objective: one step lands
    exact = []
    for i in range(n):
        keep = torch.arange(n) != i
        mean, H = _linreg_posterior(x[keep], y[keep])
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
        elpd, _, elpd_i = _elpd(loo(post, x, y, num_samples=2000))
    # what is left is the Monte Carlo error of each point's predictive integral (0.008 here)
    assert abs(elpd - exact.sum()) < 0.05, (elpd, exact.sum())
    assert np.abs(elpd_i - exact).max() < 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubnetLOOWarning)
        unshifted = _elpd(loo(post, x, y, num_samples=2000, map_shift=False))[0]
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


def test_logistic_elpd_matches_brute_force_leave_one_out(float64):
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
    elpd, se, elpd_i = _elpd(loo(post, x, y, num_samples=4000))
    assert abs(elpd - brute.sum()) < 2 * se
    assert abs(elpd - brute.sum()) < 0.5, (elpd, brute.sum())
    assert np.abs(elpd_i - brute).max() < 0.2  # one Newton step (0.10 at most here)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubnetLOOWarning)
        unshifted = _elpd(loo(post, x, y, num_samples=4000, map_shift=False))[0]
    assert abs(unshifted - brute.sum()) > 2.0, (unshifted, brute.sum())


def test_an_unmoved_estimate_warns(float64):
    """An export holds no model to move the MAP with: with coordinates outside S its estimate is
    optimistic and says so; with S = D there is nothing to move and nothing to say."""
    from pyro_subnet import to_inference_data

    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 3, generator=g)
    y = x @ torch.tensor([1.0, -0.5, 0.3]) + SIGMA * torch.randn(20, generator=g)
    for size, warns in ((1, True), (3, False)):
        guide = SubnetworkLaplace(linreg, subnetwork_size=size, selection=torch.arange(size))
        guide(x, y)
        with torch.no_grad():
            guide.loc.copy_(_linreg_posterior(x, y)[0])
        idata = to_inference_data(guide.laplace_approximation(x, y), x, y, num_samples=200)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loo(idata)
        moved = [w for w in caught if issubclass(w.category, SubnetLOOWarning) and "not moved" in str(w.message)]
        assert bool(moved) == warns, [str(w.message) for w in caught]


@pytest.mark.parametrize("guide_class", ["subnet", "diagonal"])
def test_diagonal_curvature_is_exact_where_the_curvature_is_diagonal(float64, monkeypatch, guide_class):
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
        guide.loc.copy_(_linreg_posterior(x, y)[0])
    post = guide.laplace_approximation(x, y)
    monkeypatch.setattr(jackknife, "FULL_MAX_DIM", 2)
    shifts = map_shifts(post, (x, y), {}, "obs")
    assert shifts.curvature == "diagonal GGN"
    for i in range(n):
        keep = torch.arange(n) != i
        # without point i the inputs are no longer orthogonal: the step is exact only to first order
        exact = _linreg_posterior(x[keep], y[keep])[0] - post.loc
        assert torch.allclose(shifts.delta[:, i], exact, atol=0.05 * float(exact.abs().max()) + 1e-12, rtol=0)
    pyro.set_rng_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SubnetLOOWarning)
        _elpd(loo(post, x, y, num_samples=500))


def _masked_linreg(how):
    def model(x, y=None, mask=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        with pyro.plate("data", x.shape[0]):
            if how == "poutine":
                with pyro.poutine.mask(mask=mask):
                    pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)
            else:
                pyro.sample("obs", dist.Normal(x @ w, SIGMA).mask(mask), obs=y)

    return model


@pytest.mark.parametrize("how", ["poutine", "dist"])
def test_masked_points_are_no_data(float64, how):
    """A masked point is neither left out nor part of any step: the estimate is the one of the
    model fitted on the kept points alone, and its points carry their original positions."""
    n, p = 30, 4
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, p, generator=g)
    y = x @ torch.randn(p, generator=g) + SIGMA * torch.randn(n, generator=g)
    mask = torch.ones(n, dtype=torch.bool)
    mask[::5] = False

    def posterior(model, *args):
        guide = SubnetworkLaplace(model, subnetwork_size=2, selection=torch.tensor([0, 3]))
        guide(*args)
        with torch.no_grad():
            guide.loc.copy_(_linreg_posterior(x[mask], y[mask])[0])
        return guide.laplace_approximation(*args)

    pyro.set_rng_seed(0)
    masked = loo(posterior(_masked_linreg(how), x, y, mask), x, y, mask, num_samples=300)
    pyro.set_rng_seed(0)
    kept = loo(posterior(linreg, x[mask], y[mask]), x[mask], y[mask], num_samples=300)
    elpd, _, elpd_i = _elpd(masked)
    assert len(elpd_i) == int(mask.sum())
    assert abs(elpd - _elpd(kept)[0]) < 1e-8
    points = (masked["loo_i"] if pyro_arviz.arviz_generation() == 0 else masked.elpd_i).coords["obs_dim_0"].values
    assert list(points) == mask.nonzero().reshape(-1).tolist()


def test_linearization_gap_is_the_model_against_its_linearization(float64):
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


def test_points_of_a_two_dimensional_site_keep_the_exports_axes(float64):
    """A site over two plates: the pointwise results have the export's two axes, not a flat one."""
    from pyro_subnet import to_inference_data

    def grid(x, y=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        with pyro.plate("a", 2, dim=-1), pyro.plate("b", x.shape[0], dim=-2):
            pyro.sample("obs", dist.Normal((x @ w)[:, None] + torch.tensor([0.0, 1.0]), SIGMA), obs=y)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 3, generator=g)
    y = (x @ torch.tensor([1.0, -1.0, 0.5]))[:, None] + torch.tensor([0.0, 1.0])
    y = y + SIGMA * torch.randn(10, 2, generator=g)
    guide = SubnetworkLaplace(grid, subnetwork_size=1, selection=torch.tensor([0]))
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(torch.tensor([1.0, -1.0, 0.5]))
    post = guide.laplace_approximation(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SubnetLOOWarning)
        result = loo(post, x, y, num_samples=300)
    pointwise = result["loo_i"] if pyro_arviz.arviz_generation() == 0 else result.elpd_i
    exported = to_inference_data(post, x, y, num_samples=10)["log_likelihood"]["obs"]
    assert pointwise.dims == exported.dims[2:] and pointwise.shape == exported.shape[2:]
    assert "map_shift" in (result.index if pyro_arviz.arviz_generation() == 0 else dir(result))
