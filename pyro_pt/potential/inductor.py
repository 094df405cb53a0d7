"""Compiling a captured graph with ``torch.compile`` (Inductor), and the choice of compiler.

The captured graph (:mod:`pyro_pt.potential.capture`) is straight-line aten code with no Pyro
messenger, trace or distribution object left in it, so ``torch.compile(fullgraph=True)`` sees
one graph and no graph break. Two compilers can run it:

- ``"torchscript"``: the TorchScript interpreter (C++, no Python per operation); it costs a
  fraction of a second to build, and is the fallback whenever Inductor is unavailable or fails.
- ``"inductor"``: ``torch.compile``'s Inductor backend, which fuses the elementwise operations
  into generated C++ (CPU) or Triton (CUDA) kernels. It costs a compilation per model, dtype,
  device and batch size: measured on the seed BNN (benchmarks/_bnn.py, 4929 weights) on a
  loaded 2-core CPU, about 100 s cold and 10-25 s with the on-disk cache warm, beyond the
  ~10-17 s of capture and checks both compilers pay (``benchmarks/README.md``, "Captured
  potential vs NumPyro").

``compile="auto"`` must never make a short run slower, and every rank must take the same path
(a run's draws may not depend on the number of processes, DESIGN §2), so the choice is made
from settings alone, never from timings: Inductor only where the gradient evaluations the run
is known to make repay a cold compilation. Both the compile time and the saving per call grow
with the number of operations in the graph (the saving is the per-operation overhead that
fusion removes), so their ratio, the break-even number of evaluations, is taken as one measured
constant, :data:`BREAK_EVEN_EVALUATIONS`. Measured on the seed BNN on a loaded 2-core CPU
(``benchmarks/vs_numpyro.py``, medians of 7 interleaved rounds, two runs): a graph call costs
2.68 / 2.40 ms under TorchScript and 1.83 / 1.26 ms under Inductor (NumPyro: 1.48 / 1.17 ms),
so 0.85-1.1 ms saved per call against ~114 s of cold set-up: 1.3e5 evaluations, the
conservative end. The caller passes a lower bound of the
evaluations one rung makes (the kernel: warmup iterations times the fewest leapfrog steps per
iteration), the same on every rank; without one, ``"auto"`` means TorchScript. A cache that
happens to be warm is not counted (it differs between machines and ranks).
"""

import torch

COMPILERS = ("auto", "inductor", "torchscript")
# Cold Inductor compile time / saving per call, seed BNN on a 2-core CPU: 114 s / 0.85 ms.
BREAK_EVEN_EVALUATIONS = 130_000


def check_compiler(compile):
    """Refuse a ``compile`` setting that is not one of :data:`COMPILERS`."""
    if not isinstance(compile, str) or compile not in COMPILERS:
        raise ValueError(
            f"compile must be 'auto', 'inductor' or 'torchscript' (how the captured graph of "
            f"the model is run), got {compile!r}"
        )
    return compile


def choose_compiler(compile, evaluations=None):
    """
    The compiler that ``compile`` means: ``"inductor"`` or ``"torchscript"``.

    ``"auto"`` is Inductor when at least :data:`BREAK_EVEN_EVALUATIONS` evaluations are known
    to come, i.e. when ``evaluations * saving per call >= cold compile time``. Decided from
    settings only, so that every rank agrees.

    :param str compile: ``"auto"``, ``"inductor"`` or ``"torchscript"``.
    :param int evaluations: a lower bound of the gradient evaluations of the graph (None:
        unknown, which means TorchScript under ``"auto"``).
    """
    check_compiler(compile)
    if compile != "auto":
        return compile
    if evaluations is not None and evaluations >= BREAK_EVEN_EVALUATIONS:
        return "inductor"
    return "torchscript"


def inductor_compile(gm, *example):
    """
    ``gm`` compiled by Inductor for the exact shapes of ``example`` (``dynamic=False``: one
    compilation per shape, so no shape guard can pick another kernel later), compiled now by
    one call, inside the set-up, rather than at the first leapfrog step. Raises whatever
    ``torch.compile`` raises (no C++ compiler, an unsupported operation).
    """
    compiled = torch.compile(gm, backend="inductor", fullgraph=True, dynamic=False)
    with torch.no_grad():
        compiled(*example)
    return compiled
