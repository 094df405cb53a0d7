"""Our own float32 matrix product for compiled graphs on AVX-512 CPUs whose BLAS runs AVX2.

Inductor leaves a graph's matrix products to ATen, i.e. to MKL on x86. On AMD CPUs MKL takes
its AVX2 code path even where the CPU has AVX-512 (``MKL_VERBOSE`` reports "Intel(R)
Architecture processors"; ``MKL_ENABLE_INSTRUCTIONS=AVX512`` changes nothing), which on a core
with full-width AVX-512 units (AMD Zen 5) is half its arithmetic rate. Measured on the 2-core
AMD EPYC of ``benchmarks/README.md`` (one thread, best of 5 x 2000 calls): the seed BNN's
500 x 64 x 64 product took 47.6 us in MKL, 19.4 us here (XLA: ~23 us); its transposed forms in
the gradient 48.1 -> 20.1 us (A transposed) and 46.0 -> 23.1 us (B transposed). Inductor's own
C++ GEMM template does not help: GCC keeps its accumulators in memory when the reduction
length is not a compile-time constant (57 us per product).

:func:`substitute` rewrites a captured aten graph's ``aten.mm`` and ``aten.bmm`` nodes (the
latter in vmapped graphs of several replicas) into ``pyro_pt_native::mm`` and ``bmm``, custom
operators written below and built once per machine by Inductor's own C++ cache; Inductor's
C++ wrapper calls them through the dispatcher with no Python in between. They are used where
:func:`choice` allows it: an AMD CPU with AVX-512 (as ATen itself detects it; Intel's take
MKL's AVX-512 path), decided from the machine alone like Inductor's own choice
of vector instructions, never from timings (every rank of a homogeneous cluster takes the
same path). Only float32 products on the CPU with at least 16 output columns and enough
arithmetic to matter are rewritten; the operators fall back to ``at::mm`` / ``at::bmm`` for
anything else they are handed.

The kernel: C is computed in tiles of up to 6 rows by 64 columns held in 24 AVX-512
registers; each step of the reduction broadcasts one entry of A per row (any strides) and loads
one row of B (unit stride; B is copied contiguous first otherwise), the last 16-column vector
masked. Each entry of C is one sequential fused multiply-add chain over k, so it differs from
MKL's by rounding only (relative 1e-7 to 1e-6 in float32); every compiled graph is still
checked against the traced model at set-up (:mod:`pyro_pt.potential.compiled`).
"""

import functools
import os

import torch

_SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>
#include <algorithm>
#include <cstdint>

namespace {

// C's tile of R rows by V vectors of 16 columns, the last vector's columns selected by `last`.
// A's entry (r, k) is a[r * sa0 + k * sa1]; B's rows have unit stride and are ldb apart.
template <int R, int V>
__attribute__((target("avx512f"))) void tile(const float* a, int64_t sa0, int64_t sa1,
    const float* b, int64_t ldb, float* c, int64_t ldc, int64_t K, __mmask16 last) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* row = b + k * ldb;
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V - 1; ++v) bv[v] = _mm512_loadu_ps(row + 16 * v);
    bv[V - 1] = _mm512_maskz_loadu_ps(last, row + 16 * (V - 1));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(a[r * sa0 + k * sa1]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V - 1; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
    _mm512_mask_storeu_ps(c + r * ldc + 16 * (V - 1), last, acc[r][V - 1]);
  }
}

template <int V>
void rows(int R, const float* a, int64_t sa0, int64_t sa1, const float* b, int64_t ldb,
          float* c, int64_t ldc, int64_t K, __mmask16 last) {
  switch (R) {
    case 6: return tile<6, V>(a, sa0, sa1, b, ldb, c, ldc, K, last);
    case 5: return tile<5, V>(a, sa0, sa1, b, ldb, c, ldc, K, last);
    case 4: return tile<4, V>(a, sa0, sa1, b, ldb, c, ldc, K, last);
    case 3: return tile<3, V>(a, sa0, sa1, b, ldb, c, ldc, K, last);
    case 2: return tile<2, V>(a, sa0, sa1, b, ldb, c, ldc, K, last);
    default: return tile<1, V>(a, sa0, sa1, b, ldb, c, ldc, K, last);
  }
}

constexpr int64_t kRows = 6;

// Rows [i, i + R) of one product C = A @ B (M x K times K x N), in 64-column blocks.
void block(const float* pa, int64_t sa0, int64_t sa1, const float* pb, int64_t ldb, float* pc,
           int64_t i, int64_t M, int64_t K, int64_t N) {
  const int R = static_cast<int>(std::min<int64_t>(kRows, M - i));
  for (int64_t n = 0; n < N; n += 64) {
    const int64_t width = std::min<int64_t>(64, N - n);
    const int V = static_cast<int>((width + 15) / 16);
    const int rest = static_cast<int>(width - 16 * (V - 1));
    const __mmask16 last = static_cast<__mmask16>((1u << rest) - 1u);
    const float* ta = pa + i * sa0;
    float* tc = pc + i * N + n;
    switch (V) {
      case 4: rows<4>(R, ta, sa0, sa1, pb + n, ldb, tc, N, K, last); break;
      case 3: rows<3>(R, ta, sa0, sa1, pb + n, ldb, tc, N, K, last); break;
      case 2: rows<2>(R, ta, sa0, sa1, pb + n, ldb, tc, N, K, last); break;
      default: rows<1>(R, ta, sa0, sa1, pb + n, ldb, tc, N, K, last); break;
    }
  }
}

bool supported(const at::Tensor& a, const at::Tensor& b, int64_t dim) {
  return a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat && a.dim() == dim &&
         b.dim() == dim && a.device().is_cpu() && b.device().is_cpu() &&
         a.size(dim - 1) == b.size(dim - 2) && (dim == 2 || a.size(0) == b.size(0)) &&
         __builtin_cpu_supports("avx512f");
}

// C[j] = A[j] @ B[j] for j < batch; a 2-D product is a batch of one (batch strides unused).
at::Tensor product(const at::Tensor& a, const at::Tensor& b_in, bool batched) {
  const int64_t d = batched ? 1 : 0;
  const int64_t batch = batched ? a.size(0) : 1;
  const int64_t M = a.size(d), K = a.size(d + 1), N = b_in.size(d + 1);
  // B's rows must have unit stride for the vector loads; a copy of B is cheap beside C
  at::Tensor b = (b_in.stride(d + 1) == 1 || N == 1) ? b_in : b_in.contiguous();
  at::Tensor c = batched ? at::empty({batch, M, N}, a.options()) : at::empty({M, N}, a.options());
  if (batch == 0 || M == 0 || N == 0) return c;
  if (K == 0) return c.zero_();
  const float* pa = a.const_data_ptr<float>();
  const float* pb = b.const_data_ptr<float>();
  float* pc = c.mutable_data_ptr<float>();
  const int64_t sa0 = a.stride(d), sa1 = a.stride(d + 1), ldb = b.stride(d);
  const int64_t saj = batched ? a.stride(0) : 0, sbj = batched ? b.stride(0) : 0;
  const int64_t blocks = (M + kRows - 1) / kRows;
  // threads only for work worth ~64k multiply-adds each, as ATen's own grain sizes go
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (kRows * N * K));
  at::parallel_for(0, batch * blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t j = task / blocks, i = (task % blocks) * kRows;
      block(pa + j * saj, sa0, sa1, pb + j * sbj, ldb, pc + j * M * N, i, M, K, N);
    }
  });
  return c;
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  return supported(a, b, 2) ? product(a, b, false) : at::mm(a, b);
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  return supported(a, b, 3) ? product(a, b, true) : at::bmm(a, b);
}

}  // namespace

TORCH_LIBRARY(pyro_pt_native, m) {
  m.def("mm(Tensor a, Tensor b) -> Tensor");
  m.def("bmm(Tensor a, Tensor b) -> Tensor");
}
TORCH_LIBRARY_IMPL(pyro_pt_native, CPU, m) {
  m.impl("mm", &mm);
  m.impl("bmm", &bmm);
}
"""

# Products with fewer output columns, or less arithmetic, are left to ATen: below 16 columns a
# vector is mostly masked (a 500 x 64 x 1 product: 8.1 us here, 3.1 us in MKL), and a small
# product's dispatcher call costs more than it saves.
MIN_COLUMNS = 16
MIN_MULTIPLY_ADDS = 1 << 15
SETTING = "PYRO_PT_MATMUL"  # "auto" (default), "native" or "aten"
# CPUs on which MKL runs its AVX2 code although they have AVX-512 (MKL checks for Intel's)
MKL_AVX2_VENDORS = ("AuthenticAMD", "HygonGenuine")

_operator = []  # [the operator, or None where it cannot be built]


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
    """``torch.ops.pyro_pt_native`` (its ``mm`` and ``bmm``), built and loaded on first use;
    None where it cannot be."""
    if not _operator:
        try:
            from torch._inductor.codecache import CppCodeCache

            CppCodeCache.load(_SOURCE)  # loading the library registers the operators
            ops = torch.ops.pyro_pt_native

            @torch.library.register_fake("pyro_pt_native::mm")
            def _mm_shape(a, b):
                return a.new_empty((a.shape[0], b.shape[1]))

            @torch.library.register_fake("pyro_pt_native::bmm")
            def _bmm_shape(a, b):
                return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))

            _operator.append(ops)
        except Exception:  # no compiler, another torch's headers
            _operator.append(None)
    return _operator[0]


def substitute(gm):
    """Rewrite ``gm``'s float32 CPU ``aten.mm``, ``aten.addmm`` (``nn.Linear``'s product, as
    the native product plus the bias) and ``aten.bmm`` nodes whose products have at least
    :data:`MIN_COLUMNS` columns and :data:`MIN_MULTIPLY_ADDS` multiply-adds (each, in a
    batch) into the native ones, in place, where :func:`choice` allows it. Returns
    ``(rewritten, products)``: how many nodes were rewritten, of how many."""
    aten = torch.ops.aten
    native = {aten.mm.default: "mm", aten.addmm.default: "mm", aten.bmm.default: "bmm"}
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
