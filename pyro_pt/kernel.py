"""ParallelTempering: a pyro.infer.MCMC kernel doing likelihood-tempered replica exchange.

Glue only (the shape of a scan and a round: docs/layout.md, "One run state"): ``setup`` builds
the :class:`~pyro_pt.run.Run` (:mod:`pyro_pt.setup`); ``sample`` is one scan. What the kernel
says about its run is :class:`~pyro_pt.diagnostics.Diagnostics`, its checkpoints
:class:`~pyro_pt.checkpoint.Checkpointing`, Pyro's ``initial_params`` / ``save_params``
:class:`~pyro_pt.compat.KernelParams`; all three read the run."""

import math
import time

from pyro.infer.autoguide.initialization import init_to_uniform
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from .checkpoint import Checkpointing, restore, resume_warmup, save
from .comm import make_comm
from .compat import KernelParams, mcmc_num_samples, refuse_multichain_mcmc, refuse_no_draws
from .diagnostics import Diagnostics
from .ensemble import Ensemble, PooledAdaptation, check_num_ladders
from .explain import missing_sites
from .growth import AUTO, growth_options
from .ladder import Ladder
from .options import check_checkpointing, check_options, ladder_temperatures
from .potential.inductor import check_compiler
from .reference import check_reference, is_prior
from .reference.stabilized import crossed_bridge, refresh
from .report import Scan
from .rounds import after_scans
from .rungs import explore
from .run import Options, Run
from .setup import set_up_followers, set_up_run
from .swap import swap_round


class ParallelTempering(Checkpointing, Diagnostics, KernelParams, MCMCKernel):
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
    derived from Pyro's seed (:mod:`pyro_pt.random`), so a seeded run is reproducible.

    At the end of a run its sampling phase is reviewed (:mod:`pyro_pt.health`: too few rungs,
    a bottleneck pair, no round trip, a cold-chain mean whose Monte Carlo error is large
    against its posterior sd, a cold rung that does not move, an unreliable log Z): one
    :class:`~pyro_pt.TemperingWarning` (rank 0), also the ``warnings`` of the report's closing
    row and of :meth:`diagnostics`, each with what to do. :meth:`mcse` gives the Monte Carlo
    error of any function of the cold draws, valid across modes (:mod:`pyro_pt.regeneration`).
    A model Pyro's NUTS refuses (a plate drawing a random subsample, a discrete latent) is
    refused at set-up, naming the site.

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
        then Inductor from the warmup round's end at which its compilation costs less than it
        is expected to save, 30 % of the run's projected explorer time,
        :mod:`pyro_pt.autocompile`; ``explorer_info
        ["compile"]`` says when and why), ``"torchscript"`` or
        ``"inductor"`` (Inductor on the captured graph, TorchScript as the fallback); see
        :attr:`explorer_info` ``["potential_engine"]``. Under Inductor, ``explorer="hmc"`` on
        a small model steps all of a process's rungs in one compiled call per leapfrog step
        (``explorer_info["leapfrog"] == "lockstep"``, :mod:`pyro_pt.potential.lockstep`).
    :param int checkpoint_every: with ``checkpoint_path``, write a checkpoint (:meth:`checkpoint`)
        every so many scans; :meth:`resume` continues from one (:mod:`pyro_pt.checkpoint`).
    :param str checkpoint_path: the file of the periodic checkpoints (replaced atomically).
    :param reference: what the hottest rung samples (:mod:`pyro_pt.reference`): ``"auto"``
        (default), the prior, until warmup's cold draws show separated modes; then a leg to a
        Gaussian mixture q fitted to them (``"mixture"``'s) joins the ladder at its cold end,
        the prior's leg kept (:mod:`pyro_pt.reference.joining`; ``explorer_info["reference"]``
        and ``adaptation_history``'s ``"joined"`` say whether and when); ``"prior"``, the prior
        alone; ``"variational"``, a Gaussian q in the unconstrained space refitted at each
        warmup round's end to the cold chain's draws, so that rung beta targets
        :math:`(1-\beta)\log q + \beta(lp + ll)` and the barrier between the hot end and the
        posterior shrinks (Surjanovic et al. 2022); or a fitted Pyro autoguide
        (``AutoNormal``, ``AutoMultivariateNormal``, ...), its Gaussian kept fixed;
        ``"mixture"``, a Gaussian mixture refitted as ``"variational"`` is (a component on
        each mode the cold chains found: on a multimodal posterior a far shorter barrier than
        one Gaussian's; :mod:`pyro_pt.reference.mixture`). With a
        reference the default ladder ends at ``max_temperature=inf`` (beta = 0 is q, drawn
        exactly), and log Z is still the evidence. ``explorer_info["reference"]`` says which.
    :param int num_ladders: C independent ladders of the same betas, whose tempered rungs
        step in one batched call (:mod:`pyro_pt.ensemble`): C times the tempered restarts of
        one ladder, at the price of one batched scan per call. As each chain of
        ``MCMC(num_chains=C)`` would, every ladder runs ``warmup_steps`` and ``num_samples``
        scans; MCMC holds ``num_samples`` draws: each ladder's every C-th cold draw, in
        contiguous blocks, ladder 0's first. The adaptation, the growth of the ladder, the
        diagnostics, :meth:`mcse` and the review pool the ladders. Default (None): 8 ladders for
        a small model, else one (:func:`~pyro_pt.ensemble.num_ladders` says the rule;
        ``explorer_info["num_ladders"]`` and ``["num_ladders_reason"]`` what it chose and why).
        Checkpoints hold every ladder (from the sampling phase, a run resumes for the draws
        left only); a fitted reference is every ladder's q.

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
                 checkpoint_path=None, reference="auto", num_ladders=None):
        if not callable(model):
            raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
        check_reference(reference)
        # By default the hottest rung is drawn exactly (options.ladder_temperatures), where the
        # prior allows (else setup.finite_hot_end), and the ladder grows (in one process; a
        # max_replicas given asks for growth, refused over several processes as "auto" is).
        grows = (num_replicas is None and temperatures is None and is_prior(reference)
                 and adapt_temperatures is True)
        check_num_ladders(num_ladders)
        start, cap = growth_options(AUTO if grows else num_replicas, max_replicas, temperatures,
                                    adapt_temperatures)
        self._ladder = Ladder(ladder_temperatures(start, max_temperature, temperatures))
        check_options(explorer, explorer_kwargs, swap_scheme, swap_interval, adapt_temperatures)
        check_compiler(compile)
        checkpoint_every, checkpoint_path = check_checkpointing(checkpoint_every, checkpoint_path)
        self.model = model
        # The settings, in one place: each run set up reads them (pyro_pt.run.Options).
        self.options = Options(
            model=model, explorer=explorer, explorer_kwargs=dict(explorer_kwargs or {}),
            swap_scheme=swap_scheme, swap_interval=swap_interval,
            adapt_temperatures=adapt_temperatures, init_strategy=init_strategy,
            transforms=transforms, process_group=process_group, compile=compile,
            reference=reference, checkpoint_every=checkpoint_every,
            checkpoint_path=checkpoint_path, initial_params=None, save_params=None,
            resume_from=None,
            ladder_given=temperatures is not None or not (
                max_temperature is None or max_temperature == math.inf),
            exact_hot_end_default=max_temperature is None and temperatures is None,
            max_replicas=cap, grows_by_default=grows and max_replicas is None,
            num_ladders=num_ladders)
        self.transforms = None
        self.run = None  # the current (or last) run's state (pyro_pt.run.Run), once set up
        self.ensemble = None  # with num_ladders > 1, every ladder's run (pyro_pt.ensemble)

    # ----- ladder -----

    @property
    def _ladder_now(self):
        return self.run.ladder if self.run else self._ladder

    @property
    def temperatures(self):
        """The ladder in use, cold (1.0) first."""
        return list(self._ladder_now.temperatures)

    @property
    def betas(self):
        """Inverse temperatures, cold (1.0) first; 0.0 for a prior rung."""
        return list(self._ladder_now.betas)

    @property
    def num_replicas(self):
        return len(self._ladder_now.betas)

    @property
    def rung_blocks(self):
        """``[(start, stop), ...]``: the rungs each rank holds (after setup)."""
        return list(self.run.rungs.blocks) if self.run else None

    @property
    def local_temperatures(self):
        """The temperatures of the rungs this process runs (after setup)."""
        return [self.temperatures[k] for k in self.run.rungs.rungs] if self.run else None

    @property
    def explorer_info(self):
        """Which explorer, potential path, compiler and reference the run uses, and why."""
        return self.run.explorer_info if self.run else {}

    @property
    def timings(self):
        """Wall-clock seconds in ``sample()``: all of it, and inside the explorers' moves."""
        return self.run.timings if self.run else {}

    def setup(self, warmup_steps, *args, **kwargs):
        comm = make_comm(self.options.process_group)
        refuse_multichain_mcmc(comm)
        refuse_no_draws()
        self._ladder.reset()  # a rerun starts from the ladder given, not the one it adapted to
        run = Run(self.options, comm, self._ladder, warmup_steps)
        if self.options.resume_from:  # the checkpoint's ladder and warmup
            resume_warmup(run, *self.options.resume_from, warmup_steps)
        self.run = None
        set_up_run(run, args, kwargs)
        self.transforms = run.split.transforms
        if run.num_ladders > 1:
            run.together = [run] + set_up_followers(run)
        restored = restore(run) if run.resume_payload is not None else None
        for ladder in run.together:
            ladder.initial_state = ladder.rungs.cold_state()
        self.run = run
        self.ensemble = None
        if run.num_ladders > 1:
            self.ensemble = Ensemble(run.together, warmup_steps, mcmc_num_samples(),
                                     PooledAdaptation() if self.options.adapt_temperatures
                                     else None)
            if restored is not None:
                self.ensemble.resume(restored, run.split.device)

    def sample(self, params):
        run = self.run
        before = run.scans
        if self.ensemble is not None:  # num_ladders > 1: MCMC's calls take the draws in blocks
            draw = self.ensemble.sample(lambda: self._scan(self.ensemble.runs))
        else:
            draw = self._scan([run])[0]
        # the periodic checkpoint, at the end of a call (an ensemble's first sampling calls
        # make several scans each) in which the scans passed a multiple of checkpoint_every
        every = run.options.checkpoint_every
        if every and run.scans // every > before // every:
            save(run, run.options.checkpoint_path, self.ensemble)
        return draw

    def _scan(self, runs):
        """One scan of every ladder's run in ``runs`` (one, or an ensemble's, whose tempered
        rungs step in one call): explore, communicate, record, and the round's end where
        there is one. Returns each run's cold state."""
        first, ensemble = runs[0], self.ensemble
        start = time.perf_counter()
        with missing_sites(first.split):
            explored = explore([run.rungs for run in runs])
        first.timings["explorers"] += time.perf_counter() - start
        colds = []
        for ladder, (run, (local_ll, cold_moved)) in enumerate(zip(runs, explored)):
            run.ll = run.rungs.gather(local_ll)
            outcome = [math.nan] * (run.num_replicas - 1)
            if (run.scans + 1) % run.options.swap_interval == 0:
                outcome = self._communicate(run)
            cold = run.rungs.cold_state()
            run.recorder.record_scan(run.ll, outcome)
            # the draws MCMC records, for their Monte Carlo errors
            if run.recorder.sampling and (ensemble is None or ensemble.keeps(ladder)):
                transforms = run.split.transforms
                run.recorder.record_cold({name: transforms[name].inv(v) if name in transforms
                                          else v for name, v in cold.items()})
            if run.report is not None:  # the report's columns (the first ladder's: the ensemble's)
                run.report.observe(run, Scan(cold_moved, outcome, cold))
            if first.refitting:  # q is refitted to the cold draws at warmup rounds' ends
                first.refitting.keep(run, cold, ladder)
            if ensemble is None:
                run.schedule.after_scan(run)  # where this scan ends a round: adapt, grow, ...
            colds.append(cold)
        if ensemble is not None:  # the ladders' round end, their adaptation pooled
            after_scans(runs, ensemble.adaptation)
        first.timings["total"] += time.perf_counter() - start
        return colds

    def _communicate(self, run):
        """One swap round (the ``t // swap_interval``-th) over the ladder; returns its outcome."""
        interval = run.options.swap_interval
        origin, attempts = swap_round(run.options.swap_scheme, run.scans // interval,
                                      run.betas, run.ll, run.swap_generator, run.ladder.legs)
        outcome = run.recorder.record_swaps(attempts)
        run.ll = [run.ll[k] for k in origin]
        if origin != sorted(origin):
            run.rungs.permute(origin)
        if crossed_bridge(run, attempts):  # each cold rung's ll in its own leg's meaning
            refresh(run, run.ladder.legs.colds)
        return outcome
