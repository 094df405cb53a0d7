"""matmul.substitute: the large float32 products of a captured graph, linear layers' included,
rewritten to the native product, which then runs in an Inductor-compiled graph and in a
ParallelTempering kernel, agreeing with aten."""

import pytest
import torch

from pyro_pt.potential import matmul
from pyro_pt.potential.capture import capture
from pyro_pt.potential.inductor import inductor_compile

from .test_matmul import avx512


def _network_gradient(x):
    """A small ReLU network's summed output and its weight gradients, one function of the
    flat weights: the products of a BNN's forward and backward passes."""
    def fn(z):
        w1, w2 = z[:10 * 64].reshape(10, 64), z[10 * 64:].reshape(64, 64)
        h = torch.relu(x @ w1)
        out = torch.tanh(h @ w2).sum()
        g2 = h.t() @ (1 - torch.tanh(h @ w2) ** 2)
        g1 = x.t() @ ((1 - torch.tanh(h @ w2) ** 2) @ w2.t() * (h > 0))
        return out, g1, g2
    return fn


def _targets(gm):
    """The operators a graph calls, in order."""
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_substitute_takes_the_large_float32_products_only(monkeypatch):
    x = torch.randn(200, 10, generator=torch.Generator().manual_seed(2))
    fn = _network_gradient(x)
    z = 0.3 * torch.randn(10 * 64 + 64 * 64, generator=torch.Generator().manual_seed(3))
    monkeypatch.setenv(matmul.SETTING, "aten")
    assert matmul.substitute(capture(fn, z)) == (0, 7)
    monkeypatch.setenv(matmul.SETTING, "bogus")
    with pytest.raises(ValueError, match="PYRO_PT_MATMUL"):
        matmul.substitute(capture(fn, z))
    monkeypatch.setenv(matmul.SETTING, "auto")
    gm = capture(fn, z)
    native, total = matmul.substitute(gm)
    assert total == 7
    if not matmul.choice()[0]:
        assert native == 0
        return
    # every product here has >= 64 columns and >= 2**15 multiply-adds
    assert native == 7
    assert torch.ops.aten.mm.default not in _targets(gm)
    for value, reference in zip(gm(z), fn(z)):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-4)


@avx512
def test_linear_layers_products_are_rewritten_with_their_bias(monkeypatch):
    monkeypatch.setenv(matmul.SETTING, "native")  # on any AVX-512 CPU, whatever the rule says
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(100, 24, generator=generator)
    weight, bias = torch.randn(40, 24, generator=generator), torch.randn(40, generator=generator)

    def fn(w):
        # nn.Linear's product: addmm(bias, x, w.t()); scaled addmm nodes are left alone
        return (torch.nn.functional.linear(x, w, bias).tanh().sum(),
                torch.addmm(bias, x, w.t(), beta=0.5))

    gm = capture(fn, weight)
    assert _targets(gm).count(torch.ops.aten.addmm.default) == 2
    assert matmul.substitute(gm) == (1, 2)
    after = _targets(gm)
    assert after.count(torch.ops.aten.addmm.default) == 1
    assert torch.ops.pyro_pt.native_mm.default in after
    for value, reference in zip(gm(weight), fn(weight)):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=1e-4)


@avx512
def test_a_product_of_a_rewritten_linear_layer_is_rewritten_too(monkeypatch):
    monkeypatch.setenv(matmul.SETTING, "native")
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(100, 64, generator=generator)
    w, b = torch.randn(64, 64, generator=generator), torch.randn(64, generator=generator)

    def fn(w):  # two stacked layers: the second reads the first's addmm
        return (torch.nn.functional.linear(torch.nn.functional.linear(x, w, b), w, b).sum(),)

    gm = capture(fn, w)
    assert matmul.substitute(gm) == (2, 2)
    torch.testing.assert_close(gm(w)[0], fn(w)[0], rtol=1e-5, atol=1e-2)


def test_a_bad_setting_is_an_error_not_a_silent_fallback(monkeypatch):
    from .test_compiled import linear_split
    from pyro_pt.potential import FunctionalSplit

    monkeypatch.setenv(matmul.SETTING, "mkl")
    with pytest.raises(ValueError, match="PYRO_PT_MATMUL must be 'auto', 'native' or 'aten'"):
        FunctionalSplit(linear_split(torch.float32), compile="inductor")


@avx512
@avx512
def test_a_compiled_graph_runs_the_native_product_and_agrees(monkeypatch):
    monkeypatch.setenv(matmul.SETTING, "native")
    x = torch.randn(200, 10, generator=torch.Generator().manual_seed(4))
    fn = _network_gradient(x)
    z = 0.3 * torch.randn(10 * 64 + 64 * 64, generator=torch.Generator().manual_seed(5))
    compiled = inductor_compile(capture(fn, z), z)
    assert compiled.matmuls == (7, 7)
    reference = [t.double() for t in _network_gradient(x.double())(z.double())]
    for value, ref in zip(compiled(z), reference):
        assert float((value.double() - ref).abs().max() / ref.abs().max()) < 1e-5


def _relu_regression(x, y):
    """A one-hidden-layer ReLU regression whose products are large enough to be rewritten."""
    import pyro
    import pyro.distributions as dist

    w1 = pyro.sample("w1", dist.Normal(0.0, 1.0).expand([x.shape[1], 32]).to_event(2))
    w2 = pyro.sample("w2", dist.Normal(0.0, 1.0).expand([32, 16]).to_event(2))
    w3 = pyro.sample("w3", dist.Normal(0.0, 1.0).expand([16]).to_event(1))
    mean = torch.relu(torch.relu(x @ w1) @ w2) @ w3
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(mean, 0.5), obs=y)


def _kernel_run(monkeypatch, setting, threads):
    from pyro.infer import MCMC

    from pyro_pt import ParallelTempering

    monkeypatch.setenv(matmul.SETTING, setting)
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(300, 8, generator=generator)
    y = torch.sin(x[:, 0]) + 0.1 * torch.randn(300, generator=generator)
    torch.manual_seed(7)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # one thread: replicas looped; more: vmapped (bmm)
    try:
        kernel = ParallelTempering(_relu_regression, num_replicas=2, max_temperature=4.0,
                                   explorer="hmc", explorer_kwargs={"num_steps": 4},
                                   compile="inductor")
        mcmc = MCMC(kernel, num_samples=6, warmup_steps=4, disable_progbar=True)
        mcmc.run(x, y)
    finally:
        torch.set_num_threads(previous)
    return kernel.explorer_info, mcmc.get_samples()["w3"]


@avx512
@pytest.mark.parametrize("threads, batched, leapfrog", [(1, "loop", "fused"),
                                                       (2, "vmap", "batched")])
def test_a_kernel_samples_with_the_native_product(monkeypatch, threads, batched, leapfrog):
    info, draws = _kernel_run(monkeypatch, "native", threads)
    # 300 x 8 x 32, 300 x 32 x 16 and their gradients' products (all have >= 16 columns)
    assert info["potential_matmul"] == "native (5 of 5 products)"
    # the fused leapfrog step's products are rewritten like the potential's: it stays
    # bitwise the unfused step, so the fused path is kept
    assert (info["batched"], info["leapfrog"]) == (batched, leapfrog), info
    reference_info, reference = _kernel_run(monkeypatch, "aten", threads)
    assert reference_info["potential_matmul"] == "aten (PYRO_PT_MATMUL=aten)"
    # the same chain up to rounding: a few HMC transitions amplify a 1e-7 difference a little
    torch.testing.assert_close(draws, reference, rtol=1e-3, atol=1e-4)
