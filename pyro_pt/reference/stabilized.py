"""The stabilized variational run: a leg to the fitted reference and a leg to the prior that
share the cold end (:mod:`pyro_pt.legs`; Surjanovic, Syed, Bouchard-Cote, Campbell 2022,
section 3.4): when it is used (:func:`stabilize`; else ``explorer_info["legs"]`` says why),
each leg's meaning of ll, and their refresh after the bridge. Why, and how the two legs swap:
docs/design.md, "The stabilized run".
"""

import math

from ..ladder import Ladder, geometric_ladder
from ..legs import Legs, split_replicas
from .split import ReferencedSplit

MIN_REPLICAS = 4  # two legs of two rungs


def _why_not(run, split):
    """Why ``run`` keeps one leg (None: it gets two)."""
    options = run.options
    if not isinstance(options.reference, str):
        return "one leg: a fitted guide is taken as it is"
    if options.max_replicas:
        return "one leg: num_replicas='auto' grows one leg"
    if options.ladder_given:
        return "one leg: the ladder was given (temperatures or max_temperature)"
    if run.num_replicas < MIN_REPLICAS:
        return f"one leg: {run.num_replicas} rungs, fewer than {MIN_REPLICAS} for two legs"
    if options.swap_scheme == "sequential":
        return "one leg: the sequential sweep would move a state twice across the cold end"
    if split.prior_refusal() is not None:
        return "one leg: the prior is improper, and a prior leg ends at a draw from it"
    return None


def stabilize(run, split):
    """At set-up, before the rungs are built: give ``run`` the two legs of a stabilized ladder
    where its settings allow (:func:`_why_not`), else keep its one (a resumed run keeps the
    checkpoint's). Returns what ``explorer_info["legs"]`` says."""
    legs = run.ladder.legs
    if legs is None and not run.resume_from:
        why = _why_not(run, split)
        if why is not None:
            return why
        run.ladder = stabilized_ladder(run.num_replicas)
        legs = run.ladder.legs
    return None if legs is None else legs.describe()


def stabilized_ladder(num_replicas):
    """The starting ladder of two legs of ``num_replicas`` rungs in all, each from beta = 1 to
    0 in equal steps."""
    legs = Legs(split_replicas(num_replicas))
    return Ladder([t for size in legs.sizes for t in geometric_ladder(size, math.inf)], legs)


def rung_log_likelihood(run, rung, z):
    """The log-likelihood the swaps use at ``rung``'s state ``z``: against q on the
    reference's leg (:class:`~pyro_pt.reference.split.ReferencedSplit`), the model's own on the
    prior's; from the captured graph where it answers (the bridge's refresh takes two every
    other scan: through the model's trace they took a third of a stabilized run's time on the
    two-component mixture), else from the trace."""
    base = run.fast if run.fast is not None else run.split
    legs = run.ladder.legs
    if run.reference is not None and (legs is None or legs.leg_of(rung) == 0):
        base = ReferencedSplit(base, run.reference)
    read = getattr(base, "graph_log_likelihood", None)
    return float(base.log_likelihood(z) if read is None else read(z))


def refresh(run, rungs=None):
    """Recompute the swaps' log-likelihoods of ``rungs`` (all by default) on their owners and
    gather them (a collective): after q changes, or after the bridge moved the cold states
    from one leg's meaning of ll to the other's."""
    block = run.rungs
    local = []
    for k, z in zip(block.rungs, block.states):
        mine = rungs is None or k in rungs
        local.append(rung_log_likelihood(run, k, z) if mine else run.ll[k])
    run.ll = block.gather(local)


def crossed_bridge(run, attempts):
    """Whether a swap round's ``attempts`` moved states across the bridge."""
    legs = run.ladder.legs
    return legs is not None and legs.stabilized and any(
        pair == legs.bridge and accepted for pair, accepted, _ in attempts)
