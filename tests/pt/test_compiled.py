"""The compiled captured potential: the compile setting, its automatic choice, the fallback to
TorchScript, and Inductor's numbers against TorchScript's and the traced path's.

Only the slow tests compile with Inductor, and only the smallest model of the functional tests
(a cold Inductor cache costs ~10-30 s per graph on a 2-core CPU); everything else checks that the
default never reaches Inductor.
"""

import os
import subprocess
import sys

import pytest
import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.potential import FunctionalSplit, ModelSplit, compiled
from pyro_pt.potential.inductor import choose_compiler

from . import models

RTOL = 1e-6


def linear_split(dtype):
    x, y = models.linear_data()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return ModelSplit(models.linear_model, (x.to(dtype), y.to(dtype)))
    finally:
        torch.set_default_dtype(previous)


def points(fast, num=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    base = fast.compiled.check_points()[0]
    return [base + torch.randn(base.shape, generator=generator, dtype=base.dtype)
            for _ in range(num)]


def relative_difference(actual, expected):
    return float((actual - expected).abs().max() / expected.abs().max().clamp(min=1e-30))


@pytest.fixture
def no_inductor(monkeypatch):
    """Inductor raising if reached: what the fallback must survive and the default never
    touches."""
    calls = []

    def refuse(gm, *example):
        calls.append(gm)
        raise RuntimeError("Inductor is not available here")

    monkeypatch.setattr(compiled, "inductor_compile", refuse)
    return calls


@pytest.mark.parametrize("bad", ["jit", "Inductor", None, True])
def test_bad_compile_setting_names_the_argument(bad):
    split = linear_split(torch.float64)
    with pytest.raises(ValueError, match="compile must be 'auto', 'inductor' or 'torchscript'"):
        FunctionalSplit(split, compile=bad)
    with pytest.raises(ValueError, match="compile must be"):
        ParallelTempering(models.linear_model, num_replicas=2, compile=bad)


def test_auto_starts_on_torchscript_and_never_reaches_inductor_at_set_up(no_inductor):
    # "auto" may switch during a run (tests/pt/test_autocompile.py), never at set-up.
    assert choose_compiler("auto") == "torchscript"
    assert choose_compiler("inductor") == "inductor"
    assert choose_compiler("torchscript") == "torchscript"
    fast = FunctionalSplit(linear_split(torch.float64))
    assert (fast.path, fast.compiled.engine, fast.compiled.engine_reason) == ("functional", "jit", "")
    fast.batched_potential_and_grad(torch.stack(points(fast, 3)), torch.ones(3))
    assert no_inductor == []


def test_inductor_failure_falls_back_to_checked_torchscript(no_inductor):
    split = linear_split(torch.float64)
    fast = FunctionalSplit(split, compile="inductor")
    reference = FunctionalSplit(split, compile="torchscript")
    assert len(no_inductor) == 1
    assert (fast.path, fast.compiled.engine) == ("functional", "jit")
    assert "Inductor failed, TorchScript runs the graph" in fast.compiled.engine_reason
    for point in points(fast):
        for actual, expected in zip(fast.evaluate(point), reference.evaluate(point)):
            assert torch.equal(actual, expected)


def test_kernel_reports_the_engine_and_threads_the_setting(no_inductor):
    pyro.set_rng_seed(0)
    x, y = models.linear_data()
    info = {}
    for setting in ("auto", "inductor"):
        kernel = ParallelTempering(models.linear_model, num_replicas=2, explorer="hmc",
                                   adapt_temperatures=False, compile=setting)
        MCMC(kernel, num_samples=2, warmup_steps=2, disable_progbar=True).run(x, y)
        info[setting] = kernel.explorer_info
    assert info["auto"]["potential_engine"] == "jit"
    assert info["auto"]["potential_engine_reason"] == ""
    assert info["inductor"]["potential_engine"] == "jit"  # Inductor refused: the fallback
    assert "Inductor failed" in info["inductor"]["potential_engine_reason"]
    assert len(no_inductor) == 1


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_inductor_agrees_with_torchscript_and_traced(dtype):
    split = linear_split(dtype)
    fast = FunctionalSplit(split, compile="inductor", batched="vmap")
    reference = FunctionalSplit(split, compile="torchscript", batched="vmap")
    assert (fast.path, fast.compiled.engine, fast.compiled.engine_reason) == ("functional", "inductor", "")
    assert reference.compiled.engine == "jit"
    zs = points(fast)
    for point in zs:
        out = fast.evaluate(point)
        assert all(t.dtype == dtype for t in out)
        for actual, expected in zip(out, reference.evaluate(point)):
            assert relative_difference(actual, expected) <= RTOL
        # and against Pyro's own trace, which both are checked against at set-up
        traced = fast.compiled.traced_reference(point)
        for actual, expected in zip(out, traced):
            assert relative_difference(actual, expected) <= (RTOL if dtype == torch.float64
                                                             else 1e-5)
    if dtype == torch.float64:
        # the vmapped graphs of many replicas follow the single-point engine
        betas = torch.tensor([1.0, 0.5, 0.1], dtype=dtype)
        batch = torch.stack(zs[:3])
        for actual, expected in zip(fast.batched_potential_and_grad(batch, betas),
                                    reference.batched_potential_and_grad(batch, betas)):
            assert relative_difference(actual, expected) <= RTOL


# A fresh process: torch.compile changes process state once, at its first call, which an
# earlier test in the same pytest process may already have spent.
AFTER_FIRST_INDUCTOR = """
import math, torch, pyro, pyro.distributions as dist
from pyro_pt.potential import FunctionalSplit, ModelSplit

def gamma_factor_model(v):
    a = pyro.sample("a", dist.Normal(1.0, 1.0))
    # Unvalidated, Gamma(a <= 0).log_prob is finite: only validation makes it NaN.
    pyro.factor("f", dist.Gamma(a, 1.0).log_prob(v).sum())

split = ModelSplit(gamma_factor_model, (torch.tensor([0.5, 2.0]),),
                   init_strategy=lambda site: torch.tensor(1.0))
bad = torch.tensor([-0.5])
for compile, engine in (("inductor", "inductor"), ("torchscript", "jit")):
    fast = FunctionalSplit(split, compile=compile, batched="loop")
    assert (fast.path, fast.compiled.engine) == ("functional", engine), fast.compiled.reason
    assert torch.distributions.Distribution._validate_args, "validation turned off"
    lp, ll, _, _ = fast.evaluate(bad)
    assert math.isnan(lp) and math.isnan(ll), (compile, lp, ll)
    assert all(math.isnan(t) for t in split.log_densities({"a": bad.reshape(())}))
print("validated")
"""


@pytest.mark.slow
def test_graphs_keep_validation_after_the_first_inductor_compile_of_the_process():
    # torch._dynamo's first torch.compile sets torch distribution validation off for the
    # process; a graph captured after it lost its flags and gave a finite Gamma(a <= 0).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
        + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = subprocess.run([sys.executable, "-c", AFTER_FIRST_INDUCTOR], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "validated", out.stderr[-3000:]
