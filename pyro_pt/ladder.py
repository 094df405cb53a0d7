"""Temperature ladders (geometric, explicit, with a prior rung) and their round-based
adaptation; docs/design.md, "Ladders".

Pure: no Pyro inference machinery. Rungs are listed cold first, ``T_0 = 1``.
:func:`inverse_temperatures` and :func:`temperatures_of` are the one conversion pair.
"""

import math

from .barrier import cumulative_barrier


def geometric_ladder(num_replicas, max_temperature):
    r"""
    The K = ``num_replicas`` temperatures :math:`T_k = T_{max}^{k/(K-1)}`, increasing from 1.0.

    With ``max_temperature=float("inf")`` the hottest rung is the prior (:math:`\beta = 0`),
    which a geometric ladder cannot reach: the betas are then equally spaced,
    :math:`\beta_k = 1 - k/(K-1)`, non-reversible tempering's usual start (Syed et al. 2021).
    """
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int):
        raise TypeError(f"num_replicas must be an int, got {num_replicas!r}")
    if num_replicas < 2:
        raise ValueError(
            f"num_replicas must be at least 2 for a ladder, got {num_replicas}; "
            "for a single chain use pyro.infer.NUTS directly"
        )
    try:
        max_temperature = float(max_temperature)
    except (TypeError, ValueError):
        raise TypeError(f"max_temperature must be a number, got {max_temperature!r}") from None
    if not max_temperature > 1.0:
        raise ValueError(
            f"max_temperature must be greater than 1 (the cold rung), got {max_temperature}"
        )
    last = num_replicas - 1
    if math.isinf(max_temperature):
        return [1.0] + [last / (last - k) for k in range(1, last)] + [math.inf]
    return [max_temperature ** (k / last) for k in range(num_replicas)]


def validate_temperatures(temperatures):
    """An explicit ladder as a list of floats, checked: starting at exactly 1.0, strictly
    increasing; only the last may be ``inf`` (the prior rung). ``[1.0]`` alone is allowed: one
    cold chain, no swaps (a baseline)."""
    try:
        temps = [float(t) for t in temperatures]
    except (TypeError, ValueError):
        raise TypeError(
            f"temperatures must be a sequence of numbers, got {temperatures!r}"
        ) from None
    if not temps:
        raise ValueError("temperatures is empty; give at least [1.0]")
    if temps[0] != 1.0:
        raise ValueError(
            f"temperatures must start at 1.0 (the cold chain, the posterior), got {temps[0]}"
        )
    for lower, upper in zip(temps, temps[1:]):
        if any(math.isnan(t) for t in (lower, upper)) or not upper > lower:
            raise ValueError(f"temperatures must increase strictly, got {temps}")
    return temps


def inverse_temperatures(temperatures):
    """beta = 1 / T for each rung; ``inf`` maps to exactly 0."""
    return [0.0 if math.isinf(t) else 1.0 / t for t in temperatures]


def temperatures_of(betas):
    """T = 1 / beta for each rung; 0 maps to ``inf`` (the prior rung)."""
    return [math.inf if b == 0.0 else 1.0 / b for b in betas]


class Ladder:
    """
    The ladder of one run: the one place its rungs' inverse temperatures live (every reader
    reads :attr:`betas`; :attr:`temperatures` are derived), and the history of its adaptation.
    :meth:`reset` goes back to the start (a new run of the same kernel).

    :param list temperatures: a validated ladder, cold (1.0) first; with two ``legs``
        (:mod:`pyro_pt.legs`, default one; each adapts on its own pairs), each leg's in turn.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("initial", "legs", "betas", "history")
    REBUILT = ()

    def __init__(self, temperatures, legs=None):
        self.initial = inverse_temperatures(temperatures)
        self.legs = legs
        self.reset()

    def reset(self):
        self.betas = list(self.initial)
        self.history = []

    @property
    def temperatures(self):
        return temperatures_of(self.betas)

    @property
    def exact_hots(self):
        """The hottest rungs at beta = 0 (the prior, or a fitted q), drawn exactly: where
        tempered restarts begin (:mod:`pyro_pt.lineages`). Adaptation keeps the ends fixed."""
        hots = self.legs.hots if self.legs is not None else [len(self.betas) - 1]
        return [h for h in hots if h > 0 and self.betas[h] == 0.0]

    def adapt(self, scan, rejection_rates, pair_barriers=None):
        """
        The end of a warmup round at ``scan``: record it, and move the rungs to equal
        increments of the pairs' barriers over the round (:func:`equal_barrier_betas`; by
        default the ``rejection_rates``). Returns the new betas, or None: a pair never tried
        says nothing about its barrier, and the ladder then stays as it is.
        """
        betas = list(self.betas)
        pairs = list(rejection_rates if pair_barriers is None else pair_barriers)
        unattempted = any(math.isnan(r) for r in rejection_rates + pairs)
        legs = self.legs
        self.history.append({
            "scans": scan,
            "temperatures": temperatures_of(betas),
            "rejection_rates": list(rejection_rates),
            "pair_barriers": pairs,
            # of the leg to the reference, on a stabilized ladder
            "barrier": math.nan if unattempted else cumulative_barrier(
                pairs if legs is None else legs.pick(0, betas, pairs)[1])[-1],
        })
        if unattempted:
            return None
        if legs is None or not legs.stabilized:
            self.betas = equal_barrier_betas(betas, pairs)
        else:
            self.betas = [beta for leg in range(len(legs.spans))
                          for beta in equal_barrier_betas(*legs.pick(leg, betas, pairs))]
        return list(self.betas)


def equal_barrier_betas(betas, pair_barriers, num_rungs=None):
    r"""
    K' decreasing betas with the same ends as ``betas`` at equal increments of the cumulative
    barrier (:func:`~pyro_pt.barrier.cumulative_barrier` of ``pair_barriers``; Syed et al. 2021,
    Sec. 5.1), so that every pair is expected to reject equally often: rung k at
    :math:`\Lambda(\beta_k) = \Lambda\, k / (K' - 1)`, linear between the current rungs. K' is
    the current number of rungs, or ``num_rungs`` to grow the ladder (:mod:`pyro_pt.growth`).
    Without any barrier the ladder is returned unchanged (grown: equal steps in beta).
    """
    cumulative = cumulative_barrier(pair_barriers)
    total = cumulative[-1]
    num = len(betas) if num_rungs is None else num_rungs
    if num == len(betas) and (total <= 0.0 or num < 3):
        return list(betas)
    if total <= 0.0:  # no barrier to go by: equal steps in beta
        return [betas[0] + (betas[-1] - betas[0]) * k / (num - 1) for k in range(num)]
    new = [betas[0]]
    segment = 0
    for k in range(1, num - 1):
        target = total * k / (num - 1)
        while cumulative[segment + 1] < target:
            segment += 1
        lo, hi = cumulative[segment], cumulative[segment + 1]
        frac = (target - lo) / (hi - lo)
        new.append(betas[segment] + frac * (betas[segment + 1] - betas[segment]))
    new.append(betas[-1])
    return new


# A growing ladder (pyro_pt.growth) grows at the ends of the last GROWTH_ROUNDS warmup rounds of
# at least MIN_GROWTH_SCANS scans. Shorter rounds hold the chains' transient (ll drifting towards
# the typical set), whose barrier estimate is far too high: growing on it would add rungs that
# are not needed.
MIN_GROWTH_SCANS = 32
GROWTH_ROUNDS = 2


def settled_round_ends(warmup_steps, swap_interval=1):
    """The warmup round ends, sorted, of the rounds of at least :data:`MIN_GROWTH_SCANS` scans:
    where the ladder may change its rungs (grow, or gain q's leg), past the chains' transient."""
    ends, start, kept = sorted(warmup_round_ends(warmup_steps, swap_interval)), 0, []
    for end in ends:
        if end - start >= MIN_GROWTH_SCANS:
            kept.append(end)
        start = end
    return kept


def warmup_round_ends(warmup_steps, swap_interval=1):
    """The scans that end a warmup round: :func:`adaptation_round_ends` counted in swap rounds,
    so that every round holds swaps of every pair whatever the ``swap_interval``."""
    ends = adaptation_round_ends(-(-warmup_steps // swap_interval))
    return {e * swap_interval for e in ends if e * swap_interval < warmup_steps}


def adaptation_round_ends(warmup_steps, first_round=4):
    """Rounds of doubling length (``first_round``, twice that, ...) that end strictly before the
    warmup does, so the explorers still have warmup left to settle on the final ladder."""
    ends, end, length = [], 0, first_round
    while end + length < warmup_steps:
        end += length
        ends.append(end)
        length *= 2
    return ends
