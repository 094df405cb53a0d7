"""Graphs compiled in this process, reused by a later kernel on the same model.

Setting up a kernel captures the model's graph, then compiles it and the vmapped graphs its
explorers run, each captured again from it. On the 25-weight BNN of
``benchmarks/vs_numpyro_ess.py`` (one thread, Inductor's on-disk cache warm) the set-up took
~0.5 s, ~0.35 s of it the lockstep steps' captures and compilations. A later kernel on the
same model and data in the same process (another chain, a rerun in a notebook) captures the
same graph again, and :func:`derived` gives it what was compiled from that graph before,
as JAX reuses a jitted function's compilation for the same trace. "The same" is strict: the
same generated code and bitwise the same constants (data, prior parameters), for the same
purpose and shapes. Whatever checks a caller runs on a compiled graph it still runs.

Measured gain (``benchmarks/ablation.py``, a second kernel set up after a whole PT run of 1000
warmup iterations and 2000 draws): without it the second set-up took 0.53-0.88 s instead of
0.13-0.25 s on the small models (the rest comes from Inductor's on-disk cache): 3-7 % of the
first run's wall time on the 25-weight BNN, 6-11 % (median 9 %) on eight schools, and nothing
visible on the seed BNN (whose fused step it does not cover). Borderline, so kept; a shorter run
makes the share larger.
"""

import torch

from .constants import bitwise_equal
from .matmul import choice

MAX_ENTRIES = 8
# Graphs whose constants are larger are not kept (the comparison holds a copy of them).
MAX_CONSTANT_BYTES = 16 * 2**20

_entries = []  # [(code, what, constants, value)], the most recently used last


def derived(gm, what, example, make):
    """
    ``make()``, or what ``make`` returned before for a graph with ``gm``'s code and constants,
    the same ``what`` (a hashable key of the purpose: sizes, dtype, device, options) and
    inputs ``example`` of the same shapes, strides, dtypes and devices (a graph's code need
    not show its shapes: ``-(z ** 2).sum()`` is the same code for any ``z``). A ``make`` that
    raises keeps nothing.
    """
    # the matrix products' path is the machine's, but PYRO_PT_MATMUL may change it in between
    what = (what, choice()[0],
            tuple((tuple(t.shape), t.stride(), t.dtype, t.device) for t in example))
    constants = dict(gm.named_buffers())
    constants.update((name, value) for name, value in vars(gm).items()
                     if torch.is_tensor(value))
    size = sum(t.numel() * t.element_size() for t in constants.values())
    if size > MAX_CONSTANT_BYTES:
        return make()
    code = gm.code
    for i, (other_code, other_what, other_constants, value) in enumerate(_entries):
        if other_code == code and other_what == what and _same(constants, other_constants):
            _entries.append(_entries.pop(i))
            return value
    value = make()
    kept = {k: (t.stride(), t.detach().clone()) for k, t in constants.items()}  # a clone
    _entries.append((code, what, kept, value))  # of an expanded tensor has other strides
    del _entries[:-MAX_ENTRIES]
    return value


def _same(constants, kept):
    return constants.keys() == kept.keys() and all(
        a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
        and a.stride() == stride and bitwise_equal(a, b)
        for a, (stride, b) in ((constants[k], kept[k]) for k in constants))


def clear():
    """Forget every graph kept here."""
    _entries.clear()
