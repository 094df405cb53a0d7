import torch

from pyro_pt.recorders import IndexProcess, SwapStatistics, theoretical_round_trip_rate
from pyro_pt.swap import draw_round_uniforms, swap_pairs


def run_index_process(scheme, num_temperatures, accept_prob, num_rounds, seed=0):
    """Drive the real pairing and round-trip code with a swapper of constant acceptance."""
    generator = torch.Generator().manual_seed(seed)
    index = IndexProcess(num_temperatures)
    for round_index in range(num_rounds):
        coin, uniforms = draw_round_uniforms(generator, num_temperatures)
        for i in swap_pairs(scheme, round_index, num_temperatures, coin):
            if uniforms[i] < accept_prob:
                index.swap(i)
        index.observe()
    return index.round_trips / num_rounds


def test_round_trips_by_hand():
    index = IndexProcess(3)
    for pair in (0, 1):  # lineage 0 goes cold -> hot
        index.swap(pair)
        index.observe()
    assert index.lineage == [1, 2, 0] and index.round_trips == 0
    for pair in (1, 0):  # and back to cold
        index.swap(pair)
        index.observe()
    assert index.lineage == [0, 1, 2] and index.round_trips == 1
    # Lineage 2 started hot: reaching cold is not yet a round trip.
    index.swap(1)
    index.swap(0)
    index.observe()
    assert index.lineage[0] == 2 and index.round_trips == 1


def test_deo_round_trip_rate_matches_theory_and_seo_is_slower():
    num_temperatures, accept_prob, num_rounds = 8, 0.7, 60000
    rejection = [1 - accept_prob] * (num_temperatures - 1)
    theory = theoretical_round_trip_rate(rejection)  # 1 / (2 + 2 * 7 * 3/7) = 0.125
    assert abs(theory - 0.125) < 1e-12
    deo = run_index_process("deo", num_temperatures, accept_prob, num_rounds)
    assert abs(deo - theory) / theory < 0.04
    seo = run_index_process("seo", num_temperatures, accept_prob, num_rounds)
    assert seo < 0.6 * deo


def test_deo_with_no_rejection_makes_half_a_round_trip_per_round():
    assert abs(run_index_process("deo", 6, 1.0, 4000) - 0.5) < 0.01


def test_swap_statistics():
    stats = SwapStatistics(2)
    stats.record(0, True, 1.0)
    stats.record(0, False, 0.2)
    assert stats.acceptance()[0] == 0.6 and stats.accepts == [1, 0]
    assert stats.acceptance()[1] != stats.acceptance()[1]  # never attempted: NaN
    assert stats.mean_acceptance() == 0.6


def test_restarts_by_hand():
    """A restart is a lineage that sat at the exact hot end and then reached the cold rung;
    the lineage that starts there was drawn there. Round trips need a cold start instead."""
    index = IndexProcess(3, exact_hots=[2])
    index.swap(1)  # lineage 2 (drawn at the hot end) moves down, lineage 1 goes hot
    index.observe()
    assert index.lineage == [0, 2, 1] and index.restarts == 0
    index.swap(0)  # lineage 2 reaches the cold rung: one restart, no round trip
    index.observe()
    assert index.lineage == [2, 0, 1] and (index.restarts, index.round_trips) == (1, 0)
    index.swap(0)  # back and forth between the two colder rungs: nothing new
    index.swap(0)
    index.observe()
    assert index.restarts == 1
    index.swap(1)  # lineage 1, drawn afresh at the hot end, comes down to the cold rung
    index.observe()
    index.swap(0)
    index.observe()
    assert index.lineage == [1, 2, 0] and index.restarts == 2
    # without an exact hot end (a finite hottest temperature) restarts are not counted
    assert IndexProcess(3).restarts is None


def test_restarts_are_the_round_trip_rate_under_deo():
    """Each lineage that reaches the hot end restarts once at the cold end: over a long DEO
    run restarts and round trips come at the same rate, the theoretical one."""
    generator = torch.Generator().manual_seed(1)
    num, rounds = 6, 40000
    index = IndexProcess(num, exact_hots=[num - 1])
    for round_index in range(rounds):
        coin, uniforms = draw_round_uniforms(generator, num)
        for i in swap_pairs("deo", round_index, num, coin):
            if uniforms[i] < 0.6:
                index.swap(i)
        index.observe()
    theory = theoretical_round_trip_rate([0.4] * (num - 1))
    assert abs(index.restarts / rounds - theory) < 0.05 * theory
    assert abs(index.restarts - index.round_trips) <= num  # lineages still on their way
