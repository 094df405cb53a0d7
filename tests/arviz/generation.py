"""Reading ArviZ's answers the same way under both generations (names differ: elpd_loo / elpd)."""

import numpy as np

import pyro_arviz


def elpd(loo):
    """The elpd of an ``az.loo`` result."""
    return float(loo["elpd_loo"] if pyro_arviz.arviz_generation() == 0 else loo.elpd)


def elpd_parts(result):
    """The elpd, its standard error and the pointwise elpd of an ``az.loo`` result."""
    if pyro_arviz.arviz_generation() == 0:
        return float(result["elpd_loo"]), float(result["se"]), np.asarray(result["loo_i"])
    return float(result.elpd), float(result.se), np.asarray(result.elpd_i)


def compare_columns():
    """``az.compare``'s columns for elpd, its effective parameters, difference, weight and errors."""
    if pyro_arviz.arviz_generation() == 0:
        return ["elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse"]
    return ["elpd", "p", "elpd_diff", "weight", "se", "dse"]


def compare(exports):
    """``az.compare`` with its numbers unrounded (ArviZ >= 1 rounds its table by default)."""
    import arviz as az

    return az.compare(exports) if pyro_arviz.arviz_generation() == 0 else az.compare(exports, round_to="none")
