"""FunctionalSplit where a model is not one graph (float64): the fallback to the traced
ModelSplit, and NaN where the traced path is NaN, with gradients connected."""

import contextlib
import math
import random

import pytest
import torch

import pyro
import pyro.distributions as dist

from pyro_pt.potential import FunctionalSplit, ModelSplit, densities

from .functional_checks import assert_close, assert_same_as_traced, points


pytestmark = pytest.mark.usefixtures("float64")  # tests/conftest.py


# ----- models -----


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
