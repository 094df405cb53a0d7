"""FunctionalSplit against the traced ModelSplit and hand-written densities (float64): values,
gradients, NaN semantics, fallbacks, batches and their independence of the batch."""

import contextlib
import importlib.util
import math
import os
import pickle
import random
import sys

import pytest
import torch

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.ops.integrator import potential_grad

from pyro_pt.potential import FunctionalSplit, ModelSplit, TemperedPotential, densities

from . import models

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import _bnn  # noqa: E402

RTOL = 1e-6


@pytest.fixture(autouse=True)
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def points(split, num, seed, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    z0 = split.initial_point()
    return [{k: v + scale * torch.randn(v.shape, generator=generator) for k, v in z0.items()}
            for _ in range(num)]


def densities_and_grads(split, z):
    """lp, ll and their gradients (flat) from ``split.log_densities`` by autograd."""
    z = {k: v.detach().clone().requires_grad_(True) for k, v in z.items()}
    lp, ll = split.log_densities(z)
    grads = [torch.cat([g.reshape(-1) for g in torch.autograd.grad(
        term, [z[n] for n in sorted(z)], retain_graph=True)]) for term in (lp, ll)]
    return lp.detach(), ll.detach(), grads[0], grads[1]


def assert_close(actual, expected, rtol=RTOL):
    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    scale = expected.abs().max().clamp(min=1e-12)
    assert float((actual - expected).abs().max()) <= rtol * float(scale), (actual, expected)


def assert_same_as_traced(split, fast, zs):
    for z in zs:
        for actual, expected in zip(densities_and_grads(fast, z), densities_and_grads(split, z)):
            assert_close(actual, expected)


# ----- models -----

IDX = torch.tensor([0, 2, 5])
MASK = torch.tensor([True, False, True])
FRACS = torch.tensor([0.2, 0.9, 0.4])


def kitchen_sink(y):
    """Constrained latents, a subsampled plate, poutine.scale, poutine.mask and a factor."""
    loc = pyro.sample("loc", dist.Normal(0.0, 2.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    rate = pyro.sample("rate", dist.LogNormal(0.0, 0.5))
    frac = pyro.sample("frac", dist.Beta(2.0, 2.0))
    offsets = pyro.sample("offsets", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with pyro.plate("data", 6, subsample=IDX) as i:
        pyro.sample("y", dist.Normal(loc + offsets[i % 2], sigma), obs=y[i])
    with poutine.scale(scale=0.5):
        pyro.sample("count", dist.Poisson(rate), obs=torch.tensor(3.0))
    with poutine.mask(mask=MASK):
        pyro.sample("fracs", dist.Beta(5 * frac, 5 * (1 - frac)).expand([3]), obs=FRACS)
    pyro.factor("penalty", -((frac - 0.3) ** 2))


def kitchen_sink_by_hand(z, y):
    loc, u_sigma, u_rate, u_frac, offsets = (z[k] for k in ("loc", "sigma", "rate", "frac",
                                                           "offsets"))
    sigma, rate, frac = u_sigma.exp(), u_rate.exp(), torch.sigmoid(u_frac)
    lp = (dist.Normal(0.0, 2.0).log_prob(loc)
          + dist.HalfNormal(1.0).log_prob(sigma) + u_sigma  # log |d exp(u) / du| = u
          + dist.LogNormal(0.0, 0.5).log_prob(rate) + u_rate
          + dist.Beta(2.0, 2.0).log_prob(frac) + torch.log(frac * (1 - frac))
          + dist.Normal(0.0, 1.0).log_prob(offsets).sum())
    ll = (6 / 3 * dist.Normal(loc + offsets[IDX % 2], sigma).log_prob(y[IDX]).sum()
          + 0.5 * dist.Poisson(rate).log_prob(torch.tensor(3.0))
          + (dist.Beta(5 * frac, 5 * (1 - frac)).log_prob(FRACS) * MASK).sum()
          - (frac - 0.3) ** 2)
    return lp, ll


def pyro_module_bnn():
    spec = importlib.util.spec_from_file_location(
        "pt_torchrun_example", os.path.join(ROOT, "examples", "pt_torchrun.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    x, y, _, _ = example.make_data(60, 0)
    return example.BayesianMLP(), (x.double(), y.double())


def branching_model(y):
    z = pyro.sample("z", dist.Normal(0.0, 1.0))
    if z > 0:  # the density's form depends on the latent value
        pyro.sample("y", dist.Normal(z, 1.0), obs=y)
    else:
        pyro.sample("y", dist.StudentT(3.0, z, 1.0), obs=y)


def noisy_model(y):
    z = pyro.sample("z", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(z + 0.1 * torch.randn(()), 1.0), obs=y)


def subsampling_model(y):
    z = pyro.sample("z", dist.Normal(0.0, 1.0))
    with pyro.plate("data", 10, subsample_size=3):  # a random subsample at every call
        pyro.sample("y", dist.Normal(z, 1.0), obs=y)


def python_random_model(y):
    z = pyro.sample("z", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(z + random.gauss(0.0, 1.0), 1.0), obs=y)


def invalid_scale_model(y):
    s = pyro.sample("s", dist.Normal(0.0, 1.0))
    pyro.sample("y", dist.Normal(0.0, s), obs=y)  # s <= 0 is invalid


def gamma_factor_model(v):
    a = pyro.sample("a", dist.Normal(1.0, 1.0))
    # Unvalidated, Gamma(a <= 0).log_prob is finite: only validation makes it NaN.
    pyro.factor("f", dist.Gamma(a, 1.0).log_prob(v).sum())


def cases():
    y = torch.tensor([0.4, -1.2, 2.0, 0.3, 1.1, -0.5])
    bnn = _bnn.CountingModel()
    x, t = _bnn.make_data(num_data=60)
    return {
        "linear": (models.linear_model, models.linear_data()),
        "bimodal": (models.bimodal_model, ()),
        "constrained": (models.constrained_model, (y[:4],)),
        "gaussian": (models.gaussian_model, (models.gaussian_data(),)),
        "kitchen_sink": (kitchen_sink, (y,)),
        "bnn": (bnn, (x.double(), t.double())),
        "pyro_module_bnn": pyro_module_bnn(),
    }


@pytest.fixture(scope="module")
def splits():
    previous = torch.get_default_dtype()  # module fixtures run before the autouse one
    torch.set_default_dtype(torch.float64)
    pyro.set_rng_seed(0)
    built = {}
    for name, (model, args) in cases().items():
        split = ModelSplit(model, args)
        built[name] = split, FunctionalSplit(split, batched="vmap")
    torch.set_default_dtype(previous)
    return built


# ----- the single-point path -----


@pytest.mark.parametrize("name", ["linear", "bimodal", "constrained", "gaussian", "kitchen_sink",
                                  "bnn", "pyro_module_bnn"])
def test_same_values_and_gradients_as_traced(splits, name):
    split, fast = splits[name]
    assert fast.path == "functional", fast.reason
    assert_same_as_traced(split, fast, points(split, 3, seed=1))


def test_kitchen_sink_matches_hand_computation(splits):
    split, fast = splits["kitchen_sink"]
    y = split.model_args[0]
    for z in points(split, 3, seed=2):
        lp, ll = fast.log_densities(z)
        expected_lp, expected_ll = kitchen_sink_by_hand(z, y)
        assert_close(lp, expected_lp)
        assert_close(ll, expected_ll)


def test_drop_in_for_tempered_potential_and_pyro_gradients(splits):
    split, fast = splits["kitchen_sink"]
    z = points(split, 1, seed=3)[0]
    grads, potential = potential_grad(TemperedPotential(fast, 0.3), dict(z))
    grads_ref, potential_ref = potential_grad(TemperedPotential(split, 0.3), dict(z))
    assert_close(potential, potential_ref)
    for name in grads:
        assert_close(grads[name], grads_ref[name])
    assert fast.split is split and fast.compiled.split is split
    with torch.no_grad():
        lp, ll = fast.log_densities(z)
    assert not lp.requires_grad
    assert_close(ll, split.log_densities(z)[1])


def test_pickles(splits):
    split, fast = splits["constrained"]
    copy = pickle.loads(pickle.dumps(fast))
    z = points(split, 1, seed=4)[0]
    assert copy.path == "functional"
    assert_close(torch.stack(copy.log_densities(z)), torch.stack(split.log_densities(z)))


def test_setup_leaves_the_random_stream_alone(splits):
    state = torch.get_rng_state()
    fast = FunctionalSplit(splits["linear"][0], batched="vmap")
    assert fast.batched.path == "vmap"
    assert torch.equal(state, torch.get_rng_state())


def test_flatten_order_is_sorted_latent_names(splits):
    split, fast = splits["kitchen_sink"]
    z = points(split, 1, seed=5)[0]
    flat = fast.flatten(z)
    assert flat.shape == (fast.dim,) == (6,)
    assert torch.equal(flat, torch.cat([z[n].reshape(-1) for n in sorted(z)]))
    assert all(torch.equal(fast.unflatten(flat)[n], z[n]) for n in z)


# ----- fallbacks and NaN -----


@pytest.mark.parametrize("model, why", [
    (branching_model, "capture failed"),
    (noisy_model, "random"),
    (subsampling_model, "random"),
    (python_random_model, "disagrees"),
])
def test_models_that_are_not_one_graph_fall_back_to_traced(model, why):
    pyro.set_rng_seed(0)
    split = ModelSplit(model, (torch.tensor(0.7),))
    fast = FunctionalSplit(split)
    assert fast.path == "traced" and why in fast.reason, fast.reason
    assert fast.batched.path == "loop"
    if model is branching_model:
        for value in (-0.8, 0.6):
            z = {"z": torch.tensor(value)}
            assert_same_as_traced(split, fast, [z])
            expected = (dist.Normal(value, 1.0) if value > 0 else dist.StudentT(3.0, value, 1.0))
            assert_close(fast.log_densities(z)[1], expected.log_prob(torch.tensor(0.7)))
        potential, grad, ll = fast.batched_potential_and_grad(
            torch.tensor([[-0.8], [0.6]]), torch.tensor([1.0, 0.5]))
        assert_close(ll, torch.stack([fast.log_densities({"z": torch.tensor(v)})[1]
                                      for v in (-0.8, 0.6)]))


@pytest.mark.parametrize("model, args, bad", [
    (invalid_scale_model, (torch.tensor(0.5),), {"s": torch.tensor(-0.3)}),
    (gamma_factor_model, (torch.tensor([0.5, 2.0]),), {"a": torch.tensor(-0.5)}),
])
def test_nan_where_traced_is_nan_with_gradients_connected(model, args, bad):
    pyro.set_rng_seed(0)
    split = ModelSplit(model, args, init_strategy=lambda site: torch.tensor(1.0))
    fast = FunctionalSplit(split)
    assert fast.path == "functional", fast.reason
    z = {k: v.clone().requires_grad_(True) for k, v in bad.items()}
    lp, ll = fast.log_densities(z)
    assert torch.isnan(lp) and torch.isnan(ll)
    (grad,) = torch.autograd.grad(-(lp + 0.5 * ll), list(z.values()))
    assert torch.isnan(grad).all()
    # NaN in one replica leaves the others bitwise as they are alone
    good = torch.tensor([[0.8], [1.3]])
    rows = torch.cat([good[:1], bad[next(iter(bad))].reshape(1, 1), good[1:]])
    betas = torch.tensor([1.0, 0.5, 0.2])
    potential, grad, ll = fast.batched_potential_and_grad(rows, betas)
    assert torch.isnan(potential[1]) and torch.isnan(ll[1]) and torch.isnan(grad[1]).all()
    for r in (0, 2):
        alone = fast.batched_potential_and_grad(rows[r:r + 1], betas[r:r + 1])
        assert all(torch.equal(a[0], b[r]) for a, b in zip(alone, (potential, grad, ll)))
    # without validation the traced path is finite (and wrong), and so is the functional one,
    # through a graph captured without flags
    if model is gamma_factor_model:
        with pyro.validation_enabled(False):
            assert_close(fast.log_densities(bad)[1], split.log_densities(bad)[1])
            assert math.isfinite(float(fast.log_densities(bad)[1]))
            assert fast.evaluate(torch.tensor([-0.5]), grads=True) is not None


def test_graph_missing_a_validation_check_falls_back_to_traced(monkeypatch):
    # The check points are valid, so there a graph without a flag agrees with the traced path;
    # the set-up counts the flags against the traced path's checks instead.
    record = densities._validation_as_flags

    @contextlib.contextmanager
    def misses_one(flags):
        recorded = []
        with record(recorded):
            yield
        flags.extend(recorded[1:])

    monkeypatch.setattr(densities, "_validation_as_flags", misses_one)
    split = ModelSplit(gamma_factor_model, (torch.tensor([0.5, 2.0]),),
                       init_strategy=lambda site: torch.tensor(1.0))
    fast = FunctionalSplit(split)
    assert fast.path == "traced"
    assert "holds 6 of the 7 distribution validation checks" in fast.reason, fast.reason
    assert all(math.isnan(t) for t in fast.log_densities({"a": torch.tensor(-0.5)}))
    monkeypatch.undo()
    assert FunctionalSplit(split).path == "functional"


# ----- the batched path -----


@pytest.mark.parametrize("name", ["kitchen_sink", "bnn"])
def test_batched_matches_single_evaluations_and_betas_temper_only_ll(splits, name):
    split, fast = splits[name]
    assert fast.batched.path == "vmap", fast.batched.reason
    zs = points(split, 5, seed=6, scale=0.3)
    z_flat = torch.stack([fast.flatten(z) for z in zs])
    betas = torch.tensor([1.0, 0.6, 0.25, 0.05, 0.0])
    potential, grad, ll = fast.batched_potential_and_grad(z_flat, betas)
    assert potential.shape == ll.shape == (5,) and grad.shape == (5, fast.dim)
    for r, z in enumerate(zs):
        lp_r, ll_r, grad_lp, grad_ll = densities_and_grads(split, z)
        assert_close(potential[r], -(lp_r + betas[r] * ll_r))
        assert_close(grad[r], -(grad_lp + betas[r] * grad_ll))
        assert_close(ll[r], ll_r)
        if name == "kitchen_sink":  # and an independent computation
            lp_hand, ll_hand = kitchen_sink_by_hand(z, split.model_args[0])
            assert_close(potential[r], -(lp_hand + betas[r] * ll_hand))


@pytest.mark.parametrize("name, batched", [("bnn", "vmap"), ("constrained", "vmap"),
                                           ("constrained", "loop")])
def test_replica_results_are_bitwise_independent_of_the_batch(splits, name, batched):
    split, fast = splits[name]
    if batched == "loop":
        fast = FunctionalSplit(split, batched="loop")
    assert fast.batched.path == batched, fast.batched.reason
    zs = points(split, 6, seed=7, scale=0.3)
    z_flat = torch.stack([fast.flatten(z) for z in zs])
    betas = torch.tensor([1.0, 0.7, 0.5, 0.3, 0.2, 0.1])
    alone = fast.batched_potential_and_grad(z_flat[:1], betas[:1])
    for rows in ([0, 1], [1, 0], [2, 0, 4, 5], [5, 4, 3, 2, 1, 0]):
        out = fast.batched_potential_and_grad(z_flat[rows], betas[rows])
        slot = rows.index(0)
        assert all(torch.equal(a[0], b[slot]) for a, b in zip(alone, out)), rows
    # more replicas than one vmapped call takes: chunks of at most max_batch
    many = torch.cat([z_flat, z_flat])
    out = fast.batched_potential_and_grad(many, torch.cat([betas, betas]))
    assert all(torch.equal(a[0], b[6]) for a, b in zip(alone, out))


def test_bad_batched_arguments(splits):
    _, fast = splits["constrained"]
    with pytest.raises(ValueError, match="z_flat"):
        fast.batched_potential_and_grad(torch.zeros(2, fast.dim + 1), torch.ones(2))
    with pytest.raises(ValueError, match="betas"):
        fast.batched_potential_and_grad(torch.zeros(2, fast.dim), torch.ones(3))
    with pytest.raises(ValueError, match="batched"):
        FunctionalSplit(splits["constrained"][0], batched="gpu")
    with pytest.raises(ValueError, match="points"):
        FunctionalSplit(splits["constrained"][0], points=[{"loc": torch.tensor(0.0)}])


def test_auto_batching_loops_on_one_cpu_thread(splits):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fast = FunctionalSplit(splits["linear"][0])
        assert fast.batched.path == "loop" and "one CPU thread" in fast.batched.reason
    finally:
        torch.set_num_threads(threads)


def tolist_branching_model(y):
    z = pyro.sample("z", dist.Normal(0.0, 3.0))
    # tolist reads the value outside the dispatcher; the capture must not freeze the branch
    scale = 1.0 if z.detach().reshape(1).tolist()[0] > 0 else 5.0
    pyro.sample("y", dist.Normal(z, scale).expand(y.shape).to_event(1), obs=torch.tensor(y.tolist()))


def repr_branching_model(y):
    z = pyro.sample("z", dist.Normal(0.0, 3.0))
    scale = 1.0 if "-" not in repr(z) else 5.0
    pyro.sample("y", dist.Normal(z, scale).expand(y.shape).to_event(1), obs=y)


@pytest.mark.parametrize("model", [tolist_branching_model, repr_branching_model])
def test_python_reads_of_latent_values_fall_back_to_traced(model):
    y = torch.tensor([0.4, -1.2, 2.0])
    split = ModelSplit(model, (y,), init_strategy=lambda site: torch.tensor(1.0))
    fast = FunctionalSplit(split)  # check points all have z > 0: the values cannot tell
    assert fast.path == "traced", fast.reason
    zs = [{"z": torch.tensor(v)} for v in (1.0, -2.0)]
    assert_same_as_traced(split, fast, zs)
    assert_close(fast.log_densities(zs[1])[1], dist.Normal(-2.0, 5.0).log_prob(y).sum())


def test_tolist_of_constant_data_keeps_the_graph():
    def model(y):
        z = pyro.sample("z", dist.Normal(0.0, 3.0))
        pyro.sample("y", dist.Normal(z, 1.0).expand(y.shape).to_event(1),
                    obs=torch.tensor(y.tolist()))

    pyro.set_rng_seed(0)
    split = ModelSplit(model, (torch.tensor([0.4, -1.2, 2.0]),))
    fast = FunctionalSplit(split)
    assert fast.path == "functional", fast.reason
    assert_same_as_traced(split, fast, points(split, 2, seed=8))
    assert torch.Tensor.tolist.__name__ == "tolist"  # the capture's patch is undone
