"""plot_tempering draws the run's own numbers: swap acceptance, local and global barrier."""

import math
import re

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import arviz as az  # noqa: E402
import pyro  # noqa: E402
from pyro.infer import MCMC, NUTS  # noqa: E402

from pyro_pt import ParallelTempering, plot_tempering, to_inference_data  # noqa: E402

from .models import bimodal_model, linear_data, linear_model  # noqa: E402


@pytest.fixture(scope="module")
def adapted_run():
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(bimodal_model, num_replicas=6, max_temperature=math.inf,
                               explorer="rwmh", adapt_temperatures=True, reference="prior")
    mcmc = MCMC(kernel, num_samples=300, warmup_steps=200, disable_progbar=True)
    mcmc.run()
    return kernel, mcmc


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def expected_local_barrier(temperatures, acceptance):
    """lambda at each pair's midpoint, r_i / (beta_i - beta_{i+1}), from the ladder itself."""
    betas = [0.0 if math.isinf(t) else 1.0 / t for t in temperatures]
    mids = [0.5 * (a + b) for a, b in zip(betas, betas[1:])]
    return mids, [(1.0 - acc) / (a - b) for acc, a, b in zip(acceptance, betas, betas[1:])]


def plotted(fig):
    """(bar heights, lambda midpoints, lambda values, barrier title, cumulative curve)."""
    bars = fig.axes[0].containers[0]
    (points,) = [line for ax in fig.axes for line in ax.lines if line.get_gid() == "local_barrier"]
    barrier_ax = points.axes
    (cumulative,) = [line for ax in fig.axes for line in ax.lines
                     if line.get_label() == r"cumulative $\Lambda(\beta)$"]
    return ([bar.get_height() for bar in bars], list(points.get_xdata()),
            list(points.get_ydata()), barrier_ax.get_title(), list(cumulative.get_ydata()))


def check_against(fig, temperatures, acceptance, barrier, recommended):
    heights, mids, lambdas, title, cumulative = plotted(fig)
    assert heights == pytest.approx(acceptance, rel=1e-12, nan_ok=True)
    want_mids, want_lambdas = expected_local_barrier(temperatures, acceptance)
    assert mids == pytest.approx(want_mids, rel=1e-12)
    assert lambdas == pytest.approx(want_lambdas, rel=1e-12)
    shown = float(re.search(r"= ([0-9.]+)", title).group(1))
    assert shown == pytest.approx(barrier, abs=0.005)
    assert f"about {recommended} replicas" in title
    # The cumulative barrier runs from the hottest rung (0) up to the global barrier.
    assert cumulative[0] == 0.0 and cumulative[-1] == pytest.approx(barrier, rel=1e-12)


def test_kernel_input(adapted_run):
    kernel, _ = adapted_run
    diag = kernel.diagnostics()
    fig = plot_tempering(kernel)
    check_against(fig, kernel.temperatures, diag["swap_acceptance"], diag["barrier"],
                  diag["recommended_replicas"])
    # Lambda is the sum of the rejection rates; lambda agrees with the kernel's local_barrier.
    assert diag["barrier"] == pytest.approx(sum(1 - a for a in diag["swap_acceptance"]))
    _, _, lambdas, _, _ = plotted(fig)
    assert lambdas == pytest.approx([lam for _, lam in diag["local_barrier"]], rel=1e-12)
    # Adapted ladder: a third panel with one row of rungs per warmup round, plus the final one.
    (history_ax,) = [ax for ax in fig.axes if "adaptation" in ax.get_title()]
    rows = history_ax.lines
    assert len(rows) == len(kernel.adaptation_history) + 1 >= 2
    assert list(rows[-1].get_xdata()) == pytest.approx(kernel.betas)
    assert list(rows[0].get_xdata()) == pytest.approx(
        [0.0 if math.isinf(t) else 1 / t for t in kernel.adaptation_history[0]["temperatures"]])


def test_mcmc_and_inference_data_inputs(adapted_run, tmp_path):
    kernel, mcmc = adapted_run
    diag = kernel.diagnostics()
    expected = plotted(plot_tempering(kernel))
    assert plotted(plot_tempering(mcmc)) == expected

    idata = to_inference_data(mcmc)
    stats = idata.sample_stats
    path = tmp_path / "tempering.png"
    fig = plot_tempering(idata, path=str(path))
    check_against(fig, list(stats["temperature"].values), list(stats.attrs["swap_acceptance"]),
                  float(stats.attrs["barrier"][0]), int(stats.attrs["recommended_replicas"][0]))
    # The same run through ArviZ draws the same picture as through the kernel.
    assert plotted(fig)[0] == pytest.approx(diag["swap_acceptance"], rel=1e-12)
    assert plotted(fig)[1:4] == expected[1:4]
    # The restarts and round trips, the kernel's, in the swap panel's title, from all three.
    said = f"{diag['restarts']} tempered restarts, {diag['round_trips']} round trips"
    assert diag["restarts"] > 0 and float(stats.attrs["restarts"][0]) == diag["restarts"]
    for source in (kernel, mcmc, idata):
        assert said in plot_tempering(source).axes[0].get_title()
    # Nothing in InferenceData records the adaptation: two panels and a twin axis only.
    assert not [ax for ax in fig.axes if "adaptation" in ax.get_title()]
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.filterwarnings("ignore:num_chains=2 is more than available_cpu")
def test_several_chains_plot_chain_zero():
    x, y = linear_data()
    pyro.set_rng_seed(1)
    kernel = ParallelTempering(linear_model, num_replicas=4, max_temperature=20.0,
                               explorer="rwmh", adapt_temperatures=True)
    mcmc = MCMC(kernel, num_samples=80, warmup_steps=40, num_chains=2, disable_progbar=True)
    mcmc.run(x, y)
    diag = {key: value["chain 0"] for key, value in mcmc.diagnostics().items()
            if isinstance(value, dict) and "chain 0" in value}
    # Each chain adapts its own ladder: chain 0's numbers go with chain 0's temperatures.
    assert diag["swap_acceptance"] != mcmc.diagnostics()["swap_acceptance"]["chain 1"]
    for source in (mcmc, to_inference_data(mcmc)):
        fig = plot_tempering(source)
        check_against(fig, diag["temperatures"], diag["swap_acceptance"],
                      diag["barrier"], diag["recommended_replicas"])
        assert fig.get_suptitle() == "Tempering of chain 0 of 2"
    # The MCMC's figure has chain 0's adaptation (the kernel object holds chain 1's).
    history = diag["adaptation_history"]
    assert history != mcmc.diagnostics()["adaptation_history"]["chain 1"]
    (history_ax,) = [ax for ax in plot_tempering(mcmc).axes if "adaptation" in ax.get_title()]
    assert len(history_ax.lines) == len(history) + 1 >= 2
    assert list(history_ax.lines[0].get_xdata()) == pytest.approx(
        [1 / t for t in history[0]["temperatures"]])
    # The InferenceData's says why it has none.
    texts = [t.get_text() for t in plot_tempering(to_inference_data(mcmc)).texts]
    assert any("adaptation is not in the InferenceData" in t for t in texts)
    with pytest.raises(ValueError, match="run"):
        plot_tempering(MCMC(ParallelTempering(linear_model, num_replicas=3), 5, num_chains=2))


def test_user_axes(adapted_run):
    kernel, _ = adapted_run
    fig, axes = plt.subplots(1, 2)
    assert plot_tempering(kernel, axes=axes) is fig
    assert axes[0].containers and any(line.get_gid() == "local_barrier" for line in axes[1].lines)
    with pytest.raises(ValueError, match="two or three"):
        plot_tempering(kernel, axes=[axes[0]])


def test_bad_input():
    with pytest.raises(TypeError, match="ParallelTempering"):
        plot_tempering(object())
    x, y = linear_data()
    with pytest.raises(TypeError, match="NUTS"):
        plot_tempering(MCMC(NUTS(linear_model), num_samples=2))
    with pytest.raises(TypeError, match="to_inference_data"):
        plot_tempering(az.from_dict(posterior={"a": np.zeros((1, 5))}))
    with pytest.raises(ValueError, match="run"):
        plot_tempering(ParallelTempering(linear_model, num_replicas=3))
    pyro.set_rng_seed(0)
    lone = ParallelTempering(linear_model, temperatures=[1.0], explorer="rwmh")
    MCMC(lone, num_samples=3, warmup_steps=2, disable_progbar=True).run(x, y)
    with pytest.raises(ValueError, match="at least two temperatures"):
        plot_tempering(lone)


def test_bottleneck_pairs_are_red_and_labelled(adapted_run):
    _, mcmc = adapted_run
    idata = to_inference_data(mcmc)
    stats = idata["sample_stats"]
    acceptance = np.asarray(stats.attrs["swap_acceptance"], dtype=np.float64).copy()
    acceptance[[1, 3]] = [0.05, 0.0]
    stats.attrs["swap_acceptance"] = acceptance
    fig = plot_tempering(idata)
    bars = fig.axes[0].containers[0]
    red = matplotlib.colors.to_rgba("tab:red", alpha=0.8)
    assert [bar.get_facecolor() == red for bar in bars] == [a < 0.1 for a in acceptance]
    labels = [t for t in fig.axes[0].texts if t.get_gid() == "bottleneck"]
    assert [t.xy[0] for t in labels] == [1, 3] and {t.get_text() for t in labels} == {"bottleneck"}
    assert fig.get_suptitle() == ""  # one chain: nothing to say


def test_a_stabilized_run_draws_each_leg_and_exports_the_rungs_legs(tmp_path):
    """Two legs (3 rungs to q, 2 to the prior): the bridge is its own bar, each leg has its
    local and cumulative barrier (the leg to q's ends at the barrier in the title), and the
    export names each rung's leg and gives the bridge's rungs both at T = 1."""
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_replicas=5, explorer="rwmh",
                               reference="variational")
    mcmc = MCMC(kernel, warmup_steps=60, num_samples=60, disable_progbar=True)
    mcmc.run(*linear_data())
    diagnostics = kernel.diagnostics()
    for source in (kernel, to_inference_data(mcmc)):
        fig = plot_tempering(source)
        labels = [tick.get_text() for tick in fig.axes[0].get_xticklabels()]
        assert labels[2] == "bridge" and len(labels) == 4
        points = [line for ax in fig.axes for line in ax.lines
                  if line.get_gid() == "local_barrier"]
        assert len(points) == 2
        (cumulative,) = [line for ax in fig.axes for line in ax.lines
                         if line.get_label() == r"cumulative $\Lambda(\beta)$ (reference's leg)"]
        assert cumulative.get_ydata()[-1] == pytest.approx(
            sum(1 - a for a in diagnostics["swap_acceptance"][:2]), rel=1e-12)
        assert "leg to q" in points[0].axes.get_title()
        plt.close(fig)
    stats = to_inference_data(mcmc).sample_stats
    assert list(stats["leg"].values) == ["reference"] * 3 + ["prior"] * 2
    assert list(stats["pair_cold_temperature"].values)[2] == 1.0
    assert list(stats["pair_hot_temperature"].values)[2] == 1.0
    assert float(stats.attrs["barrier_prior_leg"][0]) == pytest.approx(
        diagnostics["legs"]["prior"]["barrier"])
    path = tmp_path / "stabilized.nc"
    to_inference_data(mcmc).to_netcdf(str(path))
    assert list(az.from_netcdf(str(path)).sample_stats["leg"].values)[3] == "prior"
