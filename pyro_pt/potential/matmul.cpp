// The native float32 matrix products of pyro_pt.potential.matmul (see its docstring): built at
// run time by Inductor's C++ cache, which loads the library and so registers the operators.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
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

at::Tensor native_mm(const at::Tensor& a, const at::Tensor& b) {
  return supported(a, b, 2) ? product(a, b, false) : at::mm(a, b);
}

at::Tensor native_bmm(const at::Tensor& a, const at::Tensor& b) {
  return supported(a, b, 3) ? product(a, b, true) : at::bmm(a, b);
}

}  // namespace

TORCH_LIBRARY(pyro_pt, m) {
  m.def("native_mm(Tensor a, Tensor b) -> Tensor");
  m.def("native_bmm(Tensor a, Tensor b) -> Tensor");
}
TORCH_LIBRARY_IMPL(pyro_pt, CPU, m) {
  m.impl("native_mm", &native_mm);
  m.impl("native_bmm", &native_bmm);
}

// C shims in Inductor's convention (aoti_torch_<device>_<op name>: input handles, then the
// output's): the generated C++ calls these directly instead of going through the dispatcher
// (aoti_torch_call_dispatcher, ~4.6 us more a call), see shims() in matmul.py.
extern "C" AOTITorchError aoti_torch_cpu_native_mm(AtenTensorHandle a, AtenTensorHandle b,
                                                   AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    *ret0 = torch::aot_inductor::new_tensor_handle(
        native_mm(*torch::aot_inductor::tensor_handle_to_tensor_pointer(a),
           *torch::aot_inductor::tensor_handle_to_tensor_pointer(b)));
  });
}

extern "C" AOTITorchError aoti_torch_cpu_native_bmm(AtenTensorHandle a, AtenTensorHandle b,
                                                    AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    *ret0 = torch::aot_inductor::new_tensor_handle(
        native_bmm(*torch::aot_inductor::tensor_handle_to_tensor_pointer(a),
            *torch::aot_inductor::tensor_handle_to_tensor_pointer(b)));
  });
}
