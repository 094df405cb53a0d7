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

from .models import (bimodal_mass_above_zero, bimodal_model, linear_data, linear_model,
                     linear_posterior, sum_data, sum_log_evidence, sum_model)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # short runs, small ladders


def _run(model, args, ladders, samples, warmup, seed=0, **kwargs):
    pyro.set_rng_seed(seed)
    kwargs.setdefault("num_replicas", 4)
    kernel = ParallelTempering(model, num_ladders=ladders, **kwargs)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    mcmc.run(*args)
    return kernel, mcmc


def test_mcmc_records_each_ladders_cold_draws_in_blocks():
    """N = 301 draws from 3 ladders: 101 scans each, MCMC holding ladder 0's 101 cold draws,
    ladder 1's 101, then ladder 2's first 99; each ladder warmed up for ceil(40 / 3) scans."""
    kernel, mcmc = _run(linear_model, linear_data(), 3, 301, 40)
    runs, ensemble = kernel.run.together, kernel.ensemble
    assert len(runs) == 3 and all(run.scans == 14 + 101 for run in runs)
    assert all(run.warmup_steps == 14 for run in runs)
    samples = mcmc.get_samples()["w"]
    assert samples.shape == (301, 2)
    blocks = [torch.stack([d["w"] for d in draws]) for draws in ensemble.draws]
    assert torch.equal(samples, torch.cat(blocks)[:301])
    # the ladders are independent: their cold chains differ
    assert not torch.equal(blocks[0], blocks[1])
    # the records MCMC's draws come from: the kernel's tours cover exactly them
    assert kernel._records().tours.num_draws == 301


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
    assert d["tempering_record"]["log_likelihood"].shape == (3 * 50, 4)
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
    kernel, mcmc = _run(linear_model, (x, y), 4, 800, 200)
    mean, cov = linear_posterior(x, y)
    w = mcmc.get_samples()["w"].double()
    error = kernel.diagnostics()["mcse"]["w"]
    assert torch.all((w.mean(0) - mean).abs() < 4 * error + 1e-3)
    assert torch.allclose(w.var(0), cov.diagonal(), rtol=0.3)


@pytest.mark.slow
def test_the_ensemble_weighs_modes_and_finds_the_evidence():
    """Mode weight of the bimodal model, and log Z of a model with exact evidence, within 4 of
    their stated (pooled) errors."""
    kernel, mcmc = _run(bimodal_model, (), 4, 2000, 800, num_replicas=6)
    above = (mcmc.get_samples()["theta"] > 0).double()
    error = float(kernel.mcse(above))
    assert abs(float(above.mean()) - bimodal_mass_above_zero()) < 4 * error
    y = sum_data()
    kernel, _ = _run(sum_model, (y,), 4, 1200, 600, num_replicas=8)
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


@pytest.mark.parametrize("kwargs, named", [
    (dict(num_replicas="auto"), "num_replicas='auto'"),
    (dict(max_replicas=16), "max_replicas"),
    (dict(num_replicas=4, reference="variational"), "reference"),
    (dict(num_replicas=4, checkpoint_every=10, checkpoint_path="x.pt"), "checkpoint_every"),
])
def test_what_an_ensemble_does_not_support_yet_is_refused(kwargs, named):
    with pytest.raises(ValueError, match=named):
        ParallelTempering(linear_model, num_ladders=2, **kwargs)


def test_an_ensemble_does_not_grow_and_refuses_a_checkpoint(tmp_path):
    kernel, _ = _run(linear_model, linear_data(), 2, 10, 10, num_replicas=None)
    assert kernel.num_replicas == 8 and kernel.run.growth is None
    with pytest.raises(ValueError, match="num_ladders=1 to checkpoint"):
        kernel.checkpoint(tmp_path / "run.pt")
    with pytest.raises(ValueError, match="num_ladders must be 1"):
        ParallelTempering.resume(tmp_path / "run.pt", linear_model, num_ladders=2)


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
