import math

import pytest

from pyro_pt.ladder import geometric_ladder, inverse_temperatures, validate_temperatures


def test_geometric_ladder():
    temps = geometric_ladder(5, 16.0)
    assert temps == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0])
    ratios = [b / a for a, b in zip(temps, temps[1:])]
    assert ratios == pytest.approx([2.0] * 4)


def test_prior_rung_ladder_has_equally_spaced_betas_ending_at_zero():
    temps = geometric_ladder(5, float("inf"))
    assert math.isinf(temps[-1]) and temps[0] == 1.0
    assert inverse_temperatures(temps) == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])


@pytest.mark.parametrize(
    "num, tmax, match",
    [(1, 10.0, "num_replicas"), (4, 1.0, "max_temperature"), (4, 0.5, "max_temperature"),
     (4, float("nan"), "max_temperature")],
)
def test_bad_geometric_ladders(num, tmax, match):
    with pytest.raises(ValueError, match=match):
        geometric_ladder(num, tmax)
    with pytest.raises(TypeError, match="num_replicas"):
        geometric_ladder(2.5, 10.0)


@pytest.mark.parametrize(
    "temps, match",
    [([2.0, 4.0], "start at 1.0"), ([1.0, 3.0, 2.0], "increase"), ([1.0, 1.0], "increase"),
     ([], "empty"), ([1.0, float("inf"), float("inf")], "increase"),
     ([1.0, float("nan")], "increase")],
)
def test_bad_explicit_ladders(temps, match):
    with pytest.raises(ValueError, match=match):
        validate_temperatures(temps)


def test_explicit_ladder_accepts_a_prior_rung_and_a_single_cold_rung():
    assert validate_temperatures([1, 2.5, float("inf")]) == [1.0, 2.5, math.inf]
    assert validate_temperatures([1.0]) == [1.0]
    with pytest.raises(TypeError, match="temperatures"):
        validate_temperatures(["hot"])
