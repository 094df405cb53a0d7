"""MCMC integration: shapes, summary, diagnostics, chains, ArviZ, pickling, reproducibility."""

import json
import math
import warnings
import pickle

import arviz as az
import numpy as np
import pytest
import torch

import pyro
from pyro.infer import MCMC, HMC

from pyro_pt import ParallelTempering, to_inference_data

from .models import constrained_model, linear_data, linear_model


def run(kernel, *args, num_samples=30, warmup_steps=20, seed=0, **mcmc_kwargs):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples, warmup_steps, disable_progbar=True, **mcmc_kwargs)
    mcmc.run(*args)
    return mcmc


@pytest.fixture
def data():
    return linear_data()


def test_shapes_constrained_values_and_diagnostics():
    y = torch.tensor([0.3, 1.2, 0.8, 2.0])
    kernel = ParallelTempering(constrained_model, num_replicas=3, max_temperature=9.0,
                               explorer="rwmh", adapt_temperatures=False)
    mcmc = run(kernel, y)
    samples = mcmc.get_samples()
    assert set(samples) == {"loc", "scale", "frac"}
    assert all(v.shape == (30,) for v in samples.values())
    assert (samples["scale"] > 0).all() and ((samples["frac"] > 0) & (samples["frac"] < 1)).all()
    assert kernel.temperatures == pytest.approx([1.0, 3.0, 9.0])
    assert kernel.betas == pytest.approx([1.0, 1 / 3, 1 / 9])
    diag = mcmc.diagnostics()
    for key in ("divergences", "acceptance rate", "local_acceptance", "swap_acceptance",
                "round_trips", "temperatures", "divergences_per_temperature"):
        assert key in diag, key
    chain = diag["swap_acceptance"]["chain 0"]
    assert len(chain) == 2 and all(0 <= a <= 1 for a in chain)
    assert len(diag["local_acceptance"]["chain 0"]) == 3
    record = diag["tempering_record"]["chain 0"]
    assert record["log_likelihood"].shape == (30, 3)
    assert record["swap_accepted"].shape == (30, 2)
    # DEO: exactly one of the two pairs is attempted each scan.
    attempted = ~torch.isnan(record["swap_accepted"])
    assert (attempted.sum(1) == 1).all()
    # The cold rung's recorded ll is that of the returned sample.
    split_ll = kernel.run.split.log_densities(
        {k: kernel.transforms[k](v[-1]) for k, v in samples.items()}
    )[1]
    assert float(record["log_likelihood"][-1, 0]) == pytest.approx(float(split_ll), rel=1e-5)
    json.dumps(kernel.logging())
    assert kernel.timings["total"] >= kernel.timings["explorers"] > 0


def test_summary_prints(capsys, data):
    mcmc = run(ParallelTempering(linear_model, num_replicas=2, explorer="rwmh"), *data)
    mcmc.summary()
    out = capsys.readouterr().out
    assert "w[0]" in out and "n_eff" in out and "Number of divergences" in out


def test_seeded_runs_are_reproducible_and_seeds_differ(data):
    def draws(seed):
        kernel = ParallelTempering(linear_model, num_replicas=3, explorer="rwmh")
        return run(kernel, *data, seed=seed).get_samples()["w"]

    assert torch.equal(draws(3), draws(3))
    assert not torch.equal(draws(3), draws(4))


def test_two_chains_on_one_kernel_reset_everything(data):
    kernel = ParallelTempering(linear_model, num_replicas=3, explorer="rwmh")
    mcmc = run(kernel, *data, num_chains=2)
    w = mcmc.get_samples(group_by_chain=True)["w"]
    assert w.shape == (2, 30, 2)
    assert not torch.equal(w[0], w[1])
    diag = mcmc.diagnostics()
    for chain in ("chain 0", "chain 1"):
        assert diag["tempering_record"][chain]["log_likelihood"].shape == (30, 3)
        assert diag["local_acceptance"][chain][0] > 0
    assert "r_hat" in diag["w"]


def test_initial_params_and_save_params(data):
    kernel = ParallelTempering(constrained_model, num_replicas=2, explorer="rwmh")
    y = torch.tensor([0.3, 1.2])
    init = {"loc": torch.tensor(0.5), "scale": torch.tensor(0.1), "frac": torch.tensor(-0.2)}
    mcmc = run(kernel, y, initial_params=init, save_params=["scale", "loc"], num_samples=5)
    assert kernel.save_params == ["loc", "scale"]
    assert set(mcmc.get_samples()) == {"loc", "scale"}
    # Every rung started at the user's point.
    with pytest.raises(ValueError, match="save_params names \\['nope'\\]"):
        run(ParallelTempering(constrained_model, num_replicas=2, explorer="rwmh"), y,
            save_params=["nope"])


def test_arviz_from_pyro_and_to_inference_data_round_trip(tmp_path, data):
    kernel = ParallelTempering(linear_model, num_replicas=3, max_temperature=4.0,
                               explorer="rwmh", adapt_temperatures=False)
    mcmc = run(kernel, *data, num_chains=2)
    plain = az.from_pyro(mcmc)
    assert {"posterior", "log_likelihood", "sample_stats", "observed_data"} <= set(plain.groups())
    idata = to_inference_data(mcmc)
    assert {"posterior", "log_likelihood", "sample_stats", "observed_data"} <= set(idata.groups())
    stats = idata.sample_stats
    assert stats["tempered_log_likelihood"].dims == ("chain", "draw", "temperature")
    assert stats["swap_accepted"].dims == ("chain", "draw", "swap_pair")
    assert stats["tempered_log_likelihood"].shape == (2, 30, 3)
    assert list(stats.temperature.values) == pytest.approx([1.0, 2.0, 4.0])
    assert list(stats.beta.values) == pytest.approx([1.0, 0.5, 0.25])
    # The cold rung's ll is the sum of ArviZ's pointwise log-likelihood of the same draws.
    pointwise = idata.log_likelihood["y"].sum("y_dim_0").values
    assert pointwise == pytest.approx(stats["tempered_log_likelihood"].values[..., 0], rel=1e-5)
    path = tmp_path / "pt.nc"
    idata.to_netcdf(str(path))
    loaded = az.from_netcdf(str(path))
    assert loaded.sample_stats["swap_accepted"].shape == (2, 30, 2)
    assert loaded.sample_stats.attrs["log_Z"].shape == (2,)
    assert "relative to the hottest rung" in loaded.sample_stats.attrs["log_Z_meaning"]
    assert list(loaded.sample_stats.temperature.values) == pytest.approx([1.0, 2.0, 4.0])
    az.summary(loaded)


def test_inference_data_keeps_each_chains_adapted_ladder(data):
    kernel = ParallelTempering(linear_model, num_replicas=4, max_temperature=30.0,
                               explorer="rwmh")
    mcmc = run(kernel, *data, num_chains=2, warmup_steps=30)
    diag = mcmc.diagnostics()
    stats = to_inference_data(mcmc).sample_stats
    ladders = [diag["temperatures"][f"chain {c}"] for c in (0, 1)]
    assert ladders[0] != ladders[1]  # each chain adapted its own ladder
    assert stats["ladder_temperature"].values.tolist() == ladders
    assert list(stats.temperature.values) == ladders[0]
    for c in (0, 1):
        acceptance = diag["swap_acceptance"][f"chain {c}"]
        betas = stats["ladder_beta"].values[c]
        lam = [(1 - a) / (b0 - b1) for a, b0, b1 in zip(acceptance, betas, betas[1:])]
        assert stats["local_barrier"].values[c] == pytest.approx(lam, rel=1e-12)
        mid = [(b0 + b1) / 2 for b0, b1 in zip(betas, betas[1:])]
        assert stats["local_barrier_beta"].values[c] == pytest.approx(mid, rel=1e-12)
        assert stats.attrs["theoretical_round_trip_rate"][c] == pytest.approx(
            diag["theoretical_round_trip_rate"][f"chain {c}"])


def test_prior_rung_temperatures_survive_netcdf(tmp_path, data):
    kernel = ParallelTempering(linear_model, num_replicas=3, max_temperature=math.inf,
                               explorer="rwmh")
    idata = to_inference_data(run(kernel, *data))
    path = tmp_path / "prior.nc"
    idata.to_netcdf(str(path))
    loaded = az.from_netcdf(str(path)).sample_stats
    temps = loaded.temperature.values
    assert temps[0] == 1.0 and math.isinf(temps[-1])
    # restarts, counted from the prior rung, survive too; a finite hot end's are NaN
    restarts = kernel.diagnostics()["restarts"]
    assert float(np.ravel(loaded.attrs["restarts"])[0]) == restarts > 0  # netCDF: a scalar
    finite = ParallelTempering(linear_model, num_replicas=3, max_temperature=4.0,
                               explorer="rwmh")
    assert math.isnan(np.ravel(to_inference_data(run(finite, *data)).sample_stats.attrs[
        "restarts"])[0])


def test_to_inference_data_rejects_other_kernels(data):
    x, y = data
    pyro.set_rng_seed(0)
    mcmc = MCMC(HMC(linear_model, num_steps=2), 5, 2, disable_progbar=True)
    mcmc.run(x, y)
    with pytest.raises(TypeError, match=r"ParallelTempering kernel, this one ran HMC; "
                       r"pyro_arviz.from_pyro\(mcmc\) exports runs of any kernel"):
        to_inference_data(mcmc)


def test_kernel_pickles_before_and_after_a_run(data):
    kernel = ParallelTempering(linear_model, num_replicas=3, explorer="nuts",
                               explorer_kwargs={"max_tree_depth": 2})
    clone = pickle.loads(pickle.dumps(kernel))
    first = run(kernel, *data, num_samples=5, warmup_steps=5).get_samples()["w"]
    second = run(clone, *data, num_samples=5, warmup_steps=5).get_samples()["w"]
    assert torch.equal(first, second)
    after = pickle.loads(pickle.dumps(kernel))
    assert after.temperatures == kernel.temperatures


@pytest.mark.parametrize("explorer", ["hmc", "nuts"])
def test_pyro_explorers_run_with_swaps(explorer, data):
    kwargs = {"hmc": {"num_steps": 3}, "nuts": {"max_tree_depth": 3}}[explorer]
    kernel = ParallelTempering(linear_model, num_replicas=3, explorer=explorer,
                               explorer_kwargs=kwargs, swap_scheme="sequential")
    mcmc = run(kernel, *data, num_samples=20, warmup_steps=20)
    diag = mcmc.diagnostics()
    record = diag["tempering_record"]["chain 0"]["swap_accepted"]
    assert not torch.isnan(record).any()  # sequential: every pair, every scan
    assert sum(diag["swap_acceptance"]["chain 0"]) > 0
    assert "step size" in kernel.logging()


def test_callable_explorer_gets_the_tempered_potential(data):
    built = []

    def explorer(potential_fn, num_steps):
        built.append(potential_fn)
        return HMC(potential_fn=potential_fn, num_steps=num_steps)

    kernel = ParallelTempering(linear_model, temperatures=[1.0, 2.0, 5.0], explorer=explorer,
                               explorer_kwargs={"num_steps": 2}, adapt_temperatures=False)
    run(kernel, *data, num_samples=5, warmup_steps=5)
    assert [p.beta for p in built] == pytest.approx([1.0, 0.5, 0.2])


def test_single_cold_rung_is_plain_sampling(data):
    kernel = ParallelTempering(linear_model, temperatures=[1.0], explorer="rwmh")
    mcmc = run(kernel, *data)
    diag = mcmc.diagnostics()
    assert diag["swap_acceptance"]["chain 0"] == [] and diag["round_trips"]["chain 0"] == 0
    assert mcmc.get_samples()["w"].shape == (30, 2)


def test_hmc_num_steps_stays_fixed_while_the_step_size_adapts(data):
    kernel = ParallelTempering(linear_model, num_replicas=3, max_temperature=10.0,
                               explorer="hmc", explorer_kwargs={"num_steps": 3})
    run(kernel, *data, num_samples=5, warmup_steps=30)
    step_sizes = [explorer.step_size for explorer in kernel.run.rungs.explorers]
    assert [explorer.num_steps for explorer in kernel.run.rungs.explorers] == [3, 3, 3]
    assert len(set(step_sizes)) == 3  # adapted per rung
    assert kernel.explorer_info["explorer"] == "hmc (batched)"
    assert kernel.explorer_info["potential"] == "functional"


def test_hmc_refuses_options_of_pyros_hmc():
    with pytest.raises(TypeError, match="trajectory_length.*pyro.infer.HMC"):
        ParallelTempering(linear_model, explorer="hmc",
                          explorer_kwargs={"trajectory_length": 1.0})


def test_the_set_up_time_is_in_explorer_info_and_a_long_one_on_the_progress_bar():
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_replicas=2, explorer="rwmh")
    MCMC(kernel, num_samples=5, warmup_steps=5, disable_progbar=True).run(*linear_data())
    seconds = kernel.explorer_info["setup_seconds"]
    assert 0.0 < seconds < 60.0
    assert "set-up" not in kernel.logging()  # a short set-up is not news
    kernel.explorer_info["setup_seconds"] = 42.4  # as after a cold Inductor compile
    assert kernel.logging()["set-up"] == "42 s"


def test_chains_whose_ladders_grew_apart_export_padded():
    """The default ladder grows per chain: two chains can end with different K; the export
    holds each chain's ladder and records, NaN past its own rungs."""
    from .test_kernel_barrier import sufficient_model

    pyro.set_rng_seed(1)  # a seed whose two chains grow to different K (12 and 9)
    mcmc = MCMC(ParallelTempering(sufficient_model, explorer="rwmh"), 30, 300, num_chains=2,
                disable_progbar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(10**6)
    diag = mcmc.diagnostics()
    sizes = [len(diag["temperatures"][f"chain {c}"]) for c in (0, 1)]
    assert sizes[0] != sizes[1]
    stats = to_inference_data(mcmc).sample_stats
    assert stats.sizes["temperature"] == max(sizes)
    for c, size in enumerate(sizes):
        ladder = stats["ladder_temperature"].values[c]
        assert list(ladder[:size]) == diag["temperatures"][f"chain {c}"]
        assert np.isnan(ladder[size:]).all()
        assert np.isnan(stats["tempered_log_likelihood"].values[c, :, size:]).all()
        assert np.isnan(stats["swap_accepted"].values[c, :, size - 1:]).all()
        assert not np.isnan(stats["tempered_log_likelihood"].values[c, :, :size]).any()
