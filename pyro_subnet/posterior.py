r"""
The subnetwork Laplace posterior: a Gaussian on S coordinates, the MAP everywhere else.

.. math::

    u_S \sim \mathcal N(\hat u_S, \Lambda_S^{-1}), \qquad u_{\bar S} = \hat u_{\bar S},

with :math:`\Lambda_S = C C^\top` the Cholesky factorization of the subnetwork precision. Draws
are :math:`\hat u_S + C^{-\top}\varepsilon` and densities use :math:`C^\top (u_S - \hat u_S)`,
both by triangular solves; the covariance is formed only when asked for.

**References**

[1] E. Daxberger et al., "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
[2] A. Immer, M. Korzepa, M. Bauer, "Improving predictions of Bayesian neural nets via local
    linearization", AISTATS 2021.
"""

import math

import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.infer.autoguide import AutoContinuous
from pyro.infer.autoguide.initialization import init_to_median
from torch.distributions import biject_to

from . import predictive, shapes
from .curvature import LatentModel
from .evidence import cholesky_with_jitter


class SubsetNormal(TorchDistribution):
    r"""
    A distribution on :math:`\mathbb R^D` that is Gaussian on the coordinates ``idx`` and a point
    mass at ``loc`` on the others. :meth:`log_prob` is the density of the S coordinates (w.r.t.
    Lebesgue measure on the affine subspace through ``loc``). Subclasses say how the Gaussian is
    shaped: :meth:`_offset` maps standard normal draws to :math:`u_S - \hat u_S`, :meth:`_whiten`
    maps back, and :meth:`_log_det` is the log-determinant of that whitening.

    :param torch.Tensor loc: the MAP, shape ``(D,)``.
    :param torch.LongTensor idx: the S coordinates.
    :param torch.Tensor factor: what shapes the Gaussian (see the subclass).
    """

    arg_constraints = {}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, idx, factor, batch_shape=torch.Size(), validate_args=None):
        self.loc, self.idx, self.factor = loc, idx, factor
        super().__init__(torch.Size(batch_shape), loc.shape[-1:], validate_args=validate_args)

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape[:-1] + (len(self.idx),), dtype=self.loc.dtype, device=self.loc.device)
        return self.loc.expand(shape).index_copy(-1, self.idx, self.loc[self.idx] + self._offset(eps))

    def log_prob(self, value):
        w = self._whiten(value[..., self.idx] - self.loc[self.idx])
        return -0.5 * w.pow(2).sum(-1) + self._log_det() - 0.5 * len(self.idx) * math.log(2 * math.pi)

    def expand(self, batch_shape, _instance=None):
        """Independent copies (``Predictive(..., parallel=True)`` draws in a plate)."""
        return type(self)(self.loc, self.idx, self.factor, batch_shape)


class SubnetworkNormal(SubsetNormal):
    r"""
    :class:`SubsetNormal` with precision :math:`C C^\top` on the S coordinates; ``factor`` is
    the lower Cholesky factor ``C`` of the S x S precision.
    """

    @property
    def precision_tril(self):
        return self.factor

    def _offset(self, eps):
        # one solve with all draws as right-hand sides: a batch of solves would copy C per draw
        flat = eps.reshape(-1, len(self.idx)).T
        return torch.linalg.solve_triangular(self.factor.mT, flat, upper=True).T.reshape(eps.shape)

    def _whiten(self, r):
        return (self.factor.mT @ r.unsqueeze(-1)).squeeze(-1)

    def _log_det(self):
        return self.factor.diagonal().log().sum()


class SubnetworkLaplacePosterior(AutoContinuous):
    r"""
    The guide returned by :meth:`SubnetworkLaplace.laplace_approximation`: it draws the S
    subnetwork coordinates from :math:`\mathcal N(\hat u_S, \Sigma_S)` and holds the others at
    the MAP. Use it with :class:`~pyro.infer.Predictive`, or call :meth:`predict` for the
    linearized predictive.

    Example::

        posterior = guide.laplace_approximation(x, y)
        posterior.subnetwork[:3]               # [("W0", 1207), ("W1", 33), ...]
        posterior.predict(x_test)["obs"].stddev
        Predictive(model, guide=posterior, num_samples=200)(x_test)["obs"]

    :param LatentModel latent: the model as a function of the flat latent vector (from the
        MAP guide).
    :param SubnetworkCurvature curvature: the MAP, the S selected coordinates and the parts of
        the precision there (:mod:`pyro_subnet.evidence`).
    :param prior_scale: the multiplier of the prior precision, in any form of
        :class:`SubnetworkLaplace`'s ``prior_scale`` (``"marglik"`` forms are fitted here) or a
        dict per site; the value in use is kept in :attr:`prior_scale`.
    :param tuple args: a model call used to set the guide up.
    :param callable init_loc_fn: initialization used only to trace the model once.
    """

    def __init__(self, latent, curvature, prior_scale=1.0, args=(), kwargs=None, init_loc_fn=init_to_median):
        super().__init__(latent.model, init_loc_fn=init_loc_fn)
        self._setup_prototype(*args, **(kwargs or {}))
        shapes.remember_call(self, latent.model, args, kwargs or {})
        self._curvature = curvature
        self.prior_scale = curvature.resolve(prior_scale)
        precision = curvature.precision(self.prior_scale)
        precision_tril = cholesky_with_jitter(precision)
        self.register_buffer("loc", curvature.loc)
        self.register_buffer("subnetwork_indices", curvature.indices)
        self.register_buffer("precision", precision.detach())
        self.register_buffer("precision_tril", precision_tril.detach())
        self._latent = LatentModel(self, latent.model, latent.observed, latent.factors, latent.spec_options)

    def log_marginal_likelihood(self, prior_scale=None):
        r"""
        The Laplace evidence :math:`\log p(y)` of the subnetwork posterior (see
        :mod:`pyro_subnet.evidence`) from the curvature computed at the fit, to compare models
        or prior scales without recomputing it.

        :param prior_scale: ``None`` (the scale of this posterior), a positive number,
            ``"subnet"``, ``("subnet", a)``, a dict per site, or ``"marglik"`` /
            ``"marglik_per_site"`` for the maximum.
        :rtype: float
        """
        return self._curvature.log_marginal_likelihood(self.prior_scale if prior_scale is None else prior_scale)

    def get_posterior(self, *args, **kwargs):
        """The :class:`SubnetworkNormal` over the flat unconstrained latent vector."""
        return SubnetworkNormal(self.loc, self.subnetwork_indices, self.precision_tril)

    @property
    def covariance(self):
        r""":math:`\Sigma_S = \Lambda_S^{-1}`, an ``S x S`` tensor."""
        return torch.cholesky_inverse(self.precision_tril)

    @property
    def subnetwork(self):
        """``[(site name, flat element index of its unconstrained value), ...]`` for each of S."""
        out = []
        for i in self.subnetwork_indices.tolist():
            for name, (a, b) in self._latent.blocks.items():
                if a <= i < b:
                    out.append((name, i - a))
                    break
        return out

    def _loc_scale(self, *args, **kwargs):
        scale = torch.zeros_like(self.loc)
        scale[self.subnetwork_indices] = self.covariance.diagonal().sqrt()
        return self.loc, scale

    def quantiles(self, quantiles, *args, **kwargs):
        """Marginal posterior quantiles of each latent site (constrained space)."""
        return normal_quantiles(self, quantiles)

    def _offset_draws(self, num_samples):
        r"""``num_samples`` draws of :math:`u_S - \hat u_S \sim \mathcal N(0, \Sigma_S)`, ``[M, S]``."""
        C = self.precision_tril
        eps = torch.randn(num_samples, C.shape[0], 1, dtype=C.dtype, device=C.device)
        # one solve with M right-hand sides (a batch of M solves would copy C per draw), and never
        # the D-vectors of SubnetworkNormal's draws
        return torch.linalg.solve_triangular(C.mT, eps.squeeze(-1).T, upper=True).T

    def _whiten(self, J):
        r"""``B`` with :math:`B B^\top = J \Sigma_S J^\top` for Jacobian rows ``J`` (``[m, S]``):
        :math:`B = J C^{-\top}`, one triangular solve."""
        return torch.linalg.solve_triangular(self.precision_tril, J.T, upper=False).T

    def _jacobian(self, args, kwargs, chunk_size=None):
        """``{site: (spec, fn, eta, J)}``: MAP natural parameters and their Jacobians w.r.t. the S
        coordinates (see :func:`pyro_subnet.predictive.linearize`)."""
        return predictive.linearize(self, args, kwargs, lambda spec, J: J, chunk_size)

    def forward(self, *args, **kwargs):
        r"""
        One draw of every latent site (AutoContinuous's), for :class:`~pyro.infer.Predictive`.
        The call is first checked against the MAP's shapes, as :meth:`predict` checks it, so
        that inputs of another width name the site and the argument here instead of failing
        inside torch when ``Predictive`` replays the model; each distinct call (its tensors'
        shapes and its plain number and string arguments) is checked once, with one model trace
        at the MAP.

        :raises ValueError: naming the site, where the data's shapes do not fit the MAP's.
        """
        plain = (bool, int, float, str, type(None))
        key = (tuple(sorted(shapes.call_shapes(self._latent.model, args, kwargs).items())),
               tuple((i, v) for i, v in enumerate(args) if isinstance(v, plain)),
               tuple(sorted((k, v) for k, v in kwargs.items() if isinstance(v, plain))))
        checked = self.__dict__.setdefault("_checked_call_shapes", set())
        if key not in checked:
            shapes.checked_trace(self._latent, self.loc, args, kwargs, "Predictive(model, guide=posterior)")
            checked.add(key)
        return super().forward(*args, **kwargs)

    def predict(self, *args, linearized=True, num_samples=100, chunk_size=None, **kwargs):
        r"""
        Posterior predictive distribution of each observed site.

        With ``linearized=True`` the natural parameters are linearized in the subnetwork,
        :math:`\eta(x, u) \approx \eta(x, \hat u) + J_S(x)(u_S - \hat u_S)`: Normal
        likelihoods get :math:`\mathcal N(\mu, J_S\Sigma_S J_S^\top + \sigma^2)` (marginal per
        element), Bernoulli and Categorical the probit approximation, other families a
        ``num_samples``-component Monte Carlo mixture of the linearized model. The cost is
        linear in the number of inputs: the call is split along its data plate into chunks of
        ``chunk_size`` inputs (see :mod:`pyro_subnet.predictive`). With ``linearized=False``
        the mixture is over draws of the network itself.

        :return: ``{observed site name: torch.distributions.Distribution}``.
        :raises ValueError: naming the site, where the data's shapes do not fit the MAP's.
        """
        shapes.checked_trace(self._latent, self.loc, args, kwargs, "predict")
        if linearized:
            return predictive.linearized_predictive(self, args, kwargs, num_samples, chunk_size)
        draws = self.get_posterior().sample((num_samples,))
        etas, specs = {}, {}
        with torch.no_grad():
            for u in draws:
                tr, _ = self._latent.trace(u, args, kwargs)
                for name in self._latent.observed:
                    fn = tr.nodes[name]["fn"]
                    spec = specs.setdefault(name, predictive.spec_all(self._latent, fn, name))
                    etas.setdefault(name, []).append(spec.natural(fn))
        return {n: specs[n].mixture(torch.stack(e)) for n, e in etas.items()}


@torch.no_grad()
def normal_quantiles(guide, quantiles):
    """
    Quantiles of each latent site of an :class:`AutoContinuous` guide whose marginals are
    Normal in unconstrained space, ``guide._loc_scale()``, zero scales (point masses) allowed.
    """
    loc, scale = guide._loc_scale()
    q = torch.as_tensor(quantiles, dtype=loc.dtype)
    if ((q <= 0) | (q >= 1)).any():
        raise ValueError(f"quantiles must lie strictly between 0 and 1, got {quantiles}")
    z = torch.distributions.Normal(0.0, 1.0).icdf(q).to(loc.dtype)
    result = {}
    for latent in loc + scale * z[:, None]:
        for site, uv in guide._unpack_latent(latent):
            result.setdefault(site["name"], []).append(biject_to(site["fn"].support)(uv))
    return {k: torch.stack(v) for k, v in result.items()}
