"""compile="auto": a run starts on TorchScript and switches to Inductor at the warmup round's end
where the compilation pays (pyro_pt.autocompile), from the costs it records or estimates.

Most tests make Inductor fail, so that the switch recompiles under TorchScript, its fallback:
the switch's mechanics (at which scan, on which evidence, with what said), which must leave the
draws bitwise those of a TorchScript run, without the seconds of a real compilation. One slow
test compiles for real and checks the draws against the exact posterior.
"""

import types

import pytest
import torch

import pyro
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size

from pyro_pt import ParallelTempering, autocompile
from pyro_pt.autocompile import SAVED, SAVED_LADDERS, AutoCompile
from pyro_pt.comm import LocalComm
from pyro_pt.potential import FunctionalSplit, ModelSplit, compiled, torch_compat
from pyro_pt.rounds import RoundEnd

from . import models
from .distributed import run_linear, run_linear_switching, spawn

real_expected_seconds = autocompile.expected_seconds

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # short runs, tiny ladders


@pytest.fixture
def records(tmp_path, monkeypatch):
    """The records of compile costs in a file of the test's own."""
    path = tmp_path / "records.json"
    monkeypatch.setattr(autocompile, "_records_path", lambda: str(path))
    return path


@pytest.fixture
def failing_inductor(monkeypatch):
    """Inductor raising when reached (TorchScript then runs the graph); the list of calls."""
    calls = []

    def refuse(gm, *example):
        calls.append(gm)
        raise RuntimeError("Inductor is not available here")

    monkeypatch.setattr(compiled, "inductor_compile", refuse)
    monkeypatch.setattr(compiled, "missing_apis", lambda: None)
    monkeypatch.setattr(autocompile, "missing_apis", lambda: None)
    return calls


def expect(monkeypatch, seconds):
    """Every compilation expected to cost ``seconds`` (as if measured here before)."""
    monkeypatch.setattr(autocompile, "expected_seconds", lambda *args: (seconds, "measured"))


def run(compile="auto", explorer="hmc", warmup=20, samples=12, seed=0, **kwargs):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(models.linear_model, num_replicas=3, max_temperature=10.0,
                               explorer=explorer, compile=compile, **kwargs)
    mcmc = MCMC(kernel, samples, warmup, disable_progbar=True)
    mcmc.run(*models.linear_data())
    return kernel, mcmc.get_samples()["w"]


def test_a_short_run_stays_on_torchscript_and_says_why(records, failing_inductor):
    kernel, _ = run()
    info = kernel.explorer_info
    assert info["potential_engine"] == "jit" and failing_inductor == []
    # the last warmup round's end before scan 20 is scan 12 (rounds of 4 and 8 scans)
    assert info["compile"].startswith("TorchScript: Inductor's estimated ")
    assert info["compile"].endswith("the explorers are expected to take after scan 12")
    assert "compile" not in kernel.logging() and "compile_seconds" not in info


@pytest.mark.parametrize("explorer", ["hmc", "nuts"])
def test_the_switch_leaves_the_draws_those_of_the_engine(records, failing_inductor,
                                                         monkeypatch, explorer):
    # At the second round's end (scan 12) the switch pays: Inductor is tried once, fails, and
    # TorchScript runs the recompiled graph. The states re-evaluated and the graphs rebuilt,
    # every draw, swap and adaptation is bitwise that of a TorchScript run.
    reference, w_reference = run("torchscript", explorer)
    expect(monkeypatch, 0.0)
    kernel, w = run("auto", explorer)
    assert len(failing_inductor) == 1
    assert kernel.explorer_info["compile"].startswith(
        "TorchScript: the switch to Inductor at scan 12 failed (Inductor failed")
    assert kernel.explorer_info["compile_seconds"] > 0.0
    assert kernel.logging()["compile"].startswith("TorchScript (Inductor failed), ")
    assert torch.equal(w, w_reference)
    assert str(kernel.diagnostics()["swap_acceptance"]) == \
        str(reference.diagnostics()["swap_acceptance"])


def test_random_walk_metropolis_never_switches(records, failing_inductor, monkeypatch):
    expect(monkeypatch, 0.0)  # it would pay, but rwmh uses no gradient graph
    kernel, _ = run("auto", "rwmh")
    assert kernel.explorer_info["compile"].startswith("TorchScript: explorer 'rwmh' takes no "
                                                      "gradients")
    assert failing_inductor == []


@pytest.mark.parametrize("explorer", ["hmc", "nuts"])
def test_a_switch_re_evaluates_every_state_and_rebuilds_every_graph(records, failing_inductor,
                                                                   monkeypatch, explorer):
    # The TorchScript graphs before and after a failed switch give the same numbers, so the
    # draws cannot tell a stale state or step from a fresh one: the switch is checked here.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # replicas looped: the fused step (vmapped ones have none)
    try:
        kernel, _ = run("torchscript", explorer)  # a finished run, switched by hand
        fast, explorers = kernel.run.fast, kernel.run.rungs.explorers
        graphs = {k: v for k, v in fast.compiled._graphs.items() if k[0] == "grads"}
        steps = dict(fast.fused._steps)
        cleared = []
        if explorer == "nuts":  # Pyro's kernels keep their own cache of the state's density
            monkeypatch.setattr(type(explorers[0]), "target_changed",
                                lambda self: cleared.append(self))
        AutoCompile(fast, LocalComm(), 20, 0).switch(kernel.run, 20, "by hand (took {took})")
    finally:
        torch.set_num_threads(threads)
    assert len(failing_inductor) == 1  # the graph was compiled again
    # none of the old graphs or steps is kept: rebuilt, or left to be rebuilt on first use
    assert graphs and all(fast.compiled._graphs.get(k) is not graphs[k] for k in graphs)
    if explorer == "hmc":
        # every slot's cached potential and gradient is recomputed at its next step: every
        # ladder's (a small model runs several by default, pyro_pt.ensemble)
        group = explorers[0].group
        assert len(kernel.run.together) > 1
        assert group.engine._stale == set(range(len(group.betas)))
        assert steps and all(fast.fused._steps.get(k) is not steps[k] for k in steps)
        assert kernel.explorer_info["leapfrog"] == "fused"  # rebuilt, and said so
    else:
        assert cleared == list(explorers)
    assert kernel.explorer_info["compile"].startswith(
        "TorchScript: the switch to Inductor at scan 20 failed")


@pytest.mark.parametrize("ladders, below, above", [(1, 2.26, 2.28), (2, 3.02, 3.03)])
def test_the_decision_is_the_compile_against_what_it_saves_of_the_projected_run(
        records, failing_inductor, monkeypatch, ladders, below, above):
    # Scan 4 of 20 warmup scans ends the first round, whose scans pay one-off costs: no decision.
    # Scan 12: the round's 8 scans took 0.56 s, 0.07 s a scan, 108 scans left (20 - 12 warmup,
    # 100 draws): a projection of 7.56 s, of which 30 % is 2.268 s; with several ladders,
    # 40 %: 3.024 s.
    assert (SAVED, SAVED_LADDERS) == (0.3, 0.4)
    fast = FunctionalSplit(ModelSplit(models.linear_model, models.linear_data()))
    run = types.SimpleNamespace(options=types.SimpleNamespace(explorer="hmc"), explorer_info={},
                                reference=None, rungs=types.SimpleNamespace(explorers=[]))
    other = types.SimpleNamespace(rungs=types.SimpleNamespace(explorers=[]))
    run.together = [run] + [other] * (ladders - 1)
    outcomes = {}
    for expected in (below, above):
        run.explorer_info = {}
        expect(monkeypatch, expected)
        switch = AutoCompile(fast, LocalComm(), 20, 100)
        run.timings = {"explorers": 0.1}
        switch.end_round(run, RoundEnd(4, "warmup round"))  # the first round: no decision
        assert switch.switched_at is None and "compile" not in run.explorer_info
        run.timings = {"explorers": 0.66}
        switch.end_round(run, RoundEnd(12, "warmup round"))
        outcomes[expected] = switch.switched_at
        assert "of the 7.6 s the explorers" in run.explorer_info["compile"]
    assert outcomes == {below: 12, above: None}
    assert len(failing_inductor) == 1


def test_a_resumed_run_switches_where_the_checkpointed_run_had(records, failing_inductor,
                                                               monkeypatch, tmp_path):
    expect(monkeypatch, 0.0)
    path = str(tmp_path / "scan12.pt")

    def hook(kernel, params, stage, i):
        if stage == "Warmup" and i + 1 == 12:
            kernel.checkpoint(path)

    pyro.set_rng_seed(0)
    kernel = ParallelTempering(models.linear_model, num_replicas=3, explorer="hmc", num_ladders=1)
    mcmc = MCMC(kernel, 12, 20, disable_progbar=True, hook_fn=hook)
    mcmc.run(*models.linear_data())
    expect(monkeypatch, 1e9)  # a new decision would not switch: the checkpoint's is taken
    resumed = ParallelTempering.resume(path, models.linear_model)
    pyro.set_rng_seed(123)
    again = MCMC(resumed, 12, 8, disable_progbar=True)
    again.run(*models.linear_data())
    assert resumed.explorer_info["compile"].startswith(
        "TorchScript: the switch to Inductor at scan 12 failed (Inductor failed")
    assert resumed.explorer_info["compile"].endswith("; restored from the checkpoint")
    assert len(failing_inductor) == 2  # the run's switch, and the resumed run's
    assert torch.equal(again.get_samples()["w"], mcmc.get_samples()["w"])


def test_records_are_per_graph_dtype_and_kind(records):
    split = FunctionalSplit(ModelSplit(models.linear_model, models.linear_data()))
    gm = split.compiled.fx_graph(torch.float64, torch.device("cpu"))
    cold = autocompile.estimated_cold_seconds
    estimate = cold(gm, "cpu")
    nodes = len(gm.graph.nodes)
    assert estimate == autocompile.COLD_SECONDS["cpu"] + autocompile.SECONDS_PER_NODE * nodes
    assert cold(gm, "cuda") > estimate  # Triton's compilations
    assert cold(gm, "xpu") >= cold(gm, "cuda")  # a device not listed: the slowest
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph") == \
        (estimate, "estimated")
    # the first switch filled Inductor's cache: the next is expected at the warm fraction
    autocompile.record(gm, torch.float64, "cpu", "graph", 12.0)
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph") == \
        (12.0 * autocompile.WARM_FRACTION, "measured")
    autocompile.record(gm, torch.float64, "cpu", "graph", 3.25)  # a later switch: what it took
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph") == (3.25, "measured")
    assert autocompile.expected_seconds(gm, torch.float32, "cpu", "graph")[1] == "estimated"
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph + leapfrog steps")[1] == \
        "estimated"
    records.write_text("not json")  # a damaged file is no record, and is written anew
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph")[1] == "estimated"
    autocompile.record(gm, torch.float64, "cpu", "graph", 1.5)
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph") == \
        (1.5 * autocompile.WARM_FRACTION, "measured")


def test_the_records_file_can_be_chosen_or_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv("PYRO_PT_COMPILE_RECORDS", str(tmp_path / "mine.json"))
    assert autocompile._records_path() == str(tmp_path / "mine.json")
    monkeypatch.setenv("PYRO_PT_COMPILE_RECORDS", "")
    assert autocompile._records_path() is None
    monkeypatch.setenv("PYRO_PT_COMPILE_RECORDS", str(tmp_path))  # a folder: nothing kept
    split = FunctionalSplit(ModelSplit(models.linear_model, models.linear_data()))
    gm = split.compiled.fx_graph(torch.float64, torch.device("cpu"))
    autocompile.record(gm, torch.float64, "cpu", "graph", 1.0)
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph")[1] == "estimated"
    assert list(tmp_path.iterdir()) == []
    monkeypatch.delenv("PYRO_PT_COMPILE_RECORDS")
    assert autocompile._records_path().endswith(autocompile.RECORDS)


@pytest.mark.slow
def test_a_real_switch_to_inductor_samples_the_exact_posterior(records, monkeypatch):
    expect(monkeypatch, 0.0)
    kernel, w = run("auto", "hmc", warmup=200, samples=1500)
    info = kernel.explorer_info
    assert info["potential_engine"] == "inductor", info
    assert info["compile"].startswith("Inductor from scan 12")
    assert kernel.logging()["compile"].startswith("Inductor, ")
    mean, covariance = models.linear_posterior(*models.linear_data())
    ess = effective_sample_size(w.unsqueeze(0))
    z = (w.mean(0) - mean) / (covariance.diagonal().sqrt() / ess.sqrt())
    assert z.abs().max() < 4.5, z
    ratio = w.var(0) / covariance.diagonal()
    assert ((ratio - 1).abs() < 0.25).all(), ratio
    # the compilation was recorded: a later run of this model expects the warm fraction of it
    monkeypatch.setattr(autocompile, "expected_seconds", real_expected_seconds)
    kernel, _ = run("auto", "hmc")
    seconds = info["compile_seconds"] * autocompile.WARM_FRACTION
    took = f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    saved = SAVED if kernel.run.num_ladders == 1 else SAVED_LADDERS  # the default: 8 ladders
    assert kernel.explorer_info["compile"].startswith(
        f"TorchScript: Inductor's measured {took} compilation is over the {saved:.0%}"), took


def test_without_inductors_cache_dir_nothing_is_recorded(monkeypatch, tmp_path):
    monkeypatch.delenv("PYRO_PT_COMPILE_RECORDS", raising=False)  # the default place
    resolve = torch_compat._resolve

    def without(entry):
        if entry is torch_compat.TABLE["cache_dir"]:
            raise AttributeError("stubbed away")
        return resolve(entry)

    monkeypatch.setattr(torch_compat, "_resolve", without)
    split = FunctionalSplit(ModelSplit(models.linear_model, models.linear_data()))
    gm = split.compiled.fx_graph(torch.float64, torch.device("cpu"))
    autocompile.record(gm, torch.float64, "cpu", "graph", 1.0)
    assert autocompile.expected_seconds(gm, torch.float64, "cpu", "graph")[1] == "estimated"
    reason = torch_compat.lookup("cache_dir")[1]
    assert "records no compilation, and expects each to cost a cold one" in reason


@pytest.mark.slow
def test_every_rank_switches_at_rank_0s_scan(tmp_path, records, failing_inductor, monkeypatch):
    # Two ranks, rank 1 holding only the prior rung (whose draws' ll comes from its graph):
    # both join the round end's broadcast, both switch (each its own graph), and the chains are
    # bitwise the one-process run's.
    kwargs = {"num_replicas": 3, "max_temperature": float("inf"), "explorer": "hmc",
              "warmup_steps": 20}  # the switch comes at the second round's end, scan 12
    expect(monkeypatch, 0.0)
    alone = run_linear(dict(kwargs))
    assert len(failing_inductor) == 1
    (rank0, tries0), (rank1, tries1) = spawn(2, tmp_path, run_linear_switching, dict(kwargs))
    assert (tries0, tries1) == (1, 1) and rank0["world_size"] == 2
    for result in (rank0, rank1):
        assert torch.equal(result["w"], alone["w"])
        assert str(result["swap_acceptance"]) == str(alone["swap_acceptance"])


@pytest.mark.slow
def test_an_inductor_set_up_is_recorded_for_a_later_auto_run(records):
    # compile="inductor" fills Inductor's cache: its set-up's seconds are recorded, so a later
    # "auto" run of the model expects the warm fraction of them, not a cold compilation
    # (one ladder: the small run's explorers then take too little for the switch to pay)
    kernel, _ = run("inductor", "hmc", num_ladders=1)
    assert kernel.explorer_info["potential_engine"] == "inductor", kernel.explorer_info
    seconds = kernel.explorer_info["setup_seconds"] * autocompile.WARM_FRACTION
    took = f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    later, _ = run("auto", "hmc", num_ladders=1)
    assert later.explorer_info["compile"].startswith(
        f"TorchScript: Inductor's measured {took} compilation"), (took, later.explorer_info)
