"""Small models with exact answers, shared by the pyro_pt tests (module level: they pickle)."""

import math

import torch

import pyro
import pyro.distributions as dist


# ----- conjugate Bayesian linear regression: w ~ N(0, prior_scale^2 I), y ~ N(X w, noise^2) -----

PRIOR_SCALE = 0.6
NOISE = 1.0


def linear_data(num_points=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_points, 2, generator=generator, dtype=torch.float64)
    x[:, 1] = 0.6 * x[:, 0] + 0.8 * x[:, 1]  # correlated features: a non-diagonal posterior
    y = x @ torch.tensor([0.7, -0.4], dtype=torch.float64)
    y = y + NOISE * torch.randn(num_points, generator=generator, dtype=torch.float64)
    return x, y


def linear_model(x, y):
    zero = torch.zeros(2, dtype=x.dtype)
    w = pyro.sample("w", dist.Normal(zero, PRIOR_SCALE).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(w @ x.T, NOISE), obs=y)  # w @ x.T vectorizes over draws


def linear_posterior(x, y):
    """Exact posterior mean and covariance of ``w`` in ``linear_model``."""
    precision = torch.eye(2, dtype=x.dtype) / PRIOR_SCALE**2 + x.T @ x / NOISE**2
    covariance = torch.linalg.inv(precision)
    return covariance @ (x.T @ y) / NOISE**2, covariance


# ----- a bimodal posterior with unequal mode weights -----

MODES = (-2.0, 2.0)
MODE_WEIGHTS = (0.25, 0.75)
MODE_SCALE = 0.3
BIMODAL_PRIOR_SCALE = 3.0


def bimodal_log_likelihood(theta):
    """log(0.25 N(theta; -2, 0.3) + 0.75 N(theta; 2, 0.3)), as a pyro.factor (plain torch:
    this model is evaluated hundreds of thousands of times in the tests)."""
    const = -math.log(MODE_SCALE) - 0.5 * math.log(2 * math.pi)
    low, high = ((theta - m) / MODE_SCALE for m in MODES)
    return torch.logaddexp(
        math.log(MODE_WEIGHTS[0]) + const - 0.5 * low**2,
        math.log(MODE_WEIGHTS[1]) + const - 0.5 * high**2,
    )


def bimodal_model():
    theta = pyro.sample("theta", dist.Normal(torch.tensor(0.0), BIMODAL_PRIOR_SCALE))
    pyro.factor("mixture", bimodal_log_likelihood(theta))


def bimodal_mass_above_zero():
    """P(theta > 0) under the posterior, by quadrature on a fine grid."""
    grid = torch.linspace(-12, 12, 200001, dtype=torch.float64)
    log_density = dist.Normal(0.0, BIMODAL_PRIOR_SCALE).log_prob(grid)
    log_density = log_density + bimodal_log_likelihood(grid)
    density = torch.exp(log_density - log_density.max())
    return float(density[grid > 0].sum() / density.sum())


# ----- a model with a constrained latent, a factor, and scaling -----


def constrained_model(y):
    loc = pyro.sample("loc", dist.Normal(0.0, 5.0))
    scale = pyro.sample("scale", dist.LogNormal(0.0, 1.0))
    frac = pyro.sample("frac", dist.Beta(2.0, 3.0))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(loc, scale), obs=y)
    pyro.factor("penalty", -((frac - 0.3) ** 2))


# ----- a 10-dimensional conjugate Gaussian with analytic evidence -----


def gaussian_data(num_points=20, dim=10, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return 0.5 + torch.randn(num_points, dim, generator=generator, dtype=torch.float64)


def gaussian_model(y):
    z = pyro.sample("z", dist.Normal(torch.zeros(y.shape[1], dtype=y.dtype), 1.0).to_event(1))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(z, 1.0).to_event(1), obs=y)


def gaussian_log_evidence(y):
    """log p(y) of ``gaussian_model``: per dimension, y[:, j] ~ N(0, I + 1 1^T)."""
    n = y.shape[0]
    cov = torch.eye(n, dtype=y.dtype) + 1.0
    return float(dist.MultivariateNormal(torch.zeros(n, dtype=y.dtype), cov).log_prob(y.T).sum())


# ----- a sum of two latents: the data fix theta_1 + theta_2, the prior alone theta_1 - theta_2 -----

SUM_PRIOR_SCALE = 10.0


def sum_data(num_points=50, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return 1.5 + torch.randn(num_points, generator=generator, dtype=torch.float64)


def sum_model(y):
    zero = torch.zeros(2, dtype=y.dtype)
    theta = pyro.sample("theta", dist.Normal(zero, SUM_PRIOR_SCALE).to_event(1))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(theta.sum(-1, keepdim=True), 1.0), obs=y)


def sum_posterior(y):
    """Exact posterior mean [2] and covariance [2, 2] of theta in ``sum_model``."""
    ones = torch.ones(y.shape[0], 2, dtype=y.dtype)
    precision = torch.eye(2, dtype=y.dtype) / SUM_PRIOR_SCALE**2 + ones.T @ ones
    covariance = torch.linalg.inv(precision)
    return covariance @ (ones.T @ y), covariance


def sum_log_evidence(y):
    """log p(y) of ``sum_model``: y ~ N(0, I + 2 s^2 1 1^T)."""
    n = y.shape[0]
    cov = torch.eye(n, dtype=y.dtype) + 2 * SUM_PRIOR_SCALE**2
    return float(dist.MultivariateNormal(torch.zeros(n, dtype=y.dtype), cov).log_prob(y))


def gaussian_tempered_ll_mean(mean, cov, log_z, q_mean, q_cov, beta):
    r"""
    For a Gaussian posterior :math:`N(\mu, \Sigma)` with evidence :math:`Z` and a Gaussian
    reference :math:`q = N(m, S)`: the mean of :math:`ll' = \log Z + \log N(z; \mu, \Sigma) -
    \log q(z)` under the rung at ``beta``, :math:`\propto q^{1-\beta} (Z N(\mu, \Sigma))^\beta`,
    a Gaussian of precision :math:`(1-\beta) S^{-1} + \beta \Sigma^{-1}`.
    """
    p_q, p_post = torch.linalg.inv(q_cov), torch.linalg.inv(cov)
    precision = (1 - beta) * p_q + beta * p_post
    cov_b = torch.linalg.inv(precision)
    mean_b = cov_b @ ((1 - beta) * p_q @ q_mean + beta * p_post @ mean)

    def expected_log_normal(mu, sigma, p):
        d = mean_b - mu
        return -0.5 * (torch.trace(p @ cov_b) + d @ p @ d + torch.logdet(2 * math.pi * sigma))

    return float(log_z + expected_log_normal(mean, cov, p_post)
                 - expected_log_normal(q_mean, q_cov, p_q))
