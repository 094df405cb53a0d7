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


Z = (torch.zeros(3),)  # the example inputs


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
    first = recent.derived(graph(loc()), ("what", 1), Z, make)  # each capture its own tensors
    again = recent.derived(graph(loc()), ("what", 1), Z, make)
    assert again is first and make.calls == 1


def test_another_constant_code_or_purpose_makes_anew():
    make = Maker()
    base = torch.tensor([0.0, 1.0, 2.0])
    first = recent.derived(graph(base), ("what", 1), Z, make)
    others = [
        (graph(torch.tensor([-0.0, 1.0, 2.0])), ("what", 1)),  # 0.0 -> -0.0: another bit
        (graph(base, scale=2.5), ("what", 1)),  # another constant
        (graph(base.double()), ("what", 1)),  # another dtype
        (capture(lambda z: ((z - base) * 2.0).sum(), torch.zeros(3)), ("what", 1)),  # code
        (graph(base), ("what", 2)),  # another purpose (size, dtype, device)
    ]
    made = [recent.derived(gm, what, Z, make) for gm, what in others]
    assert make.calls == 1 + len(others)
    assert len({id(v) for v in [first] + made}) == len(made) + 1


def test_a_failed_make_keeps_nothing_and_the_oldest_go():
    def fail():
        raise RuntimeError("no compiler")

    gm = graph(torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError):
        recent.derived(gm, ("what", 0), Z, fail)
    make = Maker()
    recent.derived(gm, ("what", 0), Z, make)
    assert make.calls == 1
    for k in range(1, recent.MAX_ENTRIES + 1):
        recent.derived(gm, ("what", k), Z, make)
    recent.derived(gm, ("what", 0), Z, make)  # pushed out by the eight after it
    assert make.calls == recent.MAX_ENTRIES + 2
    recent.derived(gm, ("what", recent.MAX_ENTRIES), Z, make)  # still there
    assert make.calls == recent.MAX_ENTRIES + 2


def test_the_same_code_at_other_input_shapes_makes_anew():
    make = Maker()

    def shapeless(size):
        gm = capture(lambda z: -(z ** 2).sum(), torch.zeros(size))
        assert not dict(gm.named_buffers())  # no constant tells the sizes apart
        return gm

    first = recent.derived(shapeless(3), ("what",), (torch.zeros(3),), make)
    assert recent.derived(shapeless(3), ("what",), (torch.ones(3),), make) is first
    other = recent.derived(shapeless(5), ("what",), (torch.zeros(5),), make)
    strided = recent.derived(shapeless(3), ("what",), (torch.zeros(6)[::2],), make)
    assert make.calls == 3 and len({id(first), id(other), id(strided)}) == 3
