r"""Several independent ladders of one run, advanced together (``num_ladders=C``).

Each ladder is a whole run of its own (:class:`~pyro_pt.run.Run`: its rungs, random streams,
swaps, lineages, recorder and report), and all of them share the model's captured graphs and
the ladder's betas. Every scan, the tempered rungs of all the ladders take their step in one
batched call of the explorer (one :class:`~pyro_pt.explorers.HMCGroup` over every ladder's
rungs), so on a small model C ladders cost far less than C runs; each ladder's prior rung
draws on its own. The ladders' cold chains are independent, so the tempered restarts add up.

**What Pyro's MCMC records.** ``warmup_steps`` and ``num_samples`` count draws, as for every
kernel: each ladder runs :math:`\lceil W / C\rceil` warmup scans and
:math:`B = \lceil N / C\rceil` sampling scans, and MCMC records ladder 0's B cold draws, then
ladder 1's, ... (the last ladder's cut to N in all): contiguous blocks, so the autocorrelation
Pyro's ``summary()`` computes is each ladder's own (interleaved draws of independent chains
would look uncorrelated at every lag below C, and overstate the effective sample size). The
calls between scans return draws already made.

**Adaptation and statistics are pooled.** At a warmup round's end the ladder adapts once, to
the swap statistics of all the ladders (C times the data of one); the diagnostics, the review
and :meth:`~pyro_pt.ParallelTempering.mcse` read the ladders' records pooled
(:class:`Pooled`): swap acceptance over all the attempts, restarts and round trips summed, the
stepping-stone log Z over every ladder's ll draws, and the Monte Carlo errors over every
ladder's tours (the regenerative error treats tours as independent, and the ladders' are).

Over several processes each rank holds its block of every ladder's rungs, all of its tempered
ones in one group; a seeded run gives the same draws on any number of ranks. Not yet with
C > 1: checkpoints, a fitted reference, a growing ladder (the default ladder keeps its 8
rungs); each is refused with what to do.
"""

import math
from types import SimpleNamespace

import torch

from .barrier import leg_pair_barriers, rung_barriers
from .recorders import phase_summary
from .regeneration import ColdTours
from .rounds import adapted_betas, move_rungs


def check_num_ladders(num_ladders, grows, reference, checkpoint_every, max_replicas):
    """Refuse a ``num_ladders`` that is not a positive int, or what C > 1 does not support yet
    (see the module), naming the argument."""
    if isinstance(num_ladders, bool) or not isinstance(num_ladders, int) or num_ladders < 1:
        raise ValueError(f"num_ladders must be a positive int, got {num_ladders!r}")
    if num_ladders == 1:
        return
    refused = []
    if checkpoint_every is not None:
        refused.append("checkpoint_every/checkpoint_path (checkpoints of one ladder only)")
    if reference != "prior":
        refused.append("a reference other than 'prior'")
    if grows or max_replicas is not None:
        refused.append("num_replicas='auto' or max_replicas (a growing ladder)")
    if refused:
        raise ValueError(
            f"num_ladders={num_ladders} does not support {'; '.join(refused)} yet: give a "
            "fixed num_replicas (or temperatures), the prior reference and no checkpoints, "
            "or use num_ladders=1")


def warmup_scans(warmup_steps, num_ladders):
    """The warmup scans of each ladder: ``warmup_steps`` counts draws, C per scan."""
    return -(-warmup_steps // num_ladders)


class Ensemble:
    """
    The C runs of a kernel with ``num_ladders=C`` (see the module) and the order in which
    MCMC's calls get their draws.

    :param list runs: the ladders' runs, set up.
    :param int warmup_steps: MCMC's warmup draws (W).
    :param int num_samples: MCMC's draws (N), or None when the kernel runs outside
        :class:`~pyro.infer.MCMC` (then every call scans, and returns ladder 0's draw).
    :param adaptation: the ladder's pooled adaptation (:class:`PooledAdaptation`), if any.
    """

    def __init__(self, runs, warmup_steps, num_samples, adaptation=None):
        self.runs = runs
        self.adaptation = adaptation  # PooledAdaptation, or None with adapt_temperatures=False
        self.warmup_steps = warmup_steps
        self.num_samples = num_samples
        num = len(runs)
        self.block = None if num_samples is None else -(-num_samples // num)
        self.calls = 0
        self.draws = [[] for _ in runs]  # the sampling phase's cold draws, per ladder
        self.latest = None  # the last scan's cold states, per ladder

    def sample(self, scan):
        """The draw of MCMC's next call; ``scan()`` runs one scan of every ladder and returns
        their cold states."""
        call, num = self.calls, len(self.runs)
        self.calls += 1
        if call < self.warmup_steps:  # warmup: a scan every C calls
            if call % num == 0:
                self.latest = scan()
            return self.latest[call % num]
        j = call - self.warmup_steps
        if self.block is None or j < self.block:
            self.latest = scan()
            for kept, cold in zip(self.draws, self.latest):
                kept.append(cold)
            return self.latest[0]
        ladder, i = divmod(j, self.block)
        return self.draws[ladder][i]

    def keeps(self, ladder):
        """Whether ladder ``ladder``'s cold draw of the scan under way is one MCMC records
        (the last ladder's block is cut to ``num_samples`` in all; outside MCMC, ladder 0's)."""
        if self.block is None:
            return ladder == 0
        made = len(self.draws[ladder])  # before this scan's
        return ladder * self.block + made < self.num_samples


def _pooled_acceptance(statistics):
    """Each pair's mean acceptance probability over several ladders'
    :class:`~pyro_pt.recorders.SwapStatistics` (NaN for a pair never attempted); of one, its
    own :meth:`~pyro_pt.recorders.SwapStatistics.acceptance`."""
    out = []
    for pair in range(statistics[0].num_pairs):
        attempts = sum(s.attempts[pair] for s in statistics)
        total = sum(s.prob_sum[pair] for s in statistics)
        out.append(total / attempts if attempts else math.nan)
    return out


class PooledAdaptation:
    """At a warmup round's end, with ``adapt_temperatures``: the ladder the ensemble shares
    moves its rungs to equal increments of the barrier the round's swaps and ll draws of all
    the ladders give (:class:`~pyro_pt.rounds.LadderAdaptation` over their pooled records)."""

    def end_round(self, runs, end):
        if end.kind != "warmup round":
            return
        betas = adapted_betas(runs[0].ladder, Pooled([run.recorder for run in runs]), end.scan)
        if betas is not None:
            for run in runs:
                move_rungs(run, betas)


class _PooledStatistics:
    """Several ladders' :class:`~pyro_pt.recorders.SwapStatistics` of a view (the round's, or
    the phase's) read as one."""

    def __init__(self, statistics):
        self.statistics = statistics
        self.num_pairs = statistics[0].num_pairs

    def acceptance(self):
        return _pooled_acceptance(self.statistics)

    def rejection_rates(self):
        return [1.0 - a for a in self.acceptance()]


class Pooled:
    """
    The sampling phase's records of several ladders of the same betas read as one: what
    :meth:`~pyro_pt.recorders.TemperingRecorder.summary` gives of one ladder, over all of
    them (see the module).
    """

    def __init__(self, recorders):
        self.recorders = recorders
        first = recorders[0]
        self.legs = first.legs
        self.sampling = first.sampling

    @property
    def tours(self):
        """Every ladder's cold draws by tour, in MCMC's order (the kernel records only the
        draws MCMC holds); of one ladder, its own record."""
        if len(self.recorders) == 1:
            return self.recorders[0].tours
        return ColdTours.merged([r.tours for r in self.recorders])

    @property
    def round(self):
        """The current round's swap statistics of every ladder, pooled."""
        return _PooledStatistics([r.round for r in self.recorders])

    @property
    def round_ll(self):
        """The current round's ll rows of every ladder, ladder after ladder."""
        return [row for r in self.recorders for row in r.round_ll]

    def round_pair_barriers(self, betas):
        """Each pair's barrier over the current round of every ladder (as
        :meth:`~pyro_pt.recorders.TemperingRecorder.round_pair_barriers`)."""
        return leg_pair_barriers(self.legs, betas, self.round.rejection_rates(),
                                 rung_barriers(self.round_ll, len(betas)))

    @property
    def index(self):
        """The lineages' counts of every ladder added up (round trips, restarts)."""
        return SimpleNamespace(round_trips=self.round_trips, restarts=self.restarts)

    @property
    def round_trips(self):
        return sum(r.index.round_trips for r in self.recorders)

    @property
    def restarts(self):
        counts = [r.index.restarts for r in self.recorders]
        return None if any(c is None for c in counts) else sum(counts)

    def acceptance(self):
        """Each pair's mean acceptance probability over every ladder's attempts."""
        return _pooled_acceptance([r.phase for r in self.recorders])

    def summary(self, betas, num_rounds, rungs):
        """As :meth:`TemperingRecorder.summary`, pooled: ``num_rounds`` is one ladder's; the ll
        and swap records are the ladders' stacked in ladder order."""
        if len(self.recorders) == 1:
            return self.recorders[0].summary(betas, num_rounds, rungs)
        num = len(betas)
        # the scans whose cold draws MCMC holds (the last ladder's block may be cut short)
        kept = [r.tours.num_draws for r in self.recorders]
        record_ll = torch.cat([torch.tensor(r.round_ll[:n] if r.sampling else [],
                                            dtype=torch.float64).reshape(-1, num)
                               for r, n in zip(self.recorders, kept)])
        record_swaps = torch.cat([torch.tensor(r.swap_record[:n], dtype=torch.float64).reshape(
            -1, num - 1) for r, n in zip(self.recorders, kept)])
        return phase_summary(betas, self.acceptance(), self.round_trips, self.restarts,
                             num_rounds * len(self.recorders), record_ll, record_swaps,
                             self.legs, rungs)


def pooled_rungs(summaries, kept):
    """The rungs' explorer diagnostics (:meth:`~pyro_pt.rungs.RungBlock.summary`) of several
    ladders as one: the cold chains' divergences as indices of MCMC's draws (ladder c's
    ``kept[c]`` draws follow the ladders before it), the divergences per temperature added up,
    acceptance rates averaged over the ladders; of one ladder, its own."""
    if len(summaries) == 1:
        return summaries[0]
    first, num = summaries[0], len(summaries)
    out = dict(first)
    offsets = [sum(kept[:c]) for c in range(num)]
    out["divergences"] = [offset + d for s, offset, n in zip(summaries, offsets, kept)
                          for d in s["divergences"] if d < n]
    out["acceptance rate"] = sum(s["acceptance rate"] for s in summaries) / num
    out["local_acceptance"] = [sum(values) / num for values in
                               zip(*(s["local_acceptance"] for s in summaries))]
    out["divergences_per_temperature"] = [sum(values) for values in zip(
        *(s["divergences_per_temperature"] for s in summaries))]
    return out
