"""Small models shared by the subnet tests, with hand-written references (no pyro_subnet code)."""

import pyro
import pyro.distributions as dist
import torch
from torch.func import hessian, jacrev

H, DIN, LO, HI = 5, 2, 0.1, 2.0


def mlp(x, W1, b1, W2, b2):
    return torch.tanh(x @ W1.T + b1) @ W2.T + b2


def sample_mlp(x, k):
    """The latent weights W1, b1, W2, b2 (Normal(0, 1) priors) and the MLP's output at ``x``."""
    W1 = pyro.sample("W1", dist.Normal(0.0, 1.0).expand([H, DIN]).to_event(2))
    b1 = pyro.sample("b1", dist.Normal(0.0, 1.0).expand([H]).to_event(1))
    W2 = pyro.sample("W2", dist.Normal(0.0, 1.0).expand([k, H]).to_event(2))
    b2 = pyro.sample("b2", dist.Normal(0.0, 1.0).expand([k]).to_event(1))
    return mlp(x, W1, b1, W2, b2)


def mlp_model(x, y=None, k=2, likelihood="normal"):
    """A one-hidden-layer tanh MLP; Normal(., sigma) with sigma ~ Uniform(LO, HI), or Categorical."""
    f = sample_mlp(x, k)
    if likelihood == "normal":
        sigma = pyro.sample("sigma", dist.Uniform(LO, HI))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(f, sigma).to_event(1), obs=y)
    else:
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Categorical(logits=f), obs=y)


def unpack(u, k):
    """The flat unconstrained vector in the prototype order: W1, b1, W2, b2[, sigma]."""
    sizes = [H * DIN, H, k * H, k]
    parts = list(torch.split(u[: sum(sizes)], sizes))
    W1, b1, W2, b2 = parts[0].reshape(H, DIN), parts[1], parts[2].reshape(k, H), parts[3]
    return W1, b1, W2, b2, u[sum(sizes):]


def dense_precision(u, x, k, likelihood):
    """Dense linearized-Laplace precision over all coordinates: GGN + Hessian of -log prior."""

    def outputs(u):
        W1, b1, W2, b2, rest = unpack(u, k)
        f = mlp(x, W1, b1, W2, b2)
        if likelihood == "normal":
            log_sigma = torch.log(LO + (HI - LO) * torch.sigmoid(rest[0]))
            return f, log_sigma.expand_as(f)
        return f, None

    f, log_sigma = outputs(u)
    Jf = jacrev(lambda u: outputs(u)[0])(u)  # [N, k, D]
    if likelihood == "normal":
        sigma = log_sigma.exp()
        Js = jacrev(lambda u: outputs(u)[1])(u)
        G = torch.einsum("nkd,nk,nke->de", Jf, sigma**-2, Jf) + 2 * torch.einsum("nkd,nke->de", Js, Js)
    else:
        p = torch.softmax(f, -1)
        F = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
        G = torch.einsum("nkd,nkl,nle->de", Jf, F, Jf)

    def log_prior(u):
        W1, b1, W2, b2, rest = unpack(u, k)
        lp = sum(torch.distributions.Normal(0.0, 1.0).log_prob(t).sum() for t in (W1, b1, W2, b2))
        if likelihood == "normal":
            s = torch.sigmoid(rest[0])
            # Uniform density is constant; the log|det J| of u -> LO + (HI-LO) sigmoid(u) is not
            lp = lp + torch.log(torch.tensor(HI - LO)) + torch.log(s) + torch.log1p(-s)
        return lp

    return G, -hessian(log_prior)(u)


def mlp_data(n=12, k=2, likelihood="normal", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, DIN, generator=g)
    if likelihood == "normal":
        y = torch.sin(2 * x[:, :1]) + 0.1 * torch.randn(n, k, generator=g)
    else:
        y = torch.randint(0, k, (n,), generator=g)
    return x, y


def random_loc(guide, seed=1, scale=0.7):
    """Puts the guide's MAP at a fixed random point (the formulas hold at any point)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        guide.loc.copy_(scale * torch.randn(guide.loc.shape, generator=g, dtype=guide.loc.dtype))


SIGMA = 0.5


def linreg(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Normal(x @ w, SIGMA), obs=y)


def linreg_posterior(x, y):
    """The exact posterior mean and precision of ``linreg``'s weights."""
    H = x.T @ x / SIGMA**2 + torch.eye(x.shape[1], dtype=x.dtype)
    return torch.linalg.solve(H, x.T @ y / SIGMA**2), H
