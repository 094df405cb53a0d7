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
"""

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


def _prior_gradients(latent, u_hat, idx, batches, scale):
    """
    Yields ``(x, g, c)``: the variables ``x = u[idx]``, the gradient ``g`` w.r.t. them (with its
    graph, for a second differentiation) of a term that is not linear in them, and the term's
    multiplier ``c``: the log prior and log|det J| of the first batch (``c = scale``), then the
    factors of every batch (``c = 1``).
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
            yield x, g, c


def prior_hessian(latent, u_hat, idx, batches, max_rows=None, out=None, scale=1.0):
    r"""
    :math:`c P_S + Q_S` (see the module docstring) with ``c = scale``, an ``S x S`` tensor. The
    prior is taken from the first batch; factor sites are summed over all batches.

    Coordinates whose Hessian rows are diagonal (see :func:`_separable`; all weights of a BNN
    with an elementwise prior) get theirs from a single Hessian-vector product with the
    indicator vector; every other coordinate gets an exact row.

    :param torch.Tensor out: if given, the result is added to it in place (no second
        ``S x S`` matrix) and it is returned.
    """
    u_hat = u_hat.detach()
    S = len(idx)
    H = u_hat.new_zeros(S, S) if out is None else out
    per = max_rows or _rows_per_pass(latent, idx)
    safe = _separable(latent, u_hat, idx, *batches[0])
    rest = (~safe).nonzero().reshape(-1)
    for delta, g, c in _prior_gradients(latent, u_hat, idx, batches, scale):
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
                H[safe, safe] -= rows[0][safe]  # the diagonal entries of the safe coordinates
                rows = rows[1:]
                a_rest = 0
            else:
                a_rest = a - int(safe.any())
            r = rest[a_rest : a_rest + len(rows)]
            H[r] -= rows
            H[:, r] -= rows.T
            H[r[:, None], r] += rows[:, r]  # counted twice above
    return H


def prior_hessian_diagonal(latent, u_hat, batches, scale=1.0):
    r"""
    Diagonal of :math:`c P + Q` (``c = scale``) over all D coordinates with one Hessian-vector product per latent site
    (the indicator of the site's block). This is exact when, within each site, the log prior
    couples no two elements — true for the usual elementwise priors, hierarchical ones included.
    Sites whose unconstrained distribution has an event dimension are done exactly, one row per
    coordinate.
    """
    u_hat = u_hat.detach()
    D = u_hat.numel()
    d = u_hat.new_zeros(D)
    for u, g, c in _prior_gradients(latent, u_hat, torch.arange(D, device=u_hat.device), batches, scale):
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
            d[a:b] -= c * (hv[:, a:b].sum(0) if elementwise else hv[:, a:b].diagonal())
    return d
