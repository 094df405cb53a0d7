"""The Laplace evidence of the subnetwork posterior and the prior scale fitted by it, against the
closed-form evidence of Bayesian linear regression, where the Laplace approximation is exact."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyro_subnet import SubnetWarning, SubnetworkLaplace, curvature, evidence, prior

SIGMA, SD1, SD2 = 0.3, 0.7, 1.5  # noise, prior sds of the two weight sites
N = 20


def linear_model(x1, x2, y=None):
    w1 = pyro.sample("w1", dist.Normal(0.0, SD1).expand([2]).to_event(1))
    w2 = pyro.sample("w2", dist.Normal(0.0, SD2).expand([3]).to_event(1))
    with pyro.plate("data", x1.shape[0]):
        pyro.sample("obs", dist.Normal(x1 @ w1 + x2 @ w2, SIGMA), obs=y)


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x1, x2 = torch.randn(N, 2, generator=g), torch.randn(N, 3, generator=g)
    w = torch.tensor([0.4, -0.3, 0.2, 0.5, -0.1])  # small weights: the evidence wants a tight prior
    y = x1 @ w[:2] + x2 @ w[2:] + SIGMA * torch.randn(N, generator=g)
    return x1, x2, y


def closed_form(x1, x2, y, c1, c2):
    """log N(y; 0, sigma^2 I + X1 Sigma1 X1^T / c1 + X2 Sigma2 X2^T / c2), the prior precision scaled
    by c (tensors c1, c2 broadcast: one evidence per element)."""
    c1, c2 = torch.as_tensor(c1)[..., None, None], torch.as_tensor(c2)[..., None, None]
    cov = SIGMA**2 * torch.eye(N) + SD1**2 / c1 * x1 @ x1.T + SD2**2 / c2 * x2 @ x2.T
    return dist.MultivariateNormal(torch.zeros(N), cov).log_prob(y)


def dense_max(f, dim, steps=20):
    """Maximizer of a smooth f(log c) (independent of pyro_subnet): the best point of a dense grid
    of log c in [-6, 6]^dim (f takes a batch ``[..., dim]``), then Newton's method with autograd."""
    axis = torch.linspace(-6, 6, 241 if dim == 1 else 121)
    grid = torch.cartesian_prod(*[axis] * dim).reshape(-1, dim)
    t = grid[f(grid).argmax()]
    for _ in range(steps):
        grad = torch.autograd.functional.jacobian(f, t)
        hess = torch.autograd.functional.hessian(f, t)
        t = t - torch.linalg.solve(hess, grad)
    return t.exp()


def fitted_guide(x1, x2, y, at_map, **kw):
    guide = SubnetworkLaplace(linear_model, **kw)
    guide(x1, x2, y)
    X = torch.cat([x1, x2], 1)
    prec = X.T @ X / SIGMA**2 + torch.diag(torch.tensor([SD1**-2] * 2 + [SD2**-2] * 3))
    w_map = torch.linalg.solve(prec, X.T @ y / SIGMA**2)
    with torch.no_grad():  # the exact MAP, or a point away from it: the evidence is exact at any point
        guide.loc.copy_(w_map if at_map else w_map + torch.tensor([0.3, -0.2, 0.5, 0.1, -0.4]))
    return guide


@pytest.mark.parametrize("at_map", [True, False])
def test_evidence_is_exact_on_linear_regression(at_map):
    x1, x2, y = data()
    post = fitted_guide(x1, x2, y, at_map, subnetwork_size=1.0).laplace_approximation(x1, x2, y)
    for scale, (c1, c2) in [(1.0, (1, 1)), (0.3, (0.3, 0.3)), (4.0, (4, 4)), ("subnet", (1, 1)),
                            (("subnet", 2.5), (2.5, 2.5)), ({"w1": 0.5, "w2": 3.0}, (0.5, 3.0))]:
        exact = closed_form(x1, x2, y, c1, c2)
        assert abs(post.log_marginal_likelihood(scale) - exact) < 1e-8, scale
    assert abs(post.log_marginal_likelihood() - closed_form(x1, x2, y, 1, 1)) < 1e-8
    # the comparison discriminates: a factor 2 in c moves the evidence by far more than 1e-8
    assert abs(closed_form(x1, x2, y, 2, 2) - closed_form(x1, x2, y, 1, 1)) > 0.1


def test_marglik_maximizer_matches_the_closed_form():
    x1, x2, y = data()
    post = fitted_guide(x1, x2, y, True, subnetwork_size=1.0, prior_scale="marglik").laplace_approximation(x1, x2, y)
    c_star = float(dense_max(lambda t: closed_form(x1, x2, y, t[..., 0].exp(), t[..., 0].exp()), 1)[0])
    assert abs(c_star - 1) > 0.5  # the model's own prior is far from the evidence's choice
    assert abs(post.prior_scale / c_star - 1) < 1e-3
    assert abs(post.log_marginal_likelihood() - closed_form(x1, x2, y, c_star, c_star)) < 1e-8
    assert post.log_marginal_likelihood() == pytest.approx(post.log_marginal_likelihood("marglik"), abs=1e-10)
    # the posterior is the one of that prior: X^T X / sigma^2 + c* P
    X = torch.cat([x1, x2], 1)
    P = torch.diag(torch.tensor([SD1**-2] * 2 + [SD2**-2] * 3))
    assert torch.allclose(post.precision, X.T @ X / SIGMA**2 + post.prior_scale * P, rtol=1e-10)


def test_marglik_per_site_maximizer_matches_the_closed_form():
    x1, x2, y = data(seed=3)
    guide = fitted_guide(x1, x2, y, False, subnetwork_size=1.0, prior_scale="marglik_per_site")
    post = guide.laplace_approximation(x1, x2, y)
    c = dense_max(lambda t: closed_form(x1, x2, y, t[..., 0].exp(), t[..., 1].exp()), 2)
    assert set(post.prior_scale) == {"w1", "w2"}
    assert abs(post.prior_scale["w1"] / float(c[0]) - 1) < 1e-3
    assert abs(post.prior_scale["w2"] / float(c[1]) - 1) < 1e-3
    assert abs(c[0] / c[1] - 1) > 0.2  # the two sites want different scales
    assert post.log_marginal_likelihood() > post.log_marginal_likelihood("marglik") + 1e-6


def correlated_model(x, y=None):
    w = pyro.sample("w", dist.MultivariateNormal(PRIOR_MEAN, PRIOR_COV))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)


PRIOR_MEAN = torch.tensor([0.5, -1.0, 0.2, 0.0], dtype=torch.float64)
PRIOR_COV = torch.tensor([[1.0, 0.3, 0.1, 0.0], [0.3, 0.8, 0.2, 0.1], [0.1, 0.2, 1.5, 0.4], [0.0, 0.1, 0.4, 0.6]],
                         dtype=torch.float64)


@pytest.mark.parametrize("c", [1.0, 0.4, 3.0])
def test_subnetwork_evidence_with_a_correlated_prior(c):
    """With S < D the others are held at the MAP: the exact evidence is p(y | w_other) under the
    conditional prior of w_S (its precision P_SS scaled by c, its mean kept)."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(N, 4, generator=g), torch.randn(N, generator=g)
    guide = SubnetworkLaplace(correlated_model, selection=torch.tensor([0, 2]), prior_scale=c)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(torch.tensor([0.1, 0.7, -0.4, 0.9]))
    u = guide.loc.detach()
    post = guide.laplace_approximation(x, y)
    S, O = torch.tensor([0, 2]), torch.tensor([1, 3])
    Lam = torch.linalg.inv(PRIOR_COV)
    cond_mean = PRIOR_MEAN[S] - torch.linalg.solve(Lam[S][:, S], Lam[S][:, O] @ (u[O] - PRIOR_MEAN[O]))
    cov = SIGMA**2 * torch.eye(N) + x[:, S] @ torch.linalg.inv(c * Lam[S][:, S]) @ x[:, S].T
    exact = dist.MultivariateNormal(x[:, O] @ u[O] + x[:, S] @ cond_mean, cov).log_prob(y)
    assert abs(post.log_marginal_likelihood() - exact) < 1e-8
    assert torch.allclose(post.precision, x[:, S].T @ x[:, S] / SIGMA**2 + c * Lam[S][:, S], rtol=1e-10)


def test_curvature_is_computed_once_for_every_scale_tried(monkeypatch):
    calls = {"ggn": 0, "prior_hessian": 0, "evidence": 0}

    def counting(module, name):
        fn = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name.strip("_") if name != "_evidence" else "evidence"] += 1
            return fn(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(curvature, "ggn")
    counting(prior, "prior_hessian")
    counting(evidence.SubnetworkCurvature, "_evidence")
    x1, x2, y = data()
    guide = fitted_guide(x1, x2, y, True, selection=["w1", "w2"], prior_scale="marglik_per_site")
    post = guide.laplace_approximation(x1, x2, y)
    grid = [post.log_marginal_likelihood(c) for c in torch.logspace(-2, 2, 50).tolist()]
    assert calls["ggn"] == 1 and calls["prior_hessian"] == 1
    assert calls["evidence"] > 100  # the grid, L-BFGS and the 50 values above
    assert max(grid) <= post.log_marginal_likelihood() + 1e-9


def test_prior_scale_forms_and_errors():
    x1, x2, y = data()
    guide = fitted_guide(x1, x2, y, True, selection=["w2"], prior_scale=("subnet", 3.0))
    post = guide.laplace_approximation(x1, x2, y)
    assert post.prior_scale == pytest.approx(3.0 * 3 / 5)
    assert torch.allclose(post.precision, x2.T @ x2 / SIGMA**2 + 3.0 * 3 / 5 / SD2**2 * torch.eye(3), rtol=1e-10)
    for bad in ["subnets", ("subnet", -1.0), ("subnet",), 0.0, True, {"w2": 2.0}]:
        with pytest.raises(ValueError, match="prior_scale must be"):
            SubnetworkLaplace(linear_model, 1.0, prior_scale=bad)
    with pytest.raises(ValueError, match=r"missing: \['w2'\]"):
        post.log_marginal_likelihood({"w1": 2.0})
    with pytest.raises(ValueError, match="prior_scale must be"):
        post.log_marginal_likelihood({"w2": -2.0})


def flat_model(x, y=None):
    v = pyro.sample("v", dist.ImproperUniform(dist.constraints.real, (), ()))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x * v, 1.0), obs=y)


def test_marglik_needs_a_proper_prior():
    x, y = torch.randn(5), torch.randn(5)
    guide = SubnetworkLaplace(flat_model, 1.0, prior_scale="marglik",
                              init_loc_fn=pyro.infer.autoguide.init_to_value(values={"v": torch.tensor(0.0)}))
    guide(x, y)
    with torch.no_grad():
        guide.loc.fill_(0.5)
    with pytest.raises(ValueError, match="prior Hessian that is positive definite.*pass prior_scale as a number"):
        guide.laplace_approximation(x, y)
    guide.prior_scale = 1.0  # a fixed scale needs no evidence
    assert math.isclose(float(guide.laplace_approximation(x, y).precision), float(x @ x), rel_tol=1e-12)


def test_non_gaussian_prior_is_flagged(recwarn):
    from subnet_models import mlp_data, mlp_model, random_loc

    x, y = mlp_data()
    guide = SubnetworkLaplace(mlp_model, selection=["b2", "sigma"])
    guide(x, y)
    random_loc(guide)
    post = guide.laplace_approximation(x, y)
    assert not [w for w in recwarn.list if "not Gaussian" in str(w.message)]  # a fixed scale needs no evidence
    with pytest.warns(SubnetWarning, match=r"prior of sites \['sigma'\] \(not Gaussian"):
        post.log_marginal_likelihood()
    pyro.clear_param_store()
    x1, x2, y = data()
    fitted_guide(x1, x2, y, True, subnetwork_size=1.0).laplace_approximation(x1, x2, y).log_marginal_likelihood()
    assert not [w for w in recwarn.list if "not Gaussian" in str(w.message)]


def test_marglik_in_float32():
    """The model in float32: the evidence is computed in float64 from the float32 curvature."""
    x1, x2, y = data()
    torch.set_default_dtype(torch.float32)  # the autouse fixture restores the default afterwards
    f1, f2, fy = x1.float(), x2.float(), y.float()
    post = fitted_guide(f1, f2, fy, True, subnetwork_size=1.0, prior_scale="marglik").laplace_approximation(f1, f2, fy)
    assert post.precision.dtype == torch.float32
    torch.set_default_dtype(torch.float64)
    c_star = float(dense_max(lambda t: closed_form(x1, x2, y, t[..., 0].exp(), t[..., 0].exp()), 1)[0])
    assert abs(post.prior_scale / c_star - 1) < 1e-3
    assert abs(post.log_marginal_likelihood() - closed_form(x1, x2, y, c_star, c_star)) < 1e-3
