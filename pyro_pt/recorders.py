"""The one swap-statistics pipeline of a run (:class:`TemperingRecorder`) and the sampling
phase's statistics: swap acceptance, the barrier, round trips and the stepping-stone log Z.

Pure: no Pyro inference machinery, no communication.
"""

import math

import torch

from .barrier import (global_barrier, leg_pair_barriers, pair_barriers, recommended_replicas,
                      rung_barriers)
from .ladder import temperatures_of
from .legs import Legs
from .lineages import IndexProcess, theoretical_round_trip_rate  # noqa: F401 (public here too)
from .regeneration import ColdTours

LOG_Z_KEYS = ("log_Z", "log_Z_forward", "log_Z_reverse")


class SwapStatistics:
    """Swap attempts, acceptances and mean acceptance probabilities per adjacent pair. The
    mean probability (not the 0/1 outcome) estimates the acceptance rate with less variance."""

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("num_pairs", "attempts", "accepts", "prob_sum")
    REBUILT = ()

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
        return [s / n if n else math.nan for s, n in zip(self.prob_sum, self.attempts)]

    def rejection_rates(self):
        """``1 -`` the mean acceptance probability, per pair (NaN for a pair never attempted)."""
        return [1.0 - a for a in self.acceptance()]

    def mean_acceptance(self):
        rates = [a for a in self.acceptance() if not math.isnan(a)]
        return sum(rates) / len(rates) if rates else math.nan


def stepping_stone(betas, log_likelihoods):
    r"""
    ``(estimate, forward, reverse)``: the stepping-stone estimate of :math:`\log Z(\beta_0) -
    \log Z(\beta_{K-1})` from the ll record ``(num_draws, K)`` of decreasing ``betas``, the
    mean of the forward estimator (each pair's hotter rung's draws) and the reverse one (its
    colder rung's); with :math:`\beta_{K-1} = 0` the evidence (docs/design.md, "log Z").
    """
    forward = reverse = 0.0
    for hot, cold in stepping_stone_terms(betas, log_likelihoods):
        forward += float(torch.logsumexp(hot, 0) - math.log(hot.shape[0]))
        reverse -= float(torch.logsumexp(cold, 0) - math.log(cold.shape[0]))
    return 0.5 * (forward + reverse), forward, reverse


def stepping_stone_terms(betas, log_likelihoods):
    r"""Per pair, the log-weights whose log-mean-exp are its forward and reverse terms:
    :math:`\Delta_i ll` at the hotter rung, :math:`-\Delta_i ll` at the colder."""
    ll = torch.as_tensor(log_likelihoods, dtype=torch.float64)
    for i in range(len(betas) - 1):
        delta = betas[i] - betas[i + 1]
        yield delta * ll[:, i + 1], -delta * ll[:, i]


def _leg_statistics(betas, rejections, rungs, log_likelihoods):
    """:func:`ladder_statistics` of one leg: cold first, decreasing ``betas``, its pairs'
    rejection rates, its rungs' lambdas and ll columns."""
    known = [r for r in rejections if not math.isnan(r)]
    pairs = pair_barriers(betas, rejections, rungs)
    barrier = global_barrier(pairs)
    out = {
        "temperatures": temperatures_of(betas),
        "pair_barrier": pairs,
        "barrier": barrier,
        "local_barrier": [
            (0.5 * (b0 + b1), b / (b0 - b1)) for b0, b1, b in zip(betas, betas[1:], pairs)
        ],
        "recommended_replicas": recommended_replicas(barrier),
        "theoretical_round_trip_rate": theoretical_round_trip_rate(known)
        if len(known) == len(rejections) and known else math.nan,
    }
    estimates = (stepping_stone(betas, log_likelihoods)
                 if log_likelihoods.shape[0] > 0 and len(betas) > 1 else (math.nan,) * 3)
    out.update(zip(LOG_Z_KEYS, estimates))
    return out


def ladder_statistics(betas, acceptance, round_trips, num_rounds, log_likelihoods, legs=None):
    r"""
    The sampling phase's statistics (a dict of floats; the keys are docs/layout.md's
    "Diagnostics") from the final ``betas``, each pair's mean swap ``acceptance`` (NaN: never
    attempted), the ``round_trips`` in ``num_rounds`` swap rounds and the ll record
    ``(num_draws, K)``. ``local_barrier`` is ``(beta, pair_barrier / (beta_i - beta_{i+1}))``
    at each pair's mid-point.

    On the two ``legs`` of a stabilized ladder (:mod:`pyro_pt.legs`) the per-pair lists hold
    the bridge too (a barrier of 0, at beta = 1); the barrier, log Z and the replicas called for
    are the reference's leg's (the replicas for a ladder whose half is that leg), the
    theoretical round-trip rate the sum of the legs', and ``legs`` holds each leg's own.
    """
    legs = legs or Legs.plain(len(betas))
    rejections = [1.0 - a for a in acceptance]
    ll = torch.as_tensor(log_likelihoods, dtype=torch.float64).reshape(-1, len(betas))
    rungs = rung_barriers(ll, len(betas))
    per_leg = [_leg_statistics(*legs.pick(leg, betas, rejections, rungs), ll[:, a:b])
               for leg, (a, b) in enumerate(legs.spans)]
    first = per_leg[0]
    rates = [leg["theoretical_round_trip_rate"] for leg in per_leg]
    out = {
        "rejection_rates": rejections,
        "pair_barrier": legs.join([leg["pair_barrier"] for leg in per_leg]),
        "rung_barrier": rungs,
        "barrier": first["barrier"],
        "local_barrier": legs.join([leg["local_barrier"] for leg in per_leg], (1.0, 0.0)),
        "recommended_replicas": recommended_replicas(first["barrier"], legs.stabilized),
        "round_trip_rate": round_trips / num_rounds if num_rounds else math.nan,
        "theoretical_round_trip_rate": sum(rates),
    }
    out.update({key: first[key] for key in LOG_Z_KEYS})
    hottest = betas[legs.hots[0]]
    out["log_Z_meaning"] = (
        "log evidence log p(y) (the hottest rung is the prior)" if hottest == 0.0
        else f"log Z(beta=1) - log Z(beta={hottest:.4g}), relative to the hottest rung"
    )
    # None for one leg: every run has the key, so chains of MCMC(num_chains) whose ladders
    # differ (reference="auto"'s leg joined one) still give Pyro's diagnostics
    out["legs"] = dict(zip(legs.names, per_leg)) if legs.stabilized else None
    return out


class TemperingRecorder:
    """
    The one swap-statistics pipeline of a run: each swap round's attempts and each scan's K
    log-likelihoods are fed here once, and kept in two views.

    - :attr:`round`: swap statistics and ll rows (:attr:`round_ll`) since the current round
      began (the report's rows, the ladder's adaptation); the sampling phase is one round.
    - :attr:`phase`: swap statistics since the phase (warmup or sampling) began, and the index
      process with its round trips (the progress bar and the diagnostics).

    ``legs`` default to one; restarts are counted from the ``exact_hots``
    (:class:`~pyro_pt.lineages.IndexProcess`), and the sampling phase's cold draws are kept by
    the lineages' tours they come from (:attr:`tours`, :mod:`pyro_pt.regeneration`).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("warmup_steps", "scans", "legs", "index", "phase", "round", "round_ll",
             "swap_record", "tours")
    REBUILT = ()

    @classmethod
    def begun_again(cls, old, num_rungs, legs=None, exact_hots=()):
        """The records of a ladder whose rungs changed in warmup (grown, or q's leg joined):
        fresh for ``num_rungs``, at ``old``'s scan, its round trips and restarts kept (the
        report counts them from its rows)."""
        new = cls(num_rungs, old.warmup_steps, legs, exact_hots)
        new.scans = old.scans
        new.index.round_trips = old.index.round_trips
        new.index.restarts = old.index.restarts
        return new

    def __init__(self, num_rungs, warmup_steps, legs=None, exact_hots=()):
        self.warmup_steps = warmup_steps
        self.scans = 0
        self.legs = legs or Legs.plain(num_rungs)
        self.index = IndexProcess(num_rungs, self.legs, exact_hots)
        self.phase = SwapStatistics(num_rungs - 1)
        self.round = SwapStatistics(num_rungs - 1)
        self.round_ll = []
        self.swap_record = []  # sampling phase: 1/0 per pair per scan, NaN when not attempted
        self.tours = ColdTours()

    @property
    def sampling(self):
        """Whether the scans recorded so far have reached the sampling phase."""
        return self.scans > self.warmup_steps

    def record_swaps(self, attempts):
        """One swap round's ``(pair, accepted, probability)``, in the order they were taken;
        returns each pair's outcome (1.0, 0.0, or NaN when not attempted)."""
        outcome = [math.nan] * self.round.num_pairs
        for pair, accepted, prob in attempts:
            self.phase.record(pair, accepted, prob)
            self.round.record(pair, accepted, prob)
            outcome[pair] = float(accepted)
            if accepted:
                self.index.swap(pair)
        self.index.observe()
        return outcome

    def record_scan(self, log_likelihoods, outcome):
        """The end of a scan: the K log-likelihoods after it and its swap outcome."""
        self.scans += 1
        self.round_ll.append(list(log_likelihoods))
        if self.sampling:
            self.swap_record.append(outcome)

    def record_cold(self, values):
        """The sampling phase's cold draw of the scan just recorded, ``{site: tensor}``
        constrained (:class:`~pyro_pt.regeneration.ColdTours`), by the tour of rung 0's
        lineage."""
        self.tours.add(values, self.index.cold_tour)

    def round_pair_barriers(self, betas):
        """The barrier of each pair over the current round (:func:`~pyro_pt.barrier.pair_barriers`
        of its rejection rates and its rungs' ll rows)."""
        return leg_pair_barriers(self.legs, betas, self.round.rejection_rates(),
                                 rung_barriers(self.round_ll, len(self.index.lineage)))

    def begin_round(self):
        self.round.reset()
        self.round_ll = []

    def begin_sampling(self):
        """Statistics and round trips of the sampling phase are reported from its start."""
        self.begin_round()
        self.phase.reset()
        self.index.round_trips = 0
        self.index.restarts = 0
        self.tours = ColdTours()

    def summary(self, betas, num_rounds, rungs):
        """The sampling phase's statistics (:func:`ladder_statistics`), the rungs' own
        diagnostics ``rungs`` (a dict), the swap acceptance, round trips and the record: ll
        ``[draws, K]`` and swap outcomes ``[draws, K - 1]``, float64."""
        num = len(self.index.lineage)
        ll = self.round_ll if self.sampling else []
        record_ll = torch.tensor(ll, dtype=torch.float64).reshape(len(ll), num)
        record_swaps = torch.tensor(self.swap_record, dtype=torch.float64).reshape(
            len(self.swap_record), num - 1)
        return phase_summary(betas, self.phase.acceptance(), self.index.round_trips,
                             self.index.restarts, num_rounds, record_ll, record_swaps, self.legs,
                             rungs)


def phase_summary(betas, acceptance, round_trips, restarts, num_rounds, record_ll, record_swaps,
                  legs, rungs, record=None):
    """:meth:`TemperingRecorder.summary` from its parts (one ladder's, or several ladders'
    pooled: :class:`~pyro_pt.ensemble.Pooled`): :func:`ladder_statistics`, the rungs' own
    diagnostics ``rungs``, the swap acceptance, round trips, restarts and the record (the
    rows ``record_ll``, ``record_swaps`` the statistics read, or the rows ``record`` of the
    draws MCMC holds where those are fewer)."""
    out = ladder_statistics(betas, acceptance, round_trips, num_rounds, record_ll, legs)
    out.update(rungs)
    held_ll, held_swaps = record if record is not None else (record_ll, record_swaps)
    out.update(swap_acceptance=acceptance, round_trips=round_trips, restarts=restarts,
               tempering_record={"log_likelihood": held_ll, "swap_accepted": held_swaps})
    return out
