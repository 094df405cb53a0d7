r"""
Marginal posterior variances of every candidate coordinate, the input of the rankings in
:mod:`pyro_subnet.selection`: diagonal Laplace (``1 / diag(GGN + P)``), the diagonal of the full
inverse (small D only), or diagonal SWAG (Maddox et al., 2019).

**References**

[1] W. Maddox, T. Garipov, P. Izmailov, D. Vetrov, A. G. Wilson, "A Simple Baseline for Bayesian
    Uncertainty in Deep Learning", NeurIPS 2019.
"""

import warnings

import torch

from pyro_arviz.sites import scored_log_prob

from . import curvature, prior
from .comm import LocalComm
from .warning import SubnetWarning

EXACT_MAX_DIM = 4096


def jacobian_energy(latent, u_hat, idx, batches, max_rows=None):
    r"""
    :math:`\sum_n J_{dn}^\top F_n J_{dn}` for each coordinate ``d`` of ``idx``: the diagonal of
    the GGN there, without an ``S x S`` matrix. Zero means that the observed sites' parameters do
    not move with ``d`` on these data (a dead ReLU unit's weights).
    """
    d = u_hat.new_zeros(len(idx))
    for G in curvature.fisher_rows(latent, u_hat, idx, batches, max_rows):
        d += G.pow(2).sum(0)
    return d


def diag_precision(latent, u_hat, batches, prior_scale, idx, energy, comm=LocalComm()):
    """``diag(GGN + prior_scale * P + Q)`` on ``idx`` in float64, from the GGN diagonal
    ``energy`` there (float64: ``energy / precision`` ranks coordinates whose data term dwarfs
    the prior, where float32 rounds the ratio to 1). Across processes (``comm``) ``energy`` is
    the sum over the ranks already; the factors' ``Q``, a sum over data too, is summed here."""
    q = u_hat.new_zeros(u_hat.numel())
    p = prior.prior_hessian_diagonal(latent, u_hat, batches, prior_scale, factors_out=q)[idx]
    if latent.factors:
        p = p + comm.all_reduce_sum(q[idx], "sum of the factors' Hessian diagonal")
    prec = energy.double() + p.double()
    if (prec <= 0).any():
        warnings.warn(
            f"{int((prec <= 0).sum())} coordinates have a non-positive diagonal precision (flat or "
            "improper prior with no data information); they rank as the most uncertain: give their sites a "
            "proper prior, or leave them out of selection_sites",
            SubnetWarning,
        )
    return prec


def diag_laplace_variance(latent, u_hat, batches, prior_scale=1.0, max_rows=None, idx=None, energy=None):
    r"""Marginal variances ``1 / diag(GGN + prior_scale * P + Q)`` on the coordinates ``idx``
    (all D by default; :math:`Q`: the ``pyro.factor`` terms, see :mod:`pyro_subnet.prior`);
    infinite where that precision is not positive. ``energy`` is the GGN diagonal on ``idx``
    when already computed (:func:`jacobian_energy`)."""
    if idx is None:
        idx = torch.arange(u_hat.numel(), device=u_hat.device)
    if energy is None:
        energy = jacobian_energy(latent, u_hat, idx, batches, max_rows)
    prec = diag_precision(latent, u_hat, batches, prior_scale, idx, energy)
    return torch.where(prec > 0, prec.reciprocal(), torch.full_like(prec, float("inf"))).to(u_hat.dtype)


def exact_variance(latent, u_hat, batches, prior_scale=1.0, max_rows=None, idx=None, comm=LocalComm()):
    """Diagonal of the inverse of the full precision on the coordinates ``idx`` (all D by
    default; the others held at the MAP), a ``len(idx)`` squared matrix: small sizes only.
    Across processes (``comm``) its data terms are summed over the ranks."""
    if idx is None:
        idx = torch.arange(u_hat.numel(), device=u_hat.device)
    if len(idx) > EXACT_MAX_DIM:
        raise ValueError(
            f'variance="exact" builds a D x D matrix and is limited to D <= {EXACT_MAX_DIM} (here '
            f'D={len(idx)}); use variance="diag_laplace" or "swag"'
        )
    data = curvature.ggn(latent, u_hat, idx, batches, max_rows)
    prec = prior.prior_hessian(latent, u_hat, idx, batches, max_rows, scale=prior_scale, factors_out=data)
    prec += comm.all_reduce_sum(data, "sum of the curvature")
    chol, info = torch.linalg.cholesky_ex(prec)
    if info != 0:
        raise ValueError("the full precision is not positive definite; use another variance estimator")
    return torch.cholesky_inverse(chol).diagonal()


def swag_variance(latent, u_hat, batches, lr=1e-3, num_steps=500, batch_fraction=0.1, generator=None):
    r"""
    Diagonal SWAG: the variance of the iterates of constant-step SGD started at the MAP.

    The loss is minus the log joint in unconstrained space divided by the number of observed
    elements; each step uses the next call of ``batches`` and, within it, a random subset of
    ``batch_fraction`` of the observed elements (rescaled), which supplies the gradient noise.
    Coordinates that the data cannot move (the weights of a dead ReLU unit) only follow the
    prior's deterministic drift and get a near-zero variance.

    :param float lr: SGD step size.
    :param int num_steps: number of SGD steps, all of them collected.
    :param float batch_fraction: fraction of observed elements per step, in (0, 1].
    """
    if not (0 < batch_fraction <= 1):
        raise ValueError(f"batch_fraction must lie in (0, 1], got {batch_fraction}")
    if not (lr > 0 and num_steps >= 2):
        raise ValueError(f"SWAG needs lr > 0 and num_steps >= 2, got lr={lr}, num_steps={num_steps}")
    u = u_hat.detach().clone().requires_grad_(True)
    num_obs = None
    mean = torch.zeros_like(u_hat)
    sq = torch.zeros_like(u_hat)
    for step in range(num_steps):
        k = step % len(batches)
        args, kwargs = batches[k]
        tr, logdet = latent.trace(u, args, kwargs)
        lik, n_total = 0.0, 0
        for name in latent.observed:
            site = tr.nodes[name]
            lp = scored_log_prob(site).reshape(-1)
            n = lp.numel()
            m = max(1, int(round(batch_fraction * n)))
            keep = torch.randperm(n, generator=generator)[:m].to(lp.device)
            lik = lik + lp[keep].sum() * (n / m)
            n_total += n
        if num_obs is None:
            num_obs = max(1, n_total * len(batches))
        # each call stands for 1/len(batches) of the data set, its factor terms too
        lik = lik + latent.log_prior(tr, logdet, prior=False)
        loss = -(latent.log_prior(tr, logdet, factors=False) + lik * len(batches)) / num_obs
        (g,) = torch.autograd.grad(loss, u)
        if not torch.isfinite(g).all():
            raise ValueError(
                f"SWAG diverged at step {step} (non-finite gradient); lower variance_options['lr'] "
                f"(now {lr}) or check the MAP"
            )
        with torch.no_grad():
            u -= lr * g
            mean += u
            sq += u * u
    mean /= num_steps
    return (sq / num_steps - mean**2).clamp(min=0)
