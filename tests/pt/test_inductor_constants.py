"""The constants Inductor is given: uniform ones written into the graph as ``full``."""

import math

import torch

from pyro_pt.potential.capture import capture
from pyro_pt.potential.constants import inline_uniform_constants


def _graph():
    """A captured graph with uniform and non-uniform constants of several kinds."""
    zeros, ones = torch.zeros(3), torch.ones(2, 3)
    signed = torch.tensor([0.0, -0.0, 0.0])  # equal, but not bitwise uniform
    with_nan = torch.tensor([math.nan, math.nan, math.nan])
    data = torch.tensor([1.0, 2.0, 3.0])
    flags = torch.ones(3, dtype=torch.bool)

    def fn(z):
        out = (z - zeros) * ones + data
        reciprocal = 1.0 / (signed * z.abs())  # 1 / -0.0 is -inf
        return torch.where(flags, out, with_nan), reciprocal, with_nan + z

    return capture(fn, torch.tensor([0.5, -1.0, 2.0]))


def test_uniform_constants_become_full_and_the_numbers_stay_bitwise():
    gm = _graph()
    constants = {n.target: getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    z = torch.tensor([0.0, 0.0, 0.0])
    before = gm(z)
    inline_uniform_constants(gm)
    kept = {n.target: getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    fulls = [n for n in gm.graph.nodes if n.target is torch.ops.aten.full.default]
    after = gm(z)
    for a, b in zip(before, after):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    # at z = 0 the signed zero's -0.0 entry gives -inf: it was kept as it is
    assert after[1].tolist() == [math.inf, -math.inf, math.inf]
    # the signed zeros and the data stay constants; every other uniform one is a full
    assert any(torch.equal(v, torch.tensor([1.0, 2.0, 3.0])) for v in kept.values())
    assert any(bool(v.signbit().any()) and not bool(v.signbit().all()) for v in kept.values()
               if v.is_floating_point())
    assert len(fulls) >= 1 and len(kept) < len(constants)
    # a buffer no longer read is gone: AOTAutograd would pass it on every call
    assert {name for name, _ in gm.named_buffers()} == set(kept)
