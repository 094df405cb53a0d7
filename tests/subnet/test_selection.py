"""Item (f) and the selection strategies: top-variance coordinates, SWAG vs dead ReLU units."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO
from subnet_models import dense_precision, mlp_data, mlp_model, random_loc

from pyro_subnet import SubnetWarning, SubnetworkLaplace


def _setup(**kw):
    x, y = mlp_data(n=16, seed=7)
    guide = SubnetworkLaplace(mlp_model, **kw)
    guide(x, y)
    random_loc(guide, seed=8, scale=0.6)
    G, P = dense_precision(guide.loc.detach(), x, 2, "normal")
    return guide, x, y, G + P


def test_wasserstein_diag_laplace_picks_top_variances():
    guide, x, y, prec = _setup(subnetwork_size=7, selection="wasserstein", variance="diag_laplace")
    post = guide.laplace_approximation(x, y)
    var = prec.diagonal().reciprocal()
    assert torch.allclose(guide.marginal_variance, var, rtol=1e-10)
    assert post.subnetwork_indices.tolist() == torch.topk(var, 7).indices.sort().values.tolist()


def test_wasserstein_exact_variance():
    guide, x, y, prec = _setup(subnetwork_size=0.25, selection="wasserstein", variance="exact")
    post = guide.laplace_approximation(x, y)
    var = torch.linalg.inv(prec).diagonal()
    assert torch.allclose(guide.marginal_variance, var, rtol=1e-9)
    S = round(0.25 * len(var))
    assert post.subnetwork_indices.tolist() == torch.topk(var, S).indices.sort().values.tolist()
    # the same answer with the covariance of the subnetwork conditional on the rest
    assert torch.allclose(post.precision, prec[post.subnetwork_indices][:, post.subnetwork_indices], rtol=1e-10)


def test_other_strategies():
    guide, x, y, _ = _setup(subnetwork_size=5, selection="magnitude")
    D = guide.loc.numel()
    post = guide.laplace_approximation(x, y)
    assert post.subnetwork_indices.tolist() == torch.topk(guide.loc.abs(), 5).indices.sort().values.tolist()

    guide.selection = "random"
    a = guide.laplace_approximation(x, y).subnetwork_indices
    assert len(a) == 5 and len(set(a.tolist())) == 5 and a.max() < D

    guide.selection = ["b2", "sigma"]
    post = guide.laplace_approximation(x, y)
    assert post.subnetwork == [("b2", 0), ("b2", 1), ("sigma", 0)]
    assert post.subnetwork_indices.tolist() == [D - 3, D - 2, D - 1]

    mask = torch.zeros(D, dtype=torch.bool)
    mask[[3, 1, 20]] = True
    guide.selection = mask
    assert guide.laplace_approximation(x, y).subnetwork_indices.tolist() == [1, 3, 20]
    guide.selection = torch.tensor([20, 3, 1])
    assert guide.laplace_approximation(x, y).subnetwork_indices.tolist() == [1, 3, 20]


def relu_model(x, y=None):
    W1 = pyro.sample("W1", dist.Normal(0.0, 1.0).expand([4, 1]).to_event(2))
    b1 = pyro.sample("b1", dist.Normal(0.0, 1.0).expand([4]).to_event(1))
    W2 = pyro.sample("W2", dist.Normal(0.0, 1.0).expand([1, 4]).to_event(2))
    b2 = pyro.sample("b2", dist.Normal(0.0, 1.0).expand([1]).to_event(1))
    # unit 0 is dead on the data (|x| <= 1): its weights only see the prior
    h = torch.relu(x @ W1.T + b1 - torch.tensor([20.0, 0.0, 0.0, 0.0]))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(h @ W2.T + b2, 0.1).to_event(1), obs=y)


_RELU_MAP = {}


def _relu_map(selection, size):
    """The MAP of relu_model on fixed data, fitted once per test process (a fresh guide each call)."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, generator=g) * 2 - 1
    y = torch.sin(3 * x) + 0.1 * torch.randn(64, 1, generator=g)
    guide = SubnetworkLaplace(relu_model, subnetwork_size=size, selection=selection,
                              init_loc_fn=pyro.infer.autoguide.init_to_sample)
    if "loc" not in _RELU_MAP:
        svi = SVI(relu_model, guide, pyro.optim.Adam({"lr": 0.02}), Trace_ELBO())
        for _ in range(1500):
            svi.step(x, y)
        _RELU_MAP["loc"] = guide.loc.detach().clone()
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(_RELU_MAP["loc"])
    # unit 0, and any unit that died in training: W1[j, 0], b1[j], W2[0, j]
    m = guide.median()
    h = torch.relu(x @ m["W1"].T + m["b1"] - torch.tensor([20.0, 0.0, 0.0, 0.0]))
    units = [j for j in range(4) if (h[:, j] == 0).all()]
    return guide, x, y, sorted(i for j in units for i in (j, 4 + j, 8 + j))


@pytest.mark.slow
def test_swag_skips_dead_relu_unit_that_diag_laplace_picks():
    guide, x, y, dead = _relu_map("wasserstein", 3)
    assert 0 in dead and len(dead) < 12  # unit 0 is dead, not every unit
    guide.subnetwork_size = len(dead)
    post = guide.laplace_approximation(x, y)
    assert post.subnetwork_indices.tolist() == dead  # the prior variance 1 is the largest
    assert torch.allclose(guide.marginal_variance[dead], torch.ones(len(dead)), rtol=1e-12)

    guide.variance = "swag"
    guide.variance_options = {"lr": 0.01, "num_steps": 300, "batch_fraction": 0.1}
    post = guide.laplace_approximation(x, y)
    var = guide.marginal_variance
    assert not set(dead) & set(post.subnetwork_indices.tolist())
    live = torch.ones_like(var, dtype=torch.bool)
    live[dead] = False
    assert var[dead].max() < var[live].max() / 100


def test_swag_noise_comes_from_minibatches():
    """At the exact MAP of a linear-Gaussian model full-batch SGD stays put (zero variance);
    the spread SWAG measures comes from the random minibatch of each step."""
    from pyro_subnet import curvature, selection

    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 2, generator=g)
    y = x @ torch.tensor([1.0, -1.0]) + 0.5 * torch.randn(50, generator=g)

    def model(x, y=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(x @ w, 0.5), obs=y)

    guide = SubnetworkLaplace(model, 1)
    guide(x, y)
    prec = x.T @ x / 0.25 + torch.eye(2)
    u = torch.linalg.solve(prec, x.T @ y / 0.25)
    latent = curvature.LatentModel(guide, model, ["obs"], [], {})
    batches = [((x, y), {})]
    still = selection.swag_variance(latent, u, batches, lr=0.05, num_steps=50, batch_fraction=1.0)
    noisy = selection.swag_variance(latent, u, batches, lr=0.05, num_steps=50, batch_fraction=0.2)
    assert still.max() < 1e-12 and noisy.min() > 1e-4


def test_predictive_ranks_variance_times_jacobian_energy():
    guide, x, y, prec = _setup(subnetwork_size=7)  # the default selection
    assert guide.selection == "predictive"
    post = guide.laplace_approximation(x, y)
    u = guide.loc.detach()
    G, P = dense_precision(u, x, 2, "normal")
    energy = G.diagonal()
    assert torch.allclose(guide.jacobian_energy, energy, rtol=1e-10)
    score = energy / (energy + P.diagonal())
    assert post.subnetwork_indices.tolist() == torch.topk(score, 7).indices.sort().values.tolist()
    # the exact marginal variances instead of the diagonal ones
    guide.variance = "exact"
    post = guide.laplace_approximation(x, y)
    score = torch.linalg.inv(prec).diagonal() * energy
    assert post.subnetwork_indices.tolist() == torch.topk(score, 7).indices.sort().values.tolist()


def test_selection_sites_rank_within_the_sites():
    guide, x, y, prec = _setup(subnetwork_size=0.5, selection_sites=["W2", "W1"], variance="exact")
    blocks = torch.cat([torch.arange(0, 10), torch.arange(15, 25)])  # W1 (5 x 2), W2 (2 x 5)
    for selection in ["predictive", "wasserstein", "random", "magnitude"]:
        guide.selection = selection
        post = guide.laplace_approximation(x, y)
        assert len(post.subnetwork_indices) == 10 and set(post.subnetwork_indices.tolist()) <= set(blocks.tolist())
    # exact variances of the weights-only posterior: the other latents held at the MAP
    guide.selection = "wasserstein"
    post = guide.laplace_approximation(x, y)
    var = torch.linalg.inv(prec[blocks][:, blocks]).diagonal()
    assert torch.allclose(guide.marginal_variance[blocks], var, rtol=1e-9)
    assert (guide.marginal_variance[~torch.isin(torch.arange(len(prec)), blocks)] == 0).all()
    assert post.subnetwork_indices.tolist() == blocks[torch.topk(var, 10).indices].sort().values.tolist()
    # the paper's S / D counts the candidates (20 weights), not every latent coordinate
    guide.prior_scale = ("subnet", 3.0)
    post = guide.laplace_approximation(x, y)
    assert post.prior_scale == pytest.approx(3.0 * 10 / 20, rel=1e-12)
    assert torch.allclose(post.precision, post._curvature.precision(1.5), rtol=1e-12)

    guide.selection_sites = ["W3"]
    with pytest.raises(ValueError, match="unknown latent sites"):
        guide.laplace_approximation(x, y)
    guide.selection_sites, guide.selection = ["W1"], ["W1"]
    with pytest.raises(ValueError, match="selection_sites"):
        guide.laplace_approximation(x, y)
    with pytest.raises(TypeError, match="selection_sites"):
        SubnetworkLaplace(mlp_model, 3, selection_sites="W1")


def test_last_layer_is_the_last_matrix_and_its_bias():
    """sigma is sampled after W2 but feeds the scale, not the loc: it is not in the last layer."""
    guide, x, y, _ = _setup(selection="last_layer")
    post = guide.laplace_approximation(x, y)
    assert sorted({s for s, _ in post.subnetwork}) == ["W2", "b2"]
    assert len(post.subnetwork_indices) == 2 * 5 + 2
    guide.subnetwork_size = 3
    with pytest.raises(ValueError, match="last_layer"):
        guide.laplace_approximation(x, y)


def test_predictive_never_picks_dead_relu_units_that_wasserstein_picks():
    guide, x, y, dead = _relu_map("wasserstein", 3)
    guide.subnetwork_size = len(dead)
    assert guide.laplace_approximation(x, y).subnetwork_indices.tolist() == dead  # the paper's rule
    guide.selection = "predictive"
    post = guide.laplace_approximation(x, y)
    assert not set(dead) & set(post.subnetwork_indices.tolist())
    assert (guide.jacobian_energy[dead] == 0).all()
    assert (guide.jacobian_energy[post.subnetwork_indices] > 0).all()
    # asked for more than the data see: the seen coordinates only, with a warning
    D = guide.loc.numel()
    guide.subnetwork_size = D - 1
    with pytest.warns(SubnetWarning, match="nonzero Jacobian"):
        post = guide.laplace_approximation(x, y)
    assert post.subnetwork_indices.tolist() == sorted(set(range(D)) - set(dead))
