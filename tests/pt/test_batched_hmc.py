"""BatchedHMC against exact tempered Gaussian posteriors; placement independence; NaN rows."""

import math

import pytest
import torch

from pyro.ops.welford import WelfordCovariance

from pyro_pt.explorers import hmc as hmc_module
from pyro_pt.explorers.hmc import BatchedHMC
from pyro_pt.explorers.hmc_dynamics import row_sum
from pyro_pt.explorers.hmc_warmup import DualAveraging, warmup_windows

F64 = torch.float64


class TemperedGaussian:
    """
    A conjugate model with a diagonal, anisotropic posterior: ``z_d ~ N(0, s_d^2)`` and
    ``y_nd ~ N(z_d, sigma_d^2)``. Batched and row-independent (elementwise ops and short
    per-row sums), so a row's potential is bitwise the same in any batch.
    """

    def __init__(self, prior_scale, noise, y, tempered_prior=False):
        self.s2 = torch.as_tensor(prior_scale, dtype=F64) ** 2
        self.sigma2 = torch.as_tensor(noise, dtype=F64) ** 2
        self.y = torch.as_tensor(y, dtype=F64)
        self.tempered_prior = tempered_prior  # a bug: beta also on the prior

    def __call__(self, z, betas):
        s2, sigma2, y = (t.to(z) for t in (self.s2, self.sigma2, self.y))
        lp = -0.5 * (z * z / s2).sum(-1)
        resid = y[None] - z[:, None, :]
        ll = -0.5 * (resid * resid / sigma2).sum((-1, -2))
        grad_lp = -z / s2
        grad_ll = (resid / sigma2).sum(1)
        prior_weight = betas[:, None] if self.tempered_prior else 1.0
        potential = -(lp * (betas if self.tempered_prior else 1.0) + betas * ll)
        return potential, -(prior_weight * grad_lp + betas[:, None] * grad_ll), ll

    def posterior(self, beta):
        """Exact mean and variance of ``exp(lp + beta * ll)`` (diagonal)."""
        precision = 1.0 / self.s2 + beta * self.y.shape[0] / self.sigma2
        return beta * (self.y / self.sigma2).sum(0) / precision, 1.0 / precision


def gaussian(tempered_prior=False):
    # Posterior standard deviations from ~0.1 to ~2: a unit mass matrix would need tiny steps.
    y = torch.tensor([[0.3, 1.5, -0.4], [0.1, -2.0, 0.2], [0.4, 0.7, -1.1], [0.2, 2.5, 0.0]])
    return TemperedGaussian([1.0, 2.0, 0.5], [0.2, 3.0, 1.0], y, tempered_prior)


def run(potential, betas, seeds, warmup, samples, start=None, **kwargs):
    hmc = BatchedHMC(potential, **kwargs)
    z = torch.zeros(len(betas), 3, dtype=F64) if start is None else start.clone()
    hmc.setup(z, torch.tensor(betas, dtype=F64), seeds, warmup)
    draws, lls = [], []
    for t in range(warmup + samples):
        (z, ll), _ = hmc.step(z)
        if t >= warmup:
            draws.append(z)
            lls.append(ll)
    return hmc, torch.stack(draws), torch.stack(lls)


def batch_means_z_scores(series, exact, num_batches=40):
    """(mean - exact) / MCSE per column, the MCSE from batch means (autocorrelation-robust)."""
    n = series.shape[0] // num_batches * num_batches
    means = series[:n].reshape(num_batches, -1, *series.shape[1:]).mean(1)
    mcse = means.std(0) / math.sqrt(num_batches)
    return (means.mean(0) - exact) / mcse


def assert_matches_posterior(target, betas, draws, tolerance=4.5):
    for r, beta in enumerate(betas):
        mean, var = target.posterior(beta)
        z = draws[:, r]
        mean_z = batch_means_z_scores(z, mean)
        var_z = batch_means_z_scores((z - mean) ** 2, var)
        assert mean_z.abs().max() < tolerance, (r, beta, mean_z)
        assert var_z.abs().max() < tolerance, (r, beta, var_z)


BETAS = [1.0, 0.5, 0.2, 0.05]
SEEDS = [11, 12, 13, 14]


# Adapted trajectory lengths (the default), and a fixed jittered count. Three steps without
# jitter no longer: once warmup ends at the target acceptance, 3 steps of the preconditioned
# Gaussian are nearly half a period (omega L eps / pi = 0.96 measured), x -> -x, and x^2 hardly
# mixes; the reason explorer="hmc" jitters a fixed num_steps by default.
@pytest.mark.parametrize("kwargs", [{}, {"num_steps": 3, "num_steps_jitter": 0.5}],
                         ids=["adaptive", "fixed"])
def test_samples_exact_tempered_posteriors(kwargs):
    target = gaussian()
    hmc, draws, _ = run(target, BETAS, SEEDS, warmup=400, samples=4000, **kwargs)
    assert_matches_posterior(target, BETAS, draws)
    assert all(d["divergences"] == [] for d in hmc.diagnostics())


@pytest.mark.parametrize("mutant", ["tempered prior", "accept sign", "kinetic without metric"])
def test_known_bugs_fail_the_posterior_check(mutant, monkeypatch):
    tempered_prior = mutant == "tempered prior"
    if mutant == "accept sign":
        flipped = hmc_module.metropolis_probability
        monkeypatch.setattr(hmc_module, "metropolis_probability", lambda r: flipped(-r))
    if mutant == "kinetic without metric":
        monkeypatch.setattr(BatchedHMC, "_kinetic", lambda self, p: 0.5 * row_sum(p * p))
    target = gaussian(tempered_prior)
    _, draws, _ = run(target, BETAS, SEEDS, warmup=400, samples=1600, num_steps=3)
    with pytest.raises(AssertionError):
        assert_matches_posterior(gaussian(), BETAS, draws)


def test_returned_ll_is_the_ll_of_the_returned_states():
    target = gaussian()
    _, draws, lls = run(target, BETAS, SEEDS, warmup=30, samples=60, num_steps=3)
    betas = torch.tensor(BETAS, dtype=F64)
    for z, ll in zip(draws, lls):
        assert torch.equal(ll, target(z, betas)[2])


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


def test_step_size_and_mass_matrix_adapt_to_the_target():
    # Posterior standard deviations 0.1, 0.45 and 14 at beta = 1; 0.1, 1 and 28 at beta = 0.1.
    target = TemperedGaussian([0.1, 1.0, 30.0], [1.0, 0.5, 20.0], torch.zeros(2, 3))
    betas = [1.0, 0.1]
    hmc, _, _ = run(target, betas, [5, 6], warmup=1500, samples=300, num_steps=3)
    for r, beta in enumerate(betas):
        # The last slow window has 1000 autocorrelated draws: ~10% noise on each variance.
        ratio = hmc.inverse_mass[r] / target.posterior(beta)[1]
        assert ((ratio > 0.7) & (ratio < 1.3)).all(), (r, ratio)
    for d in hmc.diagnostics():
        # Above the 0.8 target: dual averaging keeps exp(x_bar), and with a fixed number of
        # steps on a Gaussian the energy error is periodic in the trajectory length.
        assert 0.7 < d["acceptance rate"] < 0.99, d
        assert d["divergences"] == []
    assert float(hmc.logging(1)["acc. prob"]) > 0.7


def test_dual_averaging_finds_the_step_size_with_the_target_acceptance():
    # acceptance exp(-(eps / 2)^2) is 0.8 at eps = 2 sqrt(-log 0.8)
    dual = DualAveraging([0.0, 0.0, 0.0], target_accept_prob=0.8)
    log_eps = dual.log_step_size
    for t in range(3000):
        if t == 1000:  # restarting one slot leaves the others' averages alone
            dual.restart([None, None, 2.0], [2])
            log_eps = dual.log_step_size
        log_eps = dual.update([math.exp(-(math.exp(x) / 2) ** 2) for x in log_eps])
    expected = 2 * math.sqrt(-math.log(0.8))
    for x in dual.final_log_step_size():
        assert abs(math.exp(x) / expected - 1) < 0.02
    assert dual.t == [3000, 3000, 2000]


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


def test_float32_runs_and_keeps_its_dtype():
    target = gaussian()
    hmc = BatchedHMC(target, num_steps=3)
    z = torch.zeros(2, 3)
    ll = hmc.setup(z, [1.0, 0.3], [7, 8], 100)
    assert ll.dtype == torch.float32
    draws = []
    for _ in range(400):
        (z, ll), _ = hmc.step(z)
        draws.append(z)
    assert z.dtype == ll.dtype == hmc.step_sizes.dtype == hmc.inverse_mass.dtype == torch.float32
    draws = torch.stack(draws[100:]).to(F64)
    mean, var = target.posterior(1.0)
    assert ((draws[:, 0].mean(0) - mean).abs() < 0.5 * var.sqrt()).all()


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


def test_stan_windows_and_regularized_variance():
    assert warmup_windows(1000) == [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    assert warmup_windows(100) == [(15, 90)]
    assert warmup_windows(20) == [(3, 10)]  # 10 iterations left for the final step size
    assert warmup_windows(19) == []
    x = torch.randn(50, 2, 4, dtype=F64)
    welford = WelfordCovariance(diagonal=True)  # as HMCWarmup uses it: rows are slots
    for row in x:
        welford.update(row)
    expected = (50 / 55) * x.var(0) + 1e-3 * (5 / 55)
    assert torch.allclose(welford.get_covariance(regularize=True), expected)
