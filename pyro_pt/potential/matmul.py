"""Our own float32 matrix product for compiled graphs on AVX-512 CPUs whose BLAS runs AVX2.

On AMD CPUs MKL takes its AVX2 code path even where the CPU has AVX-512 (docs/performance.md,
"Matrix products at the CPU's full width"), half the arithmetic rate of a core with
full-width AVX-512 units (Zen 5). On the 2-core AMD EPYC of ``benchmarks/README.md`` (one
thread, best of 5 x 2000 calls) the seed BNN's 500 x 64 x 64 product took 47.6 us in MKL, 19.4
us here (XLA: ~23 us); its transposed forms in the gradient 48.1 -> 20.1 us (A transposed) and
46.0 -> 23.1 us (B transposed). Inductor's own C++ GEMM template does not help: GCC keeps its
accumulators in memory when the reduction length is not a compile-time constant (57 us).

:func:`substitute` rewrites a captured graph's ``aten.mm``, ``aten.addmm`` and ``aten.bmm``
(vmapped graphs) into ``pyro_pt::native_mm`` / ``native_bmm`` (``matmul.cpp``, built once per
machine by Inductor's C++ cache), which the C++ wrapper calls through their C shims
(:func:`shims`), with no dispatcher or Python in between, where :func:`choice` allows it: an
AMD CPU with AVX-512, decided from the machine alone, never from timings (every rank of a
homogeneous cluster takes the same path). The operators fall back to ``at::mm`` / ``at::bmm``
for anything else they are handed. Each entry of C is one sequential fused multiply-add chain
over k (tiles of 6 rows x 64 columns in 24 registers), so it differs from MKL's by rounding
only (relative 1e-7 to 1e-6 in float32); every compiled graph is still checked against the
traced model.

``matmul.cpp`` includes no ATen or torch C++ headers, only ``<immintrin.h>``, the C shim API
(``aoti_torch_*``, ``torch_call_dispatcher``, ``torch_parallel_for``: ATen's threads and grain
rule) and the stable ABI's operator registration. With ``<ATen/ATen.h>``,
``<torch/library.h>`` and ``aoti_torch/utils.h`` the cold build took 11.5-15.6 s on the
machine above; without them 2.8-3.4 s. The first :func:`operator` call on a machine (5.1 s
idle, ``benchmarks/compile_cost.py``'s "native matmul" line) also holds ~2 s of importing
Inductor. It builds trusting the CPU's report of its vector instructions
(:func:`~pyro_pt.potential.torch_compat.trusting_the_cpu`; Inductor's own check adds 8-11 s).

Measured gain, end to end (``benchmarks/ablation.py``: whole PT runs, one thread, ranges over
interleaved rounds): without it (``PYRO_PT_MATMUL=aten``) the seed BNN's sampling phase (K =
8, HMC under Inductor) takes 1.84-1.97x as long. The small models of that table have no
product large enough and do not use it.
"""

import ctypes
import functools
import os

import torch

from . import torch_compat

# the operators' C++, beside this file (package data)
_SOURCE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matmul.cpp")

# Products with fewer output columns, or less arithmetic, are left to ATen: below 16 columns a
# vector is mostly masked (a 500 x 64 x 1 product: 8.1 us here, 3.1 us in MKL), and a small
# product's call costs more than it saves.
MIN_COLUMNS = 16
MIN_MULTIPLY_ADDS = 1 << 15
SETTING = "PYRO_PT_MATMUL"  # "auto" (default), "native" or "aten"
# CPUs on which MKL runs its AVX2 code although they have AVX-512 (MKL checks for Intel's)
MKL_AVX2_VENDORS = ("AuthenticAMD", "HygonGenuine")

_operator = []  # [the operators, or None where they cannot be built]
_shims = []  # [True] where this module loaded the library, its C shims global


def choice():
    """``(native, reason)``: whether compiled graphs use the native product on this machine,
    and why not where they do not. ``PYRO_PT_MATMUL=native`` or ``aten`` overrides the
    machine rule (``native`` still needs AVX-512 and a compiler). The rule: AVX-512 and an
    AMD (or Hygon) CPU, read from ``/proc/cpuinfo``; elsewhere MKL keeps the products."""
    setting = os.environ.get(SETTING, "auto")
    if setting not in ("auto", "native", "aten"):
        raise ValueError(f"{SETTING} must be 'auto', 'native' or 'aten', got {setting!r}")
    if setting == "aten":
        return False, f"{SETTING}=aten"
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False, "the CPU has no AVX-512 (as ATen detects it)"
    if setting == "auto" and _cpu_vendor() not in MKL_AVX2_VENDORS:
        return False, (f"a {_cpu_vendor() or 'CPU of unknown vendor'} CPU, where MKL is not "
                       f"known to skip AVX-512 (PYRO_PT_MATMUL=native to try the native one)")
    missing = torch_compat.lookup("CppCodeCache")[1]
    if missing:
        return False, missing
    if operator() is None:
        return False, "the native product could not be built (no C++ compiler?)"
    return True, ""


@functools.lru_cache(maxsize=1)
def _cpu_vendor():
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def operator():
    """``torch.ops.pyro_pt`` (its ``native_mm`` and ``native_bmm``), built and loaded on
    first use; None where it cannot be."""
    if not _operator:
        try:
            if not _registered():
                # a second library registering the namespace would abort the process (a
                # static initializer's exception): another copy of this module may have
                # loaded it already, and then its C shims stay unused
                cache = torch_compat.lookup("CppCodeCache")[0]
                with open(_SOURCE_FILE) as source, torch_compat.trusting_the_cpu():
                    library = cache.load(source.read())  # registers the operators
                # the C shims' symbols made global, for the generated code to link to
                ctypes.CDLL(library._name, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
                _shims.append(True)
            _register_python_parts()
            _operator.append(torch.ops.pyro_pt)
        except Exception:  # no compiler, another torch's headers, no CppCodeCache (None)
            _operator.append(None)
    return _operator[0]


def shims():
    """Inductor's ``aot_inductor.custom_ops_to_c_shims`` for the native products: the
    generated C++ then calls their C functions directly, not through the dispatcher
    (``aoti_torch_call_dispatcher``: ~4 us a call, five calls a leapfrog step on the seed
    BNN); ``{}`` where they are not loaded here or Inductor lacks the option."""
    if torch_compat.lookup("custom_ops_to_c_shims")[1] or operator() is None or not _shims:
        return {}
    return _Shims({getattr(torch.ops.pyro_pt, name).default: [
        f"AOTITorchError aoti_torch_cpu_{name}(AtenTensorHandle a, AtenTensorHandle b, "
        f"AtenTensorHandle* ret0)"] for name in ("native_mm", "native_bmm")})


class _Shims(dict):
    """The shims' dict, pickled with the operators' names: Inductor's graph cache pickles its
    options into the key, and an operator does not pickle (the cache would be bypassed, every
    process compiling anew)."""

    def __reduce__(self):
        return dict, ({str(op): declarations for op, declarations in self.items()},)


def _registered():
    try:
        torch.ops.pyro_pt.native_mm.default
    except (AttributeError, RuntimeError):
        return False
    return True


def _register_python_parts():
    """Shapes for Inductor's fake tensors, and gradients (the compiled graphs never ask for
    them; a direct call with inputs that require gradients must not get wrong ones). Once
    per process: :func:`operator` keeps what it made."""
    @torch.library.register_fake("pyro_pt::native_mm")
    def _mm_shape(a, b):
        return a.new_empty((a.shape[0], b.shape[1]))

    @torch.library.register_fake("pyro_pt::native_bmm")
    def _bmm_shape(a, b):
        return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))

    def keep(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.transpose(-1, -2), a.transpose(-1, -2) @ grad

    for name in ("native_mm", "native_bmm"):
        torch.library.register_autograd(f"pyro_pt::{name}", backward,
                                        setup_context=keep)


def substitute(gm):
    """Rewrite ``gm``'s float32 CPU ``aten.mm``, ``aten.addmm`` (``nn.Linear``'s product, as
    the native product plus the bias) and ``aten.bmm`` nodes whose products have at least
    :data:`MIN_COLUMNS` columns and :data:`MIN_MULTIPLY_ADDS` multiply-adds (each, in a
    batch) into the native ones, in place, where :func:`choice` allows it. Returns
    ``(rewritten, products)``: how many nodes were rewritten, of how many."""
    aten = torch.ops.aten
    native = {aten.mm.default: "native_mm", aten.addmm.default: "native_mm",
              aten.bmm.default: "native_bmm"}
    products = [node for node in gm.graph.nodes
                if node.op == "call_function" and node.target in native]
    if not products or not choice()[0]:
        return 0, len(products)
    rewritten = 0
    for node in products:
        operands = node.args[1:] if node.target is aten.addmm.default else node.args
        a, b = (_value(gm, arg) for arg in operands)
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or \
                any(node.kwargs.get(scale, 1) != 1 for scale in ("alpha", "beta")):
            continue
        (m, k), n = a.shape[-2:], b.shape[-1]
        if not (a.dtype == b.dtype == torch.float32 and a.device.type == b.device.type == "cpu"
                and n >= MIN_COLUMNS and m * n * k >= MIN_MULTIPLY_ADDS):
            continue
        op = getattr(operator(), native[node.target]).default
        if node.target is aten.addmm.default:
            with gm.graph.inserting_before(node):
                product = gm.graph.call_function(op, tuple(operands))
                total = gm.graph.call_function(aten.add.Tensor, (product, node.args[0]))
            # addmm's value is (m, n) like the product's: a later product that reads it must
            # still see its shape to be rewritten
            product.meta["val"] = node.meta.get("val")
            total.meta.update(node.meta)
            node.replace_all_uses_with(total)
            gm.graph.erase_node(node)
        else:
            node.target = op
        rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten, len(products)


def _value(gm, node):
    """The (fake) tensor a graph node stands for: a constant's own value, else the one make_fx
    recorded; None if neither is known."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "get_attr":
        return getattr(gm, node.target, None)
    return node.meta.get("val")
