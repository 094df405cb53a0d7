r"""
The prior part of the subnetwork precision:

.. math::

    c\, P_S + Q_S, \qquad
    P_S = -\nabla^2_{u_S}\Big[\log p(T(u)) + \log|\det \partial T/\partial u|\Big]_{u=\hat u},
    \qquad Q_S = -\nabla^2_{u_S} \textstyle\sum \text{factors},

the Hessian of minus the model's own log prior (with the log-det-Jacobian of the transforms to
unconstrained space) on the S coordinates, times ``c = prior_scale``, plus the exact Hessian of
minus the ``pyro.factor`` terms, which are likelihood terms without a Fisher and so are not
scaled; and the diagonal of the same over all D coordinates for the selection.

:func:`prior_scale_multiplier` is the one place where the forms of ``prior_scale`` are read.
"""

import numbers

import torch
from torch.distributions import biject_to

from .curvature import _rows_per_pass
from .likelihoods import unwrap


def _separable(latent, u_hat, idx, args, kwargs):
    """
    Positions in ``idx`` whose rows of the prior Hessian are zero off the diagonal: coordinates
    of a site whose log density is elementwise, whose distribution does not depend on the
    subnetwork and on which no other latent site or factor depends. Found with one trace per
    site: which log densities require grad when only that site's coordinates do.
    """
    names = [n for n, (a, b) in latent.blocks.items() if ((idx >= a) & (idx < b)).any()]
    children = {}
    for name in names:
        a, b = latent.blocks[name]
        sel = (idx >= a) & (idx < b)
        delta = u_hat[idx[sel]].clone().requires_grad_(True)
        tr, _ = latent.trace(u_hat, args, kwargs, idx[sel], delta)
        children[name] = {
            other for other in latent.latent_names + latent.factors
            if other != name and tr.nodes[other]["fn"].log_prob(tr.nodes[other]["value"]).requires_grad
        }
    safe = torch.zeros(len(idx), dtype=torch.bool, device=idx.device)
    for name in names:
        if children[name] or any(name in c for c in children.values()) or not _elementwise(latent, name):
            continue
        a, b = latent.blocks[name]
        safe |= (idx >= a) & (idx < b)
    return safe


def _elementwise(latent, name):
    base = unwrap(latent.guide.prototype_trace.nodes[name]["fn"])[0]
    return base.event_shape == () and biject_to(base.support).codomain.event_dim == 0


FITTED = ("marglik", "marglik_per_site")


def prior_scale_multiplier(prior_scale, fraction=1.0, sites=False):
    r"""
    The multiplier :math:`c` of the model's prior precision that ``prior_scale`` stands for:

    - a positive number ``a``: :math:`c = a`;
    - ``"subnet"``: the paper's :math:`c = S / D` (``fraction``), i.e. :math:`\lambda_S = \lambda S / D`
      with :math:`\lambda` the model's own prior precision;
    - ``("subnet", a)``: :math:`c = a\, S / D`, the paper's rescaling of ``a`` times the model's
      prior precision (Daxberger et al. 2021 use :math:`\lambda = 3` on a unit prior: ``("subnet", 3.0)``);
    - ``"marglik"`` / ``"marglik_per_site"``: fitted by the Laplace evidence
      (:mod:`pyro_subnet.evidence`); returns ``None``;
    - with ``sites=True``, a dict ``{latent site: positive number}`` (per-site multipliers), returned as is.

    ``fraction`` is :math:`S / D` for the subnetwork posterior; the selection, which ranks
    coordinates of the full network, reads ``"subnet"`` forms with ``fraction=1``.
    """
    def positive(a):
        return isinstance(a, numbers.Real) and not isinstance(a, bool) and a > 0

    if isinstance(prior_scale, str) and prior_scale in FITTED:
        return None
    if isinstance(prior_scale, str) and prior_scale == "subnet":
        return float(fraction)
    if (isinstance(prior_scale, (tuple, list)) and len(prior_scale) == 2 and isinstance(prior_scale[0], str)
            and prior_scale[0] == "subnet" and positive(prior_scale[1])):
        return float(prior_scale[1]) * fraction
    if positive(prior_scale):
        return float(prior_scale)
    if sites and isinstance(prior_scale, dict) and all(positive(v) for v in prior_scale.values()):
        return {str(k): float(v) for k, v in prior_scale.items()}
    raise ValueError(
        'prior_scale must be a positive number, "subnet" (S / D), ("subnet", a) (a * S / D), '
        f'"marglik" or "marglik_per_site"{" or a dict of positive numbers per site" if sites else ""}; '
        f"got {prior_scale!r}"
    )


def _prior_gradients(latent, u_hat, idx, batches, scale):
    """
    Yields ``(x, g, c, is_prior)``: the variables ``x = u[idx]``, the gradient ``g`` w.r.t. them
    (with its graph, for a second differentiation) of a term that is not linear in them, and the
    term's multiplier ``c``: the log prior and log|det J| of the first batch (``c = scale``,
    ``is_prior``), then the factors of every batch (``c = 1``).
    """
    terms = [(batches[0], True, False, scale)] + [(b, False, True, 1.0) for b in batches if latent.factors]
    for (args, kwargs), with_prior, with_factors, c in terms:
        x = u_hat[idx].clone().requires_grad_(True)
        tr, logdet = latent.trace(u_hat, args, kwargs, idx, x)
        lp = latent.log_prior(tr, logdet, prior=with_prior, factors=with_factors)
        if not (torch.is_tensor(lp) and lp.requires_grad):
            continue
        (g,) = torch.autograd.grad(lp, x, create_graph=True)
        if g.requires_grad:
            yield x, g, c, with_prior


def prior_hessian(latent, u_hat, idx, batches, max_rows=None, out=None, scale=1.0, factors_out=None):
    r"""
    :math:`c P_S + Q_S` (see the module docstring) with ``c = scale``, an ``S x S`` tensor. The
    prior is taken from the first batch; factor sites are summed over all batches.

    Coordinates whose Hessian rows are diagonal (see :func:`_separable`; all weights of a BNN
    with an elementwise prior) get theirs from a single Hessian-vector product with the
    indicator vector; every other coordinate gets an exact row.

    :param torch.Tensor out: if given, the result is added to it in place (no second
        ``S x S`` matrix) and it is returned.
    :param torch.Tensor factors_out: if given, :math:`Q_S` is added to it in place instead, and
        the result is :math:`c P_S` alone (the evidence needs the two apart).
    """
    u_hat = u_hat.detach()
    S = len(idx)
    H = u_hat.new_zeros(S, S) if out is None else out
    per = max_rows or _rows_per_pass(latent, idx)
    safe = _separable(latent, u_hat, idx, *batches[0])
    rest = (~safe).nonzero().reshape(-1)
    for delta, g, c, is_prior in _prior_gradients(latent, u_hat, idx, batches, scale):
        target = H if is_prior or factors_out is None else factors_out
        vs = u_hat.new_zeros(len(rest), S)
        vs[torch.arange(len(rest), device=rest.device), rest] = 1
        if safe.any():
            vs = torch.cat([safe.to(u_hat.dtype)[None], vs])
        for a in range(0, len(vs), per):
            (rows,) = torch.autograd.grad(
                g, delta, vs[a : a + per], retain_graph=True, is_grads_batched=True,
                allow_unused=True, materialize_grads=True,
            )
            rows = rows * c
            if a == 0 and safe.any():
                target[safe, safe] -= rows[0][safe]  # the diagonal entries of the safe coordinates
                rows = rows[1:]
                a_rest = 0
            else:
                a_rest = a - int(safe.any())
            r = rest[a_rest : a_rest + len(rows)]
            target[r] -= rows
            target[:, r] -= rows.T
            target[r[:, None], r] += rows[:, r]  # counted twice above
    return H


def prior_hessian_diagonal(latent, u_hat, batches, scale=1.0, factors_out=None):
    r"""
    Diagonal of :math:`c P + Q` (``c = scale``) over all D coordinates with one Hessian-vector product per latent site
    (the indicator of the site's block). This is exact when, within each site, the log prior
    couples no two elements — true for the usual elementwise priors, hierarchical ones included.
    Sites whose unconstrained distribution has an event dimension are done exactly, one row per
    coordinate. With ``factors_out`` (a D-vector) the factors' :math:`Q` is added to it in place
    instead, and the result is :math:`c P` alone (a sum over data apart from the prior).
    """
    u_hat = u_hat.detach()
    D = u_hat.numel()
    d = u_hat.new_zeros(D)
    for u, g, c, is_prior in _prior_gradients(latent, u_hat, torch.arange(D, device=u_hat.device), batches, scale):
        target = d if is_prior or factors_out is None else factors_out
        for name, (a, b) in latent.blocks.items():
            elementwise = _elementwise(latent, name)
            if elementwise:
                v = torch.zeros_like(u_hat)
                v[a:b] = 1
                vs = v[None]
            else:
                vs = torch.eye(D, dtype=u_hat.dtype, device=u_hat.device)[a:b]
            (hv,) = torch.autograd.grad(
                g, u, vs, retain_graph=True, is_grads_batched=True,
                allow_unused=True, materialize_grads=True,
            )
            target[a:b] -= c * (hv[:, a:b].sum(0) if elementwise else hv[:, a:b].diagonal())
    return d
