"""Several observed sites add up; plate subsample scaling and masks weigh the Fisher;
prior_scale multiplies P_S (``"subnet"``: by S / D)."""

import pyro
import pyro.distributions as dist
import torch

from pyro_subnet import SubnetworkLaplace


def two_site_model(x, y1=None, y2=None, mask=None):
    w = pyro.sample("w", dist.Normal(0.0, 0.5).expand([2]).to_event(1))
    v = pyro.sample("v", dist.Normal(0.0, 2.0))
    with pyro.plate("reg", 100, subsample=torch.arange(x.shape[0])):  # scale 100 / n
        pyro.sample("y1", dist.Normal(x @ w, 0.5), obs=y1)
    with pyro.plate("cls", x.shape[0]), pyro.poutine.mask(mask=mask):
        pyro.sample("y2", dist.Bernoulli(logits=x @ w * v), obs=y2)


def test_sites_scale_mask_and_prior_scale():
    g = torch.Generator().manual_seed(0)
    n = 10
    x = torch.randn(n, 2, generator=g)
    y1 = torch.randn(n, generator=g)
    y2 = torch.bernoulli(torch.full((n,), 0.5), generator=g)
    mask = torch.arange(n) % 2 == 0
    guide = SubnetworkLaplace(two_site_model, subnetwork_size=1.0)
    guide(x, y1, y2, mask)
    with torch.no_grad():
        guide.loc.copy_(torch.tensor([0.3, -0.7, 1.3]))
    w, v = guide.loc[:2].detach(), guide.loc[2].detach()
    post = guide.laplace_approximation(x, y1, y2, mask)

    # by hand: Jacobian of the Bernoulli logits x.w v w.r.t. (w, v) is (v x, x.w)
    G = torch.zeros(3, 3)
    G[:2, :2] += (100 / n) * x.T @ x / 0.25
    f = x @ w
    p = torch.sigmoid(f * v)
    J = torch.cat([v * x, f[:, None]], 1)[mask]
    G += J.T @ (J * (p * (1 - p))[mask][:, None])
    P = torch.diag(torch.tensor([4.0, 4.0, 0.25]))
    assert torch.allclose(post.precision, G + P, rtol=1e-10)

    guide.prior_scale = 3.0
    assert torch.allclose(guide.laplace_approximation(x, y1, y2, mask).precision, G + 3 * P, rtol=1e-10)
    guide.prior_scale, guide.selection = "subnet", ["w"]
    sub = guide.laplace_approximation(x, y1, y2, mask).precision
    assert torch.allclose(sub, (G + 2 / 3 * P)[:2, :2], rtol=1e-10)


def glm_sites_model(x, y_pois, y_bern, y_cat, m):
    a = pyro.sample("a", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    b = pyro.sample("b", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    C = pyro.sample("C", dist.Normal(0.0, 1.0).expand([3, 2]).to_event(2))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("pois", dist.Poisson((x @ a).exp()).mask(m), obs=y_pois)  # a masked distribution
        pyro.sample("bern", dist.Bernoulli(probs=torch.sigmoid(x @ b)), obs=y_bern)  # probs, not logits
        pyro.sample("cat", dist.Categorical(probs=torch.softmax(x @ C.T, -1)), obs=y_cat)


def test_poisson_masked_distribution_and_probs_parametrizations():
    g = torch.Generator().manual_seed(1)
    n = 12
    x = torch.randn(n, 2, generator=g)
    data = (torch.poisson(torch.ones(n), generator=g), torch.bernoulli(torch.full((n,), 0.5), generator=g),
            torch.randint(0, 3, (n,), generator=g), torch.arange(n) % 3 != 0)
    guide = SubnetworkLaplace(glm_sites_model, subnetwork_size=1.0)
    guide(x, *data)
    with torch.no_grad():
        guide.loc.copy_(0.5 * torch.randn(10, generator=g))
    u = guide.loc.detach()
    post = guide.laplace_approximation(x, *data)

    # GLMs: J is x (Kronecker with the classes for C); Fisher rate, p(1-p), diag(p) - p p^T
    m = data[3].double()
    prec = torch.eye(10)
    prec[:2, :2] += x.T @ (x * (m * (x @ u[:2]).exp())[:, None])
    p = torch.sigmoid(x @ u[2:4])
    prec[2:4, 2:4] += x.T @ (x * (p * (1 - p))[:, None])
    q = torch.softmax(x @ u[4:].reshape(3, 2).T, -1)
    F = torch.diag_embed(q) - q[:, :, None] * q[:, None, :]
    prec[4:, 4:] += torch.einsum("nkl,ni,nj->kilj", F, x, x).reshape(6, 6)
    assert torch.allclose(post.precision, prec, rtol=1e-10)
