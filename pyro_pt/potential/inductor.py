"""Compiling a captured graph with ``torch.compile`` (Inductor), and the choice of compiler.

The captured graph (:mod:`pyro_pt.potential.capture`) is straight-line aten code with no Pyro
messenger, trace or distribution object left in it, so ``torch.compile(fullgraph=True)`` sees
one graph and no graph break. Two compilers can run it:

- ``"torchscript"``: the TorchScript interpreter (C++, no Python per operation); it costs a
  fraction of a second to build, and is the fallback whenever Inductor is unavailable or fails.
- ``"inductor"``: ``torch.compile``'s Inductor backend, which fuses the elementwise operations
  into generated C++ (CPU) or Triton (CUDA) kernels. It costs a compilation per model, dtype,
  device and batch size: measured on the seed BNN (benchmarks/_bnn.py, 4929 weights) on a
  loaded 2-core CPU, about 100 s cold and 8 s with the on-disk cache warm (see
  ``benchmarks/README.md``, "vs NumPyro").

``compile="auto"`` must never make a short run slower, and every rank must take the same path
(a run's draws may not depend on the number of processes, DESIGN §2), so the choice is made
from settings alone, never from timings: Inductor only where the expected saving repays its
compile time. On CPU the measured saving per potential-and-gradient call is about zero (the
seed BNN: Inductor and TorchScript within the noise of each other, both ~1 ms), so no run
length repays a compilation and ``"auto"`` means TorchScript there. On CUDA it has not been
measured on this project's machines yet, so ``"auto"`` means TorchScript there too; a user
forces Inductor with ``compile="inductor"``.
"""

import torch

COMPILERS = ("auto", "inductor", "torchscript")


def check_compiler(compile):
    """Refuse a ``compile`` setting that is not one of :data:`COMPILERS`."""
    if not isinstance(compile, str) or compile not in COMPILERS:
        raise ValueError(
            f"compile must be 'auto', 'inductor' or 'torchscript' (how the captured graph of "
            f"the model is run), got {compile!r}"
        )
    return compile


def choose_compiler(compile, device):
    """
    The compiler that ``compile`` means on ``device``: ``"inductor"`` or ``"torchscript"``.

    Decided from the setting and the device type only, so that every rank agrees.

    :param str compile: ``"auto"``, ``"inductor"`` or ``"torchscript"``.
    :param device: the device the graph runs on.
    """
    check_compiler(compile)
    if compile != "auto":
        return compile
    # Measured: no saving on CPU; unmeasured on CUDA (see the module docstring).
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
