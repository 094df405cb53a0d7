"""ParallelTempering: a pyro.infer.MCMC kernel doing likelihood-tempered replica exchange."""

import math
import time

import torch

from pyro.infer.autoguide.initialization import init_to_uniform
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from .comm import make_comm
from .explorers import build_rungs, step_rungs
from .ladder import geometric_ladder, inverse_temperatures, validate_temperatures
from .options import check_options, inside_multichain_mcmc
from .replicas import RungBlock
from .rounds import TemperingRounds
from .stats import IndexProcess, SwapStatistics, ladder_statistics
from .swap import swap_round
from .potential import ModelSplit
from .random import stream_seeds


def _moved(before, after):
    """Whether an explorer step changed the state (for RWMH and HMC: it was accepted)."""
    return any(not torch.equal(before[name], after[name]) for name in before)


class ParallelTempering(MCMCKernel):
    r"""
    Parallel tempering (replica exchange) with likelihood-only tempering.

    Runs K replicas; the one at inverse temperature :math:`\beta_k = 1/T_k` targets

    .. math:: \log\pi_{\beta_k}(z) = lp(z) + \beta_k\, ll(z),

    with ``lp`` the log prior plus log-det-Jacobian in unconstrained space and ``ll`` the log
    probability of the observed sites. Each scan, every rung takes one step of its own explorer
    (NUTS by default); every ``swap_interval`` scans, adjacent rungs exchange their states with
    probability :math:`\min(1, \exp((\beta_i - \beta_j)(ll(z_j) - ll(z_i))))`. The cold rung
    (:math:`T_0 = 1`) samples the posterior and is what :class:`~pyro.infer.MCMC` records.

    Adapted explorer state (step size, mass matrix, proposal scale) stays with its rung; replica
    states move. Every rung has its own random stream and the swaps one shared stream, all
    derived from Pyro's seed, so a seeded run is reproducible.

    **References**

    [1] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
    a scalable highly parallel MCMC scheme", JRSS B.

    [2] Earl, Deem (2005), "Parallel tempering: theory, applications, and new perspectives".

    :param callable model: a Pyro model with at least one observed site.
    :param int num_replicas: K, the number of rungs of a geometric ladder (default 8).
    :param float max_temperature: the hottest temperature of the geometric ladder
        :math:`T_k = T_{max}^{k/(K-1)}`; ``float("inf")`` makes the hottest rung the prior,
        sampled exactly.
    :param list temperatures: an explicit ladder instead, cold first: ``[1.0, ...]``
        increasing; the last may be ``inf``.
    :param explorer: the local kernel of each rung: ``"nuts"`` (Pyro's NUTS on every rung,
        default), ``"hmc"`` (HMC with a fixed number of leapfrog steps, per-rung step size and
        diagonal mass matrix adapted in warmup; all the rungs of a process advance together,
        one batched evaluation of a captured graph of the model per leapfrog step, see
        :attr:`explorer_info`), ``"rwmh"`` (random-walk Metropolis with a scale adapted in
        warmup), or a callable ``potential_fn -> MCMCKernel``.
    :param dict explorer_kwargs: keyword arguments for every rung's explorer (e.g.
        ``{"max_tree_depth": 6}`` for NUTS; ``num_steps`` (default 10), ``num_steps_jitter``
        (default 0.5: each iteration takes between half and all of ``num_steps``),
        ``step_size``, ``target_accept_prob``, ``adapt_step_size``, ``adapt_mass_matrix`` for
        ``"hmc"``).
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

    Example::

        kernel = ParallelTempering(model, num_replicas=8, max_temperature=50.0)
        mcmc = MCMC(kernel, num_samples=1000, warmup_steps=500)
        mcmc.run(x, y)
        mcmc.diagnostics()["swap_acceptance"]
    """

    def __init__(
        self,
        model,
        num_replicas=8,
        max_temperature=50.0,
        temperatures=None,
        explorer="nuts",
        explorer_kwargs=None,
        swap_scheme="deo",
        swap_interval=1,
        adapt_temperatures=True,
        init_strategy=init_to_uniform,
        transforms=None,
        process_group=None,
    ):
        if not callable(model):
            raise TypeError(f"model must be a callable Pyro model, got {type(model).__name__}")
        if temperatures is not None:
            self._temperatures = validate_temperatures(temperatures)
        else:
            self._temperatures = geometric_ladder(num_replicas, max_temperature)
        check_options(explorer, explorer_kwargs, swap_scheme, swap_interval, adapt_temperatures)
        self.adapt_temperatures = adapt_temperatures
        self._initial_temperatures = list(self._temperatures)
        self.model = model
        self.explorer = explorer
        self.explorer_kwargs = dict(explorer_kwargs or {})
        self.swap_scheme = swap_scheme
        self.swap_interval = swap_interval
        self.init_strategy = init_strategy
        self._user_transforms = transforms
        self.process_group = process_group
        self.transforms = None
        self._user_initial_params = None
        self._initial_params = None
        self._save_params = None
        self._rungs = None

    # ----- ladder -----

    @property
    def temperatures(self):
        """The ladder in use, cold (1.0) first."""
        return list(self._temperatures)

    @property
    def betas(self):
        """Inverse temperatures, cold (1.0) first; 0.0 for a prior rung."""
        return inverse_temperatures(self._temperatures)

    @property
    def num_replicas(self):
        return len(self._temperatures)

    @property
    def rung_blocks(self):
        """``[(start, stop), ...]``: the rungs each rank holds (after setup)."""
        return list(self._rungs.blocks) if self._rungs else None

    @property
    def local_temperatures(self):
        """The temperatures of the rungs this process runs (after setup)."""
        return [self._temperatures[k] for k in self._rungs.rungs] if self._rungs else None

    # ----- MCMCKernel protocol -----

    @property
    def initial_params(self):
        return self._initial_params if self._rungs else self._user_initial_params

    @initial_params.setter
    def initial_params(self, params):
        self._user_initial_params = params

    @property
    def save_params(self):
        if self._save_params is not None:
            return self._save_params
        return sorted(self._initial_params) if self._initial_params else []

    @save_params.setter
    def save_params(self, names):
        # MCMC concatenates draws in save_params order but unpacks them in sorted order.
        self._save_params = sorted(names)

    def setup(self, warmup_steps, *args, **kwargs):
        comm = make_comm(self.process_group)
        if comm.world_size > 1 and inside_multichain_mcmc():
            raise ValueError(
                "MCMC(num_chains > 1) cannot run a ParallelTempering kernel spread over a "
                "process group: the chains would share (and deadlock) the ranks. Use "
                "num_chains=1; for independent ensembles launch separate torchrun jobs with "
                "different seeds, or split the world with torch.distributed.new_group and pass "
                "each part as process_group="
            )
        # A rerun starts from the ladder given, not the one the last run adapted to.
        self._temperatures = list(self._initial_temperatures)
        betas = self.betas
        num = self.num_replicas
        # Every rank joins the set-up's collectives (the seeds' broadcast, the final check)
        # even when its own part failed, so that a failure on one rank (a model that raises
        # on its data, rungs that find no valid start, memory) stops every rank with the
        # reason instead of leaving the others waiting for the backend's timeout.
        failure = None
        try:
            split = self._model_split(args, kwargs)
        except Exception as error:
            failure = error
        seeds = self._stream_seeds(comm)
        if failure is None:
            try:
                self._rungs = RungBlock(comm, num, split.latent_names)
                explorers, states, local_ll, self.explorer_info = build_rungs(
                    split, self._rungs.rungs, betas, seeds, split.device, self.explorer,
                    self.explorer_kwargs, warmup_steps, self._user_initial_params)
                for explorer, z in zip(explorers, states):
                    self._rungs.add(explorer, z)
            except Exception as error:
                failure = error
        self._agree_on_setup(comm, failure, warmup_steps)
        self._swap_generator = torch.Generator().manual_seed(seeds[num])
        self._warmup_steps = warmup_steps
        self._t = 0
        self._round = 0
        self._ll = self._rungs.gather(local_ll)
        self._cold = self._rungs.cold_state()
        self._initial_params = dict(self._cold)
        self._index = IndexProcess(num)
        self._swap_stats = SwapStatistics(num - 1)
        self._rounds = TemperingRounds(warmup_steps, self.adapt_temperatures, num, comm,
                                       self.swap_interval)
        self._record_ll, self._record_swaps = [], []
        self._sampling_rounds = 0
        self._per_rung_cache = None
        # Wall-clock seconds in sample(): all of it, and inside the explorers' own moves.
        self.timings = {"explorers": 0.0, "total": 0.0}

    def _model_split(self, args, kwargs):
        """The model's split into prior and likelihood, with the checks that need it."""
        split = ModelSplit(
            self.model, args, kwargs, self._user_transforms, init_strategy=self.init_strategy
        )
        if self.betas[-1] == 0.0:
            split.check_proper_prior()
        if self._save_params is not None:
            unknown = set(self._save_params) - set(split.latent_names)
            if unknown:
                raise ValueError(
                    f"save_params names {sorted(unknown)} are not latent sites of the model; "
                    f"its latent sites are {split.latent_names}"
                )
        self.transforms = split.transforms
        self._split = split
        return split

    def _stream_seeds(self, comm):
        """
        One base seed from the global generator (so pyro.set_rng_seed governs the run), the
        same on every rank, then independent child seeds: one stream per rung, one for swaps.
        """
        base = torch.randint(0, 2**62, (1,), dtype=torch.int64)
        base = int(comm.broadcast(base, src=0, what="broadcast of the seeds").item())
        return stream_seeds(base, self.num_replicas)

    def _agree_on_setup(self, comm, failure, warmup_steps):
        """
        One all-gather in which each rank says whether its set-up failed, which latent shapes
        its model has and which settings decide the ranks' common steps: a rank that failed
        raises its own error, the others raise one naming it; if the ranks disagree, all raise
        (different ladders or warmups would otherwise pair the wrong rungs or hang).
        """
        view = None
        if failure is None:
            z = self._rungs.states[0]
            view = [(name, tuple(z[name].shape)) for name in self._split.latent_names]
        settings = {
            "temperatures": [float(t) for t in self._temperatures],
            "warmup_steps": warmup_steps,
            "swap_scheme": self.swap_scheme,
            "swap_interval": self.swap_interval,
            "adapt_temperatures": self.adapt_temperatures,
            "explorer": self.explorer if isinstance(self.explorer, str) else "callable",
        }
        problem = None if failure is None else f"{type(failure).__name__}: {failure}"
        reports = comm.all_gather_object((problem, view, settings), what="set-up check")
        if failure is not None:
            raise failure
        failed = [(rank, problem) for rank, (problem, _, _) in enumerate(reports) if problem]
        if failed:
            raise RuntimeError(
                f"pyro_pt: ParallelTempering's set-up failed on rank(s) "
                f"{[rank for rank, _ in failed]}, so rank {comm.rank} stops too: "
                + "; ".join(f"rank {rank}: {problem}" for rank, problem in failed)
            )
        for rank, (_, other_view, other) in enumerate(reports):
            differ = sorted(key for key in settings if other[key] != reports[0][2][key])
            if differ:
                raise ValueError(
                    f"ranks disagree on the kernel's settings {differ}: rank 0 has "
                    f"{ {key: reports[0][2][key] for key in differ} }, rank {rank} has "
                    f"{ {key: other[key] for key in differ} }; every rank must build "
                    f"ParallelTempering and call MCMC with the same arguments"
                )
            if other_view != reports[0][1]:
                raise ValueError(
                    f"ranks disagree on the model's latent sites: rank 0 has {reports[0][1]}, "
                    f"rank {rank} has {other_view}; every rank must run the same model on the "
                    f"same shapes"
                )

    def sample(self, params):
        start = time.perf_counter()
        rungs = self._rungs
        stepped = step_rungs(rungs.explorers, rungs.states)
        explored = time.perf_counter()
        cold_moved = _moved(rungs.states[0], stepped[0][0]) if rungs.start == 0 else None
        rungs.states = [z for z, _ in stepped]
        local_ll = [ll for _, ll in stepped]
        self._ll = rungs.gather(local_ll)
        swaps, attempts = [math.nan] * (self.num_replicas - 1), []
        if (self._t + 1) % self.swap_interval == 0:
            swaps, attempts = self._swap_round()
        self._cold = rungs.cold_state()
        self._t += 1
        new_betas = self._rounds.record(self._t, self.betas, self._ll, attempts, cold_moved,
                                        self._index.round_trips)
        if new_betas is not None:
            self._set_betas(new_betas)
        if self._t == self._warmup_steps:
            # Report swap statistics and round trips of the sampling phase only.
            self._swap_stats.reset()
            self._index.round_trips = 0
        if self._t > self._warmup_steps:
            self._record_ll.append(list(self._ll))
            self._record_swaps.append(swaps)
            self._sampling_rounds += (self._t % self.swap_interval) == 0
        end = time.perf_counter()
        self.timings["explorers"] += explored - start
        self.timings["total"] += end - start
        return dict(self._cold)

    def _swap_round(self):
        origin, attempts = swap_round(
            self.swap_scheme, self._round, self.betas, self._ll, self._swap_generator
        )
        outcome = [math.nan] * (self.num_replicas - 1)
        for pair, accepted, prob in attempts:
            self._swap_stats.record(pair, accepted, prob)
            outcome[pair] = float(accepted)
            if accepted:
                self._index.swap(pair)
        self._index.observe()
        self._round += 1
        self._ll = [self._ll[k] for k in origin]
        if origin != sorted(origin):
            self._rungs.permute(origin)
        return outcome, attempts

    def _set_betas(self, betas):
        """Move the rungs to a new ladder (end of a warmup round; identical on all ranks)."""
        self._temperatures = [math.inf if b == 0.0 else 1.0 / b for b in betas]
        for k, explorer in zip(self._rungs.rungs, self._rungs.explorers):
            explorer.set_beta(betas[k])

    @property
    def adaptation_history(self):
        """Per adaptation round: its scans, the ladder it ran and the rejection rates seen."""
        return list(self._rounds.history) if self._rungs else []

    @property
    def report(self):
        """
        The per-round report as a pandas DataFrame: round, phase, scans, barrier (Lambda),
        log_Z (stepping stone on that round's ladder), min and mean swap acceptance, the cold
        rung's local acceptance (the share of scans its explorer moved), round trips and
        seconds. Warmup rows cover one round each; sampling rows are cumulative.
        """
        if not self._rungs:
            raise RuntimeError("report is available after MCMC.run has set the kernel up")
        return self._rounds.data_frame()

    def cleanup(self):
        if self._rungs:
            self._rounds.finish(self._t, self.betas, self._index.round_trips)

    def logging(self):
        # The cold explorer lives on rank 0; other ranks log the (shared) swap statistics.
        cold = self._rungs.explorers[0] if self._rungs.start == 0 else None
        out = dict(cold.logging() or {}) if cold is not None else {}
        out["swap acc."] = f"{self._swap_stats.mean_acceptance():.3f}"
        out["round trips"] = self._index.round_trips
        return out

    def diagnostics(self):
        # Gathering the rungs' diagnostics is a collective; after the run's own call (on every
        # rank, by MCMC) a later call on one rank alone, e.g. for a plot, reuses it.
        if self._per_rung_cache is None or self._per_rung_cache[0] != self._t:
            self._per_rung_cache = (self._t, self._rungs.diagnostics())
        per_rung = self._per_rung_cache[1]
        num_pairs = self.num_replicas - 1
        record_ll = torch.tensor(self._record_ll, dtype=torch.float64).reshape(
            len(self._record_ll), self.num_replicas
        )
        summary = ladder_statistics(self.betas, self._swap_stats.acceptance(),
                                    self._index.round_trips, self._sampling_rounds, record_ll)
        return {
            **summary,
            "divergences": list(per_rung[0]["divergences"]),
            "acceptance rate": per_rung[0]["acceptance rate"],
            "temperatures": self.temperatures,
            "local_acceptance": [d["acceptance rate"] for d in per_rung],
            "divergences_per_temperature": [len(d["divergences"]) for d in per_rung],
            "swap_acceptance": self._swap_stats.acceptance(),
            "round_trips": self._index.round_trips,
            "tempering_record": {
                "log_likelihood": record_ll,
                "swap_accepted": torch.tensor(self._record_swaps, dtype=torch.float64).reshape(
                    len(self._record_swaps), num_pairs
                ),
            },
        }
