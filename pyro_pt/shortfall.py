r"""
A ladder with fewer rungs than its barrier calls for
(:func:`~pyro_pt.barrier.recommended_replicas`): the one message of the end of warmup's warning
(:class:`~pyro_pt.report.Report`) and of the end-of-run review (:func:`~pyro_pt.health.review`).
A growing ladder's ``max_replicas`` is a budget, not a recommendation, so a ladder stopped at it
is still short and is told to raise it. The two moments differ only in the draws the barrier
was estimated on (warmup's last scans, or the sampling phase), which each names: by the Monte
Carlo error of two estimates, never by rule.

Pure: no Pyro inference machinery.
"""

import math

from .barrier import recommended_replicas
from .ladder import GROWTH_ROUNDS, MIN_GROWTH_SCANS


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
            f"needs about {recommended_replicas(barrier)} rungs (ceil(2 Lambda)) and {where}: "
            f"some pairs will rarely swap and the cold chain may not leave its mode; {advice}")
