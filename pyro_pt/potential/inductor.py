"""Compiling a captured graph with Inductor, and the choice of compiler.

The captured graph (:mod:`pyro_pt.potential.capture`) is straight-line aten code, so Inductor
compiles it directly, as one graph (:func:`inductor_compile`). ``"torchscript"`` runs it in the
TorchScript interpreter (C++, a fraction of a second to build; the fallback wherever Inductor is
unavailable or fails); ``"inductor"`` fuses its elementwise operations into generated C++ (CPU)
or Triton (CUDA) kernels, at a compilation per model, dtype, device and batch size: on the seed
BNN (benchmarks/_bnn.py, 4929 weights, loaded 2-core CPU) about 100 s cold, beyond the ~10-17 s
of capture and checks both pay (``benchmarks/README.md``, ``vs_numpyro.py``); with Inductor's
on-disk caches warm, ~5 s for the graph and ~1.4 s for the fused step (TorchScript's set-up:
1.5 s). ``compile="auto"`` (the default) starts on TorchScript (:func:`choose_compiler`) and
switches during warmup where the compilation pays (:mod:`pyro_pt.autocompile`).
"""

import copy

from . import torch_compat
from .constants import inline_uniform_constants
from .direct_call import direct_call
from .matmul import shims, substitute


COMPILERS = ("auto", "inductor", "torchscript")


def check_compiler(compile):
    """Refuse a ``compile`` setting that is not one of :data:`COMPILERS`."""
    if not isinstance(compile, str) or compile not in COMPILERS:
        raise ValueError(
            f"compile must be 'auto', 'inductor' or 'torchscript' (how the captured graph of "
            f"the model is run), got {compile!r}"
        )
    return compile


def choose_compiler(compile):
    """The compiler that ``compile`` means at set-up: ``"inductor"`` or ``"torchscript"``
    (``"auto"`` starts on TorchScript)."""
    check_compiler(compile)
    return "torchscript" if compile == "auto" else compile


def missing_apis():
    """The reason :func:`inductor_compile` cannot run (a private API it needs is missing, see
    :mod:`~pyro_pt.potential.torch_compat`), else None."""
    needed = ("inductor.compile", "FakeTensorMode", "ShapeEnv")
    return next(filter(None, (torch_compat.lookup(name)[1] for name in needed)), None)


class _InductorGraph:
    """An Inductor-compiled graph called as ``gm`` is (its outputs as a tuple): through the
    generated code and constants alone where :func:`~pyro_pt.potential.direct_call.direct_call`
    finds them, else through ``fn``, AOTAutograd's wrappers that ``torch._inductor.compile``
    returns."""

    def __init__(self, fn, direct=None):
        self.fn = fn
        self.direct = direct  # (generated callable, constants), or None
        self.loop = None  # a C++ loop of calls (pyro_pt.potential.native), where one is set
        # (native, all) matrix products (pyro_pt.potential.matmul)
        self.matmuls = (0, 0)

    def __call__(self, *inputs):
        if self.direct is not None:
            run, constants = self.direct
            return tuple(run([*constants, *inputs]))
        return tuple(self.fn(*inputs))

    def runner(self):
        """``(run, head)``: ``run([*head, *inputs])`` gives this graph's outputs at ``inputs``
        (a sequence), without this object's own call layer (a caller that loops over
        leapfrog steps calls it once per step)."""
        if self.direct is not None:
            return self.direct
        return (lambda args: self.fn(*args)), ()


def inductor_compile(gm, *example, asserts=True, pooled=False):
    """
    ``gm`` compiled by Inductor for the exact shapes of ``example``, now, inside the set-up.
    Raises whatever Inductor raises (no C++ compiler, an unsupported operation), and
    RuntimeError with :func:`missing_apis`'s reason where a private API it needs is missing.

    ``gm`` goes to ``torch._inductor.compile`` directly, not through ``torch.compile``: no
    Dynamo frame evaluation and guard check per call, and static shapes. The kernels are
    launched by a generated C++ wrapper (``cpp_wrapper``) rather than Python. Seed BNN, one
    thread, loaded 2-core CPU (best of 7 x 200 calls, bitwise the same numbers):
    ``torch.compile`` 1.06-1.54 ms, ``torch._inductor.compile`` 0.94-1.03 ms, with
    ``cpp_wrapper`` 0.58-0.79 ms; the C++ wrapper adds ~25 s to a cold compilation.

    ``asserts=False`` drops the generated code's checks of each input's size, stride and
    alignment, for a graph whose one caller builds inputs of the example's layout (the lockstep
    step); an input of another layout would be read wrongly instead of refused, so every other
    graph keeps them. On the 25-weight BNN's lockstep step (4 slots, one thread) the checks
    cost ~25 % of a call (about 57 -> 45 us, bitwise the same numbers).

    ``pooled=True`` has the generated code take one block of memory per call for all its
    buffers, outputs included (``memory_planning``, "combined" pool): the outputs are then views
    of one block. On the 25-weight BNN's lockstep step (29 buffers, most a few floats) a call
    took 15.9-16.9 us instead of 18.9-19.3 (best of 7 x 5000 calls; the "intermediates" pool
    alone: 26 us); glibc's ``malloc`` and ``free`` were twice the arithmetic in a ``perf``
    profile of the sampling loop.

    The larger float32 matrix products run :mod:`pyro_pt.potential.matmul`'s kernel where its
    :func:`~pyro_pt.potential.matmul.choice` allows; the result's ``matmuls`` says how many of
    how many.
    """
    # Looked up here, not at load: importing Inductor costs ~2.4 s, which every process (each
    # rank of a distributed run) would pay even under TorchScript.
    missing = missing_apis()
    if missing:
        raise RuntimeError(missing)
    compile_aten = torch_compat.lookup("inductor.compile")[0]
    FakeTensorMode = torch_compat.lookup("FakeTensorMode")[0]
    ShapeEnv = torch_compat.lookup("ShapeEnv")[0]

    # Inductor may rewrite the graph it is given; gm stays the uncompiled reference (vmap,
    # the TorchScript fallback).
    gm = copy.deepcopy(gm)
    matmuls = substitute(gm)
    inline_uniform_constants(gm)
    for node in gm.graph.nodes:
        # make_fx records each input's fake value under its own fake mode, which Inductor
        # refuses to mix; it traces the graph again from the example anyway.
        node.meta.pop("val", None)
    # Fake inputs with a shape environment: without one Inductor bypasses its on-disk graph
    # cache ("No shape env") and lowers and generates the code again on every compilation.
    fake_mode = FakeTensorMode(shape_env=ShapeEnv())
    fake = [fake_mode.from_tensor(t) for t in example]
    options = {"cpp_wrapper": True}
    if not asserts:
        options.update(size_asserts=False, scalar_asserts=False, alignment_asserts=False)
    if pooled:
        options.update(memory_planning=True, memory_pool="combined")
    c_shims = shims() if matmuls[0] else {}
    if c_shims:
        options["aot_inductor.custom_ops_to_c_shims"] = c_shims
    with torch_compat.trusting_the_cpu():
        fn = compile_aten(gm, fake, options=options)
    graph = _InductorGraph(fn, direct_call(fn, list(example)))
    graph.matmuls = matmuls
    return graph
