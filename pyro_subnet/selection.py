r"""
Subnetwork selection: which S of the D latent coordinates get a full-covariance posterior.

Daxberger et al. (2021) choose the subnetwork that minimizes the Wasserstein-2 distance between
the subnetwork posterior and the full-network posterior. Under a diagonal approximation of the
latter this is

.. math::

    \min_S \sum_{d \notin S} \sigma_d^2 \quad\Longleftrightarrow\quad
    S = \text{the } S \text{ coordinates with the largest marginal variance } \sigma_d^2,

with :math:`\sigma_d^2` from a diagonal Laplace approximation (``1 / diag(GGN + P)``), from
diagonal SWAG (Maddox et al., 2019) or, for small D, the diagonal of the full inverse.

**References**

[1] E. Daxberger et al., "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
[2] W. Maddox, T. Garipov, P. Izmailov, D. Vetrov, A. G. Wilson, "A Simple Baseline for Bayesian
    Uncertainty in Deep Learning", NeurIPS 2019.
"""

import warnings

import torch
from pyro.distributions.util import scale_and_mask

from . import curvature, prior

STRATEGIES = ("wasserstein", "random", "magnitude")
VARIANCES = ("diag_laplace", "swag", "exact")
EXACT_MAX_DIM = 4096


def resolve_size(subnetwork_size, D):
    """A count in ``[1, D]`` from a count or a fraction of D."""
    if isinstance(subnetwork_size, bool) or not isinstance(subnetwork_size, (int, float)):
        raise TypeError(
            f"subnetwork_size must be an int (a count) or a float in (0, 1] (a fraction of the "
            f"{D} latent coordinates), got {subnetwork_size!r}"
        )
    if isinstance(subnetwork_size, float):
        if not 0 < subnetwork_size <= 1:
            raise ValueError(f"subnetwork_size as a fraction must lie in (0, 1], got {subnetwork_size}")
        return max(1, int(round(subnetwork_size * D)))
    if not 1 <= subnetwork_size <= D:
        raise ValueError(
            f"subnetwork_size must be between 1 and the number of latent coordinates D={D}, "
            f"got {subnetwork_size}; pass a smaller count or a fraction"
        )
    return subnetwork_size


def explicit(selection, D, blocks):
    """Indices from a list of site names, an index tensor or a boolean mask; else ``None``."""
    if isinstance(selection, (list, tuple)) and all(isinstance(s, str) for s in selection):
        if not selection:
            raise ValueError("selection is an empty list of sites; name at least one latent site")
        unknown = [s for s in selection if s not in blocks]
        if unknown:
            raise ValueError(f"selection names unknown latent sites {unknown}; latent sites are {list(blocks)}")
        return torch.cat([torch.arange(*blocks[s]) for s in selection]).sort().values
    if isinstance(selection, (list, tuple)) or torch.is_tensor(selection):
        idx = torch.as_tensor(selection)
        if idx.dtype == torch.bool:
            if idx.shape != (D,):
                raise ValueError(f"a boolean selection mask must have shape ({D},), got {tuple(idx.shape)}")
            idx = idx.nonzero().reshape(-1)
        elif idx.dtype.is_floating_point or idx.dim() != 1:
            raise TypeError("an index selection must be a 1-d integer tensor (or a boolean mask)")
        if idx.numel() == 0:
            raise ValueError("the selection is empty; select at least one coordinate")
        if idx.min() < 0 or idx.max() >= D:
            raise ValueError(f"selection indices must lie in [0, {D}), got range [{idx.min()}, {idx.max()}]")
        idx = idx.long().sort().values
        if (idx[1:] == idx[:-1]).any():
            raise ValueError("selection indices contain duplicates; pass each coordinate once")
        return idx
    return None


def top(scores, size):
    """Indices of the ``size`` largest scores, sorted ascending by index."""
    return torch.topk(scores, size).indices.sort().values


def diag_laplace_variance(latent, u_hat, batches, prior_scale=1.0, max_rows=None):
    r"""Marginal variances ``1 / diag(GGN + prior_scale * P + Q)`` over all D coordinates
    (:math:`Q`: the ``pyro.factor`` terms, see :mod:`pyro_subnet.prior`)."""
    prec = curvature.ggn_diagonal(latent, u_hat, batches, max_rows)
    prec = prec + prior.prior_hessian_diagonal(latent, u_hat, batches, prior_scale)
    if (prec <= 0).any():
        warnings.warn(
            f"{int((prec <= 0).sum())} coordinates have a non-positive diagonal precision (flat or "
            "improper prior with no data information); they rank as the most uncertain",
            RuntimeWarning,
        )
    return torch.where(prec > 0, prec.reciprocal(), torch.full_like(prec, float("inf")))


def exact_variance(latent, u_hat, batches, prior_scale=1.0, max_rows=None):
    """Diagonal of the inverse of the full ``D x D`` precision (small D only)."""
    D = u_hat.numel()
    if D > EXACT_MAX_DIM:
        raise ValueError(
            f'variance="exact" builds a D x D matrix and is limited to D <= {EXACT_MAX_DIM} (here '
            f'D={D}); use variance="diag_laplace" or "swag"'
        )
    idx = torch.arange(D, device=u_hat.device)
    prec = curvature.ggn(latent, u_hat, idx, batches, max_rows)
    prior.prior_hessian(latent, u_hat, idx, batches, max_rows, out=prec, scale=prior_scale)
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
            lp = scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"]).reshape(-1)
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
