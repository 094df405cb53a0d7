r"""
A ladder with fewer rungs than its barrier calls for
(:func:`~pyro_pt.barrier.recommended_replicas`): the one message of the end of warmup's warning
(:class:`~pyro_pt.report.Report`) and of the end-of-run review (:func:`~pyro_pt.health.review`).
A growing ladder's ``max_replicas`` is a budget, not a recommendation, so a ladder stopped at it
is still short and is told to raise it. The two moments differ only in the draws the barrier
was estimated on (warmup's last scans, or the sampling phase), which each names: by the Monte
Carlo error of two estimates, never by rule.

A ladder a rung or so short of the rule loses little: its pairs reject a little over half their
swaps, and its round trips come at most of the rate the rule's count gives
(:func:`~pyro_pt.barrier.round_trip_rate`). So it is short only where that share is under
:data:`SHORT` (a conjugate regression that grew to 11 rungs on a barrier of 5.69 kept 90 % of
the rate of 12, and was warned of before, on 1 default run in 20; 8 rungs on a barrier of 5
keep 66 %).

Pure: no Pyro inference machinery.
"""

import math

from .barrier import recommended_replicas, round_trip_rate
from .ladder import GROWTH_ROUNDS, MIN_GROWTH_SCANS

# A ladder short of the rule's count is told so where its round trips come at under this share
# of the rate of that count.
SHORT = 0.8


def too_few_rungs(barrier, legs, measured, max_replicas=None):
    """
    What is wrong with a ladder (:class:`~pyro_pt.legs.Legs`) of fewer rungs than the global
    ``barrier`` (on a stabilized ladder, of the leg to q) calls for, and what to do; None when
    it has enough or the barrier is unknown. ``measured`` says on which draws the barrier was
    estimated (e.g. ``"over the sampling phase"``); ``max_replicas`` is the cap of a growing
    ladder (None: the ladder does not grow).
    """
    if not math.isfinite(barrier):
        return None
    needed = recommended_replicas(barrier, legs.stabilized)
    if needed <= legs.num_rungs:
        return None
    rungs = legs.sizes[0] if legs.stabilized else legs.num_rungs  # of the leg Lambda is of
    wanted = recommended_replicas(barrier)
    best = round_trip_rate(barrier, wanted)  # > 0: wanted - 1 >= 2 Lambda - 1 > Lambda here
    kept = round_trip_rate(barrier, rungs) / best if best > 0 else 0.0
    if kept >= SHORT:
        return None
    where = (f"the ladder has {legs.num_rungs}" if not legs.stabilized else
             f"the leg to q has {legs.sizes[0]} of the ladder's {legs.num_rungs} (about half "
             "the rungs go to it)")
    if max_replicas is None:
        advice = f"run with num_replicas={needed} (or temperatures= with {needed} rungs)"
    elif legs.num_rungs >= max_replicas:
        advice = (f"the growing ladder stopped at max_replicas={max_replicas}: raise "
                  f"max_replicas to {needed}, or run with num_replicas={needed}")
    else:
        advice = (f"the growing ladder grows only at the ends of the last {GROWTH_ROUNDS} warmup "
                  f"rounds of {MIN_GROWTH_SCANS}+ scans: warm up longer (warmup_steps), or run "
                  f"with num_replicas={needed}")
    return (f"too few rungs: the estimated global barrier Lambda = {barrier:.2f} ({measured}) "
            f"needs about {wanted} rungs (ceil(2 Lambda)) and {where}: "
            + (f"its round trips come at about {kept:.0%} of the rate of {wanted} rungs, some "
               "pairs rarely swap" if kept > 0 else "a pair would reject nearly every swap")
            + f" and the cold chain may not leave its mode; {advice}")
