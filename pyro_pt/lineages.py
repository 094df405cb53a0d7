r"""The index process of a tempered run: which replica lineage sits at which rung, the round trips
the lineages make and the tempered restarts that the cold chain's mode weights rest on
(docs/design.md, "Tempered restarts": why a finite hot end counts none).

Pure: no Pyro inference machinery, no communication.

**References**

[1] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
a scalable highly parallel MCMC scheme", JRSS B.

[2] Surjanovic, Biron-Lattes, Tiede, Syed, Campbell, Bouchard-Côté (2023), "Pigeons.jl:
distributed sampling from intractable distributions".
"""

from .legs import Legs


class IndexProcess:
    """
    Which replica lineage sits at which of the K = ``num_temperatures`` rungs, the round trips
    and the tempered restarts.

    A round trip is a lineage going cold (rung 0) -> hottest (rung K-1) -> cold; on the two
    ``legs`` of a stabilized ladder (:mod:`pyro_pt.legs`), from either cold rung to either
    leg's hottest and back to either cold rung. Lineage ``r`` starts at rung ``r``; only those
    that start cold have already "been cold".

    A restart is a lineage that sat at one of the ``exact_hots`` (beta = 0: every scan gives
    the lineage there a fresh i.i.d. state; the one that starts there counts as fresh) and has
    since reached a cold rung. Without exact hot ends :attr:`restarts` is None. A lineage's
    *tour* is its stretch between two visits to an exact hot end: it starts from a fresh state
    there, so its tours are the units of the recorded cold chain's Monte Carlo errors
    (:mod:`pyro_pt.regeneration`); :attr:`cold_tour` names the one holding rung 0.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("num_temperatures", "legs", "lineage", "_phase", "round_trips", "exact_hots",
             "_fresh", "_restarts", "_tours")
    REBUILT = ()

    def __init__(self, num_temperatures, legs=None, exact_hots=()):
        self.num_temperatures = num_temperatures
        self.legs = legs or Legs.plain(num_temperatures)
        self.lineage = list(range(num_temperatures))  # lineage[k]: replica at rung k
        # Per lineage: None (not cold yet), "up" (was cold, heading hot), "down" (was hot too).
        self._phase = [None] * num_temperatures
        for cold in self.legs.colds:
            self._phase[cold] = "up"
        self.round_trips = 0
        self.exact_hots = [h for h in exact_hots if h not in self.legs.colds]
        self._fresh = [rung in self.exact_hots for rung in range(num_temperatures)]
        self._tours = [0] * num_temperatures  # per lineage: its visits to an exact hot end
        self._restarts = 0

    @property
    def restarts(self):
        """Tempered restarts so far (None where no hot end is drawn exactly)."""
        return self._restarts if self.exact_hots else None

    @restarts.setter
    def restarts(self, value):
        self._restarts = 0 if value is None else int(value)

    @property
    def cold_tour(self):
        """``(lineage, tour)`` of the state at rung 0 (of two cold rungs, the one MCMC
        records): the tour it is on, counted in visits to an exact hot end."""
        return self.lineage[0], self._tours[self.lineage[0]]

    def swap(self, pair):
        """Exchange the lineages of pair ``pair``'s rungs (``pair`` and ``pair + 1``, or the
        bridge's)."""
        i, j = self.legs.pairs[pair]
        self.lineage[i], self.lineage[j] = self.lineage[j], self.lineage[i]

    def observe(self):
        """Update round trips and restarts from the current positions; call once after each
        swap round."""
        if self.num_temperatures < 2:
            return  # a lone cold rung makes no trips
        for rung in self.legs.hots:
            hot = self.lineage[rung]
            if self._phase[hot] == "up":
                self._phase[hot] = "down"
        # The lineage now at an exact hot end is drawn afresh before its next swap.
        for rung in self.exact_hots:
            self._fresh[self.lineage[rung]] = True
            self._tours[self.lineage[rung]] += 1
        for rung in self.legs.colds:
            cold = self.lineage[rung]
            if self._phase[cold] == "down":
                self.round_trips += 1
            self._phase[cold] = "up"
            if self._fresh[cold]:
                self._restarts += 1
                self._fresh[cold] = False


def theoretical_round_trip_rate(rejection_rates):
    r"""Round trips per swap round of DEO tempering (Syed et al. 2021, Thm. 3):
    :math:`\tau = 1 / (2 + 2 \sum_i r_i / (1 - r_i))`, ``r_i`` the rejection rate of pair i."""
    total = 0.0
    for r in rejection_rates:
        if r >= 1.0:
            return 0.0
        total += r / (1.0 - r)
    return 1.0 / (2.0 + 2.0 * total)
