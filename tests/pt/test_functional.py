"""FunctionalSplit against the traced ModelSplit and hand-written densities (float64): values and
gradients of single points and of batches, and their independence of the batch. Models that
are not one graph, and NaN, are in test_functional_fallbacks."""

import importlib.util
import os
import pickle
import sys

import pytest
import torch

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.ops.integrator import potential_grad

from pyro_pt.potential import FunctionalSplit, ModelSplit, TemperedPotential

from . import models
from .functional_checks import assert_close, assert_same_as_traced, densities_and_grads, points

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import _bnn  # noqa: E402


pytestmark = pytest.mark.usefixtures("float64")  # tests/conftest.py


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
