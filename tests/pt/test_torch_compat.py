"""Each private torch (and Pyro) API of pyro_pt.potential.torch_compat stubbed away: the run
takes the public path, says why, and still gives the right numbers. None of these compiles
with Inductor: every stub makes the code fall back before it would.
"""

import pyro
import pyro.distributions as dist
import pyro.ops.integrator as integrator
import pytest
import torch
from pyro.distributions.util import is_validation_enabled
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.explain import fallback_reason
from pyro_pt.explorers import pyro_kernels
from pyro_pt.potential import (FunctionalSplit, ModelSplit, capture, compiled, direct_call, matmul,
                               native, torch_compat)

from . import models

# the entries each test below stubs; a new entry must get a test of its fallback
TESTED = {"inductor.compile", "FakeTensorMode", "ShapeEnv", "TracingContext", "tracing",
          "OutputCode", "unsafe_alloc_void_ptrs_from_tensors",
          "alloc_tensors_by_stealing_from_void_ptrs", "CppCodeCache", "custom_ops_to_c_shims",
          "is_functorch_wrapped_tensor", "_functorch_wrapper_str_intern", "_is_all_true",
          "Distribution._validate_args", "_single_step_verlet",
          "vec_isa_ok", "cache_dir"}  # cache_dir: tests/pt/test_autocompile.py


@pytest.fixture
def stub(monkeypatch):
    """``stub(name)``: the private API ``name`` not found by :func:`torch_compat.lookup` (its
    own reason, returned), for the rest of the test."""

    def remove(name):
        entry, resolve = torch_compat.TABLE[name], torch_compat._resolve

        def resolve_without(e):
            if e is entry:
                raise AttributeError(f"stubbed away: {name}")
            return resolve(e)

        monkeypatch.setattr(torch_compat, "_resolve", resolve_without)
        return torch_compat.lookup(name)[1]

    return remove


@pytest.fixture
def no_inductor(monkeypatch):
    """Inductor raising if reached: every fallback here is decided before compiling."""
    calls = []

    def refuse(gm, *example, **kwargs):
        calls.append(gm)
        raise RuntimeError("Inductor was reached")

    monkeypatch.setattr(compiled, "inductor_compile", refuse)
    return calls


def linear_split():
    return ModelSplit(models.linear_model, models.linear_data())


def run(disable_validation=True, **kwargs):
    """Cold-chain draws and explorer_info of a tiny run on the linear model."""
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(models.linear_model, num_replicas=2, adapt_temperatures=False,
                               **kwargs)
    mcmc = MCMC(kernel, num_samples=3, warmup_steps=3, disable_progbar=True,
                disable_validation=disable_validation)
    mcmc.run(*models.linear_data())
    return mcmc.get_samples()["w"], kernel.explorer_info


def test_every_entry_resolves_on_the_installed_torch_and_is_tested():
    # A torch (or Pyro) that drops or changes one of them fails here first.
    assert set(torch_compat.TABLE) == TESTED
    for name in torch_compat.TABLE:
        assert torch_compat.lookup(name)[1] is None, name


def test_reason_names_the_api_the_version_and_the_public_path(stub):
    reason = stub("inductor.compile")
    assert reason == (f"torch._inductor.compile (private API) not found in torch "
                      f"{torch.__version__}: TorchScript runs the graph instead of Inductor")
    with torch_compat.recording() as seen:
        torch_compat.lookup("inductor.compile")
        torch_compat.lookup("inductor.compile")
        torch_compat.lookup("ShapeEnv")
    assert seen == [reason]
    assert fallback_reason(reason) == reason


@pytest.mark.parametrize("name", ["inductor.compile", "FakeTensorMode", "ShapeEnv"])
def test_inductor_needs_are_checked_before_compiling(name, stub, no_inductor):
    reason = stub(name)
    fast = FunctionalSplit(linear_split(), compile="inductor")
    reference = FunctionalSplit(linear_split(), compile="torchscript")
    assert (fast.path, fast.compiled.engine, fast.compiled.engine_reason) == (
        "functional", "jit", reason)
    assert no_inductor == []
    point = reference.compiled.check_points()[1]
    assert all(torch.equal(a, b) for a, b in zip(fast.evaluate(point), reference.evaluate(point)))


def test_inductor_removed_from_torch_runs_torchscript_and_draws_the_same(monkeypatch):
    import torch._inductor

    monkeypatch.delattr(torch._inductor, "compile")  # really gone, not only for the lookup
    reason = torch_compat.lookup("inductor.compile")[1]
    draws, info = run(explorer="hmc", compile="inductor")
    assert (info["potential_engine"], info["potential_engine_reason"]) == ("jit", reason)
    assert info["private_api"] == [reason]
    expected, plain = run(explorer="hmc", compile="torchscript")
    assert "private_api" not in plain
    assert torch.equal(draws, expected)


@pytest.mark.parametrize("name", ["TracingContext", "tracing", "FakeTensorMode"])
def test_capture_without_its_one_fake_mode_captures_the_same_graph(name, stub):
    reference = FunctionalSplit(linear_split())
    reason = stub(name)
    with torch_compat.recording() as seen:
        fast = FunctionalSplit(linear_split())
    assert reason in seen
    assert (fast.path, fast.compiled.engine) == ("functional", "jit")
    point = reference.compiled.check_points()[2]
    assert all(torch.equal(a, b) for a, b in zip(fast.evaluate(point), reference.evaluate(point)))


def test_without_output_code_the_wrapped_call_is_kept(stub):
    reason = stub("OutputCode")
    with torch_compat.recording() as seen:
        assert direct_call.direct_call(lambda x: (x + 1,), [torch.ones(2)]) is None
    assert seen == [reason]


def _shim():
    """A function shaped like the generated code's Python shim (its entry point in cell f)."""
    def f(handles):
        return handles

    def run(args):
        return f(args)

    return run


@pytest.mark.parametrize("name", ["unsafe_alloc_void_ptrs_from_tensors",
                                  "alloc_tensors_by_stealing_from_void_ptrs"])
def test_without_the_handle_functions_the_shim_and_the_python_loop_run(name, stub):
    assert direct_call.entry_point(_shim()) is not None
    reason = stub(name)
    with torch_compat.recording() as seen:
        assert direct_call.entry_point(_shim()) is None
        assert native.native_loop(_shim()) is None
    assert seen == [reason]


def test_without_the_code_cache_mkl_and_the_python_loop_run(stub, monkeypatch):
    monkeypatch.setattr(matmul, "_operator", [])
    monkeypatch.setattr(native, "_helper", [])
    reason = stub("CppCodeCache")
    assert native._load_helper() is None
    if not matmul._registered():  # a library loaded before keeps its operators
        assert matmul.operator() is None
    if torch.backends.cpu.get_cpu_capability() == "AVX512":
        monkeypatch.setenv(matmul.SETTING, "native")
        assert matmul.choice() == (False, reason)  # what potential_matmul then reports


def test_without_the_shims_option_the_products_go_through_the_dispatcher(stub):
    reason = stub("custom_ops_to_c_shims")
    with torch_compat.recording() as seen:
        assert matmul.shims() == {}
    assert seen == [reason]


def tolist_model(x, y):
    num = len(y.tolist())  # of the data: captured where it can be told from a latent's
    models.linear_model(x[:num], y)


def test_without_functorch_wrapped_tensor_tolist_stops_capture(stub):
    split = ModelSplit(tolist_model, models.linear_data())
    assert FunctionalSplit(split).path == "functional"
    reason = stub("is_functorch_wrapped_tensor")
    fast = FunctionalSplit(split)
    assert fast.path == "traced" and reason in fast.reason
    assert fallback_reason(fast.reason) == fast.reason
    assert FunctionalSplit(linear_split()).path == "functional"  # no tolist: unaffected


def test_without_the_wrapper_text_the_checks_still_judge_the_graph(stub):
    original = torch._tensor_str._functorch_wrapper_str_intern
    reason = stub("_functorch_wrapper_str_intern")
    with torch_compat.recording() as seen:
        fast = FunctionalSplit(linear_split())
    assert seen == [reason]
    assert fast.path == "functional"
    assert torch._tensor_str._functorch_wrapper_str_intern is original  # left alone


def test_without_is_all_true_a_validating_model_is_traced(stub):
    reason = stub("_is_all_true")
    draws, info = run(explorer="rwmh", disable_validation=False)  # MCMC's default turns it off
    assert (info["potential"], info["potential_reason"]) == ("traced", reason)
    assert reason in info["private_api"]
    assert torch.isfinite(draws).all()
    previous = is_validation_enabled()
    pyro.enable_validation(False)
    try:
        assert FunctionalSplit(linear_split()).path == "functional"  # no checks to flag
    finally:
        pyro.enable_validation(previous)


def test_without_validate_args_pyros_setting_is_restored(stub):
    reason = stub("Distribution._validate_args")
    with torch_compat.recording() as seen:
        assert capture.validation_setting() is is_validation_enabled()
        with capture.keeping_validation():
            torch.distributions.Distribution.set_default_validate_args(False)
    assert torch.distributions.Distribution._validate_args is is_validation_enabled()
    assert seen and set(seen) == {reason}
    assert FunctionalSplit(linear_split()).path == "functional"


def test_without_the_leapfrog_hook_pyro_takes_its_gradients_and_draws_the_same(stub):
    expected, _ = run(explorer="nuts")
    reason = stub("_single_step_verlet")
    pyro_potential_grad = integrator.potential_grad
    with pyro_kernels.graph_gradients():
        assert integrator.potential_grad is pyro_potential_grad  # not hooked
    draws, info = run(explorer="nuts")
    assert info["private_api"] == [reason]
    assert torch.equal(draws, expected)


def test_a_leapfrog_that_stops_looking_the_name_up_is_a_change(monkeypatch):
    monkeypatch.setattr(integrator, "_single_step_verlet", lambda *args: None)
    reason = torch_compat.lookup("_single_step_verlet")[1]
    assert reason.startswith("pyro.ops.integrator._single_step_verlet (private API) changed in "
                             f"pyro {pyro.__version__} (it no longer looks up potential_grad")
    assert not pyro_kernels._leapfrog_takes_the_hook()


def test_the_cpu_is_trusted_inside_the_block_and_the_setting_restored():
    import torch._inductor.config as config

    before = config.cpp.vec_isa_ok
    with torch_compat.trusting_the_cpu() as missing:
        assert missing is None and config.cpp.vec_isa_ok is True
    assert config.cpp.vec_isa_ok == before


def test_without_vec_isa_ok_inductor_runs_its_cpu_tests(stub):
    import torch._inductor.config as config

    reason = stub("vec_isa_ok")
    before = config.cpp.vec_isa_ok
    with torch_compat.recording() as seen, torch_compat.trusting_the_cpu() as missing:
        assert missing == reason and config.cpp.vec_isa_ok == before  # left alone
    assert seen == [reason] and "test programs" in reason
