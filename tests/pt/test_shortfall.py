"""One rule for the rungs a barrier calls for, ceil(2 Lambda) (at least 2; a stabilized ladder
twice its leg to q's less one), and one message for a ladder that has fewer: the end of warmup's
warning, the review and the growing ladder's advice."""

import math

import pytest
import torch

from pyro_pt.barrier import recommended_replicas, round_trip_rate
from pyro_pt.health import review
from pyro_pt.legs import Legs
from pyro_pt.shortfall import SHORT, too_few_rungs


@pytest.mark.parametrize("barrier, rungs", [
    (0.0, 2), (0.4, 2), (1.0, 2), (1.01, 3), (2.5, 5), (4.0, 8), (4.01, 9), (4.1, 9), (math.nan, 2),
])
def test_the_rule_is_the_ceiling_of_twice_the_barrier(barrier, rungs):
    assert recommended_replicas(barrier) == rungs


@pytest.mark.parametrize("barrier, rungs", [(0.2, 4), (1.0, 4), (1.01, 5), (4.1, 17)])
def test_a_stabilized_ladder_asks_for_twice_its_leg_to_q_less_one(barrier, rungs):
    # the leg to q gets ceil(K / 2) of K rungs: K = 2 ceil(2 Lambda) - 1 gives it ceil(2 Lambda)
    assert recommended_replicas(barrier, stabilized=True) == rungs
    assert math.ceil(rungs / 2) >= recommended_replicas(barrier)


def test_a_ladder_with_the_rungs_the_rule_asks_for_is_not_short():
    assert too_few_rungs(4.0, Legs.plain(8), "anywhere") is None
    assert too_few_rungs(4.0, Legs.plain(9), "anywhere") is None
    assert too_few_rungs(math.nan, Legs.plain(2), "anywhere") is None


def test_the_round_trip_rate_of_an_even_ladder():
    # 1 / (2 + 2 sum r / (1 - r)), each of K - 1 pairs rejecting r = Lambda / (K - 1)
    assert round_trip_rate(4.0, 9) == pytest.approx(1 / (2 + 2 * 8 * 0.5 / 0.5))
    assert round_trip_rate(2.0, 5) == pytest.approx(1 / (2 + 2 * 4 * 0.5 / 0.5))
    assert round_trip_rate(1.25, 2) == 0.0 and round_trip_rate(3.0, 4) == 0.0  # r >= 1
    # more rungs, more round trips, towards 1 / (2 + 2 Lambda)
    rates = [round_trip_rate(3.0, k) for k in range(5, 60)]
    assert rates == sorted(rates) and rates[-1] < 1 / (2 + 2 * 3.0)


def test_a_ladder_a_rung_short_that_keeps_most_round_trips_is_not_short():
    # A default conjugate regression grew to 11 rungs on Lambda = 5.69, which asks for 12: it
    # keeps 90 % of their round trips, and its pairs still swap 43 % of the time.
    assert round_trip_rate(5.69, 11) / round_trip_rate(5.69, 12) > SHORT
    assert too_few_rungs(5.69, Legs.plain(11), "anywhere") is None
    # 8 rungs on a barrier of 5 keep 66 % of the round trips of 10: short
    assert round_trip_rate(5.0, 8) / round_trip_rate(5.0, 10) < SHORT
    assert too_few_rungs(5.0, Legs.plain(8), "anywhere") is not None


@pytest.mark.parametrize("max_replicas, advice", [
    (None, "run with num_replicas=10 (or temperatures= with 10 rungs)"),
    (8, "the growing ladder stopped at max_replicas=8: raise max_replicas to 10, or run with "
        "num_replicas=10"),
    (32, "the growing ladder grows only at the ends of the last 2 warmup rounds of 32+ scans: "
         "warm up longer (warmup_steps), or run with num_replicas=10"),
])
def test_a_short_ladder_is_told_the_rule_and_what_to_do(max_replicas, advice):
    said = too_few_rungs(5.0, Legs.plain(8), "over the sampling phase", max_replicas)
    assert said == (
        "too few rungs: the estimated global barrier Lambda = 5.00 (over the sampling phase) "
        "needs about 10 rungs (ceil(2 Lambda)) and the ladder has 8: its round trips come at "
        "about 66% of the rate of 10 rungs, some pairs rarely swap and the cold chain may not "
        f"leave its mode; {advice}")


def test_a_short_stabilized_ladder_counts_the_leg_to_q():
    said = too_few_rungs(1.2, Legs([2, 2]), "over the sampling phase")
    assert "needs about 3 rungs (ceil(2 Lambda)) and the leg to q has 2 of the ladder's 4" in said
    assert said.endswith("run with num_replicas=5 (or temperatures= with 5 rungs)")


def test_the_review_says_what_the_end_of_warmup_says():
    # A healthy sampling phase of 8 rungs whose barrier calls for 10: the review's first problem
    # is the rule's message, as the end of warmup's warning would give it on that barrier.
    betas = [1.0 - k / 7 for k in range(8)]
    ll = -1.0 + 0.01 * torch.randn(400, 8, generator=torch.Generator().manual_seed(0),
                                   dtype=torch.float64)
    diagnostics = {"temperatures": [1.0 / b if b else math.inf for b in betas],
                   "swap_acceptance": [0.5] * 7, "round_trips": 9, "local_acceptance": [0.5] * 8,
                   "barrier": 5.0, "recommended_replicas": recommended_replicas(5.0),
                   "log_Z": -1.0, "log_Z_forward": -1.0, "log_Z_reverse": -1.0,
                   "tempering_record": {"log_likelihood": ll}}
    problems, _, _ = review(diagnostics, betas, 400, max_replicas=8)
    assert problems[0] == too_few_rungs(5.0, Legs.plain(8),
                                        "over the 400 swap rounds of the sampling phase", 8)
    diagnostics["barrier"] = 4.0
    problems, _, _ = review(diagnostics, betas, 400)
    assert not any("too few rungs" in p for p in problems)
