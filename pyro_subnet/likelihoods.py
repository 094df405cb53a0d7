r"""
Output parameters, Fisher information and predictive distributions of observed sites.

The "network output" of an observed site is the vector :math:`\eta_e` of *natural* parameters of
its distribution for every element ``e`` (data point) of the site:

=============  =====================================  ==================================================
family         :math:`\eta`                           Fisher :math:`F = L L^\top` w.r.t. :math:`\eta`
=============  =====================================  ==================================================
Normal         ``loc`` (and ``log scale``)            ``diag(1/scale^2, 2)``
Bernoulli      ``logits``                             ``p (1 - p)``
Categorical    ``logits``                             ``diag(p) - p p^T``
Poisson        ``log rate``                           ``rate``
other          each real parameter, unconstrained     Monte Carlo: ``mean_m s_m s_m^T``, ``s_m`` scores
=============  =====================================  ==================================================

The Fisher is invariant to the parametrization in the sense that matters here:
:math:`J_\eta^\top F_\eta J_\eta = J_\theta^\top F_\theta J_\theta` for any smooth bijection
:math:`\eta(\theta)`, so the generalized Gauss-Newton matrix is the same whichever is used; the
natural parameters are chosen because the linearized predictive of a GLM linearizes them
(Immer et al., 2021). Only parameters that depend on the latents ("active" ones) are kept,
which is exact because the Jacobian of an inactive parameter is zero.

This module is pure torch: it imports nothing from :mod:`pyro.infer`.

**References**

[1] E. Daxberger, E. Nalisnick, J. U. Allingham, J. Antoran, J. M. Hernandez-Lobato,
    "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
[2] A. Immer, M. Korzepa, M. Bauer, "Improving predictions of Bayesian neural nets via local
    linearization", AISTATS 2021.
"""

import math

import torch
from pyro.distributions.torch_distribution import ExpandedDistribution, MaskedDistribution
from torch.distributions import Bernoulli, Categorical, Independent, MixtureSameFamily, Normal, Poisson, biject_to

_PROBIT = math.pi / 8


def unwrap(fn):
    """
    Strips :class:`Independent`, :class:`ExpandedDistribution` and :class:`MaskedDistribution`
    wrappers.

    :returns: ``(base, element_shape, reinterpreted, weight)`` where ``element_shape`` is the
        shape of the independent elements of ``base`` once broadcast, ``reinterpreted`` the
        number of their rightmost dims that ``fn`` treats as event dims, and ``weight`` a float
        tensor broadcastable to ``element_shape`` (``None`` when no mask applies).
    """
    masks, reinterpreted = [], 0
    shape = fn.batch_shape + fn.event_shape
    while isinstance(fn, (Independent, ExpandedDistribution, MaskedDistribution)):
        if isinstance(fn, Independent):
            reinterpreted += fn.reinterpreted_batch_ndims
        elif isinstance(fn, MaskedDistribution):
            masks.append((fn._mask, reinterpreted))
        fn = fn.base_dist
    element_shape = shape[: len(shape) - len(fn.event_shape)]
    weight = None
    for mask, inner in masks:
        m = torch.as_tensor(mask, dtype=torch.get_default_dtype())
        # a mask at this level is aligned with the dims left of the event dims it wraps
        m = m.reshape(m.shape + (1,) * (reinterpreted - inner))
        weight = m if weight is None else weight * m
    return fn, element_shape, reinterpreted, weight


def _normal_fisher(spec, base, eta):
    n = spec.num_elements
    diag = [base.scale.detach().expand(spec.element_shape).reshape(n, 1).reciprocal() if name == "loc"
            else eta.new_full((n, 1), math.sqrt(2.0)) for name in spec.active]
    return torch.diag_embed(torch.cat(diag, -1))


def _bernoulli_fisher(spec, base, eta):
    p = torch.sigmoid(eta)
    return (p * (1 - p)).sqrt().unsqueeze(-1)


def _categorical_fisher(spec, base, eta):
    p = torch.softmax(eta, -1)
    sp = p.sqrt()
    return torch.diag_embed(sp) - p.unsqueeze(-1) * sp.unsqueeze(-2)


def _normal_predictive(spec, eta, var):
    scale = unwrap(spec._map_fn)[0].scale.detach().expand(spec.element_shape).reshape(-1, 1)
    loc = spec.build(eta).loc
    return Normal(loc, (var + scale**2).sqrt().reshape(loc.shape))


def _probit(spec, eta, var):
    return spec.build(eta / (1 + _PROBIT * var).sqrt())


def _monte_carlo_fisher(spec, base, eta):
    # Scores of draws from the model itself: E[s s^T] is the Fisher (not the empirical one).
    with torch.no_grad():
        y = spec.build(eta, base).sample((spec.num_mc,))
    etas = eta.expand((spec.num_mc,) + eta.shape).clone().requires_grad_(True)
    (scores,) = torch.autograd.grad(spec.build(etas, base).log_prob(y).sum(), etas)  # [M, n, dim]
    return scores.detach().permute(1, 2, 0) / math.sqrt(spec.num_mc)


class Family:
    """
    A row of the table of families :data:`FAMILIES`.

    :param dict links: natural parameter name -> ``(to natural, from natural)``, in order.
    :param callable fisher_sqrt: ``(spec, base, eta) -> L`` with ``F = L L^T`` per element.
    :param callable predictive: ``(spec, eta, var) -> distribution``, the closed-form
        linearized predictive when exactly the parameters ``closed_for`` are active (else Monte
        Carlo).
    """

    def __init__(self, links, fisher_sqrt, predictive=None, closed_for=()):
        self.links, self.fisher_sqrt = links, fisher_sqrt
        self.predictive, self.closed_for = predictive, list(closed_for)

    @staticmethod
    def generic(base):
        """The row of a family without a closed form: every real parameter, unconstrained."""
        names = []
        for n, c in base.arg_constraints.items():
            if c.is_discrete or (n == "probs" and "logits" in names) or n not in vars(base):
                continue
            if n == "logits" and "probs" in names:
                names.remove("probs")
            names.append(n)
        links = {n: (biject_to(base.arg_constraints[n]).inv, biject_to(base.arg_constraints[n])) for n in names}
        return Family(links, _monte_carlo_fisher)


_IDENTITY = (lambda v: v, lambda v: v)
_LOG = (torch.log, torch.exp)
FAMILIES = {
    # a scale that depends on the subnetwork makes the Normal predictive non-Gaussian
    Normal: Family({"loc": _IDENTITY, "scale": _LOG}, _normal_fisher, _normal_predictive, ["loc"]),
    Bernoulli: Family({"logits": _IDENTITY}, _bernoulli_fisher, _probit, ["logits"]),
    Categorical: Family({"logits": _IDENTITY}, _categorical_fisher, _probit, ["logits"]),
    Poisson: Family({"rate": _LOG}, lambda spec, base, eta: eta.exp().sqrt().unsqueeze(-1)),
}


def _discrete(base):
    """The discrete arguments of ``base`` (a Binomial's ``total_count``), which are kept as they are."""
    return {n: getattr(base, n) for n, c in base.arg_constraints.items() if c.is_discrete and n in vars(base)}


def family_of(base):
    """The closed-form family ``base`` belongs to (a key of :data:`FAMILIES`), else its own type."""
    return next((f for f in FAMILIES if isinstance(base, f)), type(base))


def row_of(base):
    """The :class:`Family` row of ``base``."""
    return FAMILIES.get(family_of(base)) or Family.generic(base)


class OutputSpec:
    r"""
    How to read, weigh and rebuild one observed site's distribution from its natural parameters.

    :param fn: the site's distribution at the MAP.
    :param list active: names of the natural parameters that depend on the latents
        (see :meth:`natural_names`).
    :param bool mc_fisher: allow the Monte Carlo Fisher for families without a closed form.
    :param int num_mc: number of Monte Carlo draws per element for that Fisher.
    :param str name: the site name, for error messages.
    """

    def __init__(self, fn, active, mc_fisher=True, num_mc=16, name="?"):
        base, self.element_shape, self.reinterpreted, _ = unwrap(fn)
        self.family = family_of(base)
        self.row = row_of(base)
        self.name, self.num_mc = name, num_mc
        if self.family not in FAMILIES and not mc_fisher:
            raise ValueError(
                f"observed site '{name}' has a {self.family.__name__} distribution, which has no "
                "closed-form Fisher here; pass mc_fisher=True to estimate it by Monte Carlo, or "
                "use a Normal, Bernoulli, Categorical or Poisson likelihood"
            )
        self.active = [n for n in self.row.links if n in active]
        self.num_elements = self.element_shape.numel()
        self._event = {n: self._param(base, n).shape[len(self.element_shape):] for n in self.active}
        self.sizes = [self._event[n].numel() for n in self.active]
        self.dim = sum(self.sizes)

    @staticmethod
    def natural_names(base):
        """The names of ``base``'s natural parameters, active or not."""
        return list(row_of(base).links)

    def _param(self, base, name):
        """The natural (unconstrained) parameter ``name``, broadcast to ``element_shape``."""
        value = self.row.links[name][0](getattr(base, name))
        return value.expand(self.element_shape + value.shape[len(base.batch_shape):])

    def natural(self, fn):
        """Flattened active natural parameters of ``fn``, a tensor ``[num_elements, dim]``."""
        base = unwrap(fn)[0]
        parts = [self._param(base, n).reshape(self.num_elements, -1) for n in self.active]
        return torch.cat(parts, -1)

    def split(self, eta):
        """Inverse of :meth:`natural` on ``[..., num_elements, dim]``: name -> parameter."""
        out, pos = {}, 0
        for n, k in zip(self.active, self.sizes):
            out[n] = eta[..., pos : pos + k].reshape(eta.shape[:-2] + self.element_shape + self._event[n])
            pos += k
        return out

    def fisher_sqrt(self, fn):
        r"""
        A square root :math:`L_e` of each element's Fisher, :math:`F_e = L_e L_e^\top`, w.r.t. the
        active natural parameters, as a tensor ``[num_elements, dim, rank]``. Masks of the
        distribution are applied (``L`` times the square root of the weight).
        """
        base, _, _, weight = unwrap(fn)
        L = self.row.fisher_sqrt(self, base, self.natural(fn).detach())
        if weight is not None:
            L = L * weight.expand(self.element_shape).reshape(self.num_elements, 1, 1).sqrt()
        return L

    def build(self, eta, map_fn=None):
        """
        The base distribution (without event wrappers) for natural parameters ``eta`` of shape
        ``[..., num_elements, dim]``; inactive parameters are taken from ``map_fn`` (or the MAP
        distribution given to :meth:`set_map`).
        """
        base = unwrap(map_fn if map_fn is not None else self._map_fn)[0]
        params = self.split(eta)
        kwargs = {n: link[1](params[n]) if n in params else getattr(base, n).detach()
                  for n, link in self.row.links.items()}
        return self.family(**kwargs, **_discrete(base), validate_args=False)

    def set_map(self, fn):
        """Remembers the site's distribution at the MAP (for inactive parameters)."""
        self._map_fn = fn
        return self

    def wrap(self, base):
        """Re-applies the site's event dims to a base distribution."""
        return Independent(base, self.reinterpreted) if self.reinterpreted else base

    def log_prob(self, eta, value):
        """
        The site's log density of ``value`` (masks applied) under natural parameters ``eta``
        of shape ``[..., num_elements, dim]``: a tensor ``[..., *batch_shape]``.
        """
        weight = unwrap(self._map_fn)[3]
        lp = self.build(eta).log_prob(value)
        if weight is not None:
            lp = lp * weight
        return lp.sum(tuple(range(-self.reinterpreted, 0))) if self.reinterpreted else lp

    @property
    def has_closed_predictive(self):
        """Whether :meth:`linearized_predictive` has a closed form for the active parameters."""
        return self.row.predictive is not None and self.active == self.row.closed_for

    def linearized_predictive(self, eta, cov):
        r"""
        Closed-form linearized predictive, or ``None`` when there is none.

        :param eta: MAP natural parameters ``[num_elements, dim]``.
        :param cov: their covariance under the linearized posterior, ``[num_elements, dim, dim]``.

        Normal: :math:`\mathcal N(\mu, J\Sigma J^\top + \sigma^2)` (only when the scale does not
        depend on the subnetwork); Bernoulli and Categorical: the probit approximation
        :math:`\mathrm{softmax}(\eta / \sqrt{1 + \pi/8\, \mathrm{diag}(J\Sigma J^\top)})`.
        """
        if not self.has_closed_predictive:
            return None
        return self.row.predictive(self, eta, cov.diagonal(dim1=-2, dim2=-1))

    def mixture(self, etas):
        """
        Equal-weight mixture of the distributions with natural parameters ``etas``
        (``[num_samples, num_elements, dim]``), over the site's whole event.
        """
        m = etas.shape[0]
        base = self.build(etas)  # batch [M, *element_shape]
        map_base = unwrap(self._map_fn)[0]
        names = list(self.row.links) + list(_discrete(map_base))
        # the mixture dim must be the rightmost batch dim, left of the reinterpreted event dims
        outer = len(self.element_shape) - self.reinterpreted
        params = {}
        for name in names:
            v = getattr(base, name)
            event = v.shape[len(base.batch_shape):] if v.dim() > len(base.batch_shape) else ()
            v = v.expand((m,) + self.element_shape + tuple(event))
            params[name] = v.movedim(0, outer)
        comp = self.family(**params, validate_args=False)
        comp = Independent(comp, self.reinterpreted) if self.reinterpreted else comp
        mix = Categorical(logits=etas.new_zeros(comp.batch_shape), validate_args=False)
        return MixtureSameFamily(mix, comp, validate_args=False)
