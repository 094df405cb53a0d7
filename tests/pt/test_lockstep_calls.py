"""The lockstep step's call: the generated code without AOTAutograd's wrappers, and the
lockstep evaluation of swapped states.

:func:`~pyro_pt.potential.inductor.inductor_compile` calls Inductor's generated code directly,
with the graph's lifted constants it recorded (:func:`~pyro_pt.potential.direct_call.direct_call`);
:func:`~pyro_pt.explorers.hmc_dynamics.evaluate_lockstep` re-evaluates states a swap put in
place through the lockstep step (zero momentum, zero step). Under Inductor only (slow).
"""

import pytest
import torch

from pyro_pt.explorers.hmc import BatchedHMC
from pyro_pt.explorers.hmc_dynamics import evaluate_lockstep
from pyro_pt.potential import FunctionalSplit

from .test_leapfrog_speed import BETAS, assert_identical, gamma_split

pytestmark = pytest.mark.slow
CPU = torch.device("cpu")
STATES = torch.tensor([[1.0], [0.4], [2.0]])


@pytest.fixture(scope="module")
def gamma_fast():
    fast = FunctionalSplit(gamma_split(), compile="inductor", batched="loop")
    assert fast.compiled.engine == "inductor", fast.compiled.engine_reason
    return fast


def plan(fast, num_slots):
    out = fast.lockstep.plan(num_slots, torch.float32, CPU)
    assert out is not None, fast.lockstep.reason
    return out


def test_the_step_is_called_without_the_wrappers_and_gives_their_numbers(gamma_fast):
    step = plan(gamma_fast, 3)[0][3]
    assert step.direct is not None  # found on this torch; None would mean the wrapped call
    run, constants = step.direct
    assert all(isinstance(c, torch.Tensor) for c in constants)
    # a state the check points never saw, with one slot past its last step
    args = (torch.tensor(2), torch.tensor([3, 1, 2]), STATES + 0.25,
            torch.tensor([[0.3], [-1.0], [0.5]]), torch.zeros(3), torch.zeros(3, 1),
            torch.zeros(3), torch.zeros(3, dtype=torch.bool), torch.full((3, 1), 0.1),
            torch.full((3,), 0.1), torch.full((3,), 0.05), BETAS.clone())
    direct = step(*args)
    wrapped = tuple(step.fn(*args))
    assert_identical(direct, wrapped)
    assert direct[0][1].item() == args[2][1].item()  # slot 1 (n = 1 < i = 2) is carried


def test_lockstep_evaluation_is_the_potential_and_the_same_in_any_company(gamma_fast):
    potential, grad, ll = gamma_fast.batched_potential_and_grad(STATES, BETAS)
    out = evaluate_lockstep(plan(gamma_fast, 3), STATES, BETAS)
    assert not out[3].any()
    for value, reference in zip(out[:3], (potential, grad, ll)):
        torch.testing.assert_close(value, reference, rtol=1e-5, atol=0)
    for slots in ([2, 0, 1], [1], [0, 2]):
        alone = evaluate_lockstep(plan(gamma_fast, len(slots)), STATES[slots], BETAS[slots])
        assert_identical(alone, tuple(t[slots] for t in out))


def test_a_swapped_in_state_gets_the_lockstep_potential_or_the_nan_semantics(gamma_fast):
    hmc = BatchedHMC(gamma_fast.batched_potential_and_grad,
                     fused_step=gamma_fast.fused.step, lockstep=gamma_fast.lockstep.plan)
    hmc.setup(STATES, BETAS, [1, 2, 3], 0)
    assert hmc.leapfrog == "lockstep"
    # slot 0 gets slot 2's state, slot 1 an invalid one (a <= 0: the traced path's NaN)
    z = torch.tensor([[2.0], [-0.5], [2.0]])
    hmc.replace_states([0, 1])
    hmc._refresh(z)
    lock = evaluate_lockstep(plan(gamma_fast, 3), z, BETAS)
    assert lock[3].tolist() == [False, True, False]
    assert hmc._potential[0] == lock[0][0] and torch.equal(hmc._grad[0], lock[1][0])
    potential, grad, ll = gamma_fast.batched_potential_and_grad(z[1:2], BETAS[1:2])
    assert_identical((hmc._potential[1:2], hmc._grad[1:2], hmc._ll[1:2]), (potential, grad, ll))
    assert not torch.isfinite(hmc._potential[1])
