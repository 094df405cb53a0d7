r"""
A ladder with fewer rungs than its barrier calls for: the one rule and the one message, for the
end of warmup's warning (:class:`~pyro_pt.report.Report`), the end-of-run review
(:func:`~pyro_pt.health.review`) and the growing ladder (:mod:`pyro_pt.growth`) alike.

The rule is :func:`~pyro_pt.barrier.recommended_replicas`: :math:`\lceil 2\Lambda \rceil` rungs
(at least 2), which keep every adjacent pair's rejection rate near 1/2 or below (Syed et al.
2021, Sec. 5.3); on a stabilized ladder the leg to q, which gets :math:`\lceil K/2 \rceil` of the
K rungs, needs that many, so K is twice it less one. A growing ladder grows to this number capped
by ``max_replicas``; the cap is a budget, not a recommendation, so a ladder stopped at its cap is
still short and is told to raise it. Both moments compare the ladder with the rule; each says on
which draws it estimated :math:`\Lambda` (warmup's last scans, or the sampling phase), which is
where their numbers can differ: by the Monte Carlo error of two estimates, never by their rule.

**References**

[1] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
a scalable highly parallel MCMC scheme", JRSS B.

Pure: no Pyro inference machinery (as :mod:`pyro_pt.health`, which uses it).
"""

import math

from .barrier import recommended_replicas
from .ladder import GROWTH_ROUNDS, MIN_GROWTH_SCANS


def too_few_rungs(barrier, legs, measured, max_replicas=None):
    """
    What is wrong with a ladder of fewer rungs than ``barrier`` calls for, and what to do; None
    when it has enough (or the barrier is unknown).

    :param float barrier: the estimated global barrier :math:`\\Lambda` (on a stabilized ladder,
        of the leg to q).
    :param Legs legs: the ladder's legs (:mod:`pyro_pt.legs`).
    :param str measured: on which draws the barrier was estimated, e.g. ``"over the sampling
        phase"``.
    :param int max_replicas: the cap of a growing ladder (None: the ladder does not grow).
    :returns: str or None.
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
