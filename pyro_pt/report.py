"""The report of a tempered run: one row per round (:mod:`pyro_pt.rounds`), printed above the
progress bar, and the DataFrame (the kernel's :attr:`~pyro_pt.ParallelTempering.report`).

A row holds the values of the report's columns, :data:`COLUMNS`: each a :class:`Column`, one
object with all there is of it (its heading and print format, what it keeps over a round and
observes after each scan, its value at the round's end, whether its sampling rows are
cumulative). Printing, the DataFrame and the closing row read that one list, so a new column
is one object added to it. A warmup row holds its round's swap statistics, hence the barrier
and a stepping-stone log Z on the round's fixed ladder; sampling rows are cumulative, the
closing row's ``warnings`` the review's (:mod:`pyro_pt.health`). A sampling row's ``mcse_sd``
is the largest regenerative Monte Carlo error of a cold-chain mean over its posterior sd
(:mod:`pyro_pt.regeneration`), which the review warns above
:data:`~pyro_pt.health.MCSE_TOLERANCE`. Every number is the same on every rank but the seconds.
"""

import math
import sys
import time
import warnings
from collections import namedtuple

import torch

from .barrier import global_barrier
from .checkpoint_state import capture, restore
from .ensemble import Pooled
from .health import TemperingWarning, warning_text, worst_mean
from .recorders import stepping_stone
from .rounds import RoundEnd
from .shortfall import too_few_rungs

# What one scan did, as the columns observe it (:meth:`Column.observe`): whether rung 0's state
# moved under its explorer (the move rate's; None on ranks without rung 0), each pair's swap
# outcome (1.0, 0.0, NaN where not attempted), and the cold state after the scan (every rank).
Scan = namedtuple("Scan", ["cold_moved", "swaps", "cold"])


class Column:
    """
    One column of the report. Its :attr:`heading` names it in the DataFrame and the printed
    table; :attr:`digits` is its printed format (decimals of a float; None: a count or a word,
    printed as it is) in :attr:`width` characters, and a column that is not :attr:`printed` (a
    text) is the DataFrame's only.

    Over a round the report keeps one value for the column: :meth:`begin` at the round's start,
    then :meth:`observe` after every scan (:class:`Scan`); :meth:`value` at the round's end
    gives the row's. A :attr:`cumulative` column's sampling rows count from the sampling
    phase's start, else from the previous row (its :meth:`begin` runs again there). The column
    object itself holds nothing of a run: one object serves every run, and what it keeps the
    report holds and checkpoints (:meth:`saved` and :meth:`loaded` turn it into a form another
    process reads alike, and back).
    """

    heading = None
    digits = None
    min_width = 8
    printed = True
    cumulative = True

    @property
    def width(self):
        return max(len(self.heading), self.min_width)

    def begin(self, run):
        """What the column keeps at the start of a round of ``run`` (nothing by default)."""
        return None

    def observe(self, kept, run, scan):
        """What it keeps after ``scan``, a :class:`Scan` of ``run``, from ``kept`` before it."""
        return kept

    def value(self, run, end, kept):
        """The row's value at the round's end ``end`` (a :class:`~pyro_pt.rounds.RoundEnd`; the
        closing row is a ``"sampling"`` one), from what it ``kept`` since the round's start."""
        raise NotImplementedError

    def saved(self, kept):
        """``kept`` as a checkpoint holds it."""
        return kept

    def loaded(self, saved):
        """What :meth:`saved` gave, kept again in the resuming process."""
        return saved

    def cell(self, value):
        """``value`` printed in :attr:`width` characters; ``-`` where it is unknown (None) or
        not counted (NaN)."""
        if value is None or self.digits is not None and math.isnan(value):
            return f"{'-':>{self.width}}"
        if self.digits is None:
            return f"{value:>{self.width}}"
        return f"{value:>{self.width}.{self.digits}f}"


def records(run):
    """What the columns read of ``run``: its recorder, or with several ladders all of theirs
    pooled (:class:`~pyro_pt.ensemble.Pooled`): the first ladder's report is the ensemble's."""
    if len(run.together) == 1:
        return run.recorder
    return Pooled([r.recorder for r in run.together])


def _sampling(end):
    return end.kind == "sampling"


class RoundNumber(Column):
    heading = "round"

    def value(self, run, end, kept):
        return len(run.report.rows) + 1


class Phase(Column):
    heading = "phase"

    def value(self, run, end, kept):
        return "sampling" if _sampling(end) else "warmup"


class Scans(Column):
    """The scans of the row's round (of the sampling phase so far, in sampling)."""

    heading = "scans"

    def begin(self, run):
        return run.scans

    def value(self, run, end, kept):
        return end.scan - kept


class Barrier(Column):
    """The global barrier Lambda of the round's swaps, on its first leg (the reference's)."""

    heading, digits = "barrier", 3

    def value(self, run, end, kept):
        recorder, betas = records(run), run.ladder.betas
        if all(math.isnan(a) for a in recorder.round.acceptance()):
            return math.nan
        pairs = recorder.round_pair_barriers(betas)
        return global_barrier(recorder.legs.pick(0, betas, pairs)[1])


class LogZ(Column):
    """The stepping-stone log Z of the round's ll rows on its first leg (the reference's)."""

    heading, digits, min_width = "log_Z", 3, 10

    def value(self, run, end, kept):
        recorder, betas = records(run), run.ladder.betas
        if not recorder.round_ll or len(betas) < 2:
            return math.nan
        ll = torch.tensor(recorder.round_ll, dtype=torch.float64)
        return stepping_stone(*recorder.legs.pick(0, betas, columns=ll))[0]


def _swap_acceptance(run):
    """The round's swap acceptance of the pairs it tried."""
    return [a for a in records(run).round.acceptance() if not math.isnan(a)]


class MinSwapAcceptance(Column):
    heading, digits = "min_swap_acc", 3

    def value(self, run, end, kept):
        known = _swap_acceptance(run)
        return min(known) if known else math.nan


class MeanSwapAcceptance(Column):
    heading, digits = "mean_swap_acc", 3

    def value(self, run, end, kept):
        known = _swap_acceptance(run)
        return sum(known) / len(known) if known else math.nan


class ColdMoveRate(Column):
    """The cold rung's move rate: the share of the round's scans in which its explorer changed
    its state (the glossary's "move rate", whatever the explorer counts as accepted). Only
    rank 0 sees rung 0 move: one scalar per round travels to the others."""

    heading, digits = "cold_local_acc", 3

    def begin(self, run):
        return (0, 0)  # (moves, scans)

    def observe(self, kept, run, scan):
        moves, scans = kept
        return moves + bool(scan.cold_moved), scans + 1

    def value(self, run, end, kept):
        moves, scans = kept
        moves = torch.tensor([float(moves)], dtype=torch.float64)
        if run.comm.world_size > 1:
            moves = run.comm.broadcast(moves, src=0, what="broadcast of the cold acceptance")
        return float(moves[0]) / scans if scans else math.nan


class RoundTrips(Column):
    heading = "round_trips"

    def begin(self, run):
        return records(run).index.round_trips

    def value(self, run, end, kept):
        return records(run).index.round_trips - kept


class Restarts(Column):
    """Tempered restarts (:mod:`pyro_pt.lineages`); None where the hot end is finite."""

    heading = "restarts"

    def begin(self, run):
        return records(run).index.restarts

    def value(self, run, end, kept):
        restarts = records(run).index.restarts
        return None if restarts is None else restarts - (kept or 0)


class McseOverSd(Column):
    """The largest Monte Carlo error of a cold-chain mean over its posterior sd, so far in the
    sampling phase (:mod:`pyro_pt.regeneration`); NaN in warmup and without an exact hot end."""

    heading, digits = "mcse_sd", 3

    def value(self, run, end, kept):
        recorder = records(run)
        if not _sampling(end) or recorder.index.restarts is None:
            return math.nan
        _, sd, errors = recorder.tours.summary()
        worst = worst_mean({"mcse": errors, "posterior_sd": sd})
        return math.nan if worst is None else worst[0]


class Seconds(Column):
    """Wall-clock seconds of the round; a checkpoint keeps the seconds elapsed (a clock's
    reading means nothing to another process)."""

    heading, digits = "seconds", 2

    def begin(self, run):
        return time.perf_counter()

    def value(self, run, end, kept):
        return time.perf_counter() - kept

    def saved(self, kept):
        return time.perf_counter() - kept

    def loaded(self, saved):
        return time.perf_counter() - saved


class Warnings(Column):
    """The review's problems (:mod:`pyro_pt.health`), in the closing row only, one per line;
    printed as lines under it (:meth:`Report.finish`)."""

    heading, printed = "warnings", False

    def value(self, run, end, kept):
        return ""


# The report's columns, in their order.
COLUMNS = (RoundNumber(), Phase(), Scans(), Barrier(), LogZ(), MinSwapAcceptance(),
           MeanSwapAcceptance(), ColdMoveRate(), RoundTrips(), Restarts(), McseOverSd(),
           Seconds(), Warnings())


def _progress_bar_active():
    """Whether a visible tqdm bar (Pyro's MCMC progress bar; tqdm comes with Pyro) is on screen."""
    from tqdm import tqdm

    return any(not getattr(bar, "disable", True) for bar in list(getattr(tqdm, "_instances", ())))


def _print_line(line):
    """Print above the progress bar (tqdm.write keeps the bar intact), or not at all."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


class Report:
    """
    The rows of one run's report, of its ``columns`` (default :data:`COLUMNS`). The set-up
    begins the first round; the round schedule adds a row at each round's end and begins the
    next round; the kernel has every scan observed (:meth:`observe`) and calls :meth:`finish`
    at the end. Rank 0 of ``comm`` owns the cold rung and prints; ``max_replicas`` is a growing
    ladder's cap (None: it does not grow).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state. The rows and
    # what each column keeps over the current round; the settings, the communicator and
    # whether it prints are the resuming process's, and a resumed run is not finished.
    STATE = ("rows", "kept")
    REBUILT = ("warmup_steps", "comm", "max_replicas", "columns", "_printing", "_speaks",
               "_finished")

    def __init__(self, warmup_steps, comm, max_replicas=None, columns=None):
        self.warmup_steps = warmup_steps
        self.comm = comm
        self.max_replicas = max_replicas
        self.columns = list(COLUMNS if columns is None else columns)
        self.rows = []
        self.kept = {}  # heading -> what the column keeps over the current round
        self._printing = comm.rank == 0 and _progress_bar_active()
        self._speaks = comm.rank == 0  # prints and warns
        self._finished = False

    def begin_round(self, run, end=None):
        """A round of ``run`` from its current scan, after the round end ``end`` (None: the
        first): every column begins afresh, but at a sampling row the cumulative ones go on."""
        for column in self.columns:
            if end is None or not _sampling(end) or not column.cumulative:
                self.kept[column.heading] = column.begin(run)

    def observe(self, run, scan):
        """After each scan of ``run``: what it did (a :class:`Scan`), for every column."""
        kept = self.kept
        for column in self.columns:
            kept[column.heading] = column.observe(kept[column.heading], run, scan)

    def add_row(self, run, end):
        """The row of the round that ends at ``end`` (a :class:`~pyro_pt.rounds.RoundEnd`)."""
        row = {c.heading: c.value(run, end, self.kept[c.heading]) for c in self.columns}
        self.rows.append(row)
        if self._printing:
            printed = [c for c in self.columns if c.printed]
            if len(self.rows) == 1:
                _print_line(" ".join(f"{c.heading:>{c.width}}" for c in printed))
            _print_line(" ".join(c.cell(row[c.heading]) for c in printed))

    def finish(self, run, problems=()):
        """The closing row of the sampling phase (once; nothing if it has just been written),
        the run's ``problems`` (:func:`pyro_pt.health.review`) in its ``warnings`` column, one
        per line, printed under it, and one :class:`~pyro_pt.health.TemperingWarning`."""
        if self._finished:
            return
        self._finished = True
        scan = run.scans
        done = self.rows[-1]["scans"] if self.rows and self.rows[-1]["phase"] == "sampling" else 0
        if scan > self.warmup_steps and scan - self.warmup_steps != done:
            self.add_row(run, RoundEnd(scan, "sampling"))
        if not problems or not self.rows:
            return
        self.rows[-1]["warnings"] = "\n".join(problems)
        if self._printing:
            for problem in problems:
                _print_line(f"warning: {problem}")
        if self._speaks:  # the numbers are the same on every rank: one warning per run
            warnings.warn(warning_text(problems), TemperingWarning, stacklevel=2)

    def check_rungs(self, legs):
        """At the end of warmup: one :class:`~pyro_pt.health.TemperingWarning` when the barrier
        of warmup's last scans calls for more rungs (:func:`~pyro_pt.shortfall.too_few_rungs`)."""
        row = self.rows[-1]
        problem = too_few_rungs(row["barrier"], legs, f"over warmup's last {row['scans']} scans",
                                self.max_replicas)
        if problem is not None and self._speaks:
            warnings.warn(f"ParallelTempering, at the end of warmup: {problem}", TemperingWarning,
                          stacklevel=2)

    def data_frame(self):
        """The report as a pandas DataFrame, one row per round, a column per column object."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=[c.heading for c in self.columns])

    def state_dict(self):
        """What a checkpoint keeps (:mod:`pyro_pt.checkpoint`): :attr:`STATE`, each column's
        kept value in its saved form."""
        state = capture(self)
        state["kept"] = ("val", {c.heading: c.saved(self.kept[c.heading]) for c in self.columns})
        return state

    def load_state_dict(self, state, run=None):
        restore(self, state, torch.device("cpu"))
        self.kept = {c.heading: c.loaded(self.kept[c.heading]) for c in self.columns}
