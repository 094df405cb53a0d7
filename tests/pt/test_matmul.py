"""The native float32 matrix product (pyro_pt.potential.matmul) against float64 references: the
operators, their gradients, threads and fallbacks, the machine rule and the C shims. Its
substitution into captured and compiled graphs is in test_matmul_rewrite."""

import math

import pytest
import torch

from pyro_pt.potential import matmul

avx512 = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512" or matmul.operator() is None,
    reason="the native product needs AVX-512 and a C++ compiler")


def _operand(shape, transposed, generator):
    """A float32 matrix of ``shape``, stored transposed (a strided view) if asked."""
    if transposed:
        return torch.randn(shape[::-1], generator=generator).t()
    return torch.randn(shape, generator=generator)


# (M, K, N): whole tiles, the seed BNN's shapes, row tails (M % 6), column tails (N % 16),
# more than one 64-column block, K = 1
SHAPES = [(6, 8, 64), (500, 64, 64), (64, 500, 64), (10, 500, 64), (7, 19, 17),
          (13, 3, 130), (1, 33, 16), (500, 1, 48)]


@avx512
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_native_product_matches_a_float64_reference(shape, layout):
    m, k, n = shape
    generator = torch.Generator().manual_seed(m * 1000 + k * 10 + n)
    a = _operand((m, k), layout[0] == "t", generator)
    b = _operand((k, n), layout[1] == "t", generator)
    out = torch.ops.pyro_pt.native_mm(a, b)
    reference = a.double() @ b.double()
    assert out.shape == (m, n) and out.dtype == torch.float32 and out.is_contiguous()
    # one float32 rounding per multiply-add: a wrong tile, mask or stride is off by O(1)
    error = (out.double() - reference).abs().max() / reference.abs().max()
    assert error < 2e-6 * math.sqrt(k)
    # the layout of the operands changes the addresses only, not the numbers
    assert torch.equal(out, torch.ops.pyro_pt.native_mm(a.contiguous(), b.contiguous()))


@avx512
@pytest.mark.parametrize("expanded", ["", "a", "b"])
def test_native_batched_product_matches_a_float64_reference(expanded):
    generator = torch.Generator().manual_seed(len(expanded))
    m, k, n, batch = 23, 40, 50, 3
    a = torch.randn(1 if expanded == "a" else batch, m, k, generator=generator)
    b = torch.randn(1 if expanded == "b" else batch, n, k, generator=generator).transpose(1, 2)
    # a batch of one operand shared by every product (stride 0), as vmap passes the data
    a, b = a.expand(batch, m, k), b.expand(batch, k, n)
    out = torch.ops.pyro_pt.native_bmm(a, b)
    reference = a.double() @ b.double()
    assert out.shape == (batch, m, n) and out.is_contiguous()
    assert float((out.double() - reference).abs().max() / reference.abs().max()) < 2e-5
    for j in range(batch):
        assert torch.equal(out[j], torch.ops.pyro_pt.native_mm(a[j], b[j]))


@avx512
def test_nan_and_inf_stay_in_their_rows_and_columns():
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(20, 32, generator=generator), torch.randn(32, 40, generator=generator)
    a[3, 5] = math.nan
    b[7, 33] = math.inf
    out = torch.ops.pyro_pt.native_mm(a, b)
    bad = torch.zeros(20, 40, dtype=torch.bool)
    bad[3, :] = True
    bad[:, 33] = True
    assert torch.isfinite(out[~bad]).all() and not torch.isfinite(out[bad]).any()
    clean = torch.ops.pyro_pt.native_mm(a.nan_to_num(0.0), b.clamp(max=1e3))
    torch.testing.assert_close(out[~bad], clean[~bad], rtol=0, atol=0)


@avx512
def test_other_dtypes_and_empty_products_fall_back_to_aten():
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(9, 5, generator=generator, dtype=torch.float64), \
        torch.randn(5, 20, generator=generator, dtype=torch.float64)
    assert torch.equal(torch.ops.pyro_pt.native_mm(a, b), torch.mm(a, b))
    assert torch.equal(torch.ops.pyro_pt.native_mm(torch.ones(4, 0), torch.ones(0, 16)),
                       torch.zeros(4, 16))
    assert torch.ops.pyro_pt.native_mm(torch.ones(0, 3), torch.ones(3, 16)).shape == (0, 16)
    assert torch.equal(torch.ops.pyro_pt.native_bmm(a[None], b[None]), torch.bmm(a[None], b[None]))
    assert torch.ops.pyro_pt.native_bmm(torch.ones(0, 2, 3), torch.ones(0, 3, 16)).shape == \
        (0, 2, 16)


@avx512
def test_unsupported_shapes_raise_atens_errors():
    # what the kernel does not take goes to aten::mm / aten::bmm, errors included, which
    # cross the C shims as error codes and come back as RuntimeError
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.ops.pyro_pt.native_mm(torch.ones(3, 4), torch.ones(5, 16))
    with pytest.raises(RuntimeError, match="3D"):
        torch.ops.pyro_pt.native_bmm(torch.ones(3, 4), torch.ones(4, 16))
    with pytest.raises(RuntimeError):
        torch.ops.pyro_pt.native_bmm(torch.ones(2, 3, 4), torch.ones(3, 4, 16))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.ops.pyro_pt.native_mm(torch.ones(3, 4), torch.ones(4, 16, dtype=torch.float64))


@avx512
def test_threads_split_the_rows_not_the_numbers():
    generator = torch.Generator().manual_seed(2)
    a = torch.randn(4, 300, 64, generator=generator)
    b = torch.randn(4, 64, 80, generator=generator)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.pyro_pt.native_bmm(a, b)
        torch.set_num_threads(2)
        two = torch.ops.pyro_pt.native_bmm(a, b)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one, two)


def test_the_native_source_includes_no_aten_headers():
    # <ATen/ATen.h>, <torch/library.h> and aoti_torch/utils.h made the cold build 28.5 s;
    # the C shims and the stable ABI's headers build in seconds
    with open(matmul._SOURCE_FILE) as source:
        includes = [line.split()[1] for line in source if line.startswith("#include")]
    assert includes and not [name for name in includes if "ATen" in name or
                             name in ("<torch/library.h>", "<torch/extension.h>") or
                             "aoti_torch/utils.h" in name], includes


@avx512
def test_the_machine_rule(monkeypatch):
    monkeypatch.setenv(matmul.SETTING, "auto")
    monkeypatch.setattr(matmul, "_cpu_vendor", lambda: "GenuineIntel")
    native, reason = matmul.choice()
    assert not native and "GenuineIntel" in reason and "PYRO_PT_MATMUL=native" in reason
    monkeypatch.setattr(matmul, "_cpu_vendor", lambda: None)  # no /proc/cpuinfo
    assert not matmul.choice()[0]
    monkeypatch.setenv(matmul.SETTING, "native")  # the override
    assert matmul.choice() == (True, "")
    monkeypatch.setattr(matmul, "_cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setenv(matmul.SETTING, "auto")
    assert matmul.choice() == (True, "")


@avx512
def test_the_native_products_have_gradients():
    generator = torch.Generator().manual_seed(10)
    a = torch.randn(2, 30, 20, generator=generator, requires_grad=True)
    b = torch.randn(2, 20, 40, generator=generator, requires_grad=True)
    weights = torch.randn(2, 30, 40, generator=generator)
    (torch.ops.pyro_pt.native_bmm(a, b) * weights).sum().backward()
    expected = torch.autograd.grad((torch.bmm(a, b) * weights).sum(), (a, b))
    for grad, reference in zip((a.grad, b.grad), expected):
        torch.testing.assert_close(grad, reference)
    a2, b2 = a[0].detach().requires_grad_(), b[0].detach().requires_grad_()
    (torch.ops.pyro_pt.native_mm(a2, b2) * weights[0]).sum().backward()
    torch.testing.assert_close(b2.grad, a2.detach().t() @ weights[0])


@avx512
def test_the_c_shims_are_global_and_their_config_pickles_by_name():
    import ctypes
    import pickle

    shims = matmul.shims()
    assert set(shims) == {torch.ops.pyro_pt.native_mm.default,
                          torch.ops.pyro_pt.native_bmm.default}
    # the generated code links to these at load time
    process = ctypes.CDLL(None)
    assert process.aoti_torch_cpu_native_mm and process.aoti_torch_cpu_native_bmm
    # Inductor's graph cache pickles its options into the key: an operator would not pickle
    # (the cache bypassed, every process compiling anew)
    assert pickle.loads(pickle.dumps(shims)) == {
        "pyro_pt.native_mm.default": shims[torch.ops.pyro_pt.native_mm.default],
        "pyro_pt.native_bmm.default": shims[torch.ops.pyro_pt.native_bmm.default]}
