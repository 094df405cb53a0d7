"""The fast leapfrog paths give bitwise the numbers of the plain one.

:func:`~pyro_pt.explorers.hmc_dynamics.leapfrog_rows` runs one slot's trajectory at a time
through a fused step; under Inductor that step is one compiled graph
(:meth:`~pyro_pt.potential.fused.FusedSteps.step`). Both must reproduce
:func:`~pyro_pt.explorers.hmc_dynamics.leapfrog` exactly, jittered step counts, NaN rows and the
traced path's answer at invalid points included. The Inductor tests compile the 1-D Gamma
factor model only (two small graphs, ~10-40 s on a loaded 2-core CPU: marked slow).
"""

import pytest
import torch

import pyro
import pyro.distributions as dist

from pyro_pt.explorers.hmc import BatchedHMC
from pyro_pt.explorers.hmc_dynamics import leapfrog, leapfrog_rows
from pyro_pt.potential import FunctionalSplit, ModelSplit
from pyro_pt.potential.leapfrog import leapfrog_step

BETAS = torch.tensor([1.0, 0.5, 0.2])


def gamma_factor_model(v):
    a = pyro.sample("a", dist.Normal(1.0, 1.0))
    # Gamma(a <= 0) is invalid: NaN under validation, answered by the traced path.
    pyro.factor("f", dist.Gamma(a, 1.0).log_prob(v).sum())


def gamma_split():
    return ModelSplit(gamma_factor_model, (torch.tensor([0.5, 2.0]),),
                      init_strategy=lambda site: torch.tensor(1.0))


def assert_identical(actual, expected):
    for a, b in zip(actual, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def trajectories(fast, step, steps):
    """Both leapfrogs from three states, one of which walks into a <= 0 (invalid)."""
    z = torch.tensor([[1.0], [0.4], [2.0]])
    potential, grad, ll = fast.batched_potential_and_grad(z, BETAS)
    start = (z, potential, grad, ll)
    p0 = torch.tensor([[0.3], [-4.0], [-0.5]])
    eps, inv_mass = torch.tensor([0.1, 0.2, 0.05]), torch.ones(3, 1)
    plain = leapfrog(lambda q: fast.batched_potential_and_grad(q, BETAS), start, p0, eps,
                     inv_mass, steps, 6)
    rows = leapfrog_rows(step, lambda r, q: fast.batched_potential_and_grad(q, BETAS[r:r + 1]),
                         start, p0, eps, inv_mass, BETAS, steps, 6)
    return plain, rows


@pytest.mark.parametrize("steps", [None, torch.tensor([6, 4, 1])], ids=["fixed", "jittered"])
def test_rows_one_at_a_time_are_the_batched_leapfrog(steps):
    fast = FunctionalSplit(gamma_split(), compile="torchscript", batched="loop")
    graph = fast.compiled._graph("grads", torch.float32, torch.device("cpu"))[0]
    plain, rows = trajectories(fast, leapfrog_step(graph), steps)
    assert plain[-1].tolist() == [False, True, False]  # slot 1 met a <= 0, and was rejected
    assert_identical(rows, plain)


def test_fused_torchscript_step_is_bitwise_the_unfused_leapfrog_and_none_in_vmap_mode():
    split = gamma_split()
    fast = FunctionalSplit(split, compile="torchscript", batched="loop")
    step = fast.fused.step(torch.float32, torch.device("cpu"))
    assert step is not None, fast.fused.reason
    for steps in (None, torch.tensor([6, 4, 1])):
        plain, rows = trajectories(fast, step, steps)
        assert_identical(rows, plain)
    vmapped = FunctionalSplit(split, compile="torchscript", batched="vmap")
    assert vmapped.fused.step(torch.float32, torch.device("cpu")) is None


@pytest.fixture(scope="module")
def inductor_split():
    fast = FunctionalSplit(gamma_split(), compile="inductor", batched="loop")
    assert fast.compiled.engine == "inductor", fast.compiled.engine_reason
    step = fast.fused.step(torch.float32, torch.device("cpu"))
    assert step is not None, fast.fused.reason
    return fast, step


@pytest.mark.slow
@pytest.mark.parametrize("steps", [None, torch.tensor([6, 4, 1])], ids=["fixed", "jittered"])
def test_fused_inductor_step_is_bitwise_the_unfused_leapfrog(inductor_split, steps):
    fast, step = inductor_split
    plain, rows = trajectories(fast, step, steps)
    # the invalid slot is redone unfused: the traced path's NaN and its rejection
    assert plain[-1].tolist() == [False, True, False]
    assert_identical(rows, plain)


@pytest.mark.slow
def test_batched_hmc_with_the_fused_step_draws_bitwise_the_same(inductor_split):
    fast, _ = inductor_split
    runs = []
    for fused_step in (fast.fused.step, None):
        hmc = BatchedHMC(fast.batched_potential_and_grad, fused_step=fused_step)
        z = torch.ones(3, 1)
        hmc.setup(z, BETAS, [1, 2, 3], warmup_steps=30)
        draws = []
        for _ in range(50):
            state, info = hmc.step(z)
            z = state.z
            draws.append((state.z, state.ll, info.accept_prob, info.num_steps))
        runs.append((draws, hmc.step_sizes, hmc.trajectory_lengths))
    (fused, eps_fused, lengths_fused), (plain, eps_plain, lengths_plain) = runs
    for a, b in zip(fused, plain):
        assert_identical(a, b)
    assert torch.equal(eps_fused, eps_plain) and lengths_fused == lengths_plain
