"""The cases of explorers.py: their models and data in Pyro (torch imported inside each function),
the draws as arrays, and the NumPyro worker's run of the logistic regression (no torch)."""

import json
import math
import os
import sys
import time

import numpy as np

from vs_numpyro import XLA_FLAGS

NUM_DATA, NUM_FEATURES = 500, 10
SCHOOLS_Y = (28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0)
SCHOOLS_SIGMA = (15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0)


# ----- the NumPyro side (no torch) -----

def numpyro_worker(data_path):
    """One NumPyro NUTS run of the logistic regression per stdin line (JSON: seed, warmup,
    samples, chains); replies with its seconds and the path of its draws ``[chains, draws,
    11]`` (the coefficients, then the intercept)."""
    os.environ["XLA_FLAGS"] = XLA_FLAGS
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(x, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)

    data = np.load(data_path)
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
    print(json.dumps({"jax": jax.__version__, "numpyro": numpyro.__version__}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        begin = time.perf_counter()
        mcmc = MCMC(NUTS(model), num_warmup=job["warmup"], num_samples=job["samples"],
                    num_chains=job["chains"], chain_method="sequential", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(job["seed"]), x, y, extra_fields=("num_steps",))
        draws = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
        seconds = time.perf_counter() - begin
        out = os.path.join(os.path.dirname(data_path), f"numpyro_{job['seed']}_{job['chains']}.npy")
        np.save(out, np.concatenate([np.asarray(draws["w"]), np.asarray(draws["b"])[..., None]],
                                    -1))
        steps = np.asarray(mcmc.get_extra_fields()["num_steps"])
        print(json.dumps({"seconds": seconds, "path": out, "leapfrogs": float(steps.mean())}),
              flush=True)


# ----- models and data (Pyro) -----

def logistic_data():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_DATA, NUM_FEATURES, generator=g)
    w, b = torch.randn(NUM_FEATURES, generator=g), 0.5
    y = torch.bernoulli(torch.sigmoid(x @ w + b), generator=g)
    return x, y


def logistic(x, y):
    import torch
    import pyro
    import pyro.distributions as dist

    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0), 1.0))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)


def logistic_draws(samples):
    """``[draws, 11]``: the coefficients, then the intercept."""
    return np.concatenate([samples["w"].numpy(), samples["b"].numpy()[:, None]], -1)


def mixture_data(centers, per_center, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.cat([c + torch.randn(per_center, generator=g) for c in centers])


def mixture(y, scale, k):
    """Equal-weight mixture of ``k`` unit-variance components, ``mu ~ Normal(0, scale^2 I_k)``."""
    import torch
    import pyro
    import pyro.distributions as dist

    mu = pyro.sample("mu", dist.Normal(torch.zeros(k), scale).to_event(1))
    components = dist.Normal(mu, 1.0).log_prob(y[:, None]) - math.log(k)
    pyro.factor("mixture", torch.logsumexp(components, -1).sum())


def mix2(y):
    mixture(y, 10.0, 2)


def mix3(y):
    mixture(y, 5.0, 3)


def schools(y, sigma):
    import torch
    import pyro
    import pyro.distributions as dist

    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0), 5.0))
    tau = pyro.sample("tau", dist.HalfCauchy(torch.tensor(5.0)))
    with pyro.plate("schools", y.shape[0]):
        theta_tilde = pyro.sample("theta_tilde", dist.Normal(torch.tensor(0.0), 1.0))
        pyro.sample("y", dist.Normal(mu + tau * theta_tilde, sigma), obs=y)


def schools_draws(samples):
    return np.concatenate([samples["mu"].numpy()[:, None], samples["tau"].numpy()[:, None],
                           samples["theta_tilde"].numpy()], -1)
