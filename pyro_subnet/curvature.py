r"""
Curvature of a Pyro model w.r.t. a subset of its flattened unconstrained latent coordinates.

With :math:`u` the flat unconstrained latent vector (the coordinates of
:class:`~pyro.infer.autoguide.AutoContinuous`), :math:`\hat u` the MAP and :math:`S` a set of
coordinates, the subnetwork precision is

.. math::

    \Lambda_S = \sum_n J_{Sn}^\top F_n J_{Sn} \;+\; c\, P_S \;+\; Q_S,
    \qquad P_S = -\nabla^2_{u_S}\Big[\log p(T(u)) + \log|\det \partial T/\partial u|\Big]_{u=\hat u},
    \qquad Q_S = -\nabla^2_{u_S} \textstyle\sum \text{factors}

where :math:`J_{Sn}` is the Jacobian of the natural parameters of the observed sites
(:mod:`pyro_subnet.likelihoods`) for data element ``n`` w.r.t. the S coordinates only and
:math:`F_n = L_n L_n^\top` their Fisher. The GGN term is accumulated from rows
:math:`L_n^\top J_{Sn}` obtained by batched vector-Jacobian products whose inputs are the S
coordinates alone: the stored Jacobian is ``rows x S``, never ``data x outputs x D``. Data are
processed in chunks. A weight matrix with selected entries enters the model as a
:class:`~pyro_subnet.subnet_tensor.SubnetMatrix`, so that inside products a row's gradient
w.r.t. those entries is a gather rather than a dense gradient of the matrix; any other use of
a selected site falls back to dense rows, bounded by ``max_rows`` times the site's size.

:math:`c` is ``prior_scale``. ``pyro.factor`` sites are likelihood terms (as in
:mod:`pyro_pt`) without a distribution, hence without a Fisher: their exact Hessian
:math:`Q_S` enters unscaled. :math:`P_S` and :math:`Q_S` are in :mod:`pyro_subnet.prior`.

**References**

[1] E. Daxberger et al., "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
[2] A. Immer, M. Korzepa, M. Bauer, "Improving predictions of Bayesian neural nets via local
    linearization", AISTATS 2021.
"""

import pyro.poutine as poutine
import torch
from pyro.distributions.util import scale_and_mask
from torch.distributions import biject_to

from torch.distributions.transforms import ComposeTransform, IndependentTransform, identity_transform

from pyro_arviz.sites import scored_log_prob

from .likelihoods import OutputSpec, unwrap
from .subnet_tensor import SubnetMatrix, unavailable as subnet_unavailable

_FLOAT_BUDGET = 2**25  # transient floats per batched backward pass


class LatentModel:
    """
    The model seen as a function of the flat unconstrained latent vector.

    :param guide: a set-up :class:`~pyro.infer.autoguide.AutoContinuous` (its prototype trace
        fixes the sites and their order).
    :param callable model: the model itself (not wrapped in the guide's initialization, which
        would run for every site before the conditioning replaces its value).
    :param list observed: names of the observed sites that carry a likelihood.
    :param list factors: names of the ``pyro.factor`` sites.
    :param dict spec_options: keyword arguments of :class:`~pyro_subnet.likelihoods.OutputSpec`.
    """

    def __init__(self, guide, model, observed, factors, spec_options):
        self.guide = guide
        self.model = model
        self.observed = list(observed)
        self.factors = list(factors)
        self.spec_options = spec_options
        self.latent_names = [n for n, _ in guide.prototype_trace.iter_stochastic_nodes()]
        # dense rows where the SubnetMatrix's private torch API is missing (the reason kept)
        self.subnet_matrix_reason = subnet_unavailable()
        self.use_subnet_matrix = self.subnet_matrix_reason is None
        self.blocks, pos = {}, 0
        for name, shape in guide._unconstrained_shapes.items():
            size = shape.numel()
            self.blocks[name] = (pos, pos + size)
            pos += size

    def values(self, u, idx=None, delta=None):
        """
        Constrained values of the latent sites and the summed log|det Jacobian| at ``u``, or at
        ``u`` with coordinates ``idx`` (sorted, unique) replaced by ``delta``. Only the sites that
        contain one of ``idx`` depend on ``delta``, so that ``requires_grad`` tells what depends
        on the subnetwork.
        """
        pieces = self._pieces(idx, delta) if idx is not None else {}
        values, logdet = {}, 0.0
        for site, uv in self.guide._unpack_latent(u):
            name = site["name"]
            t = biject_to(site["fn"].support)
            identity = _is_identity(t)
            if name in pieces:
                local, part = pieces[name]
                if len(local) == uv.numel():  # the whole site
                    uv = part.reshape(uv.shape)
                elif identity and uv.dim() == 2 and len(local) < uv.numel() // 2 and self.use_subnet_matrix:
                    # a matrix in a product: Jacobians w.r.t. its entries cost O(S) per row
                    uv = SubnetMatrix(uv, local // uv.shape[1], local % uv.shape[1], part)
                else:
                    uv = uv.reshape(-1).index_copy(0, local, part).reshape(uv.shape)
            if identity:
                values[name] = uv
                continue
            v = t(uv)
            values[name] = v
            logdet = logdet + t.log_abs_det_jacobian(uv, v).sum()
        return values, logdet

    def _pieces(self, idx, delta):
        """``{site: (indices within the site, its part of delta)}`` for the sites ``idx`` touches.
        ``idx`` is sorted, so each site's part is a contiguous piece of ``delta``: one split, whose
        backward is a concatenation (masking per site would zero-fill a D-vector per site)."""
        if len(idx) > 1 and (idx[1:] <= idx[:-1]).any():
            raise ValueError("subnetwork indices must be sorted and unique")
        starts = torch.tensor([a for a, _ in self.blocks.values()], device=idx.device)
        lo = torch.searchsorted(idx, starts).tolist() + [len(idx)]
        counts = [h - l for l, h in zip(lo[:-1], lo[1:])]
        parts = torch.split(delta, counts)
        out = {}
        for (name, (a, _)), l, c, part in zip(self.blocks.items(), lo, counts, parts):
            if c:
                out[name] = (idx[l : l + c] - a, part)
        return out

    def trace(self, u, args, kwargs, idx=None, delta=None):
        """A trace of the model with its latents at ``u`` (see :meth:`values`)."""
        values, logdet = self.values(u, idx, delta)
        model = poutine.condition(self.model, data=values)
        return poutine.block(poutine.trace(model).get_trace)(*args, **kwargs), logdet

    def log_prior(self, tr, logdet, prior=True, factors=True):
        """
        Log prior of the latent sites (with scale and mask) plus log|det J| (``prior``), plus the
        ``pyro.factor`` terms (``factors``).
        """
        total = logdet if prior else 0.0
        names = (self.latent_names if prior else []) + (self.factors if factors else [])
        for name in names:
            site = tr.nodes[name]
            total = total + scored_log_prob(site).sum()
        return total

    def specs(self, tr, wrt, active=None):
        """
        One :class:`OutputSpec` per observed site of a trace whose subnetwork variables are
        ``wrt``; the active parameters are those that depend on ``wrt`` (not merely on a
        ``pyro.param``, which would cost zero Fisher rows and lose the closed-form predictive),
        unless ``active`` (``{site: names}``, e.g. from another chunk of the same call) says.
        """
        out = {}
        for name in self.observed:
            fn = tr.nodes[name]["fn"]
            if active is not None:
                names = active[name]
            else:
                base = unwrap(fn)[0]
                names = [n for n in OutputSpec.natural_names(base)
                         if torch.is_tensor(v := getattr(base, n)) and v.requires_grad and _depends_on(v, wrt)]
            out[name] = OutputSpec(fn, names, name=name, **self.spec_options).set_map(fn)
        return out


def _depends_on(value, wrt):
    (g,) = torch.autograd.grad(value.sum(), wrt, retain_graph=True, allow_unused=True)
    return g is not None


def _is_identity(t):
    while isinstance(t, IndependentTransform):
        t = t.base_transform
    return t == identity_transform or (isinstance(t, ComposeTransform) and not t.parts)


def _site_weight(site, spec):
    """Plate scale and poutine.mask of an observed site, broadcast to its elements."""
    w = scale_and_mask(torch.ones(site["fn"].batch_shape), site["scale"], site["mask"])
    w = w.reshape(w.shape + (1,) * spec.reinterpreted)
    return w.expand(spec.element_shape).reshape(-1)


def _rows_per_pass(latent, idx):
    touched = [b for b in latent.blocks.values() if ((idx >= b[0]) & (idx < b[1])).any()]
    size = sum(b[1] - b[0] for b in touched) + len(idx)
    return max(1, min(4096, _FLOAT_BUDGET // max(size, 1)))


def traced_outputs(latent, u_hat, idx, args, kwargs, active=None):
    """
    The model traced at ``u_hat`` with the coordinates ``idx`` as variables ``delta``.

    :returns: ``(delta, trace, specs, eta, starts)``: the :class:`OutputSpec` of every observed
        site, the flat natural parameters ``eta`` of those that depend on ``delta`` (one tensor,
        so that one backward pass serves all of them) and where each site's part starts.
    """
    delta = u_hat[idx].clone().requires_grad_(True)
    tr, _ = latent.trace(u_hat, args, kwargs, idx, delta)
    specs = latent.specs(tr, delta, active)
    etas, starts, pos = [], {}, 0
    for name, spec in specs.items():
        if spec.dim:
            etas.append(spec.natural(tr.nodes[name]["fn"]).reshape(-1))
            starts[name], pos = pos, pos + etas[-1].numel()
    return delta, tr, specs, torch.cat(etas) if etas else None, starts


def vjp_rows(eta, delta, L, start, max_rows):
    r"""
    Yields blocks ``[rows, S]`` of :math:`L_e^\top J_e` for the elements ``e`` of one site, whose
    natural parameters are ``eta[start : start + n k]`` (``L`` is ``[n, k, r]``): batched
    vector-Jacobian products whose cotangent ``(e, j)`` is column ``j`` of ``L_e``, placed at
    element ``e``'s parameters. ``L = I`` gives the rows of the Jacobians themselves.
    """
    n, k, r = L.shape
    # the cotangents are rows x outputs of the call: bounded too, for calls left unsplit
    per = max(1, min(max_rows, _FLOAT_BUDGET // eta.numel()) // r)
    for a in range(0, n, per):
        b = min(n, a + per)
        m = b - a
        C = L.new_zeros(m, r, eta.numel())
        ar = torch.arange(a, b, device=L.device)
        cols = start + (ar[:, None] * k + torch.arange(k, device=L.device)).reshape(m, k)
        C.scatter_(2, cols[:, None, :].expand(m, r, k), L[a:b].transpose(1, 2))
        (G,) = torch.autograd.grad(
            eta, delta, C.reshape(m * r, -1), retain_graph=True, is_grads_batched=True,
            allow_unused=True, materialize_grads=True,
        )
        yield G


def fisher_rows(latent, u_hat, idx, batches, max_rows=None):
    r"""
    Yields blocks of rows :math:`L_n^\top J_{Sn}` (``[rows, S]``) for every observed element of
    every batch, with the plate scale and masks folded in, so that
    :math:`\sum \text{rows}^\top \text{rows} = \sum_n J_{Sn}^\top F_n J_{Sn}`.
    """
    max_rows = max_rows or _rows_per_pass(latent, idx)
    u_hat = u_hat.detach()
    for args, kwargs in batches:
        delta, tr, specs, eta, starts = traced_outputs(latent, u_hat, idx, args, kwargs)
        for name, start in starts.items():
            site, spec = tr.nodes[name], specs[name]
            L = spec.fisher_sqrt(site["fn"]) * _site_weight(site, spec).to(u_hat).sqrt()[:, None, None]
            yield from vjp_rows(eta, delta, L, start, max_rows)


def output_jacobians(latent, u_hat, idx, args, kwargs, active=None, max_rows=None):
    r"""
    The natural parameters of each observed site of one model call and their Jacobians w.r.t.
    the coordinates ``idx``, by the batched products of :func:`vjp_rows` with ``L = I``.

    :returns: ``{site: (spec, fn, eta, J)}`` with ``eta`` ``[num_elements, dim]`` and ``J``
        ``[num_elements, dim, S]`` (both ``None`` for a site that does not depend on ``idx``).
    """
    max_rows = max_rows or _rows_per_pass(latent, idx)
    delta, tr, specs, eta, starts = traced_outputs(latent, u_hat.detach(), idx, args, kwargs, active)
    out = {}
    for name, spec in specs.items():
        fn = tr.nodes[name]["fn"]
        if name not in starts:
            out[name] = (spec, fn, None, None)
            continue
        n, k = spec.num_elements, spec.dim
        eye = torch.eye(k, dtype=eta.dtype, device=eta.device).expand(n, k, k)
        J = torch.cat(list(vjp_rows(eta, delta, eye, starts[name], max_rows))).reshape(n, k, len(idx))
        out[name] = (spec, fn, eta[starts[name] : starts[name] + n * k].detach().reshape(n, k), J)
    return out


def ggn(latent, u_hat, idx, batches, max_rows=None):
    """The subnetwork GGN :math:`\\sum_n J_{Sn}^T F_n J_{Sn}`, an ``S x S`` tensor."""
    H = u_hat.new_zeros(len(idx), len(idx))
    for G in fisher_rows(latent, u_hat, idx, batches, max_rows):
        H.addmm_(G.T, G)
    return H


def ggn_diagonal(latent, u_hat, batches, max_rows=None):
    """Diagonal of the GGN over all D coordinates, without D x D memory."""
    idx = torch.arange(u_hat.numel(), device=u_hat.device)
    d = u_hat.new_zeros(u_hat.numel())
    for G in fisher_rows(latent, u_hat, idx, batches, max_rows):
        d += G.pow(2).sum(0)
    return d
