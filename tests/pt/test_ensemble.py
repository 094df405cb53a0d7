"""num_ladders > 1 (pyro_pt.ensemble): independent ladders stepped in one call, what MCMC
records of them (contiguous blocks), the pooled adaptation and statistics, against exact
answers and against each ladder's own records."""

import math

import pytest
import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt.explorers import by_group
from pyro_pt.regeneration import ColdTours

from . import test_checkpoint as ckpt
from .test_kernel_barrier import sufficient_model
from .models import (bimodal_mass_above_zero, bimodal_model, linear_data, linear_model,
                     linear_posterior, sum_data, sum_log_evidence, sum_model, sum_posterior)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # short runs, small ladders


def _run(model, args, ladders, samples, warmup, seed=0, **kwargs):
    pyro.set_rng_seed(seed)
    kwargs.setdefault("num_replicas", 4)
    kernel = ParallelTempering(model, num_ladders=ladders, **kwargs)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(*args)
    return kernel, mcmc


def test_mcmc_records_each_ladders_thinned_cold_draws_in_blocks():
    """N = 301 draws from 3 ladders: each ladder warms up for 40 scans and samples for 303
    (101 x 3); MCMC holds ladder 0's every third cold draw (101), ladder 1's, then ladder 2's
    first 99."""
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_ladders=3, num_replicas=4)
    colds, scan = [], kernel._scan

    def recording(runs):  # every scan's cold states, per ladder
        out = scan(runs)
        colds.append([c["w"] for c in out])
        return out

    kernel._scan = recording
    mcmc = MCMC(kernel, num_samples=301, warmup_steps=40, disable_progbar=True)
    mcmc.run(*linear_data())
    runs, ensemble = kernel.run.together, kernel.ensemble
    assert len(runs) == 3 and all(run.scans == 40 + 303 for run in runs)
    assert all(run.warmup_steps == 40 for run in runs)
    samples = mcmc.get_samples()["w"]
    assert samples.shape == (301, 2)
    sampling = torch.stack([torch.stack(c) for c in colds[40:]])  # [303 scans, 3 ladders, 2]
    held = torch.cat([sampling[2::3, c] for c in range(3)])[:301]
    assert torch.equal(samples, held)
    # the ladders are independent: their cold chains differ
    assert not torch.equal(sampling[:, 0], sampling[:, 1])
    # the records MCMC's draws come from: the kernel's tours cover exactly them, and the
    # tempering record has their rows, while log Z reads every scan
    assert kernel._records().tours.num_draws == 301
    record = kernel.diagnostics()["tempering_record"]
    rows = [torch.tensor(run.recorder.round_ll, dtype=torch.float64) for run in runs]
    assert torch.equal(record["log_likelihood"], torch.cat([r[2::3] for r in rows])[:301])
    # each held draw's swap outcomes: each pair's mean over the 3 scans it stands for (DEO
    # tries the even pairs on even scans, the odd ones on odd scans)
    swaps = torch.tensor(runs[1].recorder.swap_record, dtype=torch.float64)
    assert torch.equal(record["swap_accepted"][101 + 5], swaps[15:18].nanmean(0))
    assert not record["swap_accepted"].isnan().any()


def test_every_ladders_tempered_rungs_step_in_one_group_on_one_shared_ladder():
    kernel, _ = _run(linear_model, linear_data(), 3, 30, 40, max_temperature=math.inf)
    explorers = [e for run in kernel.run.together for e in run.rungs.explorers]
    groups = by_group(explorers)
    # one batched group for the 3 x 3 tempered rungs, and each ladder's prior rung apart
    assert sorted(len(members) for _, members in groups) == [1, 1, 1, 9]
    betas = kernel.betas
    for run in kernel.run.together:
        assert run.ladder is kernel.run.ladder
        assert [e.beta for e in run.rungs.explorers] == betas
    # the pooled adaptation moved the ladder once per warmup round
    assert len(kernel.adaptation_history) == len(kernel.run.schedule.warmup_ends)


def test_pooled_statistics_add_up_the_ladders_records():
    kernel, mcmc = _run(bimodal_model, (), 3, 150, 60)
    runs = kernel.run.together
    d = kernel.diagnostics()
    assert d["num_ladders"] == 3
    assert d["restarts"] == sum(run.recorder.index.restarts for run in runs)
    assert d["round_trips"] == sum(run.recorder.index.round_trips for run in runs)
    attempts = [sum(run.recorder.phase.attempts[p] for run in runs) for p in range(3)]
    accepted = [sum(run.recorder.phase.prob_sum[p] for run in runs) for p in range(3)]
    assert d["swap_acceptance"] == pytest.approx([a / n for a, n in zip(accepted, attempts)])
    assert d["tempering_record"]["log_likelihood"].shape == (150, 4)  # MCMC's draws' rows
    # mcse of a function of MCMC's draws: over every ladder's tours, numbered apart
    above = kernel.mcse(lambda s: (s["theta"] > 0).double(), samples=mcmc.get_samples())
    tours = sum(len(run.recorder.tours.sums) for run in runs)
    assert d["mcse_tours"] == tours and math.isfinite(float(above))


def test_merged_tours_have_the_moments_of_all_the_draws():
    generator = torch.Generator().manual_seed(0)
    parts, draws = [], []
    for size in (5, 9, 1):
        part = ColdTours()
        for i in range(size):
            value = torch.randn(3, generator=generator, dtype=torch.float64)
            part.add({"x": value}, tour=i // 2)
            draws.append(value)
        parts.append(part)
    merged = ColdTours.merged(parts)
    whole = torch.stack(draws)
    mean, sd, _ = merged.summary()
    assert torch.allclose(mean["x"], whole.mean(0), atol=1e-12)
    assert torch.allclose(sd["x"], whole.std(0), atol=1e-12)
    # tours are the parts' own: 3 + 5 + 1
    assert len(merged.sums) == 9 and merged.num_draws == 15


def test_the_ensemble_samples_the_exact_posterior():
    x, y = linear_data()
    kernel, mcmc = _run(linear_model, (x, y), 4, 200, 50)
    mean, cov = linear_posterior(x, y)
    w = mcmc.get_samples()["w"].double()
    error = kernel.diagnostics()["mcse"]["w"]
    assert torch.all((w.mean(0) - mean).abs() < 4 * error + 1e-3)
    assert torch.allclose(w.var(0), cov.diagonal(), rtol=0.3)


@pytest.mark.slow
def test_the_ensemble_weighs_modes_and_finds_the_evidence():
    """Mode weight of the bimodal model, and log Z of a model with exact evidence, within 4 of
    their stated (pooled) errors."""
    kernel, mcmc = _run(bimodal_model, (), 4, 500, 200, num_replicas=6)
    above = (mcmc.get_samples()["theta"] > 0).double()
    error = float(kernel.mcse(above))
    assert abs(float(above.mean()) - bimodal_mass_above_zero()) < 4 * error
    y = sum_data()
    kernel, _ = _run(sum_model, (y,), 4, 300, 150, num_replicas=8)
    d = kernel.diagnostics()
    assert abs(d["log_Z"] - sum_log_evidence(y)) < 4 * d["log_Z_error"]


def test_same_seed_same_draws():
    a = _run(linear_model, linear_data(), 2, 40, 20, seed=3)[1].get_samples()["w"]
    b = _run(linear_model, linear_data(), 2, 40, 20, seed=3)[1].get_samples()["w"]
    assert torch.equal(a, b)


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_num_ladders_must_be_a_positive_int(value):
    with pytest.raises(ValueError, match="num_ladders must be a positive int"):
        ParallelTempering(linear_model, num_ladders=value)


def test_a_fitted_reference_is_every_ladders_fitted_to_all_their_draws(monkeypatch):
    """reference="variational" with 3 ladders of a stabilized ladder (3 rungs to q, 2 to the
    prior): every ladder's rungs on q's leg step in one group against the one q, fitted at the
    warmup rounds' ends to every ladder's cold draws; each rung's pooled mean ll matches its
    closed form under the final q, the cold chain the posterior, log Z the evidence."""
    from pyro_pt.reference.gaussian import GaussianReference
    from pyro_pt.reference.refit import LINEAGES_PER_LADDER
    from .test_reference import _rung_errors

    fitted, fit = [], GaussianReference.fit

    def recorded(self, draws, independent=False, lineages=None):
        if lineages is not None:  # a fit to the cold draws (not q's first, to prior draws)
            fitted.append((draws.shape[0], set((lineages // LINEAGES_PER_LADDER).tolist())))
        return fit(self, draws, independent, lineages)

    monkeypatch.setattr(GaussianReference, "fit", recorded)
    torch.set_num_threads(1)
    y = sum_data()
    kernel, mcmc = _run(sum_model, (y,), 3, 600, 200, num_replicas=5, reference="variational")
    assert kernel.explorer_info["legs"].startswith("stabilized: 3 rungs from the posterior to q")
    groups = {}
    for c, run in enumerate(kernel.run.together):
        for k, explorer in enumerate(run.rungs.explorers):
            if k not in (2, 4):  # the prior rungs (q's and the prior's) draw on their own
                groups.setdefault(id(explorer.group), []).append((c, k))
    assert sorted(groups.values()) == [[(c, k) for c in range(3) for k in (0, 1)],
                                       [(c, 3) for c in range(3)]]
    # each fit: the cold draws of a round (or more) of every ladder
    assert kernel.run.reference.fits >= 2
    assert fitted and all(n % 3 == 0 and ladders == {0, 1, 2} for n, ladders in fitted), fitted
    errors = _rung_errors(kernel, mcmc, y)
    assert max(abs(e) for e in errors) < 4.5, errors
    assert abs(kernel.diagnostics()["log_Z"] - sum_log_evidence(y)) < 0.1
    theta = mcmc.get_samples()["theta"]
    mean, cov = sum_posterior(y)
    ratio = theta.var(0) / cov.diagonal()
    assert ((ratio > 0.7) & (ratio < 1.4)).all(), ratio


# ----- checkpoints -----

# 3 ladders, 20 warmup calls and 13 draws (blocks of 5, the last cut to 3): calls 4 (the first
# round's end: the ladder has just adapted), 20 (the end of warmup), 22 (in the first block's
# calls, which scan 3 times each) and 27 (after them: the draws are all made, and held)
ENSEMBLE = {"num_ladders": 3, "num_replicas": 4, "max_temperature": math.inf,
            "explorer_kwargs": {"num_steps": 3}}
CALLS = (4, 20, 22, 27)


def _checkpointed(kernel, tmp_path, calls=CALLS, warmup=20, samples=13):
    paths = {c: str(tmp_path / f"call{c}.pt") for c in calls}
    return ckpt.run(kernel, warmup, samples, write=paths), paths


def _with_log_z(result, kernel):
    return {**result, "log_Z": kernel.diagnostics()["log_Z"]}


@pytest.mark.parametrize("kwargs", [
    ENSEMBLE, {"num_ladders": 3},
    {**ENSEMBLE, "num_replicas": 5, "max_temperature": None, "reference": "variational"},
], ids=["fixed", "growing", "stabilized"])
def test_a_resumed_ensemble_is_the_uninterrupted_run(kwargs, tmp_path):
    """Each checkpoint holds every ladder's run and the draws held for later calls: the
    resumed run's draws, pooled records, adaptation, report and log Z are the rest of the
    uninterrupted run's, bit for bit (the default kernel grows its ladder in warmup; the
    stabilized one refits q to every ladder's draws)."""
    torch.set_num_threads(1)
    full, paths = _checkpointed(ParallelTempering(linear_model, **kwargs), tmp_path)
    assert full["w"].shape[0] == 13 and full["swap_accepted"].eq(1).any()
    for call, path in paths.items():
        header, payload = ckpt.read_checkpoint(path)
        assert (header["calls"], header["num_ladders"], len(payload["ladders"])) == (call, 3, 2)
        # scans of each ladder: a scan per warmup call, 3 per call of the first block's 5
        assert header["scans"] == min(call, 20) + 3 * min(max(call - 20, 0), 5)
        kernel = ParallelTempering.resume(path, linear_model)
        resumed = ckpt.run(kernel, max(20 - call, 0), 13 - max(call - 20, 0), seed=123)
        assert kernel.run.num_ladders == 3
        if "reference" in kwargs:  # q fitted at scan 12 to 3 ladders' draws (at 4: too few)
            assert kernel.run.reference.fits == 1 and kernel.run.refitting.skipped == [4]
        assert full["w"].shape[0] - resumed["w"].shape[0] == max(call - 20, 0)
        ckpt.assert_continues(full, resumed)


def test_periodic_checkpoints_of_an_ensemble_leave_it_unchanged(tmp_path):
    """Every 7 scans of each ladder, at the end of the call that passed them (the first
    block's calls make 3 scans each): the run is unchanged, and the last checkpoint resumes."""
    path = tmp_path / "periodic.pt"
    plain = ckpt.run(ParallelTempering(linear_model, **ENSEMBLE), 20, 13)
    full = ckpt.run(ParallelTempering(linear_model, checkpoint_every=7, checkpoint_path=path,
                                      **ENSEMBLE), 20, 13)
    ckpt.assert_continues(plain, full)
    header, _ = ckpt.read_checkpoint(path, payload=False)
    # scans 21, 23, 26, 29, 32, 35: the last multiple of 7 passed is 35, at call 25
    assert (header["scans"], header["calls"]) == (35, 25)
    ckpt.assert_continues(full, ckpt.run(ParallelTempering.resume(path, linear_model), 0, 8))


def test_a_sampling_checkpoint_of_an_ensemble_resumes_for_the_draws_left_only(tmp_path):
    _, paths = _checkpointed(ParallelTempering(linear_model, **ENSEMBLE), tmp_path,
                             calls=(22, 33))
    with pytest.raises(ValueError, match=r"warmup_steps=0, num_samples=11\), not num_samples=20"):
        ckpt.run(ParallelTempering.resume(paths[22], linear_model), 0, 20)
    with pytest.raises(ValueError, match="finished run of 3 ladders"):
        ckpt.run(ParallelTempering.resume(paths[33], linear_model), 0, 5)
    with pytest.raises(ValueError, match="of a run of 3 ladders, but num_ladders=2"):
        ParallelTempering.resume(paths[22], linear_model, num_ladders=2)


def test_a_warmup_checkpoint_of_an_ensemble_resumes_for_any_number_of_draws(tmp_path):
    """In warmup no draw is laid out yet: the resumed run's blocks are its own num_samples'
    (30 draws: blocks of 10), and its warmup the rest of the checkpointed run's."""
    full = ckpt.run(ParallelTempering(linear_model, **ENSEMBLE), 20, 30)
    _, paths = _checkpointed(ParallelTempering(linear_model, **ENSEMBLE), tmp_path, calls=(4,))
    ckpt.assert_continues(full, ckpt.run(ParallelTempering.resume(paths[4], linear_model),
                                         16, 30, seed=5))


def test_the_ladders_grow_together_into_one_group():
    """num_replicas="auto" with 3 ladders from 3 rungs: the pooled barrier grows the shared
    ladder; every ladder gets the new rungs, all of them built in one explorer group, and the
    cold chains stay the exact posterior N(0, 1/(n + 1)) of test_kernel_barrier's model."""
    n = 10**4
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(sufficient_model, num_ladders=3, num_replicas="auto",
                               temperatures=[1.0, 100.0, math.inf])
    mcmc = MCMC(kernel, num_samples=600, warmup_steps=600, disable_progbar=True)
    mcmc.run(n)
    grown = [h["grown_to"] for h in kernel.adaptation_history if "grown_to" in h]
    num = kernel.num_replicas
    assert grown and grown[-1] == num > 3
    runs = kernel.run.together
    assert all([e.beta for e in run.rungs.explorers] == kernel.betas for run in runs)
    # the first two tempered rungs' group, at each growth one group of every ladder's new rungs,
    # and the prior rungs
    groups = by_group([e for run in runs for e in run.rungs.explorers])
    added = [3 * (b - a) for a, b in zip([3] + grown, grown)]
    assert sorted(len(members) for _, members in groups) == sorted([1, 1, 1, 3 * 2] + added)
    # each ladder's new rungs have streams of their own: their states differ
    middle = [run.rungs.states[1]["theta"] for run in runs]
    assert not torch.equal(middle[0], middle[1])
    d = kernel.diagnostics()
    assert d["tempering_record"]["log_likelihood"].shape == (600, num)
    assert d["restarts"] > 0
    theta = mcmc.get_samples()["theta"].double() * math.sqrt(n + 1)
    assert abs(float(theta.mean())) < 4 * float(d["mcse"]["theta"]) * math.sqrt(n + 1) + 0.05
    assert float(theta.var()) == pytest.approx(1.0, rel=0.25)


def test_the_arviz_export_gives_each_ladder_its_chain():
    """N = 60 draws of 3 ladders: 3 chains of 20, each with its ladder's own tempering record
    and restarts, which add up to the pooled ones; ArviZ's R-hat then compares the ladders."""
    from pyro_pt import to_inference_data

    kernel, mcmc = _run(bimodal_model, (), 3, 60, 30)
    data = to_inference_data(mcmc)
    stats, posterior = data["sample_stats"], data["posterior"]
    assert posterior["theta"].shape == (3, 20)
    blocks = [torch.stack([d["theta"] for d in draws]).numpy() for draws in kernel.ensemble.draws]
    assert (posterior["theta"].values == torch.tensor(blocks).numpy()).all()
    assert stats["tempered_log_likelihood"].shape == (3, 20, 4)
    runs = kernel.run.together
    assert list(stats.attrs["restarts"]) == [run.recorder.index.restarts for run in runs]
    assert sum(stats.attrs["restarts"]) == kernel.diagnostics()["restarts"]
    assert data["log_likelihood"]["mixture"].shape == (3, 20)


def test_the_arviz_export_of_a_cut_last_block_is_one_chain():
    from pyro_pt import to_inference_data

    kernel, mcmc = _run(bimodal_model, (), 3, 61, 30)
    stats = to_inference_data(mcmc)["sample_stats"]
    assert stats["tempered_log_likelihood"].shape == (1, 61, 4)
    assert stats.attrs["restarts"][0] == kernel.diagnostics()["restarts"]


def test_a_resumed_ensemble_exports_and_states_errors_for_the_draws_its_mcmc_holds(tmp_path):
    """Resumed in warmup, MCMC holds the whole run: a chain per ladder. Resumed in the sampling
    phase it holds the blocks' ends only: one chain, and mcse over those draws is the
    uninterrupted run's regenerative error over the same draws' tours."""
    from pyro_pt import to_inference_data
    from pyro_pt.regeneration import regenerative_error

    full_kernel = ParallelTempering(linear_model, **ENSEMBLE)
    _, paths = _checkpointed(full_kernel, tmp_path, calls=(4, 22), samples=12)
    # the uninterrupted run's tours, in MCMC's order
    merged = ColdTours.merged([r.recorder.tours for r in full_kernel.run.together]).tours
    for call, chains, draws in ((4, 3, 4), (22, 1, 10)):
        pyro.set_rng_seed(7)
        kernel = ParallelTempering.resume(paths[call], linear_model)
        mcmc = MCMC(kernel, num_samples=12 - max(call - 20, 0), warmup_steps=max(20 - call, 0),
                    disable_progbar=True)
        mcmc.run(*linear_data())
        data = to_inference_data(mcmc, log_likelihood=False)
        assert data["posterior"]["w"].shape[:2] == (chains, draws)
        # the tempering record of the draws MCMC holds (not the whole run's rows)
        assert data["sample_stats"]["tempered_log_likelihood"].shape == (chains, draws, 4)
        w = mcmc.get_samples()["w"][:, 0]
        error = kernel.mcse(lambda s: s["w"][:, 0], samples=mcmc.get_samples())
        assert torch.equal(error, regenerative_error(w.double(), merged[12 - chains * draws:]))


def test_the_report_is_the_ensembles():
    """The first ladder's report (the one printed) reads every ladder: its sampling rows'
    restarts and round trips add up to the pooled ones."""
    kernel, _ = _run(bimodal_model, (), 3, 150, 60)
    report, d = kernel.report, kernel.diagnostics()
    sampling = report[report["phase"] == "sampling"]
    assert sampling["restarts"].iloc[-1] == d["restarts"]
    assert sampling["round_trips"].iloc[-1] == d["round_trips"]
    runs = kernel.run.together
    assert d["restarts"] > max(run.recorder.index.restarts for run in runs)


def test_a_ladder_is_the_same_whatever_the_number_of_ladders():
    """With a fixed ladder (no pooled adaptation) ladder c's every scan is the same in a run of
    1, 2 or 3 ladders: its base seed is derived from the run's whatever C, and the batched
    step gives a slot the same numbers whatever its company."""
    records = {}
    for ladders in (1, 2, 3):
        kernel, _ = _run(bimodal_model, (), ladders, 30, 12, seed=5, adapt_temperatures=False)
        records[ladders] = [run.recorder.round_ll for run in kernel.run.together]
    # sampling scans: C ceil(30 / C) per ladder, 30 each here
    assert records[1][0] == records[2][0] == records[3][0]
    assert records[2][1] == records[3][1]
    assert records[3][2] != records[3][1]


def _big_model(x, y):
    w = pyro.sample("w", pyro.distributions.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", pyro.distributions.Normal(x @ w, 1.0), obs=y)


def test_the_default_runs_eight_ladders_on_a_small_model_and_one_on_a_large_one():
    from pyro_pt.ensemble import DEFAULT_LADDERS, SMALL_MODEL_WORK, graph_work

    kernel, mcmc = _run(linear_model, linear_data(), None, 16, 8)
    info = kernel.explorer_info
    assert info["num_ladders"] == DEFAULT_LADDERS == len(kernel.run.together)
    assert "a small model" in info["num_ladders_reason"]
    assert kernel.diagnostics()["num_ladders"] == DEFAULT_LADDERS
    # the count: a product x @ w of [n, d] by [d] is n d multiply-adds, and its n outputs
    # and the likelihood's elementwise terms grow with n too
    generator = torch.Generator().manual_seed(0)
    sizes = {}
    for n in (100, 200):
        x = torch.randn(n, 600, generator=generator)
        y = torch.randn(n, generator=generator)
        kernel, _ = _run(_big_model, (x, y), None, 2, 2)
        sizes[n] = graph_work(kernel.run.fast)
        assert kernel.explorer_info["num_ladders"] == 1
        assert "above" in kernel.explorer_info["num_ladders_reason"]
    assert sizes[100] > 100 * 600 and sizes[100] > SMALL_MODEL_WORK
    # 100 more points: at least their 100 x 600 multiply-adds more, and less than double
    assert 100 * 600 < sizes[200] - sizes[100] < sizes[100]


@pytest.mark.parametrize("kwargs, why", [
    (dict(explorer="rwmh"), "explorer='hmc'"),
])
def test_the_default_runs_one_ladder_where_an_ensemble_does_not_apply(kwargs, why):
    kernel, _ = _run(linear_model, linear_data(), None, 4, 4, **kwargs)
    assert kernel.explorer_info["num_ladders"] == 1 and kernel.run.together == [kernel.run]
    assert why in kernel.explorer_info["num_ladders_reason"]


def test_pooled_divergences_are_indices_of_mcmcs_draws():
    """A ladder's cold divergence at sampling scan s is its held draw s // C's (the draw
    that stands for scans C i .. C i + C - 1), after the draws of the ladders before it; one
    past the ladder's held draws is dropped."""
    from pyro_pt.ensemble import pooled_rungs

    def rung_summary(divergences):
        return {"divergences": divergences, "acceptance rate": 0.5, "local_acceptance": [0.5],
                "divergences_per_temperature": [len(divergences)]}

    out = pooled_rungs([rung_summary([0, 5, 7]), rung_summary([2, 9])], kept=[3, 2], thinning=3)
    # ladder 0: scans 0, 5, 7 -> draws 0, 1, 2; ladder 1 (after 3 draws): scan 2 -> draw 3,
    # scan 9 -> its draw 3, past its 2 held draws
    assert out["divergences"] == [0, 1, 2, 3]
    assert out["divergences_per_temperature"] == [5]
