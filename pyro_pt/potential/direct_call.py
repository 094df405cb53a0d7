"""Calling an Inductor-compiled graph past AOTAutograd's wrappers and the shim's conversion.

``torch._inductor.compile`` returns AOTAutograd's runtime wrappers (grad mode, output
aliasing, the graph's constants prepended to the inputs) around Inductor's generated code, and
with ``cpp_wrapper`` that code is a Python shim around a C++ entry point. On the 25-weight
BNN's lockstep step (one CPU thread) the wrappers cost about as much as the generated code
itself, and the shim's conversion of its arguments ~10 % of a call. :func:`direct_call` finds
the generated code (and the C++ entry point) and the constants, and keeps them only where they
give bitwise the wrapped call's outputs. Both rest on private torch APIs, looked up through
:mod:`~pyro_pt.potential.torch_compat`; without them the wrapped call is kept.

Measured gain, end to end (``benchmarks/ablation.py``: whole PT runs, one thread, ranges over
interleaved rounds): without it the seed BNN's sampling phase takes 1.09-1.15x as long, the
25-weight BNN's 1.04-1.79x (median 1.51; the lockstep C++ loop needs the entry point found
here, so it is off too); on eight schools no gain is seen within the noise (0.76-1.17).
"""

import torch

from . import torch_compat


def closure(fn):
    """``{free variable: value}`` of the filled cells of ``fn``'s closure (none if it has none)."""
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    values = {}
    for name, cell in zip(names, getattr(fn, "__closure__", None) or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return values


def direct_call(fn, example):
    """
    ``(generated callable, constants)`` of ``fn``: the innermost output code, found through
    the wrappers' ``__wrapped__`` chain, and the tensors they pass it before the inputs (the
    graph's lifted constants), recorded on one call at ``example``. None wherever anything is
    not as expected (another torch's wrappers, an input passed other than as given, outputs
    that differ from the wrapped call's by a bit): the wrapped call is kept.
    """
    OutputCode, _ = torch_compat.lookup("OutputCode")
    if OutputCode is None:
        return None
    code, layer = None, fn
    for _ in range(16):
        found = [layer, *closure(layer).values()]
        code = next((c for c in found if isinstance(c, OutputCode)), None)
        if code is not None:
            break
        layer = getattr(layer, "__wrapped__", None)
    run = getattr(code, "current_callable", None)
    if run is None:
        return None
    seen = []

    def spy(args):
        seen.append(list(args))
        return run(args)

    code.current_callable = spy
    try:
        with torch.no_grad():
            reference = tuple(fn(*example))
    finally:
        code.current_callable = run
    if len(seen) != 1:
        return None
    args = seen[0]
    lead = len(args) - len(example)
    if lead < 0 or not all(a is b for a, b in zip(args[lead:], example)):
        return None
    constants = tuple(args[:lead])
    if not (all(isinstance(c, torch.Tensor) for c in constants)
            and _same(run, constants, example, reference)):
        return None
    entry = entry_point(run)
    if entry is not None and _same(entry, constants, example, reference):
        return entry, constants
    return run, constants


def _same(run, constants, example, reference):
    """Whether ``run`` of the constants and ``example`` gives bitwise ``reference``."""
    with torch.no_grad():
        out = tuple(run([*constants, *example]))
    return len(out) == len(reference) and all(
        isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        and torch.equal(a, b) for a, b in zip(out, reference))


def entry_point(run):
    """The C++ entry point under the generated code's Python shim ``run``, called with the
    tensors' handles as the shim calls it, skipping the shim's conversion of each argument
    (every input here is a tensor); None where ``run`` is not such a shim."""
    entry = closure(run).get("f")
    handles = torch_compat.lookup("unsafe_alloc_void_ptrs_from_tensors")[0]
    tensors = torch_compat.lookup("alloc_tensors_by_stealing_from_void_ptrs")[0]
    if not callable(entry) or handles is None or tensors is None:
        return None
    return lambda args: tensors(entry(handles(args)))
