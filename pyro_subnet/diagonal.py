r"""
Diagonal linearized Laplace over all candidate coordinates: the paper's baseline.

.. math::

    u_d \sim \mathcal N\big(\hat u_d,\; \Lambda_{dd}^{-1}\big), \qquad
    \Lambda_{dd} = \sum_n J_{dn}^\top F_n J_{dn} + c\, P_{dd} + Q_{dd},

independently for every coordinate ``d`` of the candidate sites (all D by default), the others
at the MAP. The precision is the diagonal of the subnetwork precision of
:class:`~pyro_subnet.SubnetworkLaplace` (same GGN, prior Hessian and factor terms), computed
without any ``D x D`` matrix; the linearized predictive uses
:math:`J \operatorname{diag}(\Lambda)^{-1} J^\top`, also in O(n k D).

**References**

[1] E. Daxberger et al., "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
[2] H. Ritter, A. Botev, D. Barber, "A Scalable Laplace Approximation for Neural Networks", ICLR 2018.
"""

import torch
from pyro.infer.autoguide import AutoContinuous
from pyro.infer.autoguide.initialization import init_to_median

from . import batching, curvature, prior, shapes
from . import selection as choose
from .guide import SubnetworkLaplace
from .posterior import SubnetworkLaplacePosterior, SubsetNormal


class DiagonalSubnetworkNormal(SubsetNormal):
    """
    :class:`~pyro_subnet.posterior.SubsetNormal` with independent coordinates: ``factor`` holds
    the standard deviations of the S coordinates.
    """

    @property
    def scale(self):
        return self.factor

    def _offset(self, eps):
        return self.factor * eps

    def _whiten(self, r):
        return r / self.factor

    def _log_det(self):
        return -self.factor.log().sum()


class DiagonalLaplace(SubnetworkLaplace):
    r"""
    A MAP guide (as :class:`SubnetworkLaplace`) whose :meth:`laplace_approximation` returns a
    :class:`DiagonalLaplacePosterior`: a diagonal linearized Laplace posterior over every
    coordinate of ``selection_sites`` (all latent sites by default).

    Example::

        guide = DiagonalLaplace(model, selection_sites=["W0", "W1", "W2"])
        svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
        ...
        posterior = guide.laplace_approximation(x, y)
        posterior.predict(x_test)["obs"].stddev

    :param callable model: a Pyro model with continuous latents and at least one observed site.
    :param prior_scale: multiplier of the prior precision, a positive number (``"subnet"``
        means ``len(candidates) / D``).
    :param list selection_sites: the latent sites that get a diagonal posterior; the others stay
        at the MAP. ``None``: all.
    :param process_group: as for :class:`SubnetworkLaplace`: each rank holds a shard of the data.
    :param callable init_loc_fn: per-site initialization of the MAP.
    Other keywords as for :class:`SubnetworkLaplace`.
    """

    def __init__(self, model, prior_scale=1.0, init_loc_fn=init_to_median, *, selection_sites=None,
                 mc_fisher=True, num_mc=16, chunk_size=4, process_group=None):
        super().__init__(model, subnetwork_size=1.0, selection="random", prior_scale=prior_scale,
                         init_loc_fn=init_loc_fn, mc_fisher=mc_fisher, num_mc=num_mc, chunk_size=chunk_size,
                         selection_sites=selection_sites, process_group=process_group)
        self.selection = None  # no ranking: every candidate coordinate gets its variance

    def laplace_approximation_batched(self, batches):
        """Diagonal GGN plus diagonal prior Hessian at the MAP; see :class:`DiagonalLaplace`."""
        batches = batching.as_batches(batches)
        comm, u_hat, latent, chunks = self._set_up(batches)
        idx = choose.candidates(latent, self.selection_sites, u_hat.device)
        c = prior.prior_scale_multiplier(self.prior_scale, len(idx) / u_hat.numel())
        if c is None:
            raise ValueError(f"DiagonalLaplace takes a fixed prior_scale (a positive number, \"subnet\" or "
                             f"(\"subnet\", a)), not the fitted {self.prior_scale!r}: fit it with "
                             "SubnetworkLaplace(..., prior_scale=\"marglik\") and pass the value it finds")
        energy = comm.all_reduce_sum(choose.jacobian_energy(latent, u_hat, idx, chunks), "sum of the GGN diagonal")
        prec = choose.diag_precision(latent, u_hat, chunks, c, idx, energy, comm).to(u_hat.dtype)
        if not (prec > 0).all():
            bad = [s for s, _ in _names(latent, idx[prec <= 0])]
            raise ValueError(f"the diagonal precision is not positive on sites {sorted(set(bad))} (flat prior "
                             "and no data information); give them a proper prior or leave them out of selection_sites")
        args, kwargs = batches[0]
        return DiagonalLaplacePosterior(self._raw_model, u_hat, idx, prec, self._observed, self._factors,
                                        self._spec_options, args, kwargs, init_loc_fn=self._init_loc_fn,
                                        prior_scale=c)


def _names(latent, idx):
    return [(n, i - a) for i in idx.tolist() for n, (a, b) in latent.blocks.items() if a <= i < b]


class DiagonalLaplacePosterior(SubnetworkLaplacePosterior):
    r"""
    The diagonal Laplace posterior of :class:`DiagonalLaplace`: independent Normals on the
    coordinates ``subnetwork_indices``, the MAP on the others. It is a
    :class:`SubnetworkLaplacePosterior` (same :meth:`predict`, :class:`~pyro.infer.Predictive`
    and ArviZ export) whose precision is diagonal; :attr:`precision`, :attr:`precision_tril`
    and :attr:`covariance` form their ``S x S`` matrices only when asked for, while sampling,
    densities and the linearized predictive work on the diagonal.

    :param torch.Tensor precision_diagonal: :math:`\Lambda_{dd}` for each selected coordinate.
    :param float prior_scale: the multiplier of the prior precision in use (kept in
        :attr:`prior_scale`, for the log joint of the ArviZ export).
    Other parameters as for :class:`SubnetworkLaplacePosterior`.
    """

    def __init__(self, model, loc, subnetwork_indices, precision_diagonal, observed, factors, spec_options,
                 args=(), kwargs=None, init_loc_fn=init_to_median, prior_scale=1.0):
        AutoContinuous.__init__(self, model, init_loc_fn=init_loc_fn)
        self.prior_scale = prior_scale
        self._setup_prototype(*args, **(kwargs or {}))
        shapes.remember_call(self, model, args, kwargs or {})
        self.register_buffer("loc", loc.detach())
        self.register_buffer("subnetwork_indices", subnetwork_indices)
        self.register_buffer("precision_diagonal", precision_diagonal.detach())
        self._latent = curvature.LatentModel(self, model, observed, factors, spec_options)

    @property
    def variance(self):
        """Marginal variances of the selected coordinates, ``1 / precision_diagonal``."""
        return self.precision_diagonal.reciprocal()

    @property
    def precision(self):
        return torch.diag(self.precision_diagonal)

    @property
    def precision_tril(self):
        return torch.diag(self.precision_diagonal.sqrt())

    @property
    def covariance(self):
        return torch.diag(self.variance)

    def get_posterior(self, *args, **kwargs):
        """The :class:`DiagonalSubnetworkNormal` over the flat unconstrained latent vector."""
        return DiagonalSubnetworkNormal(self.loc, self.subnetwork_indices, self.variance.sqrt())

    def _loc_scale(self, *args, **kwargs):
        scale = torch.zeros_like(self.loc)
        scale[self.subnetwork_indices] = self.variance.sqrt()
        return self.loc, scale

    def _offset_draws(self, num_samples):
        sd = self.variance.sqrt()
        return sd * torch.randn(num_samples, len(sd), dtype=sd.dtype, device=sd.device)

    def _whiten(self, J):
        return J * self.variance.sqrt()  # J diag(sd): its outer product is J diag(Lambda)^-1 J^T

    def log_marginal_likelihood(self, prior_scale=None):
        """Not defined for the diagonal baseline (its precision drops the GGN's off-diagonal terms)."""
        raise NotImplementedError(
            "the Laplace evidence needs the full-covariance posterior: use SubnetworkLaplace(model, "
            "subnetwork_size=..., prior_scale=...) and its posterior.log_marginal_likelihood()"
        )
