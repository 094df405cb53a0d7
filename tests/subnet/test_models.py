"""The subnetwork precision is exact whatever a model does with its weight matrices: products
(where :class:`~pyro_subnet.subnet_tensor.SubnetMatrix` takes the sparse path) and every other
operation (where it falls back to the dense matrix), against a dense autograd reference."""

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.nn import PyroModule, PyroSample
from subnet_models import random_loc

from pyro_subnet import SubnetworkLaplace, curvature
from pyro_subnet.subnet_tensor import SubnetMatrix

SIGMA = 0.5


def weight(name, shape):
    return pyro.sample(name, dist.Normal(0.0, 1.0).expand(shape).to_event(len(shape)))


def observe(f, y):
    with pyro.plate("data", f.shape[0]):
        pyro.sample("obs", dist.Normal(f, SIGMA).to_event(1), obs=y)


def einsum_model(x, y=None):
    A, B = weight("A", [5, 3]), weight("B", [2, 5])
    observe(torch.einsum("hd,nd->nh", B, torch.tanh(torch.einsum("nd,hd->nh", x, A))), y)


def elementwise_model(x, y=None):
    A, B = weight("A", [5, 3]), weight("B", [2, 5])
    h = torch.tanh(x @ (A * A.abs()).T + A.sum(1))
    observe(h @ B.T + (B**2).mean(), y)


def reshape_index_model(x, y=None):
    A, B = weight("A", [5, 3]), weight("B", [2, 5])
    A0 = A.clone()
    A0[0] = 0.0  # in place on a copy
    h = torch.tanh(x @ A.reshape(3, 5) + A[1, :2].sum() + A.view(-1)[7] + x @ A0.T)
    observe(h @ B[:, :].T * B[0, 1], y)


def transpose_model(x, y=None):
    A, B = weight("A", [5, 3]), weight("B", [2, 5])
    h = torch.tanh(x @ A.transpose(dim0=0, dim1=1) + x.unsqueeze(0).matmul(A.mT)[0])
    observe(torch.matmul(h, B.transpose(-1, 0)) + (B @ h[0]).unsqueeze(0) + torch.mm(h, B.t()), y)


def batched_model(x, y=None):
    A, B = weight("A", [5, 3]), weight("B", [2, 5])
    h = torch.tanh(torch.stack([x, -x]) @ A.T).sum(0)
    observe((B @ h.T).T, y)


def conv_model(x, y=None):
    A, B = weight("A", [4, 3]), weight("B", [2, 4])
    h = torch.tanh(F.conv1d(x[:, None, :], A[:, None, :], padding=1)).mean(-1)
    observe(F.linear(h, B, bias=B[:, 0]), y)


class Net(PyroModule):
    def __init__(self):
        super().__init__()
        self.l1 = PyroModule[torch.nn.Linear](3, 5)
        self.l1.weight = PyroSample(dist.Normal(0.0, 1.0).expand([5, 3]).to_event(2))
        self.l1.bias = PyroSample(dist.Normal(0.0, 1.0).expand([5]).to_event(1))
        self.l2 = PyroModule[torch.nn.Linear](5, 2)
        self.l2.weight = PyroSample(dist.Normal(0.0, 1.0).expand([2, 5]).to_event(2))

    def forward(self, x, y=None):
        observe(self.l2(torch.tanh(self.l1(x))), y)


def dense_precision(guide, model, x, y):
    """J^T J / sigma^2 + I from a dense autograd Jacobian over all D coordinates."""

    def loc(u):
        values = {site["name"]: v for site, v in guide._unpack_latent(u)}
        return poutine.trace(poutine.condition(model, values)).get_trace(x, y).nodes["obs"]["fn"].base_dist.loc

    u = guide.loc.detach()
    J = torch.autograd.functional.jacobian(loc, u).reshape(-1, u.numel())
    return J.T @ J / SIGMA**2 + torch.eye(u.numel())


@pytest.mark.parametrize("make_model", [einsum_model, elementwise_model, reshape_index_model, transpose_model,
                                        batched_model, conv_model, Net])
def test_any_use_of_weights_gives_the_dense_precision(make_model):
    model = make_model() if make_model is Net else make_model
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 3, generator=g), torch.randn(7, 2, generator=g)
    guide = SubnetworkLaplace(model, 1.0, chunk_size=3)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(0.6 * torch.randn(guide.loc.shape, generator=g))
    ref = dense_precision(guide, model, x, y)
    # two entries of each matrix, so that both enter the model as SubnetMatrix; and one bias
    a = list(guide._unconstrained_shapes)
    starts = {n: b[0] for n, b in curvature.LatentModel(guide, model, ["obs"], [], {}).blocks.items()}
    idx = torch.tensor(sorted([starts[a[0]] + 1, starts[a[0]] + 7, starts[a[-1]] + 2, starts[a[-1]] + 6]
                              + ([starts[a[1]]] if len(a) > 2 else [])))
    latent = curvature.LatentModel(guide, model, ["obs"], [], {})
    values, _ = latent.values(guide.loc.detach(), idx, guide.loc.detach()[idx])
    assert isinstance(values[a[0]], SubnetMatrix) and isinstance(values[a[-1]], SubnetMatrix)

    guide.selection = idx
    post = guide.laplace_approximation(x, y)
    assert torch.allclose(post.precision, ref[idx][:, idx], rtol=1e-10, atol=1e-12)


def standardized_model(x, y=None):
    x = (x - x.mean(0)) / x.std(0)  # data points interact: a chunk has other statistics
    A, B = weight("A", [5, 3]), weight("B", [2, 5])
    observe(torch.tanh(x @ A.T) @ B.T, y)


@pytest.mark.parametrize("model, split", [(einsum_model, True), (standardized_model, False), (transpose_model, False)])
def test_calls_are_split_only_when_the_chunks_give_the_same_likelihood(model, split):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(9, 3, generator=g), torch.randn(9, 2, generator=g)
    guide = SubnetworkLaplace(model, 1.0, chunk_size=2)
    guide(x, y)
    random_loc(guide, scale=0.5)  # a trained guide: laplace_approximation refuses the initial point
    u = guide.loc.detach()
    latent = curvature.LatentModel(guide, model, ["obs"], [], {})
    chunks = guide._chunks(latent, u, [((x, y), {})])
    assert len(chunks) == (5 if split else 1)
    ref = dense_precision(guide, model, x, y)
    assert torch.allclose(guide.laplace_approximation(x, y).precision, ref, rtol=1e-10, atol=1e-12)


def local_latent_model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0))
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Normal(0.0, 2.0))  # one latent per data point: the call cannot be split
        pyro.sample("obs", dist.Normal(w * x + z, SIGMA), obs=y)


def test_local_latents_in_the_data_plate():
    x, y = torch.randn(9), torch.randn(9)
    guide = SubnetworkLaplace(local_latent_model, 1.0, chunk_size=2)
    guide(x, y)
    with torch.no_grad():
        guide.loc.normal_()
    J = torch.cat([x[:, None], torch.eye(9)], 1)
    prec = J.T @ J / SIGMA**2 + torch.diag(torch.tensor([1.0] + [0.25] * 9))
    assert torch.allclose(guide.laplace_approximation(x, y).precision, prec, rtol=1e-12)


def factor_model(x, y=None, local=False):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)
        if local:  # a per-data-point factor: chunks add up to the whole
            pyro.factor("local", -(x @ w) ** 4 / 12)
    if not local:  # a global factor: a chunk must not add it once more
        pyro.factor("penalty", -2.0 * (w**4).sum())


@pytest.mark.parametrize("local", [False, True])
def test_factor_sites_counted_once(local):
    x, y = torch.randn(10, 2), torch.randn(10)
    guide = SubnetworkLaplace(factor_model, 1.0, chunk_size=3)
    guide(x, y, local=local)
    with torch.no_grad():
        guide.loc.copy_(torch.tensor([0.5, -1.0]))
    u = guide.loc.detach()
    latent = curvature.LatentModel(guide, factor_model, guide._observed, guide._factors, {})
    assert len(guide._chunks(latent, u, [((x, y), {"local": local})])) == (4 if local else 1)
    f = x @ u
    hess = (x.T @ (x * f[:, None] ** 2)) if local else torch.diag(24 * u**2)
    exact = x.T @ x / SIGMA**2 + torch.eye(2) + hess
    assert torch.allclose(guide.laplace_approximation(x, y, local=local).precision, exact, rtol=1e-12)
