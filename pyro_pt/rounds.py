"""When a run's rounds end, computed once, and the ordered steps that run at each end.

Warmup runs in rounds of doubling length (:func:`~pyro_pt.ladder.warmup_round_ends`); the
sampling phase is reported at doubling scan counts (16, 32, 64, ... after the warmup). A scan
that ends one of them is a :class:`RoundEnd` of kind ``"warmup round"`` (an adaptation round),
``"warmup"`` (the warmup's last scan, ending its last, partial round) or ``"sampling"`` (a row
of the sampling phase's report). At each, the :class:`RoundSchedule` runs its steps in order,
each an object with ``end_round(run, end)``: the report's row (:class:`ReportRow`), the
ladder's adaptation and growth (:class:`LadderAdaptation`), the reference's fit
(:class:`~pyro_pt.reference.refit.Refitting`), the compile switch
(:class:`~pyro_pt.autocompile.AutoCompile`); then the next round's swap statistics and ll
record start afresh, and the report's columns begin their next round (a cumulative one goes on
through the sampling rows). Pigeons.jl's ``pigeons()`` loop has the same shape.
"""

from collections import namedtuple

from .ladder import warmup_round_ends

RoundEnd = namedtuple("RoundEnd", ["scan", "kind"])

FIRST_SAMPLING_ROW = 16  # scans after the warmup; the rows then double


class RoundSchedule:
    """The round ends of one run (rounds are counted in swap rounds) and the ``steps`` at
    each, in the order they run."""

    def __init__(self, warmup_steps, swap_interval, steps=()):
        self.warmup_steps = warmup_steps
        self.warmup_ends = frozenset(warmup_round_ends(warmup_steps, swap_interval))
        self.steps = list(steps)

    def end_at(self, scan):
        """The :class:`RoundEnd` that ``scan`` is, or None."""
        if scan in self.warmup_ends:
            return RoundEnd(scan, "warmup round")
        if scan == self.warmup_steps:
            return RoundEnd(scan, "warmup")
        after = scan - self.warmup_steps
        if after >= FIRST_SAMPLING_ROW and after & (after - 1) == 0:  # a power of two
            return RoundEnd(scan, "sampling")
        return None

    def after_scan(self, run):
        """Where the scan just recorded ends a round: its steps, then the next round."""
        end = self.end_at(run.scans)
        if end is None:
            return
        for step in self.steps:
            step.end_round(run, end)
        if run.joining:  # last: it changes the ladder the other steps read
            run.joining.end_round(run, end)
        self.begin_next(run, end)

    @classmethod
    def begin_next(cls, run, end):
        """After the steps of the round end ``end``: the next round's records begin, then the
        report's round."""
        cls.begin_records(run, end)
        run.report.begin_round(run, end)

    @staticmethod
    def begin_records(run, end):
        if end.kind == "warmup round":
            run.recorder.begin_round()
        elif end.kind == "warmup":
            run.recorder.begin_sampling()


def after_scans(runs, pooled=None):
    """:meth:`RoundSchedule.after_scan` of the ladders of an ensemble (:mod:`pyro_pt.ensemble`),
    which end their rounds together: each run's own steps, then the ``pooled`` step (the
    ladder's adaptation to all the ladders' statistics, ``end_round(runs, end)``), then every
    run's next round."""
    first = runs[0]
    end = first.schedule.end_at(first.scans)
    if end is None:
        return
    for run in runs:
        for step in run.schedule.steps:
            step.end_round(run, end)
    if pooled is not None:
        pooled.end_round(runs, end)
    if first.joining:  # last: it changes the ladder the other steps read
        first.joining.end_round(first, end)
    for run in runs:  # every ladder's records first: the first ladder's report reads them all
        run.schedule.begin_records(run, end)
    first.report.begin_round(first, end)  # the ensemble's one report


class ReportRow:
    """The report's row of each round (:mod:`pyro_pt.report`); at the end of warmup, the
    warning when the barrier calls for more rungs than the ladder has."""

    def end_round(self, run, end):
        run.report.add_row(run, end)
        if end.kind == "warmup":
            run.report.check_rungs(run.recorder.legs)


class LadderAdaptation:
    """At a warmup round's end, with ``adapt_temperatures``: the ladder moves its rungs to
    equal increments of the round's barrier (:meth:`~pyro_pt.ladder.Ladder.adapt`), or grows
    where the barrier calls for more rungs (:mod:`pyro_pt.growth`); the explorers of the rungs
    whose beta moved then target their new betas (an explorer may restart its adaptation
    there, so the others are left alone)."""

    def end_round(self, run, end):
        if end.kind != "warmup round":
            return
        betas = adapted_betas(run.ladder, run.recorder, end.scan)
        if betas is None or (run.growth and run.growth.grow([run])):
            return
        move_rungs(run, betas)


def adapted_betas(ladder, records, scan):
    """:meth:`~pyro_pt.ladder.Ladder.adapt` of ``ladder`` at ``scan`` to the round's swap
    statistics and pair barriers of ``records`` (a recorder, or several ladders' pooled)."""
    return ladder.adapt(scan, records.round.rejection_rates(),
                        records.round_pair_barriers(ladder.betas))


def move_rungs(run, betas):
    """Each of ``run``'s rungs whose beta moved targets its new one in ``betas``."""
    for k, explorer in zip(run.rungs.rungs, run.rungs.explorers):
        if betas[k] != explorer.beta:
            explorer.set_beta(betas[k])
