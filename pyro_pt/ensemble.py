r"""Several independent ladders of one run, advanced together (``num_ladders=C``).

Each ladder is a whole run of its own (:class:`~pyro_pt.run.Run`: its rungs, random streams,
swaps, lineages and recorder; the first ladder's report is the ensemble's), and all of them
share the model's captured graphs and the ladder's betas. Every scan, the tempered rungs of all the ladders take their step in one
batched call of the explorer (one :class:`~pyro_pt.explorers.HMCGroup` over every ladder's
rungs), so on a small model C ladders cost far less than C runs; each ladder's prior rung
draws on its own. The ladders' cold chains are independent, so the tempered restarts add up.

**What Pyro's MCMC records.** As each chain of Pyro's ``MCMC(num_chains=C)`` would, every
ladder runs ``warmup_steps`` warmup scans and (about) ``num_samples`` sampling scans, so C
ladders make C times the tempered restarts of one at the price of one batched scan per call.
MCMC holds ``num_samples`` draws, :math:`B = \lceil N / C\rceil` per ladder: ladder 0's every
C-th cold draw, then ladder 1's, ... (the last ladder's cut to N in all). Contiguous blocks, so
the autocorrelation Pyro's ``summary()`` computes is each ladder's own (interleaved draws of
independent chains would look uncorrelated at every lag below C and overstate the effective
sample size); thinned, so each ladder's block spans its whole run. The first B sampling calls
make C scans each, the calls after them return draws already made. The Monte Carlo errors
(:mod:`pyro_pt.regeneration`) are over the draws MCMC holds, so ``mcse(fn,
samples=mcmc.get_samples())`` lines up; the stepping-stone log Z and the barriers read every
scan of every ladder.

**Adaptation and statistics are pooled.** At a warmup round's end the ladder adapts once, to
the swap statistics of all the ladders (C times the data of one); the diagnostics, the review
and :meth:`~pyro_pt.ParallelTempering.mcse` read the ladders' records pooled
(:class:`Pooled`): swap acceptance over all the attempts, restarts and round trips summed, the
stepping-stone log Z over every ladder's ll draws, and the Monte Carlo errors over every
ladder's tours (the regenerative error treats tours as independent, and the ladders' are).

A growing ladder (``num_replicas="auto"``, :mod:`pyro_pt.growth`) grows every ladder at once,
on the pooled barrier, their new rungs built in one group. Over several processes each rank
holds its block of every ladder's rungs, all of its tempered ones in one group; a seeded run
gives the same draws on any number of ranks.

A fitted reference (``reference=``, :mod:`pyro_pt.reference`) is every ladder's q: the rungs
against q of all the ladders step in one group, and a variational q is fitted at the warmup
rounds' ends to every ladder's cold draws (each lineage's ESS its own).

**Checkpoints** (:mod:`pyro_pt.checkpoint`) hold every ladder's run and the draws held for
MCMC's later calls, at the end of a call; a resumed run continues MCMC's calls as the
uninterrupted run would. A checkpoint of the sampling phase resumes for the draws left only
(the blocks are laid out over the whole run's ``num_samples``), and a finished run is not
extended.
"""

import math
from types import SimpleNamespace

import torch

from .barrier import leg_pair_barriers, rung_barriers
from .health import stepping_stone_error
from .recorders import phase_summary
from .regeneration import ColdTours
from .rounds import adapted_betas, move_rungs


# The default: this many ladders for a model whose log density computes at most SMALL_MODEL_WORK
# elements (and multiply-adds of its matrix products) per evaluation, else one; see num_ladders.
DEFAULT_LADDERS = 8
SMALL_MODEL_WORK = 100_000


def check_num_ladders(num_ladders):
    """Refuse a ``num_ladders`` that is neither None (the default rule, :func:`num_ladders`)
    nor a positive int, naming the argument."""
    if num_ladders is None:
        return
    if isinstance(num_ladders, bool) or not isinstance(num_ladders, int) or num_ladders < 1:
        raise ValueError(f"num_ladders must be a positive int or None (the default rule), got "
                         f"{num_ladders!r}")


def graph_work(fast):
    """What one evaluation of the model's captured log density and gradient computes: the
    elements of every intermediate tensor, plus the multiply-adds of its matrix products (a
    count from the graph's shapes, the same on every machine); None where no graph was
    captured."""
    compiled = getattr(fast, "compiled", None)
    if compiled is None or fast.path != "functional":
        return None
    point = compiled.check_points()[0]
    work = 0
    for node in compiled.fx_graph(point.dtype, point.device).graph.nodes:
        if node.op != "call_function":
            continue
        value = node.meta.get("val")
        outs = [v for v in (value if isinstance(value, (list, tuple)) else [value])
                if isinstance(v, torch.Tensor)]
        work += sum(v.numel() for v in outs)
        if outs and any(name in str(node.target) for name in ("mm", "mv", "dot")):
            inputs = [a.meta.get("val") for a in node.args if hasattr(a, "meta")]
            inputs = [v for v in inputs if isinstance(v, torch.Tensor) and v.dim() > 0]
            if inputs:  # each output element is a sum over the first input's last dimension
                work += outs[0].numel() * inputs[0].shape[-1]
    return work


def num_ladders(options, fast):
    """
    ``(C, why)``: the ladders of a run, and why the default rule chose them (None where the
    user gave ``num_ladders``). The same on every rank (a count from the graph's shapes, not
    a timing), so a seeded run gives the same draws on any number of processes.

    The rule: :data:`DEFAULT_LADDERS` (8) ladders where the model is small, one otherwise. A
    model is small where one evaluation of its log density and gradient computes at most
    :data:`SMALL_MODEL_WORK` (1e5) elements and multiply-adds (:func:`graph_work`: the
    battery's mixtures about 5e3-8e3, the 500-point logistic regression 5e4, a 10-64-64-1
    BNN on 500 points 7e6): there a scan's cost is mostly its fixed work, not the model, and
    8 ladders cost about 3 times one ladder's time for 8 times its tempered restarts (the
    battery's mixtures' default 1000 + 1000 runs, one thread: 9.4-13.0 s against 3.2-5.4 s,
    343-397 restarts against 45-56, no warning against a warning on every run;
    ``benchmarks/ensemble.py --defaults``). One ladder where an ensemble does not apply yet or
    gains nothing: an explorer other than the batched ``"hmc"`` (each of its rungs steps on its
    own), a model whose graph was not captured. The same with a fitted reference: on the
    mixtures, ``reference="variational"`` with 8 ladders made 8-15 times the restarts of one
    ladder in about twice its time. (A resumed run has the checkpoint's ladders.)
    """
    if options.num_ladders is not None:
        return options.num_ladders, None
    if options.explorer != "hmc":
        return 1, "only explorer='hmc' steps several ladders' rungs in one batched call"
    work = graph_work(fast)
    if work is None:
        return 1, "the model's graph was not captured, so its rungs are not batched"
    if work > SMALL_MODEL_WORK:
        return 1, (f"the model computes {work:.3g} elements and multiply-adds per evaluation "
                   f"(above {SMALL_MODEL_WORK:.0e}): several ladders would cost about as many "
                   "runs")
    return DEFAULT_LADDERS, (f"a small model ({work:.3g} elements and multiply-adds per "
                             f"evaluation, at most {SMALL_MODEL_WORK:.0e}): {DEFAULT_LADDERS} "
                             "ladders for about 3 times the time of one")


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
        self.draws = [[] for _ in runs]  # the cold draws MCMC holds, per ladder
        self.latest = None  # the last scan's cold states, per ladder
        self._holding = False  # whether the scan under way is one whose cold draws are held

    @property
    def thinning(self):
        """Every how many scans a ladder's cold draw is held: C in MCMC, else 1 (ladder 0's)."""
        return 1 if self.block is None else len(self.runs)

    def sample(self, scan):
        """The draw of MCMC's next call; ``scan()`` runs one scan of every ladder and returns
        their cold states."""
        call = self.calls
        self.calls += 1
        if call < self.warmup_steps:  # warmup: a scan per call
            self.latest = scan()
            return self.latest[0]
        j = call - self.warmup_steps
        if self.block is None:
            self._holding = True
            self.latest = scan()
            self.draws[0].append(self.latest[0])
            return self.latest[0]
        if j < self.block:  # C scans, the last one's cold draws held
            for i in range(self.thinning):
                self._holding = i == self.thinning - 1
                self.latest = scan()
            self._holding = False
            for ladder, (kept, cold) in enumerate(zip(self.draws, self.latest)):
                if ladder * self.block + j < self.num_samples:
                    kept.append(cold)
        ladder, i = divmod(j, self.block)
        return self.draws[ladder][i]

    def state_dict(self):
        """What a checkpoint holds of the calls (:mod:`pyro_pt.checkpoint`): how many were
        made, the run's layout of the draws, and the cold draws held for later calls."""
        return {"calls": self.calls, "warmup_steps": self.warmup_steps,
                "num_samples": self.num_samples, "block": self.block,
                "draws": [[{n: v.detach().cpu() for n, v in d.items()} for d in kept]
                          for kept in self.draws]}

    def resume(self, state, device):
        """Go on from a checkpoint's :meth:`state_dict`: MCMC's next call is the checkpointed
        run's next one. Checkpointed in warmup, the draws are laid out for this MCMC's
        ``num_samples``; in the sampling phase, as the checkpointed run laid them out (its
        set-up checked that this MCMC asks for the draws left)."""
        self.calls, self.warmup_steps = state["calls"], state["warmup_steps"]
        if self.calls <= self.warmup_steps or state["num_samples"] is None:
            return
        self.num_samples, self.block = state["num_samples"], state["block"]
        self.draws = [[{n: v.to(device) for n, v in d.items()} for d in kept]
                      for kept in state["draws"]]

    def keeps(self, ladder):
        """Whether ladder ``ladder``'s cold draw of the scan under way is one MCMC holds."""
        if not self._holding:
            return False
        if self.block is None:
            return ladder == 0
        return ladder * self.block + len(self.draws[ladder]) < self.num_samples


def held_record(log_likelihood, swap_accepted, thinning, num):
    """A ladder's sampling-phase record (``[scans, K]`` lls, ``[scans, K - 1]`` swap outcomes)
    at the first ``num`` draws MCMC holds of it, every ``thinning``-th scan's: each held
    draw's row of lls, and each pair's mean outcome over the ``thinning`` scans it stands for
    (NaN where none attempted it: one scan's row would show the even or the odd pairs only)."""
    if thinning == 1:
        return log_likelihood[:num], swap_accepted[:num]
    groups = swap_accepted[:num * thinning].reshape(-1, thinning, swap_accepted.shape[-1])
    tried = ~groups.isnan()
    swaps = groups.nan_to_num(0.0).sum(1) / tried.sum(1)  # 0 / 0: NaN, never attempted
    return log_likelihood[thinning - 1::thinning][:num], swaps


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
    the ladders give, or grows where that barrier calls for more rungs
    (:class:`~pyro_pt.rounds.LadderAdaptation` over their pooled records)."""

    def end_round(self, runs, end):
        if end.kind != "warmup round":
            return
        first = runs[0]
        betas = adapted_betas(first.ladder, Pooled([run.recorder for run in runs]), end.scan)
        if betas is None or (first.growth and first.growth.grow(runs)):
            return
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

    def __init__(self, recorders, thinning=1):
        self.recorders = recorders
        self.thinning = thinning  # Ensemble.thinning: every how many scans a draw is held
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
        """As :meth:`TemperingRecorder.summary`, pooled: ``num_rounds`` is one ladder's; the
        statistics (log Z, barriers) read every sampling scan of every ladder, the tempering
        record the scans whose cold draws MCMC holds, in MCMC's order."""
        if len(self.recorders) == 1:
            return self.recorders[0].summary(betas, num_rounds, rungs)
        num = len(betas)
        ll = [torch.tensor(r.round_ll if r.sampling else [], dtype=torch.float64).reshape(-1, num)
              for r in self.recorders]
        swaps = [torch.tensor(r.swap_record, dtype=torch.float64).reshape(-1, num - 1)
                 for r in self.recorders]
        kept = [r.tours.num_draws for r in self.recorders]
        held = [held_record(a, b, self.thinning, n) for a, b, n in zip(ll, swaps, kept)]
        record = [torch.cat(part) for part in zip(*held)]
        ll = torch.cat(ll)
        out = phase_summary(betas, self.acceptance(), self.round_trips, self.restarts,
                            num_rounds * len(self.recorders), ll, torch.cat(swaps), self.legs,
                            rungs, record=record)
        # log Z's Monte Carlo error over the rows it is estimated from, all of them (the
        # record holds those of MCMC's draws only)
        out["log_Z_monte_carlo"] = stepping_stone_error(*self.legs.pick(0, betas, columns=ll))
        return out


def pooled_rungs(summaries, kept, thinning=1):
    """The rungs' explorer diagnostics (:meth:`~pyro_pt.rungs.RungBlock.summary`) of several
    ladders as one: the cold chains' divergences as indices of MCMC's draws (a divergence at a
    ladder's sampling scan s is its held draw ``s // thinning``'s, and ladder c's ``kept[c]``
    draws follow the ladders before it), the divergences per temperature added up, acceptance
    rates averaged over the ladders; of one ladder, its own."""
    if len(summaries) == 1:
        return summaries[0]
    first, num = summaries[0], len(summaries)
    out = dict(first)
    offsets = [sum(kept[:c]) for c in range(num)]
    out["divergences"] = [offset + d // thinning for s, offset, n in zip(summaries, offsets, kept)
                          for d in s["divergences"] if d // thinning < n]
    out["acceptance rate"] = sum(s["acceptance rate"] for s in summaries) / num
    out["local_acceptance"] = [sum(values) / num for values in
                               zip(*(s["local_acceptance"] for s in summaries))]
    out["divergences_per_temperature"] = [sum(values) for values in zip(
        *(s["divergences_per_temperature"] for s in summaries))]
    return out
