"""pyro_arviz.register: how a plugin teaches from_pyro its results without pyro_arviz importing
it. A result class registered here stands for a plugin's; subclasses find their parent's export."""

import numpy as np
import pytest

import pyro_arviz
from pyro_arviz import convert


class Result:
    pass


class DerivedResult(Result):
    pass


class Guide:
    pass


def export(result, scale=1.0, *, log_likelihood=True):
    """Every group an export may give, whatever ``log_likelihood`` says (from_pyro drops them)."""
    draws = scale * np.arange(6.0).reshape(1, 3, 2)
    return pyro_arviz.build({
        "posterior": pyro_arviz.dataset({"w": draws}),
        "log_likelihood": pyro_arviz.dataset({"y": -draws}),
        "posterior_predictive": pyro_arviz.dataset({"y": draws}),
    }, library="planted")


@pytest.fixture
def registered(monkeypatch):
    for table in ("_EXPORTS", "_KERNEL_EXPORTS", "_HINTS"):
        monkeypatch.setattr(convert, table, dict(getattr(convert, table)))
    pyro_arviz.register(Result, export)
    pyro_arviz.register(Guide, hint="pass the result of guide.fit()")


def test_a_registered_result_and_its_subclasses_are_exported(registered):
    for obj in (Result(), DerivedResult()):
        data = pyro_arviz.from_pyro(obj, 2.0)
        assert set(pyro_arviz.groups_of(data)) == {"posterior", "log_likelihood", "posterior_predictive"}
        assert data["posterior"]["w"].values[0, 2, 1] == 10.0
        assert data["posterior"].attrs["inference_library"] == "planted"


def test_without_log_likelihood_the_two_groups_are_dropped(registered):
    data = pyro_arviz.from_pyro(Result(), log_likelihood=False, dims={"w": ["k"]}, coords={"k": ["a", "b"]})
    assert pyro_arviz.groups_of(data) == ["posterior"]
    assert list(data["posterior"]["w"].coords["k"].values) == ["a", "b"]
    assert data["posterior"].attrs["inference_library"] == "planted"  # relabelling keeps provenance


def test_a_registered_hint_says_what_to_pass(registered):
    with pytest.raises(TypeError, match=r"; got Guide; pass the result of guide.fit\(\)$"):
        pyro_arviz.from_pyro(Guide())
    with pytest.raises(TypeError, match=r"; got object$"):
        pyro_arviz.from_pyro(object())
