"""Graphs compiled in this process, reused only for the same code and bitwise constants."""

import math

import pytest
import torch

from pyro_pt.potential import recent
from pyro_pt.potential.capture import capture


def graph(loc, scale=2.0):
    """A captured graph whose constants are ``loc`` (as given: expanded, 0-d, signed zeros)
    and ``scale``."""
    scale = torch.tensor(scale)
    return capture(lambda z: ((z - loc) / scale).sum(), torch.zeros(3))


class Maker:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return object()


@pytest.mark.parametrize("loc", [
    lambda: torch.tensor([1.0, 2.0, 3.0]),
    lambda: torch.tensor(0.5).expand(3),  # stride 0
    lambda: torch.tensor(0.5).expand(1),  # one element, stride 0
    lambda: torch.tensor(0.5),  # 0-d
    lambda: torch.tensor([0.0, -0.0, math.nan]),
], ids=["plain", "expanded", "expanded-one", "scalar", "signed-nan"])
def test_the_same_graph_gets_what_was_made_for_it(loc):
    make = Maker()
    first = recent.derived(graph(loc()), ("what", 1), make)  # each capture its own tensors
    again = recent.derived(graph(loc()), ("what", 1), make)
    assert again is first and make.calls == 1


def test_another_constant_code_or_purpose_makes_anew():
    make = Maker()
    base = torch.tensor([0.0, 1.0, 2.0])
    first = recent.derived(graph(base), ("what", 1), make)
    others = [
        (graph(torch.tensor([-0.0, 1.0, 2.0])), ("what", 1)),  # 0.0 -> -0.0: another bit
        (graph(base, scale=2.5), ("what", 1)),  # another constant
        (graph(base.double()), ("what", 1)),  # another dtype
        (capture(lambda z: ((z - base) * 2.0).sum(), torch.zeros(3)), ("what", 1)),  # code
        (graph(base), ("what", 2)),  # another purpose (size, dtype, device)
    ]
    made = [recent.derived(gm, what, make) for gm, what in others]
    assert make.calls == 1 + len(others)
    assert len({id(v) for v in [first] + made}) == len(made) + 1


def test_a_failed_make_keeps_nothing_and_the_oldest_go():
    def fail():
        raise RuntimeError("no compiler")

    gm = graph(torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError):
        recent.derived(gm, ("what", 0), fail)
    make = Maker()
    recent.derived(gm, ("what", 0), make)
    assert make.calls == 1
    for k in range(1, recent.MAX_ENTRIES + 1):
        recent.derived(gm, ("what", k), make)
    recent.derived(gm, ("what", 0), make)  # pushed out by the eight after it
    assert make.calls == recent.MAX_ENTRIES + 2
    recent.derived(gm, ("what", recent.MAX_ENTRIES), make)  # still there
    assert make.calls == recent.MAX_ENTRIES + 2
