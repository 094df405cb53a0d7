"""ParallelTempering: a pyro.infer.MCMC kernel doing likelihood-tempered replica exchange.

Glue only: each scan the rungs explore (:mod:`pyro_pt.explorers`), communicate (a swap round,
:mod:`pyro_pt.swap`, states moved by :mod:`pyro_pt.rungs`), and the run records
(:mod:`pyro_pt.recorders`, :mod:`pyro_pt.report`, the ladder's adaptation in
:mod:`pyro_pt.ladder`). What the kernel says about its run (report, diagnostics, logging) is
:class:`~pyro_pt.report.Reporting`; checkpoints are :class:`~pyro_pt.checkpoint.Checkpointing`;
Pyro's ``initial_params`` / ``save_params`` are :class:`~pyro_pt.compat.KernelParams`.
"""

import math
import time

import torch

from pyro.infer.autoguide.initialization import init_to_uniform
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from .autocompile import AutoCompile
from .checkpoint import Checkpointing, check_checkpointing
from .comm import make_comm
from .compat import KernelParams, refuse_multichain_mcmc
from .explain import missing_sites
from .growth import AUTO, Growth, growth_options
from .ladder import Ladder
from .options import check_options, ladder_temperatures
from .potential.inductor import check_compiler
from .reference import check_reference, is_prior
from .reference.refit import Refitting
from .reference.stabilized import crossed_bridge, refresh
from .recorders import TemperingRecorder
from .report import Report, Reporting
from .rungs import set_up_kernel
from .swap import swap_round


class ParallelTempering(Checkpointing, Reporting, KernelParams, MCMCKernel):
    r"""
    Parallel tempering (replica exchange) with likelihood-only tempering.

    Runs K replicas; the one at inverse temperature :math:`\beta_k = 1/T_k` targets

    .. math:: \log\pi_{\beta_k}(z) = lp(z) + \beta_k\, ll(z),

    with ``lp`` the log prior plus log-det-Jacobian in unconstrained space and ``ll`` the log
    probability of the observed sites. Each scan, every rung takes one step of its own explorer
    (batched HMC by default); every ``swap_interval`` scans, adjacent rungs exchange their
    states with probability :math:`\min(1, \exp((\beta_i - \beta_j)(ll(z_j) - ll(z_i))))`.
    The cold rung (:math:`T_0 = 1`) samples the posterior and is what
    :class:`~pyro.infer.MCMC` records.

    Adapted explorer state (step size, mass matrix, proposal scale) stays with its rung; replica
    states move. Every rung has its own random stream and the swaps one shared stream, all
    derived from Pyro's seed, so a seeded run is reproducible.

    At the end of a run its sampling phase is reviewed (:mod:`pyro_pt.health`): fewer rungs
    than its barrier calls for (``ceil(2 Lambda)``, the rule the end of warmup also warns by,
    :mod:`pyro_pt.shortfall`), a bottleneck pair, no round trip, too few tempered restarts
    (prior draws that reached the cold rung: what the weights of separated modes rest on), a
    cold rung that does not move or an unreliable log Z gives one
    :class:`~pyro_pt.TemperingWarning` (rank 0), the ``warnings`` of the report's closing row
    and of :meth:`diagnostics`, each with what to do. A model Pyro's NUTS refuses (a plate
    drawing a random subsample, a discrete latent) is refused at set-up, naming the site.

    **References**

    [1] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
    a scalable highly parallel MCMC scheme", JRSS B.

    [2] Earl, Deem (2005), "Parallel tempering: theory, applications, and new perspectives".

    :param callable model: a Pyro model with at least one observed site.
    :param int num_replicas: K, the number of rungs of the ladder, or ``"auto"``: start at 8
        (or at ``temperatures``) and add rungs in warmup while the barrier calls for more, up
        to ``max_replicas`` (:mod:`pyro_pt.growth`; one process). Default: ``"auto"`` with the
        prior as reference and ``adapt_temperatures=True`` in one process, else 8.
    :param int max_replicas: the cap of a growing ladder (default 32).
    :param float max_temperature: the hottest temperature of the geometric ladder
        :math:`T_k = T_{max}^{k/(K-1)}`; ``float("inf")`` (the default) makes the hottest
        rung the prior, drawn exactly (rungs equally spaced in beta to start): its tempered
        restarts carry the weights of separated modes to the cold chain
        (:mod:`pyro_pt.lineages`). Where a latent site's prior cannot be drawn (improper,
        scaled, masked), the default falls back to 50 with a :class:`~pyro_pt.TemperingWarning`
        naming the site; a finite hottest rung may not cross between modes.
    :param list temperatures: an explicit ladder instead, cold first: ``[1.0, ...]``
        increasing; the last may be ``inf``. With it, ``num_replicas`` and
        ``max_temperature`` may be left out; given, they must agree with it.
    :param explorer: the local kernel of each rung: ``"hmc"`` (default: HMC with per-rung
        step size, diagonal mass matrix and trajectory length (ChEES) adapted in warmup; all
        the rungs of a process advance together, one batched evaluation of a captured graph
        of the model per leapfrog step, see :attr:`explorer_info`; chosen by
        ``benchmarks/explorers.py``, docs/design.md), ``"nuts"`` (Pyro's NUTS on every rung),
        ``"rwmh"`` (random-walk Metropolis with a scale adapted in
        warmup), or a callable ``potential_fn -> MCMCKernel``.
    :param dict explorer_kwargs: keyword arguments for every rung's explorer (e.g.
        ``{"max_tree_depth": 6}`` for NUTS; for ``"hmc"``: ``num_steps`` (default: none, the
        trajectory length adapts and each iteration runs a jittered share of it, at most
        ``max_num_steps`` (default 1024) leapfrog steps; an explicit ``num_steps`` fixes them),
        ``num_steps_jitter`` (with ``num_steps`` only; default 0.5: each iteration takes
        between half and all of ``num_steps``), ``step_size``, ``target_accept_prob``,
        ``adapt_step_size``, ``adapt_mass_matrix``).
    :param str swap_scheme: ``"deo"`` (deterministic even-odd, non-reversible, default),
        ``"seo"`` (stochastic even-odd) or ``"sequential"`` (every pair, cold to hot).
    :param int swap_interval: scans between swap rounds (default 1).
    :param bool adapt_temperatures: re-place the rungs during warmup, after rounds of doubling
        length, at equal increments of the estimated communication barrier (Syed et al.
        2021); the cold rung and the hottest stay fixed, and the ladder is frozen within each
        round and for the whole sampling phase. The ladder given is the starting point.
        Default True; False keeps the given ladder as it is. Either way each warmup round
        and the sampling phase get a row in :attr:`report`, printed above Pyro's progress
        bar when it is shown.
    :param callable init_strategy: per-site initialization, as for Pyro's NUTS; every rung
        starts from its own draw (default :func:`~pyro.infer.autoguide.init_to_uniform`).
    :param dict transforms: optional site -> transform to unconstrained space.
    :param process_group: a ``torch.distributed`` process group to spread the rungs over, in
        contiguous blocks; by default the world group when ``torch.distributed`` is
        initialized, else all rungs run in this process.
    :param str compile: what runs the model's captured graph: ``"auto"`` (default: TorchScript,
        then Inductor from the warmup round's end at which its compilation costs under 5 % of
        the run's projected explorer time, :mod:`pyro_pt.autocompile`; ``explorer_info
        ["compile"]`` says when and why), ``"torchscript"`` or
        ``"inductor"`` (Inductor on the captured graph, TorchScript as the fallback); see
        :attr:`explorer_info` ``["potential_engine"]``. Under Inductor, ``explorer="hmc"`` on
        a small model steps all of a process's rungs in one compiled call per leapfrog step
        (``explorer_info["leapfrog"] == "lockstep"``, :mod:`pyro_pt.potential.lockstep`).
    :param int checkpoint_every: with ``checkpoint_path``, write a checkpoint (:meth:`checkpoint`)
        every so many scans; :meth:`resume` continues from one (:mod:`pyro_pt.checkpoint`).
    :param str checkpoint_path: the file of the periodic checkpoints (replaced atomically).
    :param reference: what the hottest rung samples (:mod:`pyro_pt.reference`): ``"prior"``
        (default); ``"variational"``, a Gaussian q in the unconstrained space refitted at each
        warmup round's end to the cold chain's draws, so that rung beta targets
        :math:`(1-\beta)\log q + \beta(lp + ll)` and the barrier between the hot end and the
        posterior shrinks (Surjanovic et al. 2022); or a fitted Pyro autoguide
        (``AutoNormal``, ``AutoMultivariateNormal``, ...), its Gaussian kept fixed. With a
        reference the default ladder ends at ``max_temperature=inf`` (beta = 0 is q, drawn
        exactly), and log Z is still the evidence. ``explorer_info["reference"]`` says which.

    Example::

        kernel = ParallelTempering(model, num_replicas=8, max_temperature=50.0)
        mcmc = MCMC(kernel, num_samples=1000, warmup_steps=500)
        mcmc.run(x, y)
        mcmc.diagnostics()["swap_acceptance"]
    """

    def __init__(self, model, num_replicas=None, max_temperature=None, temperatures=None,
                 explorer="hmc", explorer_kwargs=None, swap_scheme="deo", swap_interval=1,
                 adapt_temperatures=True, init_strategy=init_to_uniform, transforms=None,
                 process_group=None, compile="auto", max_replicas=None, checkpoint_every=None,
                 checkpoint_path=None, reference="prior"):
        if not callable(model):
            raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
        check_reference(reference)
        self.reference = reference
        self._ladder_given = temperatures is not None or not (
            max_temperature is None or max_temperature == math.inf)
        # By default the hottest rung is drawn exactly (options.ladder_temperatures), where the
        # prior allows (else rungs.finite_hot_end), and the ladder grows (in one process; a
        # max_replicas given asks for growth, refused over several processes as "auto" is).
        self._exact_hot_end_default = max_temperature is None and temperatures is None
        grows = (num_replicas is None and temperatures is None and is_prior(reference)
                 and adapt_temperatures is True)
        num_replicas = AUTO if grows else num_replicas
        self._grows_by_default = grows and max_replicas is None
        num_replicas, self._max_replicas = growth_options(num_replicas, max_replicas,
                                                          temperatures, adapt_temperatures)
        self._ladder = Ladder(ladder_temperatures(num_replicas, max_temperature, temperatures))
        check_options(explorer, explorer_kwargs, swap_scheme, swap_interval, adapt_temperatures)
        self.adapt_temperatures = adapt_temperatures
        self.model = model
        self.explorer = explorer
        self.explorer_kwargs = dict(explorer_kwargs or {})
        self.swap_scheme = swap_scheme
        self.swap_interval = swap_interval
        self.init_strategy = init_strategy
        self._user_transforms = transforms
        self.process_group = process_group
        self.compile = check_compiler(compile)
        self.checkpoint_every, self.checkpoint_path = check_checkpointing(checkpoint_every,
                                                                          checkpoint_path)
        self.transforms = self._split = self._rungs = self._reference = self._refitting = None
        self._fast = self._autocompile = None

    # ----- ladder -----

    @property
    def temperatures(self):
        """The ladder in use, cold (1.0) first."""
        return list(self._ladder.temperatures)

    @property
    def betas(self):
        """Inverse temperatures, cold (1.0) first; 0.0 for a prior rung."""
        return list(self._ladder.betas)

    @property
    def num_replicas(self):
        return len(self._ladder.betas)

    @property
    def rung_blocks(self):
        """``[(start, stop), ...]``: the rungs each rank holds (after setup)."""
        return list(self._rungs.blocks) if self._rungs else None

    @property
    def local_temperatures(self):
        """The temperatures of the rungs this process runs (after setup)."""
        return [self.temperatures[k] for k in self._rungs.rungs] if self._rungs else None

    def setup(self, warmup_steps, *args, **kwargs):
        comm = make_comm(self.process_group)
        refuse_multichain_mcmc(comm)
        self._ladder.reset()  # a rerun starts from the ladder given, not the one it adapted to
        if self._resume_from:  # the checkpoint's ladder, and the run's warmup from what is left
            warmup_steps = self._resume_warmup(warmup_steps)
        num = self.num_replicas
        # A default ladder grows in one process only: over several, the rungs' blocks are
        # fixed at set-up, and the end of warmup says when the barrier calls for more rungs.
        grows = self._max_replicas and not (self._grows_by_default and comm.world_size > 1)
        self._growth = grows and Growth(self._max_replicas, comm, warmup_steps, num,
                                        self.swap_interval)
        start = time.perf_counter()
        self._rungs, self._split, local_ll, self.explorer_info, seeds = set_up_kernel(
            self, comm, warmup_steps, args, kwargs)
        # capture, checks and compilations (a cold Inductor compile: tens of seconds)
        self.explorer_info["setup_seconds"] = time.perf_counter() - start
        self.transforms = self._split.transforms
        self._swap_generator = torch.Generator().manual_seed(seeds[num])
        self._warmup_steps = warmup_steps
        self._fingerprint = None  # of this set-up's model and data, at the first checkpoint
        self._ll = self._rungs.gather(local_ll)
        self._initial_params = self._rungs.cold_state()
        self._recorder = TemperingRecorder(num, warmup_steps, self._ladder.legs,
                                           self._ladder.exact_hots)
        self._report = Report(warmup_steps, self.adapt_temperatures, comm, self.swap_interval,
                              self._growth and self._growth.max_replicas or None)
        self.explorer_info["reference"] = ("prior" if self._reference is None
                                           else self._reference.describe())
        self._refitting = self._reference is not None and self.reference == "variational" and \
            Refitting(self._reference, self._report.round_ends, self._split.latent_names)
        # compile="auto": TorchScript, then Inductor from the warmup round's end where it pays
        self._autocompile = AutoCompile.for_run(self, comm, self._report.round_ends)
        # Wall-clock seconds in sample(): all of it, and inside the explorers' own moves.
        self.timings = {"explorers": 0.0, "total": 0.0}
        if self._resume_from:
            self._restore(comm)

    @property
    def _t(self):
        """Scans done."""
        return self._recorder.scans

    def sample(self, params):
        start = time.perf_counter()
        rungs = self._rungs
        with missing_sites(self._split):
            local_ll, cold_moved = rungs.explore()
        explored = time.perf_counter()
        self._ll = rungs.gather(local_ll)
        outcome = [math.nan] * (self.num_replicas - 1)
        if (self._t + 1) % self.swap_interval == 0:
            outcome = self._communicate()
        cold = rungs.cold_state()
        self._recorder.record_scan(self._ll, outcome)
        new_betas = self._report.after_scan(self._ladder, self._recorder, cold_moved)
        if new_betas is not None and not (self._growth and self._growth.grow(self)):
            for k, explorer in zip(rungs.rungs, rungs.explorers):
                explorer.set_beta(new_betas[k])
        if self._refitting:  # at a warmup round's end q is refitted to its cold draws
            self._refitting.after_scan(self, self._t, cold)
        self.timings["explorers"] += explored - start
        if self._autocompile:  # with this scan's explorer time counted
            self._autocompile.after_scan(self)
        self.timings["total"] += time.perf_counter() - start
        self._after_scan()
        return cold

    def _communicate(self):
        """One swap round (the ``t // swap_interval``-th) over the ladder; returns its outcome."""
        origin, attempts = swap_round(self.swap_scheme, self._t // self.swap_interval,
                                      self.betas, self._ll, self._swap_generator,
                                      self._ladder.legs)
        outcome = self._recorder.record_swaps(attempts)
        self._ll = [self._ll[k] for k in origin]
        if origin != sorted(origin):
            self._rungs.permute(origin)
        if crossed_bridge(self, attempts):  # each cold rung's ll in its own leg's meaning
            refresh(self, self._ladder.legs.colds)
        return outcome
