"""Recorders of the tempering process: swap acceptance, the index process, round trips.

Pure: no Pyro inference machinery, no communication. The kernel feeds them the decisions it
takes; tests feed them synthetic decisions (e.g. a constant acceptance probability).
"""

import math


class IndexProcess:
    """
    Which replica lineage sits at which temperature, and the round trips the lineages make.

    A round trip is a lineage going cold (rung 0) -> hottest (rung K-1) -> cold. Lineage ``r``
    starts at rung ``r``; only the one that starts cold has already "been cold".

    :param int num_temperatures: K.
    """

    def __init__(self, num_temperatures):
        self.num_temperatures = num_temperatures
        self.lineage = list(range(num_temperatures))  # lineage[k]: replica at rung k
        # Per lineage: None (not cold yet), "up" (was cold, heading hot), "down" (was hot too).
        self._phase = [None] * num_temperatures
        self._phase[0] = "up"
        self.round_trips = 0

    def swap(self, i):
        """Exchange the lineages at rungs ``i`` and ``i + 1``."""
        self.lineage[i], self.lineage[i + 1] = self.lineage[i + 1], self.lineage[i]

    def observe(self):
        """Update round trips from the current positions; call once after each swap round."""
        if self.num_temperatures < 2:
            return  # a lone cold rung makes no trips
        hot = self.lineage[-1]
        if self._phase[hot] == "up":
            self._phase[hot] = "down"
        cold = self.lineage[0]
        if self._phase[cold] == "down":
            self.round_trips += 1
        self._phase[cold] = "up"


def theoretical_round_trip_rate(rejection_rates):
    r"""
    Round trips per swap round of deterministic even-odd tempering (Syed et al. 2021, Thm. 3):
    :math:`\tau = 1 / (2 + 2 \sum_i r_i / (1 - r_i))`, ``r_i`` the rejection rate of pair i.
    """
    total = 0.0
    for r in rejection_rates:
        if r >= 1.0:
            return 0.0
        total += r / (1.0 - r)
    return 1.0 / (2.0 + 2.0 * total)


class SwapStatistics:
    """
    Swap attempts, acceptances and mean acceptance probabilities per adjacent pair.

    The mean acceptance probability (not the 0/1 outcome) estimates the pair's acceptance rate
    with less variance; ``1 -`` it is the rejection rate ``r_i`` of DESIGN §1.
    """

    def __init__(self, num_pairs):
        self.num_pairs = num_pairs
        self.reset()

    def reset(self):
        self.attempts = [0] * self.num_pairs
        self.accepts = [0] * self.num_pairs
        self.prob_sum = [0.0] * self.num_pairs

    def record(self, pair, accepted, prob):
        self.attempts[pair] += 1
        self.accepts[pair] += int(accepted)
        self.prob_sum[pair] += prob

    def acceptance(self):
        """Mean acceptance probability per pair (NaN for a pair never attempted)."""
        return [
            s / n if n else math.nan for s, n in zip(self.prob_sum, self.attempts)
        ]

    def mean_acceptance(self):
        rates = [a for a in self.acceptance() if not math.isnan(a)]
        return sum(rates) / len(rates) if rates else math.nan
