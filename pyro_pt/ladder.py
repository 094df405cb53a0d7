"""Temperature ladders: geometric, explicit, and with a prior rung (T = inf, beta = 0), and
their round-based adaptation.

Pure: no Pyro inference machinery. Rungs are listed cold first, ``T_0 = 1``. A run's
:class:`Ladder` is the one place its inverse temperatures live; :func:`inverse_temperatures`
and :func:`temperatures_of` are the one conversion pair.
"""

import math

from .barrier import cumulative_barrier


def geometric_ladder(num_replicas, max_temperature):
    r"""
    The geometric ladder :math:`T_k = T_{max}^{k/(K-1)}`, :math:`k = 0, \dots, K-1`.

    With ``max_temperature=float("inf")`` the hottest rung is the prior (:math:`\beta = 0`) and
    the inverse temperatures are equally spaced, :math:`\beta_k = 1 - k/(K-1)`: a geometric
    ladder cannot reach :math:`\beta = 0`, and equal spacing is the usual starting schedule of
    non-reversible tempering (Syed et al. 2021) before adaptation moves the rungs.

    :param int num_replicas: K, at least 2.
    :param float max_temperature: :math:`T_{max} > 1`, or ``inf`` for a prior rung.
    :returns: list of K temperatures, increasing, starting at 1.0.
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
    """
    Check an explicit ladder: starting at exactly 1.0, strictly increasing; only the last may be
    ``inf`` (the prior rung). ``[1.0]`` alone is allowed: one cold chain, no swaps (a baseline).

    :returns: the ladder as a list of floats.
    """
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
    The ladder of one run: the one place its rungs' inverse temperatures live (the swaps, the
    explorers and the reports read :attr:`betas` from here; :attr:`temperatures` are derived),
    and the history of its adaptation.

    It starts at the ladder given; an adaptation stores the betas it computes, and every reader
    sees exactly those. :meth:`reset` goes back to the start (a new run of the same kernel).

    :param list temperatures: a validated ladder, cold (1.0) first; with two ``legs``
        (:mod:`pyro_pt.legs`), each leg's, cold first, one after the other.
    :param Legs legs: the ladder's legs (default: one); each adapts on its own pairs.
    """

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
        legs = getattr(self, "legs", None)
        hots = legs.hots if legs is not None else [len(self.betas) - 1]
        return [h for h in hots if h > 0 and self.betas[h] == 0.0]

    def adapt(self, scan, rejection_rates, pair_barriers=None):
        """
        The end of a warmup round at ``scan``: record it, and move the rungs to equal
        increments of the barrier (:func:`equal_barrier_betas`, the same on every rank).
        A pair never tried says nothing about its barrier: then the ladder stays as it is.

        :param list rejection_rates: each pair's rejection rate over the round.
        :param list pair_barriers: each pair's barrier over the round
            (:func:`~pyro_pt.barrier.pair_barriers`: not saturating where the rejection rate
            does); by default the rejection rates.

        :returns: the new betas, or None if the ladder stays.
        """
        betas = list(self.betas)
        pairs = list(rejection_rates if pair_barriers is None else pair_barriers)
        unattempted = any(math.isnan(r) for r in rejection_rates + pairs)
        legs = getattr(self, "legs", None)
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
    A new ladder with the same end points whose rungs sit at equal increments of the estimated
    cumulative barrier :math:`\Lambda(\beta)` (Syed et al. 2021, Sec. 5.1), so that every
    adjacent pair is expected to reject equally often: rung k of K' at
    :math:`\Lambda(\beta_k) = \Lambda\, k / (K' - 1)`. K' is the current number of rungs, or
    ``num_rungs`` to grow the ladder (:mod:`pyro_pt.growth`).

    :math:`\Lambda` is known at the current rungs (the running sum of the pairs' barriers, not
    capped at 1 per pair, so a pair that never swaps draws as many rungs as its barrier needs)
    and interpolated linearly in between: monotone, as the barrier is. Pairs without a barrier
    contribute nothing; if no pair has one the ladder is returned unchanged.

    :param list betas: current inverse temperatures, cold (1.0) first, decreasing.
    :param list pair_barriers: barrier of each adjacent pair (a rejection rate where it does
        not saturate, :func:`~pyro_pt.barrier.pair_barriers`).
    :param int num_rungs: K' of the new ladder, at least 2 (default: K, that of ``betas``).
    :returns: list of K' betas, ``[betas[0], ..., betas[-1]]``, decreasing.
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


def warmup_round_ends(warmup_steps, swap_interval=1):
    """
    The scans that end a warmup round: :func:`adaptation_round_ends` counted in swap rounds
    (4, 8, 16, ...), so that every round holds swaps of every pair even when swaps happen only
    every ``swap_interval`` scans.
    """
    ends = adaptation_round_ends(-(-warmup_steps // swap_interval))
    return {e * swap_interval for e in ends if e * swap_interval < warmup_steps}


def adaptation_round_ends(warmup_steps, first_round=4):
    """
    The scans after which round-based warmup re-places the ladder: rounds of doubling length
    (``first_round``, twice that, ...) that end strictly before the warmup does, so the
    explorers still have warmup left to settle on the final ladder.
    """
    ends, end, length = [], 0, first_round
    while end + length < warmup_steps:
        end += length
        ends.append(end)
        length *= 2
    return ends
