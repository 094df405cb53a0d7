// The native float32 matrix products of pyro_pt.potential.matmul (see its docstring): built at
// run time by Inductor's C++ cache, which loads the library and so registers the operators.
// No ATen or torch C++ headers: only the C shims (aoti_torch_*, torch_*) and the stable ABI's
// header-only library registration: Inductor's C++ cache builds this in ~3 s, against
// 11.5-15.6 s with <ATen/ATen.h>, <torch/library.h> and aoti_torch/utils.h.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <immintrin.h>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

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

#define PYRO_PT_CHECK(call)                          \
  do {                                               \
    const AOTITorchError pyro_pt_error = (call);     \
    if (pyro_pt_error != AOTI_TORCH_SUCCESS) return pyro_pt_error; \
  } while (0)

// A tensor handle the function owns, deleted when it goes out of scope.
struct Owned {
  AtenTensorHandle handle = nullptr;
  ~Owned() {
    if (handle) aoti_torch_delete_tensor_object(handle);
  }
  AtenTensorHandle release() {
    AtenTensorHandle h = handle;
    handle = nullptr;
    return h;
  }
};

// ATen's operator `name` (aten::mm or aten::bmm) through the dispatcher, for what the kernel
// does not take; a and b are borrowed, *ret a new reference.
AOTITorchError aten_product(const char* name, AtenTensorHandle a, AtenTensorHandle b,
                            AtenTensorHandle* ret) {
  Owned ha, hb;
  PYRO_PT_CHECK(aoti_torch_new_tensor_handle(a, &ha.handle));
  PYRO_PT_CHECK(aoti_torch_new_tensor_handle(b, &hb.handle));
  // the dispatcher takes over the stack's references and leaves the result's in stack[0]
  std::array<StableIValue, 2> stack{reinterpret_cast<StableIValue>(ha.release()),
                                    reinterpret_cast<StableIValue>(hb.release())};
  PYRO_PT_CHECK(torch_call_dispatcher(name, "", stack.data(), TORCH_ABI_VERSION));
  *ret = reinterpret_cast<AtenTensorHandle>(stack[0]);
  return AOTI_TORCH_SUCCESS;
}

struct Product {
  const float* pa;
  const float* pb;
  float* pc;
  int64_t sa0, sa1, ldb, saj, sbj, blocks, M, K, N;
};

void run_tasks(int64_t begin, int64_t end, void* context) {
  const Product& p = *static_cast<const Product*>(context);
  for (int64_t task = begin; task < end; ++task) {
    const int64_t j = task / p.blocks, i = (task % p.blocks) * kRows;
    block(p.pa + j * p.saj, p.sa0, p.sa1, p.pb + j * p.sbj, p.ldb, p.pc + j * p.M * p.N, i,
          p.M, p.K, p.N);
  }
}

// C[j] = A[j] @ B[j] for j < batch (dim 3), or C = A @ B (dim 2): the kernel for float32 CPU
// operands of matching shapes, ATen's mm / bmm for anything else. *ret is a new reference.
AOTITorchError product(AtenTensorHandle a, AtenTensorHandle b_in, int64_t dim,
                       AtenTensorHandle* ret) {
  const char* aten = dim == 2 ? "aten::mm" : "aten::bmm";
  int32_t dtype_a, dtype_b, device_a, device_b;
  int64_t dim_a, dim_b;
  PYRO_PT_CHECK(aoti_torch_get_dtype(a, &dtype_a));
  PYRO_PT_CHECK(aoti_torch_get_dtype(b_in, &dtype_b));
  PYRO_PT_CHECK(aoti_torch_get_device_type(a, &device_a));
  PYRO_PT_CHECK(aoti_torch_get_device_type(b_in, &device_b));
  PYRO_PT_CHECK(aoti_torch_get_dim(a, &dim_a));
  PYRO_PT_CHECK(aoti_torch_get_dim(b_in, &dim_b));
  const int32_t f32 = aoti_torch_dtype_float32(), cpu = aoti_torch_device_type_cpu();
  if (dtype_a != f32 || dtype_b != f32 || device_a != cpu || device_b != cpu || dim_a != dim ||
      dim_b != dim || !__builtin_cpu_supports("avx512f"))
    return aten_product(aten, a, b_in, ret);
  int64_t *size_a, *size_b, *stride_a, *stride_b;
  PYRO_PT_CHECK(aoti_torch_get_sizes(a, &size_a));
  PYRO_PT_CHECK(aoti_torch_get_sizes(b_in, &size_b));
  PYRO_PT_CHECK(aoti_torch_get_strides(a, &stride_a));
  PYRO_PT_CHECK(aoti_torch_get_strides(b_in, &stride_b));
  const int64_t d = dim - 2;
  if (size_a[d + 1] != size_b[d] || (dim == 3 && size_a[0] != size_b[0]))
    return aten_product(aten, a, b_in, ret);  // ATen's error message
  const int64_t batch = dim == 3 ? size_a[0] : 1;
  const int64_t M = size_a[d], K = size_a[d + 1], N = size_b[d + 1];
  const int32_t device_index = 0;
  // B's rows must have unit stride for the vector loads; a copy of B is cheap beside C
  Owned copy;
  AtenTensorHandle b = b_in;
  if (!(stride_b[d + 1] == 1 || N == 1)) {
    const int64_t strides[3] = {K * N, N, 1};
    PYRO_PT_CHECK(aoti_torch_empty_strided(dim, size_b, strides + (3 - dim), f32, cpu,
                                           device_index, &copy.handle));
    PYRO_PT_CHECK(aoti_torch_copy_(copy.handle, b_in, 0));
    b = copy.handle;
    PYRO_PT_CHECK(aoti_torch_get_strides(b, &stride_b));
  }
  Owned c;
  const int64_t sizes_c[3] = {batch, M, N}, strides_c[3] = {M * N, N, 1};
  PYRO_PT_CHECK(aoti_torch_empty_strided(dim, sizes_c + (3 - dim), strides_c + (3 - dim), f32,
                                         cpu, device_index, &c.handle));
  if (batch > 0 && M > 0 && N > 0) {
    if (K == 0) {
      PYRO_PT_CHECK(aoti_torch_zero_(c.handle));
    } else {
      void *pa, *pb, *pc;
      PYRO_PT_CHECK(aoti_torch_get_data_ptr(a, &pa));
      PYRO_PT_CHECK(aoti_torch_get_data_ptr(b, &pb));
      PYRO_PT_CHECK(aoti_torch_get_data_ptr(c.handle, &pc));
      Product p{static_cast<const float*>(pa), static_cast<const float*>(pb),
                static_cast<float*>(pc), stride_a[d], stride_a[d + 1], stride_b[d],
                dim == 3 ? stride_a[0] : 0, dim == 3 ? stride_b[0] : 0,
                (M + kRows - 1) / kRows, M, K, N};
      // threads only for work worth ~64k multiply-adds each, as ATen's own grain sizes go;
      // torch_parallel_for is at::parallel_for (ATen's thread pool and thread count)
      const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (kRows * N * K));
      PYRO_PT_CHECK(torch_parallel_for(0, batch * p.blocks, grain, &run_tasks, &p));
    }
  }
  *ret = c.release();
  return AOTI_TORCH_SUCCESS;
}

torch::stable::Tensor call(const torch::stable::Tensor& a, const torch::stable::Tensor& b,
                           int64_t dim) {
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(product(a.get(), b.get(), dim, &out));
  return torch::stable::Tensor(out);
}

torch::stable::Tensor native_mm(torch::stable::Tensor a, torch::stable::Tensor b) {
  return call(a, b, 2);
}

torch::stable::Tensor native_bmm(torch::stable::Tensor a, torch::stable::Tensor b) {
  return call(a, b, 3);
}

}  // namespace

STABLE_TORCH_LIBRARY(pyro_pt, m) {
  m.def("native_mm(Tensor a, Tensor b) -> Tensor");
  m.def("native_bmm(Tensor a, Tensor b) -> Tensor");
}
STABLE_TORCH_LIBRARY_IMPL(pyro_pt, CPU, m) {
  m.impl("native_mm", TORCH_BOX(&native_mm));
  m.impl("native_bmm", TORCH_BOX(&native_bmm));
}

// C shims in Inductor's convention (aoti_torch_<device>_<op name>: input handles, then the
// output's): the generated C++ calls these directly instead of going through the dispatcher
// (aoti_torch_call_dispatcher, ~4.6 us more a call), see shims() in matmul.py.
extern "C" AOTITorchError aoti_torch_cpu_native_mm(AtenTensorHandle a, AtenTensorHandle b,
                                                   AtenTensorHandle* ret0) {
  return product(a, b, 2, ret0);
}

extern "C" AOTITorchError aoti_torch_cpu_native_bmm(AtenTensorHandle a, AtenTensorHandle b,
                                                    AtenTensorHandle* ret0) {
  return product(a, b, 3, ret0);
}
