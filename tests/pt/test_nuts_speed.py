"""NUTS rungs take each leapfrog step's potential and gradient from the captured graph:
bitwise Pyro's autograd numbers, Pyro's path wherever the graph does not answer, and
Pyro's own path throughout where its integrator no longer takes the hook."""

import functools
import math
import pickle

import pytest
import torch

import pyro
import pyro.distributions as dist
import pyro.infer.mcmc.nuts
import pyro.ops.integrator as integrator
from pyro.infer import HMC, NUTS

from pyro_pt.explorers import pyro_kernels
from pyro_pt.explorers.pyro_kernels import PyroKernelExplorer, graph_gradients, make_kernel
from pyro_pt.potential import FunctionalSplit, ModelSplit, TemperedPotential
from pyro_pt.random import RandomStream

from .models import bimodal_model, constrained_model, linear_data, linear_model
from .test_trajectory import eight_schools_noncentered

PYRO_POTENTIAL_GRAD = integrator.potential_grad
LINEAR_DATA = linear_data()  # one data set, so that fast_split captures linear_model once
CONSTRAINED_DATA = (torch.tensor([0.3, 1.2, 0.8]),)


def invalid_scale_model():
    s = pyro.sample("s", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(0.0, s), obs=torch.tensor(0.5))  # s <= 0 is invalid


def cholesky_model():
    """Singular where |a| > 10: torch.linalg.cholesky raises, in the graph and in the trace."""
    a = pyro.sample("a", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0))
    one = torch.ones((), dtype=torch.float64)
    cov = torch.stack([torch.stack([one, a / 10]), torch.stack([a / 10, one])])
    pyro.sample("y", dist.MultivariateNormal(torch.zeros(2, dtype=torch.float64),
                                             scale_tril=torch.linalg.cholesky(cov)),
                obs=torch.tensor([0.3, -0.2], dtype=torch.float64))


@functools.lru_cache(maxsize=None)
def fast_split(model, *args, init=None):
    pyro.set_rng_seed(0)
    kwargs = {} if init is None else {"init_strategy": lambda site: torch.tensor(init)}
    fast = FunctionalSplit(ModelSplit(model, args, **kwargs))
    assert fast.path == "functional", fast.reason
    return fast


def assert_bitwise(fast_out, pyro_out):
    (grads, potential), (grads_ref, potential_ref) = fast_out, pyro_out
    assert potential.dtype == potential_ref.dtype
    assert torch.equal(potential, potential_ref) or (potential.isnan() and potential_ref.isnan())
    assert list(grads) == list(grads_ref)
    for name in grads:
        assert torch.allclose(grads[name], grads_ref[name], rtol=0, atol=0, equal_nan=True), name


@pytest.mark.parametrize("model, args", [
    (eight_schools_noncentered, ()),   # float64, a constrained site
    (linear_model, LINEAR_DATA),       # float64, a vector site
    (constrained_model, CONSTRAINED_DATA),  # float32, three transforms
    (bimodal_model, ()),               # float32, a factor
])
def test_graph_gradients_are_bitwise_pyros_autograd(model, args):
    fast = fast_split(model, *args)
    generator = torch.Generator().manual_seed(1)
    z0 = fast.initial_point()
    for scale in (0.0, 0.3, 2.0):
        z = {k: v + scale * torch.randn(v.shape, generator=generator, dtype=v.dtype)
             for k, v in z0.items()}
        for beta in (1.0, 0.37, 0.05):
            potential = TemperedPotential(fast, beta)
            ours = potential.potential_and_grad(dict(z))
            assert ours is not None
            ll = potential.known_log_likelihood(z)
            reference = PYRO_POTENTIAL_GRAD(potential, dict(z))
            assert_bitwise(ours, reference)
            assert ll == potential.known_log_likelihood(z) == fast.log_likelihood(z)
            with graph_gradients():  # what the leapfrog step gets
                assert_bitwise(integrator.potential_grad(potential, dict(z)), reference)


def test_invalid_points_are_answered_by_pyros_path():
    fast = fast_split(invalid_scale_model, init=1.0)
    potential = TemperedPotential(fast, 0.5)
    bad = {"s": torch.tensor(-0.3)}
    assert potential.potential_and_grad(bad) is None  # NaN: the traced path answers
    with graph_gradients():
        grads, value = integrator.potential_grad(potential, dict(bad))
    grads_ref, value_ref = PYRO_POTENTIAL_GRAD(potential, dict(bad))
    assert math.isnan(value) and math.isnan(value_ref)
    assert torch.isnan(grads["s"]) and torch.isnan(grads_ref["s"])
    # values that require grad are Pyro's to differentiate
    assert potential.potential_and_grad({"s": torch.tensor(0.7, requires_grad=True)}) is None


def test_errors_of_the_traced_path_reach_pyros_exception_handlers(monkeypatch):
    fast = fast_split(cholesky_model, init=0.2)
    potential = TemperedPotential(fast, 1.0)
    assert potential.potential_and_grad({"a": torch.tensor(0.5, dtype=torch.float64)})
    singular = {"a": torch.tensor(20.0, dtype=torch.float64)}
    # The graph's Cholesky factor is NaN there and the traced model's factorization fails: a
    # rejected point (NaN potential and gradient, as at an invalid value), through the hook as
    # without it. Where the graph itself raises, the error reaches Pyro's handler, which turns
    # it into a NaN potential with zero gradients, through the hook as without it.
    assert math.isnan(fast.evaluate(fast.flatten(singular))[0])
    for graph_raises in (False, True):
        if graph_raises:
            def evaluate(flat, grads=True):
                raise RuntimeError("linalg.cholesky: the input is not positive-definite")
            monkeypatch.setattr(fast.compiled, "evaluate", evaluate)
        assert potential.potential_and_grad(singular) is None
        with graph_gradients():
            grads, value = integrator.potential_grad(potential, dict(singular))
        grads_ref, value_ref = PYRO_POTENTIAL_GRAD(potential, dict(singular))
        assert math.isnan(value) and math.isnan(value_ref)
        assert torch.equal(grads["a"], grads_ref["a"]) or (
            torch.isnan(grads["a"]) and torch.isnan(grads_ref["a"]))
        if graph_raises:
            assert torch.equal(grads["a"], torch.zeros((), dtype=torch.float64))


def counting(monkeypatch):
    calls = {"graph": 0, "autograd": 0}
    answer, autograd = TemperedPotential.potential_and_grad, TemperedPotential.__call__

    def graph(self, z):
        out = answer(self, z)
        calls["graph"] += out is not None
        return out

    def traced(self, z):
        calls["autograd"] += 1
        return autograd(self, z)

    monkeypatch.setattr(TemperedPotential, "potential_and_grad", graph)
    monkeypatch.setattr(TemperedPotential, "__call__", traced)
    return calls


def rung(explorer, explorer_kwargs, beta=0.7):
    """A set-up NUTS (or user's) rung of linear_model, as build_rungs makes it."""
    fast = fast_split(linear_model, *LINEAR_DATA)
    potential = TemperedPotential(fast, beta)
    explorer = PyroKernelExplorer(make_kernel(explorer, potential, explorer_kwargs),
                                  RandomStream(3), potential)
    pyro.set_rng_seed(0)
    z = fast.initial_point()
    explorer.setup([z], warmup_steps=6)
    return explorer, z


def moves(explorer, z, num_moves=12):
    """The rung's states and lls over ``num_moves`` moves, with a swap-like cache clear."""
    out = []
    for i in range(num_moves):
        z, ll = explorer.move(z)
        out.append((z["w"].clone(), ll))
        if i == 7:
            explorer.target_changed()
    return out, explorer.diagnostics()


EXPLORERS = {
    "nuts": (NUTS, {"max_tree_depth": 4}),  # what explorer="nuts" runs
    "NUTS class": (NUTS, {"max_tree_depth": 3, "full_mass": True}),
    "callable HMC": (lambda fn, **kw: HMC(potential_fn=fn, num_steps=3, **kw), None),
}


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_without_the_hook_pyros_path_gives_the_same_draws(monkeypatch, name):
    calls = counting(monkeypatch)
    hooked = moves(*rung(*EXPLORERS[name]))
    # restored after each move
    assert integrator.potential_grad is PYRO_POTENTIAL_GRAD is pyro.infer.mcmc.nuts.potential_grad
    # Pyro's autograd only where its step-size search calls the potential itself.
    assert calls["graph"] > 10 * calls["autograd"], calls
    monkeypatch.setattr(pyro_kernels, "GRAPH_GRADIENTS", False)
    calls.update(graph=0, autograd=0)
    plain = moves(*rung(*EXPLORERS[name]))
    assert calls["graph"] == 0 and calls["autograd"] > 0
    assert all(torch.equal(a, b) and ll_a == ll_b for (a, ll_a), (b, ll_b) in
               zip(hooked[0], plain[0]))
    assert hooked[1] == plain[1]


def test_hook_is_detected_from_pyros_leapfrog_step(monkeypatch):
    assert pyro_kernels._leapfrog_takes_the_hook()
    monkeypatch.setattr(integrator, "_single_step_verlet", lambda *args: None)
    assert not pyro_kernels._leapfrog_takes_the_hook()
    monkeypatch.delattr(integrator, "_single_step_verlet")
    assert not pyro_kernels._leapfrog_takes_the_hook()


def test_pickled_rung_moves_the_same(monkeypatch):
    # MCMC(num_chains > 1) pickles the kernel, its rungs' potentials and kernels included.
    fast = fast_split(eight_schools_noncentered)
    potential = TemperedPotential(fast, 0.6)
    z = fast.initial_point()
    copy = pickle.loads(pickle.dumps(potential))  # recaptures its graph on first use
    assert_bitwise(copy.potential_and_grad(dict(z)), potential.potential_and_grad(dict(z)))
    explorer, z = rung(NUTS, {"max_tree_depth": 3})  # what explorer="nuts" runs
    copied = pickle.loads(pickle.dumps(explorer))
    calls = counting(monkeypatch)
    first = moves(explorer, z)
    assert calls["graph"] > 0
    second = moves(copied, z)
    assert all(torch.equal(a, b) and ll_a == ll_b for (a, ll_a), (b, ll_b) in
               zip(first[0], second[0]))
