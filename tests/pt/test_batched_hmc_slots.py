"""BatchedHMC's slots: draws that do not depend on how slots are batched into engines (CPU and
CUDA), NaN rows that reject without touching the other slots, replaced states and betas, and
errors that name the slot."""

import math

import pytest
import torch

from pyro_pt.explorers.hmc import BatchedHMC
from pyro_pt.explorers.hmc_dynamics import row_sum

from .tempered_gaussian import F64, gaussian, run


def run_placed(groups, jitter):
    """
    Slots split into engines by ``groups``, with a ladder change in warmup and swaps that
    cross engine boundaries: all draws, ll and diagnostics, in slot order.
    """
    target = gaussian()
    num = sum(len(slots) for slots in groups)
    betas = torch.linspace(1.0, 0.05, num, dtype=F64)
    seeds = [101 + k for k in range(num)]
    z = torch.zeros(num, 3, dtype=F64)
    engines = []
    for slots in groups:
        # jitter None: adapted trajectory lengths (ChEES), jittered on (0, T]
        kwargs = {} if jitter is None else {"num_steps": 3, "num_steps_jitter": jitter}
        hmc = BatchedHMC(target, **kwargs)
        hmc.setup(z[slots], betas[slots], [seeds[k] for k in slots], 60)
        engines.append(hmc)
    swap = list(range(num))
    swap[0], swap[1], swap[2] = 1, 2, 0  # accepted swaps 1 <-> 2 and 0 <-> 1
    history = []
    for t in range(100):
        out = [hmc.step(z[slots]) for hmc, slots in zip(engines, groups)]
        z = torch.cat([state.z for state, _ in out])
        history.append((z, torch.cat([state.ll for state, _ in out]),
                        torch.cat([info.accepted for _, info in out])))
        if t == 20:  # ladder adaptation: slots 1 and 2 get new betas
            betas = betas.clone()
            betas[1:3] = torch.tensor([0.9, 0.8])
            for hmc, slots in zip(engines, groups):
                hmc.set_betas(betas[slots])
        if t in (30, 65, 80):
            z = z[swap]
            for hmc, slots in zip(engines, groups):
                hmc.replace_states([i for i, k in enumerate(slots) if k in (0, 1, 2)])
    diagnostics = [d for hmc in engines for d in hmc.diagnostics()]
    if jitter is None:  # the adapted lengths are in the diagnostics, compared too
        assert all(d["trajectory length"] > 0 for d in diagnostics)
    step_sizes = torch.cat([hmc.step_sizes for hmc in engines])
    inverse_mass = torch.cat([hmc.inverse_mass for hmc in engines])
    return history, diagnostics, step_sizes, inverse_mass


@pytest.mark.parametrize("jitter", [0.0, 0.5, None])
@pytest.mark.parametrize("together, split", [
    ([[0, 1, 2, 3]], [[0, 1], [2, 3]]),
    # 64 slots: long enough vectors that torch's CPU kernels take their vectorized paths
    ([list(range(64))], [[0, 1], list(range(2, 64))]),
])
def test_draws_do_not_depend_on_how_slots_are_batched(together, split, jitter):
    together = run_placed(together, jitter)
    split = run_placed(split, jitter)
    for (za, lla, acca), (zb, llb, accb) in zip(together[0], split[0]):
        assert torch.equal(za, zb) and torch.equal(lla, llb) and torch.equal(acca, accb)
    assert together[1] == split[1]
    assert torch.equal(together[2], split[2]) and torch.equal(together[3], split[3])
    # The run adapted (a slow window ended at 54) and the swaps moved states.
    assert not torch.equal(together[3], torch.ones_like(together[3]))


def test_row_sum_is_batch_invariant():
    x = torch.randn(8, 40000, dtype=F64)
    whole = row_sum(x)
    assert torch.equal(whole, torch.cat([row_sum(x[r: r + 1]) for r in range(8)]))
    assert torch.allclose(whole, x.sum(-1))


class HolePotential:
    """The Gaussian, but the slot at ``beta`` has holes: NaN potential, NaN gradient, +inf."""

    def __init__(self, target, beta, hole):
        self.target, self.beta, self.hole = target, beta, hole
        self.saw_non_finite_input = False

    def __call__(self, z, betas):
        self.saw_non_finite_input |= not bool(torch.isfinite(z).all())
        potential, grad, ll = self.target(z, betas)
        mine = betas == self.beta
        nan = torch.full_like(potential, math.nan)
        potential = torch.where(mine & (z[:, 0] > self.hole[0]), nan, potential)
        grad = torch.where((mine & (z[:, 1] < self.hole[1]))[:, None], math.nan, grad)
        potential = torch.where(mine & (z[:, 2] > self.hole[2]), math.inf, potential)
        return potential, grad, ll


def test_nan_slot_rejects_and_leaves_other_slots_alone():
    target = gaussian()
    mean, var = target.posterior(0.5)
    sd = var.sqrt()
    hole = (mean[0] + 0.5 * sd[0], mean[1] - sd[1], mean[2] + sd[2])
    holes = HolePotential(target, 0.5, hole)
    start = torch.stack([target.posterior(b)[0] for b in (1.0, 0.5, 0.2)])
    hmc, draws, lls = run(holes, [1.0, 0.5, 0.2], [1, 2, 3], 100, 300, start, num_steps=4)
    _, clean, clean_lls = run(target, [1.0, 0.2], [1, 3], 100, 300, start[[0, 2]], num_steps=4)
    assert torch.equal(draws[:, [0, 2]], clean) and torch.equal(lls[:, [0, 2]], clean_lls)
    holed = draws[:, 1]
    assert torch.isfinite(holed).all() and torch.isfinite(lls[:, 1]).all()
    assert (holed[:, 0] <= hole[0]).all() and (holed[:, 1] >= hole[1]).all()
    assert (holed[:, 2] <= hole[2]).all()
    diagnostics = hmc.diagnostics()
    assert len(diagnostics[1]["divergences"]) > 0 and diagnostics[1]["acceptance rate"] > 0.2
    assert len(diagnostics[0]["divergences"]) == len(diagnostics[2]["divergences"]) == 0
    assert not holes.saw_non_finite_input
    assert holed[:, 0].std() > 0.2 * sd[0]  # it still moves


class Spy:
    def __init__(self, potential):
        self.potential, self.calls = potential, []

    def __call__(self, z, betas):
        self.calls.append((z.clone(), betas.clone()))
        return self.potential(z, betas)


@pytest.mark.parametrize("announce", [True, False])
def test_next_step_starts_from_replaced_states(announce):
    spy = Spy(gaussian())
    hmc = BatchedHMC(spy, num_steps=3)
    z = torch.zeros(3, 3, dtype=F64)
    hmc.setup(z, torch.tensor([1.0, 0.5, 0.2], dtype=F64), [1, 2, 3], 10)
    for _ in range(5):
        z = hmc.step(z)[0].z
    spy.calls.clear()
    hmc.step(z)
    assert len(spy.calls) == 3 and not torch.equal(spy.calls[0][0], z)  # cached: no re-evaluation

    swapped = z[[2, 1, 0]] + torch.tensor([[0.0], [0.0], [0.25]], dtype=F64)
    if announce:
        hmc.replace_states([0, 2])
    spy.calls.clear()
    (new, ll), _ = hmc.step(swapped)
    assert len(spy.calls) == 4 and torch.equal(spy.calls[0][0], swapped)

    hmc.set_betas([1.0, 0.6, 0.2])
    spy.calls.clear()
    (after, ll), _ = hmc.step(new)
    first_z, first_betas = spy.calls[0]
    # only slot 1's beta changed: it alone is re-evaluated, at the new beta (the potential is
    # batch-invariant, so its numbers do not depend on which rows share the call)
    assert torch.equal(first_z, new[[1]])
    assert torch.equal(first_betas, torch.tensor([0.6], dtype=F64))
    assert torch.equal(ll, gaussian()(after, first_betas)[2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kwargs", [{"num_steps": 3}, {}], ids=["fixed", "adaptive"])
def test_cuda_matches_itself_across_batching(kwargs):
    target = gaussian()
    results = []
    for groups in ([[0, 1, 2]], [[0], [1, 2]]):
        draws = []
        for slots in groups:
            hmc = BatchedHMC(target, **kwargs)
            z = torch.zeros(len(slots), 3, dtype=F64, device="cuda")
            hmc.setup(z, [[1.0, 0.5, 0.2][k] for k in slots], [9 + k for k in slots], 50)
            for _ in range(80):
                (z, ll), _ = hmc.step(z)
            assert z.device.type == "cuda" and ll.device.type == "cuda"
            draws.append(z)
        results.append(torch.cat(draws).cpu())
    assert torch.equal(results[0], results[1])


def test_bad_input_is_named():
    target = gaussian()
    with pytest.raises(ValueError, match=r"slot\(s\) \[1\]"):
        BatchedHMC(HolePotential(target, 0.5, (-10.0, -10.0, 10.0))).setup(
            torch.zeros(2, 3, dtype=F64), [1.0, 0.5], [1, 2], 10)
    with pytest.raises(ValueError, match="seeds"):
        BatchedHMC(target).setup(torch.zeros(2, 3, dtype=F64), [1.0, 0.5], [1], 10)
    with pytest.raises(ValueError, match="num_steps"):
        BatchedHMC(target, num_steps=0)
    hmc = BatchedHMC(target)
    hmc.setup(torch.zeros(2, 3, dtype=F64), [1.0, 0.5], [1, 2], 10)
    with pytest.raises(ValueError, match="as given to setup"):
        hmc.step(torch.zeros(2, 3))
