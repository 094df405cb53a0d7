"""A tempered Gaussian with exact posteriors for every beta, the batched potential the
BatchedHMC tests run, with a runner and the batch-means check of draws against the posterior."""

import math

import torch

from pyro_pt.explorers.hmc import BatchedHMC

F64 = torch.float64


class TemperedGaussian:
    """
    A conjugate model with a diagonal, anisotropic posterior: ``z_d ~ N(0, s_d^2)`` and
    ``y_nd ~ N(z_d, sigma_d^2)``. Batched and row-independent (elementwise ops and short
    per-row sums), so a row's potential is bitwise the same in any batch.
    """

    def __init__(self, prior_scale, noise, y, tempered_prior=False):
        self.s2 = torch.as_tensor(prior_scale, dtype=F64) ** 2
        self.sigma2 = torch.as_tensor(noise, dtype=F64) ** 2
        self.y = torch.as_tensor(y, dtype=F64)
        self.tempered_prior = tempered_prior  # a bug: beta also on the prior

    def __call__(self, z, betas):
        s2, sigma2, y = (t.to(z) for t in (self.s2, self.sigma2, self.y))
        lp = -0.5 * (z * z / s2).sum(-1)
        resid = y[None] - z[:, None, :]
        ll = -0.5 * (resid * resid / sigma2).sum((-1, -2))
        grad_lp = -z / s2
        grad_ll = (resid / sigma2).sum(1)
        prior_weight = betas[:, None] if self.tempered_prior else 1.0
        potential = -(lp * (betas if self.tempered_prior else 1.0) + betas * ll)
        return potential, -(prior_weight * grad_lp + betas[:, None] * grad_ll), ll

    def posterior(self, beta):
        """Exact mean and variance of ``exp(lp + beta * ll)`` (diagonal)."""
        precision = 1.0 / self.s2 + beta * self.y.shape[0] / self.sigma2
        return beta * (self.y / self.sigma2).sum(0) / precision, 1.0 / precision


def gaussian(tempered_prior=False):
    # Posterior standard deviations from ~0.1 to ~2: a unit mass matrix would need tiny steps.
    y = torch.tensor([[0.3, 1.5, -0.4], [0.1, -2.0, 0.2], [0.4, 0.7, -1.1], [0.2, 2.5, 0.0]])
    return TemperedGaussian([1.0, 2.0, 0.5], [0.2, 3.0, 1.0], y, tempered_prior)


def run(potential, betas, seeds, warmup, samples, start=None, **kwargs):
    hmc = BatchedHMC(potential, **kwargs)
    z = torch.zeros(len(betas), 3, dtype=F64) if start is None else start.clone()
    hmc.setup(z, torch.tensor(betas, dtype=F64), seeds, warmup)
    draws, lls = [], []
    for t in range(warmup + samples):
        (z, ll), _ = hmc.step(z)
        if t >= warmup:
            draws.append(z)
            lls.append(ll)
    return hmc, torch.stack(draws), torch.stack(lls)


def batch_means_z_scores(series, exact, num_batches=40):
    """(mean - exact) / MCSE per column, the MCSE from batch means (autocorrelation-robust)."""
    n = series.shape[0] // num_batches * num_batches
    means = series[:n].reshape(num_batches, -1, *series.shape[1:]).mean(1)
    mcse = means.std(0) / math.sqrt(num_batches)
    return (means.mean(0) - exact) / mcse


def assert_matches_posterior(target, betas, draws, tolerance=4.5):
    for r, beta in enumerate(betas):
        mean, var = target.posterior(beta)
        z = draws[:, r]
        mean_z = batch_means_z_scores(z, mean)
        var_z = batch_means_z_scores((z - mean) ** 2, var)
        assert mean_z.abs().max() < tolerance, (r, beta, mean_z)
        assert var_z.abs().max() < tolerance, (r, beta, var_z)


BETAS = [1.0, 0.5, 0.2, 0.05]
SEEDS = [11, 12, 13, 14]
