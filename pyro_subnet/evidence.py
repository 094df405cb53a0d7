r"""
The subnetwork precision as a function of the prior scale, and its Laplace evidence.

With :math:`\hat u` the MAP, :math:`S` the subnetwork and the other coordinates held at
:math:`\hat u`, the parts below are computed once at :math:`\hat u` (:class:`SubnetworkCurvature`)
and reused for every prior scale tried:

- :math:`G`: the GGN of the observed sites plus the Hessian :math:`Q` of minus the
  ``pyro.factor`` terms (likelihood terms, never scaled), ``S x S``;
- :math:`P`: the Hessian of minus the log prior (with log|det J|), ``S x S``;
- :math:`a = \nabla_{u_S} \log p(y \mid \hat u)` and :math:`g = -\nabla_{u_S} \log p(\hat u)`.

**The scaled prior.** The second-order model of the prior on :math:`u_S` at :math:`\hat u` is
the Gaussian :math:`\mathcal N(m, P^{-1})` with :math:`m = \hat u_S - r`, :math:`r = P^{-1} g`.
It is exact for a Gaussian prior (whatever its correlations: it is then the conditional prior of
:math:`u_S` given the held coordinates). A prior scale multiplies its precision and keeps its
mean, :math:`P_c = D_s^{1/2} P D_s^{1/2}` with :math:`D_s = \mathrm{diag}(s)` (:math:`s_i = c`
for a scalar, the site's :math:`c_k` per site). The density is rescaled, so its normaliser
changes too:

.. math::

    \log p_c(\hat u_S) = \tfrac12 \log\det P_c - \tfrac S2 \log 2\pi - \tfrac12 r^\top P_c r,
    \qquad \log\det P_c = \log\det P + \textstyle\sum_i \log s_i.

For an elementwise prior :math:`\mathcal N(0, 1/\lambda)` and a scalar :math:`c` this is
:math:`\log p(\hat u_S) + \tfrac S2 \log c - \tfrac{c-1}2 \lambda \|\hat u_S\|^2`.

**The evidence.** The log joint in :math:`u_S`, with the GGN (linearized) model of the
likelihood, is :math:`\ell(\hat u + \delta) \approx \ell(\hat u) + b^\top\delta - \tfrac12
\delta^\top\Lambda\delta` with :math:`\Lambda = G + P_c` and :math:`b = a - P_c r`, and its
integral is (MacKay 1992; Immer et al. 2021; the :math:`2\pi` terms cancel)

.. math::

    \log p(y) \approx \log p(y \mid \hat u) + \tfrac12 \log\det P_c - \tfrac12 r^\top P_c r
    + \tfrac12 b^\top \Lambda^{-1} b - \tfrac12 \log\det \Lambda .

At a MAP of the scaled model (:math:`b = 0`) this is the usual Laplace evidence
:math:`\log p(y, \hat u) + \tfrac S2 \log 2\pi - \tfrac12\log\det\Lambda`. The MAP is fitted
once, under the model's own prior, and the curvature is not refitted per scale, so :math:`b \ne 0`
for :math:`c \ne 1`: the :math:`b` term is the Laplace evidence at the Gauss-Newton mode
:math:`\hat u_S + \Lambda^{-1} b` of that scale. For a linear-Gaussian model the formula is
exact at any :math:`\hat u` and any scale. The posterior stays centred at :math:`\hat u`.

For a prior that is not Gaussian in unconstrained space (a ``Uniform`` noise scale, say) the
Gaussian model above stands in for it, so the evidence is not the one with the exact
:math:`\log p(\hat u)`, and where the MAP lies in the prior's tail (:math:`r` large) it can
drive a common scale far off; such sites get a warning. The paper's setting (Gaussian weights
only) is exact in this respect; ``"marglik_per_site"`` gives such a site a scale of its own.

**References**

[1] D. J. C. MacKay, "Bayesian Interpolation", Neural Computation 4(3), 1992.
[2] A. Immer, M. Bauer, V. Fortuin, G. Ratsch, M. E. Khan, "Scalable Marginal Likelihood
    Estimation for Model Selection in Deep Learning", ICML 2021.
[3] E. Daxberger et al., "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
"""

import math
import warnings

import torch
from torch.distributions import LowRankMultivariateNormal, MultivariateNormal, Normal

from pyro_arviz.sites import scored_log_prob

from . import curvature, prior
from .comm import LocalComm, sum_all
from .likelihoods import unwrap
from .warning import SubnetWarning

_GRID = torch.arange(-15.0, 15.01, 0.5)  # log c searched before L-BFGS polishes the best point


class SubnetworkCurvature:
    """
    The parts of the subnetwork precision and of its evidence at the MAP (module docstring),
    computed once: the GGN, the prior and factor Hessians and the two gradients.

    :param LatentModel latent: the model as a function of the flat latent vector.
    :param torch.Tensor u_hat: the MAP, shape ``(D,)``.
    :param torch.LongTensor idx: the S subnetwork coordinates (sorted).
    :param list batches: ``(args, kwargs)`` calls that together make up the data set.
    :param int num_candidates: the ``D`` of ``"subnet"``'s ``S / D``: the coordinates the
        subnetwork was chosen among (all of them by default).
    :param comm: across processes (:mod:`pyro_subnet.comm`), each rank with its shard in
        ``batches``: the data terms (:math:`G`, :math:`a`, the log-likelihood) are summed over
        the ranks in one float64 all-reduce; the prior's (:math:`P`, :math:`g`), the same on
        every rank, are not. Every rank then holds the parts of one process with all the data.
    """

    def __init__(self, latent, u_hat, idx, batches, num_candidates=None, comm=LocalComm()):
        self.loc, self.indices = u_hat.detach(), idx
        self.num_candidates = u_hat.numel() if num_candidates is None else int(num_candidates)
        self.data_precision = curvature.ggn(latent, self.loc, idx, batches)
        self.prior_precision = prior.prior_hessian(latent, self.loc, idx, batches, factors_out=self.data_precision)
        self.log_likelihood, self.likelihood_grad, self.prior_grad = _gradients(latent, self.loc, idx, batches)
        log_likelihood = torch.tensor(self.log_likelihood, dtype=torch.float64, device=self.loc.device)
        self.data_precision, self.likelihood_grad, log_likelihood = sum_all(
            comm, [self.data_precision, self.likelihood_grad, log_likelihood], "sum of the subnetwork's curvature")
        self.log_likelihood = float(log_likelihood)
        self.sites = {n: (idx >= a) & (idx < b) for n, (a, b) in latent.blocks.items() if ((idx >= a) & (idx < b)).any()}
        gaussian = (Normal, MultivariateNormal, LowRankMultivariateNormal)  # real support: no transform
        self.non_gaussian = [n for n in self.sites
                             if not isinstance(unwrap(latent.guide.prototype_trace.nodes[n]["fn"])[0], gaussian)]
        self._terms = None

    def scales(self, prior_scale):
        """The per-coordinate multipliers ``s`` (float64, shape ``(S,)``) of a number, a fixed form of
        ``prior_scale`` (:func:`~pyro_subnet.prior.prior_scale_multiplier`) or a dict per site."""
        c = prior.prior_scale_multiplier(prior_scale, self.fraction, sites=True)
        if c is None:
            raise ValueError(f"prior_scale={prior_scale!r} is fitted, not a value: resolve it with resolve()")
        if not isinstance(c, dict):
            return torch.full((len(self.indices),), c, dtype=torch.float64, device=self.loc.device)
        unknown, missing = set(c) - set(self.sites), set(self.sites) - set(c)
        if unknown or missing:
            raise ValueError(f"a per-site prior_scale needs exactly the sites of the subnetwork {list(self.sites)}; "
                             f"unknown: {sorted(unknown)}, missing: {sorted(missing)}")
        s = torch.empty(len(self.indices), dtype=torch.float64, device=self.loc.device)
        for name, mask in self.sites.items():
            s[mask] = c[name]
        return s

    def precision(self, prior_scale):
        r""":math:`G + P_c`, a new ``S x S`` tensor."""
        s = self.scales(prior_scale)
        if bool((s == s[0]).all()):  # one scale: no S x S temporaries (they are 400 MB at S = 10 000)
            return torch.add(self.data_precision, self.prior_precision, alpha=float(s[0]))
        r = s.sqrt().to(self.loc.dtype)
        return self.data_precision + r[:, None] * self.prior_precision * r[None, :]

    def resolve(self, prior_scale):
        """The multiplier a ``prior_scale`` stands for here, a float or a dict per site:
        ``"marglik"`` / ``"marglik_per_site"`` fitted (:meth:`fit`), the other forms read by
        :func:`~pyro_subnet.prior.prior_scale_multiplier` with ``S / D``."""
        if isinstance(prior_scale, str) and prior_scale in prior.FITTED:
            return self.fit(per_site=prior_scale == "marglik_per_site")
        self.scales(prior_scale)  # checks it, per site too
        return prior.prior_scale_multiplier(prior_scale, self.fraction, sites=True)

    @property
    def fraction(self):
        """:math:`S / D`, what ``"subnet"`` stands for (D: the candidate coordinates)."""
        return len(self.indices) / self.num_candidates

    def log_marginal_likelihood(self, prior_scale):
        """The Laplace evidence (module docstring) at a fixed or fitted ``prior_scale``, a float."""
        return float(self._evidence(self.scales(self.resolve(prior_scale)).log()))

    def fit(self, per_site=False):
        """
        The prior scale that maximizes the evidence: the best ``log c`` of a grid in [-15, 15],
        polished by L-BFGS; per site, L-BFGS from that scalar. Returns a float, or per site a
        dict ``{site: float}``.
        """
        ones = torch.ones(len(self.indices), dtype=torch.float64, device=self.loc.device)
        values = torch.stack([self._evidence(t * ones) for t in _GRID.tolist()])
        best = int(values.argmax())
        if not torch.isfinite(values[best]):
            raise ValueError("the subnetwork precision is not positive definite at any prior scale; "
                             "check the MAP and the selected coordinates")
        if best in (0, len(_GRID) - 1):
            warnings.warn(f"the evidence is largest at the edge of the searched prior scales (c = "
                          f"{math.exp(_GRID[best]):.3g}); the data may not determine it: pass prior_scale as "
                          "a number you can defend", SubnetWarning)
        t = self._polish(torch.tensor([float(_GRID[best])], dtype=torch.float64), lambda t: t * ones)
        if not per_site:
            return math.exp(float(t))
        masks = torch.stack([m for m in self.sites.values()]).to(torch.float64)  # sites x S
        t = self._polish(t.expand(len(self.sites)).clone(), lambda t: t @ masks)
        return {name: math.exp(float(v)) for name, v in zip(self.sites, t)}

    def _polish(self, t, to_coordinates):
        t = t.requires_grad_(True)
        opt = torch.optim.LBFGS([t], lr=1.0, max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-15,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = -self._evidence(to_coordinates(t))
            loss.backward()
            return loss

        opt.step(closure)
        t = self._newton(t.detach(), to_coordinates)
        if not torch.isfinite(self._evidence(to_coordinates(t))):
            raise ValueError("fitting the prior scale left the region where the precision is positive "
                             "definite; pass prior_scale as a number")
        return t

    def _newton(self, t, to_coordinates, max_steps=4):
        """Newton steps from L-BFGS's end, which on a flat optimum stops ~1e-8 away in ``log c``;
        the gradient's zero is fixed to ~1e-13, so that sums added in another order (the ranks of
        a process group) give the same scale."""
        loss = lambda t: -self._evidence(to_coordinates(t))  # noqa: E731
        for _ in range(max_steps):
            g = torch.autograd.functional.jacobian(loss, t)
            L, info = torch.linalg.cholesky_ex(torch.autograd.functional.hessian(loss, t))
            step = torch.cholesky_solve(g[:, None], L).squeeze(-1)
            # not a maximum here (no Cholesky), or far from it: keep L-BFGS's point
            if info != 0 or not torch.isfinite(step).all() or step.abs().max() > 1e-3:
                return t
            t = t - step
            if step.abs().max() < 1e-14:
                break
        return t

    def _evidence(self, log_s):
        """The evidence as a differentiable float64 function of ``log s`` per coordinate."""
        G, P, a, r, logdet_p, ll = self._precomputed()
        q = (0.5 * log_s).exp()
        Lam = G + q[:, None] * P * q[None, :]
        L, info = torch.linalg.cholesky_ex(Lam)
        if info != 0:  # -inf, still differentiable for L-BFGS's line search
            return log_s.sum() * 0 - math.inf
        Pr = q * (P @ (q * r))  # P_c r
        z = torch.linalg.solve_triangular(L, (a - Pr)[:, None], upper=False)
        return (ll + 0.5 * (logdet_p + log_s.sum()) - 0.5 * (r @ Pr) + 0.5 * z.pow(2).sum()
                - L.diagonal().log().sum())

    def _precomputed(self):
        if self._terms is None:
            P = self.prior_precision.double()
            L, info = torch.linalg.cholesky_ex(P)
            if info != 0:
                raise ValueError(
                    "the Laplace evidence needs a prior Hessian that is positive definite on the subnetwork "
                    f"(sites {list(self.sites)}): a flat, improper or locally non-log-concave prior has no "
                    "Gaussian normaliser; select other coordinates or pass prior_scale as a number"
                )
            if self.non_gaussian:
                warnings.warn(
                    f"the Laplace evidence replaces the prior of sites {self.non_gaussian} (not Gaussian in "
                    "unconstrained space) by its Gaussian fit at the MAP, exact only for Gaussian priors; a "
                    "prior scale fitted by it can be far off: keep them out of the subnetwork (selection) or "
                    'use prior_scale="marglik_per_site"', SubnetWarning,
                )
            r = torch.cholesky_solve(self.prior_grad.double()[:, None], L).squeeze(-1)
            self._terms = (self.data_precision.double(), P, self.likelihood_grad.double(), r,
                           2 * L.diagonal().log().sum(), torch.tensor(float(self.log_likelihood), dtype=torch.float64))
        return self._terms


def _gradients(latent, u_hat, idx, batches):
    """``log p(y | u_hat)`` (observed sites and factors, over all batches), its gradient ``a`` and
    the gradient ``g`` of minus the log prior (first batch) w.r.t. the S coordinates."""
    total, a, g = 0.0, torch.zeros_like(u_hat[idx]), None
    for args, kwargs in batches:
        x = u_hat[idx].clone().requires_grad_(True)
        tr, logdet = latent.trace(u_hat, args, kwargs, idx, x)
        ll = latent.log_prior(tr, logdet, prior=False, factors=True)
        for name, site in ((n, tr.nodes[n]) for n in latent.observed):
            if not site["is_observed"]:
                raise ValueError(f"observed site '{name}' has no data in this call; pass the observed "
                                 "values to laplace_approximation, e.g. guide.laplace_approximation(x, y)")
            ll = ll + scored_log_prob(site).sum()
        total, a = total + (float(ll.detach()) if torch.is_tensor(ll) else float(ll)), a + _grad(ll, x)
        if g is None:
            g = -_grad(latent.log_prior(tr, logdet, factors=False), x)
    return total, a, g


def _grad(value, x):
    if not (torch.is_tensor(value) and value.requires_grad):
        return torch.zeros_like(x)
    # the likelihood and the prior of one trace share its graph
    return torch.autograd.grad(value, x, retain_graph=True, allow_unused=True, materialize_grads=True)[0].detach()


def cholesky_with_jitter(precision, max_tries=4):
    """
    Lower Cholesky factor of ``precision``; on failure retries with a growing jitter added to
    its diagonal in place (so that ``precision`` stays the matrix that was factored), with a
    warning, then raises a ``ValueError`` that says what to check.
    """
    chol, info = torch.linalg.cholesky_ex(precision)
    if info == 0:
        return chol
    scale = float(precision.diagonal().abs().mean())
    added = 0.0
    for k in range(max_tries if scale > 0 else 0):
        jitter = scale * 10.0 ** (-8 + 2 * k)
        precision.diagonal().add_(jitter - added)
        added = jitter
        chol, info = torch.linalg.cholesky_ex(precision)
        if info == 0:
            warnings.warn(
                f"the subnetwork precision was not positive definite; added {jitter:.3g} to its "
                "diagonal; check that the MAP has converged (a saddle point has negative curvature)",
                SubnetWarning,
            )
            return chol
    precision.diagonal().sub_(added)
    raise ValueError(
        "the subnetwork precision (GGN + prior Hessian) is not positive definite even with jitter. "
        "Check that the MAP has converged, that every selected coordinate has a proper prior or "
        "is informed by the data, and that the model works in float64 if it is ill-conditioned"
    )
