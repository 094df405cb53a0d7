r"""
:class:`SubnetworkLaplace`: a MAP guide that turns into a subnetwork Laplace posterior.
"""

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch
from pyro.distributions import Unit, constraints
from pyro.infer.autoguide import AutoContinuous
from pyro.infer.autoguide.initialization import init_to_median
from pyro.nn import PyroParam
from pyro.poutine.util import site_is_subsample

from . import batching, curvature, evidence, prior, shapes, sharding
from . import selection as choose
from .comm import check_group, make_comm
from .posterior import SubnetworkLaplacePosterior, normal_quantiles


class SubnetworkLaplace(AutoContinuous):
    r"""
    Subnetwork linearized Laplace approximation (Daxberger et al., 2021).

    During SVI this is a MAP guide: a point mass at a learnable vector :math:`\hat u` of the
    flattened unconstrained latents (the coordinates of :class:`AutoContinuous`), so that
    ``Trace_ELBO`` minimizes :math:`-\log p(y, T(u)) - \log|\det \partial T/\partial u|`.
    :meth:`laplace_approximation` then selects S coordinates and returns a
    :class:`SubnetworkLaplacePosterior` with

    .. math::

        \Sigma_S = \Big(\sum_n J_{Sn}^\top F_n J_{Sn} + c\, P_S\Big)^{-1},

    the GGN of the observed sites w.r.t. the subnetwork plus the Hessian :math:`P_S` of minus
    the model's own log prior (with the log-det-Jacobian) on S, scaled by ``c = prior_scale``.
    ``pyro.factor`` sites count as likelihood terms (as in :mod:`pyro_pt`); having no Fisher,
    they add their exact Hessian, unscaled (see :mod:`pyro_subnet.prior`).

    Example::

        guide = SubnetworkLaplace(model, subnetwork_size=0.01)
        svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
        for _ in range(2000):
            svi.step(x, y)
        posterior = guide.laplace_approximation(x, y)
        posterior.predict(x_test)["obs"]       # linearized predictive

    **References**

    [1] E. Daxberger, E. Nalisnick, J. U. Allingham, J. Antoran, J. M. Hernandez-Lobato,
        "Bayesian Deep Learning via Subnetwork Inference", ICML 2021.
    [2] W. Maddox et al., "A Simple Baseline for Bayesian Uncertainty in Deep Learning", 2019.
    [3] A. Immer, M. Korzepa, M. Bauer, "Improving predictions of Bayesian neural nets via local
        linearization", AISTATS 2021.

    :param callable model: a Pyro model with continuous latents and at least one observed site.
    :param subnetwork_size: the number S of coordinates (int) or a fraction (float in (0, 1])
        of the candidates (the D coordinates, or those of ``selection_sites``); omitted when
        ``selection`` lists the coordinates or is ``"last_layer"``. A fraction of 1 is the full
        posterior over the candidates, whatever the ranking. Anything else is refused here; a
        count above the candidates at the guide's first call (the first ``svi.step``).
    :param selection: ``"predictive"`` (the default: largest marginal variance times Jacobian
        energy on the data, never a coordinate the data do not move), ``"wasserstein"`` (the
        paper's largest marginal variances), ``"random"``, ``"magnitude"`` (largest
        :math:`|\hat u|`), ``"last_layer"``, a list of latent site names, a LongTensor of
        indices or a boolean mask of length D. See :mod:`pyro_subnet.selection` for when each
        is preferable.
    :param str variance: marginal variances that ``"predictive"`` and ``"wasserstein"`` rank:
        ``"diag_laplace"``, ``"swag"`` or ``"exact"``.
    :param prior_scale: multiplier ``c`` of the prior precision (not of ``pyro.factor``
        terms): a positive float; ``"subnet"`` for the paper's ``S / D``; ``("subnet", a)`` for
        ``a S / D``; ``"marglik"`` for the ``c`` that maximizes the Laplace evidence, or
        ``"marglik_per_site"`` for one ``c`` per latent site (see :mod:`pyro_subnet.evidence`;
        the curvature is computed once for every value tried). The selection ranks under the
        full network's prior (``"subnet"`` forms with ``S / D = 1``, fitted forms with ``c = 1``).
        ``D`` counts the candidates: the coordinates of ``selection_sites`` when given.
    :param callable init_loc_fn: per-site initialization of the MAP.
    :param bool mc_fisher: estimate the Fisher by Monte Carlo for families without a closed form
        (otherwise such a family is an error).
    :param int num_mc: draws per element for that Monte Carlo Fisher.
    :param int chunk_size: data points per batched Jacobian pass (one model call is split along
        its data plate, see :mod:`pyro_subnet.batching`); each Jacobian row runs a backward pass
        over its chunk, so small chunks waste little and large ones save Python overhead.
    :param dict variance_options: options of the SWAG estimator (``lr``, ``num_steps``,
        ``batch_fraction``; see :func:`pyro_subnet.selection.swag_variance`).
    :param list selection_sites: latent site names a ranking chooses among (``subnetwork_size``
        as a fraction is then a fraction of their coordinates); every other latent stays at its
        MAP, its prior counted in the MAP phase, e.g. ``selection_sites=["W0", "W1"]`` for the
        paper's weights-only inference. ``None``: every latent site.
    :param process_group: a ``torch.distributed`` group whose ranks each hold a shard of the
        data; ``None``: the default group when ``torch.distributed`` is initialized (e.g. under
        ``torchrun``), else one process. Every rank then ends with the posterior of one
        process holding all the data (see :mod:`pyro_subnet.comm`); fit the MAP with
        :class:`~pyro_subnet.DataParallelELBO`.

    After a ``"predictive"`` or ``"wasserstein"`` selection the ranked variances are kept in
    ``guide.marginal_variance`` (zero outside the candidates) and, when computed, the training
    Jacobian energies (GGN diagonal) in ``guide.jacobian_energy``.

    The MAP is the :class:`~pyro.nn.PyroParam` ``guide.loc`` (param store name
    ``"SubnetworkLaplace.loc"``), so ``pyro.get_param_store().set_state(...)`` restores it. As
    in every Pyro guide the param store is the source of truth: a value it already holds when
    the guide is set up is adopted (call ``pyro.clear_param_store()`` between unrelated runs).
    The guide counts as *trained* once its MAP has been written since set-up (an optimizer step,
    or an assignment such as ``guide.loc.copy_(...)`` under ``torch.no_grad()``) or differs from
    its initial point (a restored or adopted value); :meth:`laplace_approximation` on an
    untrained guide raises a ``ValueError``.
    """

    def __init__(self, model, subnetwork_size=None, selection="predictive", variance="diag_laplace",
                 prior_scale=1.0, init_loc_fn=init_to_median, *, mc_fisher=True, num_mc=16,
                 chunk_size=4, variance_options=None, selection_sites=None, process_group=None):
        if isinstance(selection, str) and selection not in choose.STRATEGIES:
            raise ValueError(f"selection must be one of {choose.STRATEGIES}, a list of site names, "
                             f"an index tensor or a boolean mask; got {selection!r}")
        if not isinstance(selection, (str, list, tuple, torch.Tensor)):
            raise TypeError(f"selection must be a strategy name, a list of site names, an index tensor "
                            f"or a boolean mask; got {type(selection).__name__}")
        if selection_sites is not None and not (isinstance(selection_sites, (list, tuple)) and selection_sites
                                                 and all(isinstance(s, str) for s in selection_sites)):
            raise TypeError(f"selection_sites must be a non-empty list of latent site names or None, "
                            f"got {selection_sites!r}")
        subnetwork_size = choose.check_size(subnetwork_size)
        if isinstance(selection, str) and selection != "last_layer" and subnetwork_size is None:
            raise ValueError(f'selection="{selection}" needs a subnetwork_size (a count or a fraction of D)')
        if variance not in choose.VARIANCES:
            raise ValueError(f"variance must be one of {choose.VARIANCES}, got {variance!r}")
        prior.prior_scale_multiplier(prior_scale)  # checks it
        if not (isinstance(chunk_size, int) and chunk_size >= 1):
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        super().__init__(model, init_loc_fn=init_loc_fn)
        self.subnetwork_size = subnetwork_size
        self.selection = selection
        self.selection_sites = selection_sites
        self.variance = variance
        self.prior_scale = prior_scale
        self.chunk_size = chunk_size
        self.variance_options = dict(variance_options or {})
        self._spec_options = {"mc_fisher": mc_fisher, "num_mc": num_mc}
        # in a tuple, as AutoGuide keeps its model: a PyroModule model must not become a submodule
        self._raw = (model,)
        self._init_loc_fn = init_loc_fn
        self.process_group = check_group(process_group)

    @property
    def _raw_model(self):
        """The model itself, without the per-site initialization that :attr:`model` wraps it in."""
        return self._raw[0]

    def _setup_prototype(self, *args, **kwargs):
        full = poutine.block(poutine.trace(self.model).get_trace)(*args, **kwargs)
        self._observed, self._factors = [], []
        for name, site in full.nodes.items():
            if site["type"] != "sample" or site_is_subsample(site) or site["infer"].get("_deterministic"):
                continue  # a pyro.deterministic site is an observed Delta: a record, not data
            if site["is_observed"]:
                (self._factors if isinstance(site["fn"], Unit) else self._observed).append(name)
            elif site["fn"].support.is_discrete:
                raise ValueError(
                    f"latent site '{name}' is discrete ({type(site['fn']).__name__}); "
                    "SubnetworkLaplace needs continuous latents: marginalize it out or observe it"
                )
        if not self._observed:
            raise ValueError(
                "the model has no observed site (a pyro.sample with obs=...); subnetwork Laplace "
                "needs a likelihood: call the guide with the data, e.g. guide(x, y)"
            )
        super()._setup_prototype(*args, **kwargs)
        shapes.remember_call(self, self._raw_model, args, kwargs)
        self._check_size_fits()
        init = self._init_loc()
        name, store = self._pyro_get_fullname("loc"), pyro.get_param_store()
        if name in store and store[name].shape != init.shape:
            raise ValueError(
                f"the param store holds '{name}' of shape {tuple(store[name].shape)} from another model, "
                f"but this model has {init.numel()} latent coordinates; call pyro.clear_param_store() first"
            )
        # a PyroParam follows the param store (set_state restores it; a stale entry is trained, not frozen)
        self.loc = PyroParam(init, constraints.real, event_dim=1)
        param = self.loc.unconstrained()
        self._initial = (init.detach().clone(), param, param._version)

    def _check_size_fits(self):
        # a count can exceed the candidates only once the model is traced: here, at the first
        # guide call (the first svi.step), before the MAP phase rather than after it
        sites = self.selection_sites
        shapes = self._unconstrained_shapes
        if (isinstance(self.subnetwork_size, int) and isinstance(self.selection, str)
                and self.selection != "last_layer" and (sites is None or set(sites) <= set(shapes))):
            D = sum(shapes[name].numel() for name in (shapes if sites is None else set(sites)))
            choose.resolve_size(self.subnetwork_size, D, sites)

    def get_posterior(self, *args, **kwargs):
        """A Delta posterior at the MAP (the guide used during SVI)."""
        return dist.Delta(self.loc).to_event(1)

    def _loc_scale(self, *args, **kwargs):
        return self.loc, torch.zeros_like(self.loc)

    def quantiles(self, quantiles, *args, **kwargs):
        """The MAP at every level (a point mass), per latent site in constrained space."""
        return normal_quantiles(self, quantiles)

    def predict(self, *args, **kwargs):
        """Not available on the MAP guide: the predictive belongs to the posterior."""
        raise ValueError(
            "predict() needs the Laplace posterior: call posterior = "
            "guide.laplace_approximation(*data) after the MAP phase, then posterior.predict(...)"
        )

    def laplace_approximation(self, *args, **kwargs):
        r"""
        Selects the subnetwork, accumulates its GGN and prior precision at the current MAP and
        returns the :class:`SubnetworkLaplacePosterior`. ``*args, **kwargs`` are one call of the
        model on the whole data set; it is split into chunks of ``chunk_size`` data points
        along the data plate when the tensors allow (see :mod:`pyro_subnet.batching`). A fitted
        ``prior_scale`` (``"marglik"``) is chosen from the curvature computed here once. Across
        processes (``process_group``) each rank passes its own shard and every rank returns the
        posterior of one process holding all the data.

        :raises ValueError: if the guide was not trained (see the class docstring).
        """
        return self.laplace_approximation_batched([(args, kwargs)])

    def laplace_approximation_batched(self, batches):
        r"""
        As :meth:`laplace_approximation`, for data given as a re-iterable of ``(args, kwargs)``
        minibatches that together make up the data set (their contributions add up; the model
        should not rescale them by subsampling plates). The prior is read from the first
        minibatch; ``pyro.factor`` terms, as likelihood terms, add up over all of them.
        """
        batches = batching.as_batches(batches)
        comm, u_hat, latent, chunks = self._set_up(batches)
        try:
            idx = sharding.check_subnetwork(comm, choose.select(self, latent, u_hat, chunks, batches, comm))
            parts = evidence.SubnetworkCurvature(latent, u_hat, idx.to(u_hat.device), chunks, comm=comm,
                                                 num_candidates=choose.num_candidates(self, latent, u_hat.numel()))
        except Exception as error:
            comm.leave_note(error)  # the other ranks may wait in a sum: their error names this one
            raise
        return SubnetworkLaplacePosterior(latent, parts, self.prior_scale, *batches[0], init_loc_fn=self._init_loc_fn)

    def _set_up(self, batches):
        """``(comm, u_hat, latent, chunks)``: the communicator, the MAP, the model as a function of
        the flat latent vector and the chunks of this rank's data, checked against the other
        ranks' (:func:`pyro_subnet.sharding.prepare`) when there are several."""
        comm = make_comm(self.process_group)

        def set_up():
            u_hat = self._trained_map(*batches[0])
            latent = curvature.LatentModel(self, self._raw_model, self._observed, self._factors, self._spec_options)
            return u_hat, latent, self._chunks(latent, u_hat, batches)

        return (comm,) + sharding.prepare(self, comm, set_up, batches)

    def _trained_map(self, args, kwargs):
        """The MAP as the param store holds it; a ``ValueError`` if the guide was not trained."""
        with self._pyro_context:  # set up and read through the param store, as SVI does
            if self.prototype_trace is None:
                self._setup_prototype(*args, **kwargs)
            loc = self.loc
        init, param, version = self._initial
        # _version counts in-place writes to a tensor: optimizer steps and copy_ assignments
        if not (loc is param and loc._version != version) and torch.equal(loc.detach(), init):
            raise ValueError(
                "laplace_approximation() needs a trained guide, but its MAP (the param store's "
                f"'{self._pyro_get_fullname('loc')}') is still the initial point: run the MAP phase first, "
                "e.g. svi = SVI(model, guide, pyro.optim.Adam({'lr': 1e-2}), Trace_ELBO()) and svi.step(*data) "
                "until the loss settles, restore a trained param store, or set the MAP with "
                "torch.no_grad(): guide.loc.copy_(value)"
            )
        return loc.detach().clone()  # a snapshot: further training must not move the posterior

    def _chunks(self, latent, u_hat, batches):
        def trace_fn(u, args, kwargs):
            return latent.trace(u, args, kwargs)[0]

        g = torch.Generator().manual_seed(0)
        points = [u_hat, u_hat + 1e-2 * torch.randn(u_hat.shape, generator=g, dtype=u_hat.dtype).to(u_hat.device)]
        out = []
        for args, kwargs in batches:
            # the first trace on these data: one whose shapes disagree with the MAP's names the site
            traced = shapes.checked_trace(latent, u_hat, args, kwargs, "laplace_approximation")
            sizes = batching.data_plate_sizes(traced, self._observed)
            n = batching.splittable_size(args, kwargs, sizes)
            parts = None if n is None or n <= self.chunk_size else batching.split_call(args, kwargs, n, self.chunk_size)
            if parts and batching.split_is_exact(trace_fn, self._observed + self._factors, (args, kwargs), parts, n, points):
                out.extend(parts)
            else:
                out.append((args, kwargs))
        return out


