"""Slots in lockstep: one compiled call per leapfrog step for a batch of slots.

:func:`~pyro_pt.explorers.hmc_dynamics.leapfrog_lockstep` runs the vmapped fused step of a
small model (:class:`~pyro_pt.potential.lockstep.Lockstep`). Its numbers are the vmapped
graph's, so it must agree with the slots run one at a time within the tolerance, give a slot
bitwise the same numbers in any company (alone, in another order, in another engine), redo a
slot that meets an invalid point exactly as the plain leapfrog does, and sample the exact
tempered posteriors. Under Inductor only: the compilations (~10-30 s each on a loaded 2-core
CPU, fewer with Inductor's cache warm) make these tests slow.
"""

import pytest
import torch

import pyro
import pyro.distributions as dist

from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.explorers.hmc import BatchedHMC
from pyro_pt.explorers.hmc_dynamics import leapfrog, leapfrog_lockstep, leapfrog_rows
from pyro_pt.potential import FunctionalSplit, ModelSplit
from pyro_pt.potential import lockstep as lockstep_module

from .tempered_gaussian import BETAS as GAUSSIAN_BETAS, F64, assert_matches_posterior, gaussian
from .mutations import temper_the_prior_in_batched_hmc
from .test_leapfrog_speed import BETAS, assert_identical, gamma_factor_model, gamma_split

pytestmark = pytest.mark.slow
CPU = torch.device("cpu")


def gaussian_model(y):
    """``gaussian()`` of tempered_gaussian as a Pyro model: z_d ~ N(0, s_d), y_nd ~ N(z_d, sigma_d)."""
    target = gaussian()
    z = pyro.sample("z", dist.Normal(torch.zeros(3, dtype=F64), target.s2.sqrt()).to_event(1))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(z, target.sigma2.sqrt()).to_event(1), obs=y)


@pytest.fixture(scope="module")
def gamma_fast():
    fast = FunctionalSplit(gamma_split(), compile="inductor", batched="loop")
    assert fast.compiled.engine == "inductor", fast.compiled.engine_reason
    return fast


@pytest.fixture(scope="module")
def gaussian_fast():
    fast = FunctionalSplit(ModelSplit(gaussian_model, (gaussian().y,)), compile="inductor",
                           batched="loop")
    assert fast.compiled.engine == "inductor", fast.compiled.engine_reason
    return fast


def lockstep_run(fast, slots, steps):
    """The three slots' trajectories of test_leapfrog_speed, for the ``slots`` given, in
    lockstep; also one at a time through the fused step."""
    z = torch.tensor([[1.0], [0.4], [2.0]])[slots]
    betas = BETAS[slots]
    potential, grad, ll = fast.batched_potential_and_grad(z, betas)
    start = (z, potential, grad, ll)
    p0 = torch.tensor([[0.3], [-4.0], [-0.5]])[slots]
    eps, inv_mass = torch.tensor([0.1, 0.2, 0.05])[slots], torch.ones(len(slots), 1)
    steps = None if steps is None else steps[slots]
    row = lambda r, q: fast.batched_potential_and_grad(q, betas[r:r + 1])  # noqa: E731
    plan = fast.lockstep.plan(len(slots), torch.float32, CPU)
    assert plan is not None, fast.lockstep.reason
    lock = leapfrog_lockstep(plan, row, start, p0, eps, inv_mass, betas, steps, 6)
    fused = leapfrog_rows(fast.fused.step(torch.float32, CPU), row, start, p0, eps,
                          inv_mass, betas, steps, 6)
    plain = leapfrog(lambda q: fast.batched_potential_and_grad(q, betas), start, p0, eps,
                     inv_mass, steps, 6)
    return lock, fused, plain


@pytest.mark.parametrize("steps", [None, torch.tensor([6, 4, 1])], ids=["fixed", "jittered"])
def test_lockstep_agrees_with_the_slots_one_at_a_time(gamma_fast, steps):
    lock, fused, plain = lockstep_run(gamma_fast, [0, 1, 2], steps)
    # slot 1 walks into a <= 0 (invalid): redone by the plain leapfrog, its NaN rejection
    assert lock[-1].tolist() == fused[-1].tolist() == [False, True, False]
    for a, b in zip(lock, plain):
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=0, equal_nan=True)
    for a, b in zip(lock[:-1], fused[:-1]):
        torch.testing.assert_close(a[[0, 2]], b[[0, 2]], rtol=1e-5, atol=0)


@pytest.mark.parametrize("steps", [None, torch.tensor([6, 4, 1])], ids=["fixed", "jittered"])
def test_a_slot_gets_bitwise_the_same_trajectory_in_any_company(gamma_fast, steps):
    together, _, _ = lockstep_run(gamma_fast, [0, 1, 2], steps)
    for slots in ([2, 0, 1], [2, 0], [0], [2]):
        alone, _, _ = lockstep_run(gamma_fast, slots, steps)
        assert_identical(alone, tuple(t[slots] for t in together))


def test_lockstep_plans_the_batches_and_says_why_not(gamma_fast, monkeypatch):
    plan = gamma_fast.lockstep.plan(11, torch.float32, CPU)  # max_batch 8
    # the last 3 slots padded to a batch of 4: the sizes compiled are powers of two, so that a
    # ladder growing from 8 to 14 rungs compiles 2, 4 and 8 only
    assert [(first, last, size) for first, last, size, _ in plan] == [(0, 8, 8), (8, 11, 4)]
    assert [entry[:3] for entry in gamma_fast.lockstep.plan(1, torch.float32, CPU)] == [(0, 1, 2)]
    assert {lockstep_module.batch_size(n, 8) for n in range(1, 9)} == {2, 4, 8}
    assert lockstep_module.batch_size(5, 6) == 6 and lockstep_module.batch_size(3, 3) == 3
    torchscript = FunctionalSplit(gamma_split(), compile="torchscript", batched="loop")
    assert torchscript.lockstep.plan(3, torch.float32, CPU) is None
    assert "Inductor" in torchscript.lockstep.reason
    monkeypatch.setattr(lockstep_module, "MAX_FLOPS", -1)
    fresh = lockstep_module.Lockstep(gamma_fast.batched)
    assert fresh.plan(3, torch.float32, CPU) is None
    assert "flops per evaluation exceed" in fresh.reason


def engine_run(fast, groups, iterations=80, warmup=40):
    """Slots split into engines by ``groups`` with swaps across them; draws in slot order."""
    betas = torch.tensor(GAUSSIAN_BETAS, dtype=F64)
    z = torch.zeros(len(betas), 3, dtype=F64)
    engines = []
    for slots in groups:
        hmc = BatchedHMC(fast.batched_potential_and_grad, fused_step=fast.fused.step,
                         lockstep=fast.lockstep.plan)
        hmc.setup(z[slots], betas[slots], [21 + k for k in slots], warmup)
        assert hmc.leapfrog == "lockstep", fast.lockstep.reason
        engines.append(hmc)
    history = []
    for t in range(iterations):
        out = [hmc.step(z[slots]) for hmc, slots in zip(engines, groups)]
        z = torch.cat([state.z for state, _ in out])
        history.append(z)
        if t in (20, 50):
            z = z[[1, 0, 3, 2]] if t == 20 else z[[0, 2, 1, 3]]
            for hmc, slots in zip(engines, groups):
                hmc.replace_states(range(len(slots)))
    return history, engines


def test_lockstep_draws_do_not_depend_on_how_slots_are_batched(gaussian_fast):
    together, _ = engine_run(gaussian_fast, [[0, 1, 2, 3]])
    split, _ = engine_run(gaussian_fast, [[0], [1, 2, 3]])
    for a, b in zip(together, split):
        assert torch.equal(a, b)


def test_lockstep_samples_exact_tempered_posteriors(gaussian_fast):
    _, engines = engine_run(gaussian_fast, [[0, 1, 2, 3]], iterations=0, warmup=400)
    hmc = engines[0]
    z = torch.zeros(4, 3, dtype=F64)
    draws = []
    for t in range(4400):
        z = hmc.step(z)[0].z
        if t >= 400:
            draws.append(z)
    assert_matches_posterior(gaussian(), GAUSSIAN_BETAS, torch.stack(draws))
    assert all(d["divergences"] == [] for d in hmc.diagnostics())


def test_parallel_tempering_reports_the_lockstep_leapfrog():
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(gamma_factor_model, num_replicas=2, explorer="hmc",
                               compile="inductor", init_strategy=lambda site: torch.tensor(1.0))
    MCMC(kernel, num_samples=5, warmup_steps=5, disable_progbar=True).run(
        torch.tensor([0.5, 2.0]))
    assert kernel.explorer_info["leapfrog"] == "lockstep"
    assert kernel.explorer_info["leapfrog_reason"] == ""


def test_a_tempered_prior_in_lockstep_fails_the_posterior_check(monkeypatch):
    temper_the_prior_in_batched_hmc(monkeypatch)  # before the capture: in the compiled step
    fast = FunctionalSplit(ModelSplit(gaussian_model, (gaussian().y,)), compile="inductor",
                           batched="loop")
    with pytest.raises(AssertionError):
        test_lockstep_samples_exact_tempered_posteriors(fast)


def gamma_lockstep_run(seed=3, draws=20):
    """Samples of 3 rungs of the gamma factor model in lockstep, and whether each batch of
    the plan has a C++ loop."""
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(gamma_factor_model, num_replicas=3, explorer="hmc",
                               compile="inductor", init_strategy=lambda site: torch.tensor(1.0))
    mcmc = MCMC(kernel, num_samples=draws, warmup_steps=draws, disable_progbar=True)
    mcmc.run(torch.tensor([0.5, 2.0]))
    assert kernel.explorer_info["leapfrog"] == "lockstep"
    plan = kernel.run.rungs.explorers[0].group.engine._plan()
    return mcmc.get_samples(), [step.loop is not None for *_, step in plan]


def test_the_cxx_loop_draws_what_the_python_loop_draws(monkeypatch):
    native, loops = gamma_lockstep_run(seed=4, draws=30)
    assert all(loops)  # the C++ loop was built and passed its check
    monkeypatch.setattr(lockstep_module, "native_loop", lambda run: None)
    python, loops = gamma_lockstep_run(seed=4, draws=30)
    assert not any(loops)
    assert all(torch.equal(native[k], python[k]) for k in native)
