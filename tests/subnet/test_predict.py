"""Item (e): linearized predictives against exact / Monte Carlo GLM predictives."""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from subnet_models import DIN, HI, LO, H, mlp, mlp_data, mlp_model, random_loc, sample_mlp, unpack

from pyro_subnet import SubnetworkLaplace, predictive


def logreg_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 3.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Bernoulli(logits=x @ w), obs=y)


def softmax_model(x, y=None):
    W = pyro.sample("W", dist.Normal(0.0, 3.0).expand([3, x.shape[1]]).to_event(2))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Categorical(logits=x @ W.T), obs=y)


def poisson_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Poisson((x @ w).exp()), obs=y)


def _glm(model, y, n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.randn(n, 1, generator=g), torch.ones(n, 1)], 1)
    guide = SubnetworkLaplace(model, subnetwork_size=1.0)
    guide(x, y(x, g))
    random_loc(guide, seed=seed, scale=0.5)
    post = guide.laplace_approximation(x, y(x, g))
    xt = torch.stack([torch.linspace(-4, 4, 9), torch.ones(9)], 1)
    # linear models: the linearization is exact and J = x
    var = (xt @ post.covariance * xt).sum(-1) if post.loc.numel() == 2 else None
    return post, xt, var


def test_bernoulli_probit_close_to_glm_predictive():
    post, xt, var = _glm(logreg_model, lambda x, g: (x[:, 0] > 0).double())
    mu = xt @ post.loc
    # the GLM predictive E[sigmoid(f)], f ~ N(mu, var), by Gauss-Hermite quadrature
    t, w = np.polynomial.hermite_e.hermegauss(80)
    t, w = torch.tensor(t), torch.tensor(w / w.sum())
    exact = (torch.sigmoid(mu[:, None] + var.sqrt()[:, None] * t) * w).sum(-1)
    probs = post.predict(xt)["obs"].probs
    assert var.max() > 4  # uncertain enough that the approximation matters
    assert (probs - exact).abs().max() < 0.02
    # a plug-in (MAP) or a probit without the pi/8 factor would be far off
    assert (torch.sigmoid(mu) - exact).abs().max() > 0.1
    assert (torch.sigmoid(mu / (1 + var).sqrt()) - exact).abs().max() > 0.04


def test_categorical_probit_close_to_monte_carlo():
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(15, 1, generator=g), torch.ones(15, 1)], 1)
    y = torch.randint(0, 3, (15,), generator=g)
    guide = SubnetworkLaplace(softmax_model, subnetwork_size=1.0)
    guide(x, y)
    random_loc(guide, scale=0.5)
    post = guide.laplace_approximation(x, y)
    xt = torch.stack([torch.linspace(-3, 3, 7), torch.ones(7)], 1)
    W = post.get_posterior().sample((200000,))[:, post.subnetwork_indices].reshape(-1, 3, 2)
    mc = torch.softmax(torch.einsum("mkd,nd->mnk", W, xt), -1).mean(0)
    probs = post.predict(xt)["obs"].probs
    assert (probs - mc).abs().max() < 0.05
    assert (torch.softmax(xt @ post.loc.reshape(3, 2).T, -1) - mc).abs().max() > 0.1


def test_poisson_monte_carlo_predictive_and_nonlinearized():
    post, xt, var = _glm(poisson_model, lambda x, g: torch.poisson((0.5 * x[:, 0]).exp(), generator=g))
    mu = xt @ post.loc
    pred = post.predict(xt, num_samples=20000)["obs"]
    # linearized in log rate: the mixture mean is the log-normal mean exp(mu + var / 2)
    expect = (mu + var / 2).exp()
    assert torch.allclose(pred.mean, expect, rtol=0.05)
    # for a GLM the network itself is linear in log rate: same answer without linearization
    pred_nl = post.predict(xt, linearized=False, num_samples=3000)["obs"]
    assert torch.allclose(pred_nl.mean, expect, rtol=0.1)


def test_normal_linearized_vs_network_samples():
    x, y = mlp_data(n=20)
    guide = SubnetworkLaplace(mlp_model, selection=["b1", "W2"])  # sigma stays at the MAP
    guide(x, y)
    random_loc(guide, seed=3, scale=0.5)
    post = guide.laplace_approximation(x, y)
    xt = torch.randn(4, 2)
    lin = post.predict(xt)["obs"]
    assert lin.event_shape == (2,) and lin.batch_shape == (4,)
    # closed form: J Sigma J^T + sigma^2 from a finite-difference Jacobian of the network
    idx, u = post.subnetwork_indices, post.loc
    eps = 1e-6

    def f(u):
        from pyro import poutine

        vals = {s["name"]: torch.distributions.biject_to(s["fn"].support)(v) for s, v in post._unpack_latent(u)}
        tr = poutine.trace(poutine.condition(mlp_model, vals)).get_trace(xt)
        return tr.nodes["obs"]["fn"].base_dist.loc, tr.nodes["obs"]["fn"].base_dist.scale

    J = torch.stack([(f(u.index_add(0, idx[i:i + 1], torch.tensor([eps])))[0]
                      - f(u.index_add(0, idx[i:i + 1], torch.tensor([-eps])))[0]) / (2 * eps)
                     for i in range(len(idx))], -1)
    loc, scale = f(u)
    var = torch.einsum("nks,st,nkt->nk", J, post.covariance, J) + scale**2
    assert torch.allclose(lin.base_dist.loc, loc, atol=1e-12)
    assert torch.allclose(lin.variance, var, rtol=1e-6)

    # in the last layer the network is linear: sampling it gives the linearized predictive
    guide.selection = ["W2", "b2"]
    post = guide.laplace_approximation(x, y)
    lin = post.predict(xt)["obs"]
    m = 3000
    nl = post.predict(xt, linearized=False, num_samples=m)["obs"]
    se = lin.stddev / m**0.5
    assert ((nl.mean - lin.mean).abs() < 5 * se).all()
    assert ((nl.variance / lin.variance - 1).abs() < 5 * (2 / m) ** 0.5).all()


def param_noise_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    sigma = pyro.param("sigma", torch.tensor(0.5), constraint=dist.constraints.positive)
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, sigma), obs=y)


def test_normal_with_pyro_param_scale_stays_closed_form():
    """A learnable (pyro.param) noise scale requires grad but does not depend on the subnetwork."""
    x, y = torch.randn(10, 2), torch.randn(10)
    guide = SubnetworkLaplace(param_noise_model, subnetwork_size=1.0)
    guide(x, y)
    random_loc(guide)  # a trained guide: laplace_approximation refuses the initial point
    post = guide.laplace_approximation(x, y)
    prec = x.T @ x / 0.25 + torch.eye(2)
    assert torch.allclose(post.precision, prec, rtol=1e-12)
    pred = post.predict(x[:3])["obs"]
    assert isinstance(pred, torch.distributions.Normal)
    assert torch.allclose(pred.variance, (x[:3] @ torch.linalg.inv(prec) * x[:3]).sum(-1) + 0.25, rtol=1e-10)


# ---- the prediction Jacobian against torch.func.jacrev, per family, chunked or not ---------------

_OUT = {"normal": 2, "bernoulli": 1, "categorical": 3, "poisson": 1}


def family_model(x, y=None, family="normal", standardize=False):
    """The tanh MLP of ``subnet_models`` with each family's likelihood; ``standardize`` makes the
    data points interact (inputs standardized over the call), so the call cannot be split."""
    k = _OUT[family]
    if standardize:
        x = (x - x.mean(0)) / x.std(0)
    f = sample_mlp(x, k)
    if family == "normal":
        sigma = pyro.sample("sigma", dist.Uniform(LO, HI))
    with pyro.plate("data", x.shape[0]):
        if family == "normal":
            pyro.sample("obs", dist.Normal(f, sigma).to_event(1), obs=y)
        elif family == "bernoulli":
            pyro.sample("obs", dist.Bernoulli(logits=f.squeeze(-1)), obs=y)
        elif family == "categorical":
            pyro.sample("obs", dist.Categorical(logits=f), obs=y)
        else:
            pyro.sample("obs", dist.Poisson(f.squeeze(-1).exp()), obs=y)


def reference_natural(u, x, family, standardize):
    """The natural parameters ``[elements, dim]`` of the observed site, written by hand."""
    k = _OUT[family]
    if standardize:
        x = (x - x.mean(0)) / x.std(0)
    W1, b1, W2, b2, rest = unpack(u, k)
    f = mlp(x, W1, b1, W2, b2)
    if family == "normal":
        log_sigma = torch.log(LO + (HI - LO) * torch.sigmoid(rest[0]))
        return torch.stack([f.reshape(-1), log_sigma.expand(f.numel())], -1)
    # a Categorical keeps its logits normalized: those are its natural parameters
    return torch.log_softmax(f, -1) if family == "categorical" else f.reshape(-1, 1)


def _family_posterior(family, selection, standardize=False):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(15, DIN, generator=g)
    y = {"normal": torch.randn(15, 2, generator=g), "bernoulli": torch.randint(0, 2, (15,), generator=g).double(),
         "categorical": torch.randint(0, 3, (15,), generator=g),
         "poisson": torch.poisson(torch.ones(15), generator=g)}[family]
    guide = SubnetworkLaplace(family_model, selection=selection)
    guide(x, y, family=family, standardize=standardize)
    random_loc(guide, seed=2, scale=0.6)
    return guide.laplace_approximation(x, y, family=family, standardize=standardize)


@pytest.mark.parametrize("family,standardize", [
    ("normal", False), ("bernoulli", False), ("categorical", False), ("poisson", False), ("categorical", True),
])
@pytest.mark.parametrize("chunk_size", [4, None])
def test_prediction_jacobian_and_predict_equal_jacrev_reference(family, standardize, chunk_size):
    k = _OUT[family]
    D = H * DIN + H + k * H + k + (family == "normal")
    # sigma (the last coordinate) selected too for Normal: its scale is active, the predictive Monte Carlo
    sel = torch.tensor(sorted({0, 3, 7, 11, 12, 16, D - 2, D - 1}))
    post = _family_posterior(family, sel, standardize)
    xt = torch.randn(37, DIN, generator=torch.Generator().manual_seed(9))
    idx, u_hat = post.subnetwork_indices, post.loc
    natural = lambda v: reference_natural(u_hat.index_put((idx,), v), xt, family, standardize)  # noqa: E731
    eta_ref = natural(u_hat[idx])
    J_ref = torch.func.jacrev(natural)(u_hat[idx])

    call = ((xt,), {"family": family, "standardize": standardize})
    chunk = chunk_size or predictive.CHUNK_SIZE
    calls = predictive.prediction_calls(post._latent, u_hat, *call, chunk)[1]
    assert len(calls) == (1 if standardize else -(-37 // chunk))  # split unless the data points interact
    with torch.no_grad():  # as a user may call predict
        spec, fn, eta, J = post._jacobian(*call, chunk_size)["obs"]
    assert torch.allclose(eta, eta_ref, rtol=0, atol=1e-10)
    assert J.shape == J_ref.shape and torch.allclose(J, J_ref, rtol=0, atol=1e-10)

    kwargs = {"family": family, "standardize": standardize, "chunk_size": chunk_size}
    cov = torch.einsum("nks,st,nlt->nkl", J_ref, post.covariance, J_ref)
    var = cov.diagonal(dim1=-2, dim2=-1)
    if family in ("bernoulli", "categorical"):
        pred = post.predict(xt, **kwargs)["obs"]
        expect = eta_ref / (1 + math.pi / 8 * var).sqrt()
        got = pred.logits if family == "categorical" else pred.logits[:, None]
        assert torch.allclose(got, torch.log_softmax(expect, -1) if family == "categorical" else expect,
                              rtol=0, atol=1e-10)
        return
    # Monte Carlo: the components are the linearized outputs at draws that only the predictive takes
    pyro.set_rng_seed(7)
    pred = post.predict(xt, num_samples=30, **kwargs)["obs"]
    pyro.set_rng_seed(7)
    eps = torch.randn(30, len(idx), 1)
    dz = torch.linalg.solve_triangular(post.precision_tril.mT, eps, upper=True).squeeze(-1)
    etas = eta_ref + torch.einsum("nks,ms->mnk", J_ref, dz)  # [M, elements, dim]
    comp = pred.component_distribution
    if family == "poisson":
        assert torch.allclose(comp.rate.log(), etas[..., 0].T, rtol=0, atol=1e-10)
    else:
        base = comp.base_dist  # batch [n, M, 2]
        assert torch.allclose(base.loc, etas[..., 0].reshape(30, 37, 2).movedim(0, 1), rtol=0, atol=1e-10)
        assert torch.allclose(base.scale.log(), etas[..., 1].reshape(30, 37, 2).movedim(0, 1), rtol=0, atol=1e-10)
