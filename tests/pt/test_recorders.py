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
