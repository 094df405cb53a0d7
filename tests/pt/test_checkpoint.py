"""Checkpoint and resume: a resumed run is bitwise the uninterrupted one, on any number of ranks.

The interruption is simulated exactly: a full seeded run writes checkpoints at given scans
(from MCMC's hook, and periodically); a new kernel resumed from one of them, under a different
global seed, must reproduce the rest of the full run bit for bit.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import pyro
from pyro.infer import MCMC, NUTS
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from pyro_pt import ParallelTempering
from pyro_pt.checkpoint import MAGIC, read_checkpoint
from pyro_pt.explorers.hmc import BatchedHMC
from pyro_pt.lineages import IndexProcess
from pyro_pt.report import COLUMNS, Report

from .models import linear_data, linear_model

# Short runs on a tiny ladder: the review's warnings about them are expected.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

WARMUP, SAMPLES = 20, 12
# Scan 4 ends the first warmup round: the ladder has just adapted (the batched HMC has a
# step-size restart pending) and the first mass-matrix window is open; scan 26 is sampling.
SCANS = (4, 26)
KERNELS = {
    "rwmh": {"explorer": "rwmh"},
    "hmc": {"explorer": "hmc", "explorer_kwargs": {"num_steps": 3}},
    # The default: each rung's trajectory length adapted (ChEES state per slot).
    "hmc_adaptive": {"explorer": "hmc"},
    "nuts": {"explorer": "nuts", "explorer_kwargs": {"max_tree_depth": 3}},
    # The prior rung (beta = 0) drawn exactly, beside the batched engine's slots.
    "hmc_prior_rung": {"explorer": "hmc", "explorer_kwargs": {"num_steps": 3},
                       "max_temperature": float("inf")},
}
# One ladder (a small model runs 8 by default; test_ensemble.py checkpoints several).
LADDER = {"num_replicas": 4, "max_temperature": 20.0, "num_ladders": 1}


def run(kernel, warmup=WARMUP, samples=SAMPLES, data=None, seed=0, write=None):
    """A seeded run; ``write``: {scan: path} checkpoints written from MCMC's hook."""
    def hook(kernel, params, stage, i):
        scan = i + 1 + (warmup if stage == "Sample" else 0)
        if scan in (write or {}):
            kernel.checkpoint(write[scan])

    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, samples, warmup, disable_progbar=True, hook_fn=hook)
    mcmc.run(*(data or linear_data()))
    diag = kernel.diagnostics()
    return {
        "w": mcmc.get_samples()["w"],
        "swap_accepted": diag["tempering_record"]["swap_accepted"].nan_to_num(-1),
        "log_likelihood": diag["tempering_record"]["log_likelihood"],
        **{key: diag[key] for key in ("swap_acceptance", "local_acceptance", "round_trips",
                                      "divergences_per_temperature", "adaptation_history")},
        "temperatures": kernel.temperatures,
        "report": str(kernel.report.drop(columns="seconds").to_dict("list")),
    }


def resume(path, scan, kwargs, warmup=WARMUP, samples=SAMPLES, seed=123):
    """Continue from the checkpoint at ``scan`` of a run of ``warmup`` and ``samples``, with the
    warmup and draws left."""
    kernel = ParallelTempering.resume(path, linear_model, **kwargs)
    return run(kernel, max(warmup - scan, 0), samples - max(scan - warmup, 0), seed=seed)


def assert_continues(full, resumed):
    assert torch.equal(full["w"][-resumed["w"].shape[0]:], resumed["w"])
    for key in full:
        if key != "w":
            assert str(full[key]) == str(resumed[key]), key


@pytest.mark.parametrize("name", list(KERNELS))
def test_resumed_run_is_the_uninterrupted_run(name, tmp_path):
    torch.set_num_threads(1)
    kwargs = {**LADDER, **KERNELS[name]}
    paths = {scan: str(tmp_path / f"scan{scan}.pt") for scan in SCANS}
    full = run(ParallelTempering(linear_model, **kwargs), write=paths)
    assert full["adaptation_history"] and full["swap_accepted"].eq(1).any()
    for scan in SCANS:
        header, _ = read_checkpoint(paths[scan], payload=False)
        assert (header["scans"], header["num_samples"]) == (scan, SAMPLES)
        assert_continues(full, resume(paths[scan], scan, kwargs))


def test_periodic_checkpoints_leave_the_run_unchanged(tmp_path):
    kwargs = {**LADDER, **KERNELS["rwmh"]}
    path = tmp_path / "periodic.pt"
    plain = run(ParallelTempering(linear_model, **kwargs))
    full = run(ParallelTempering(linear_model, checkpoint_every=5, checkpoint_path=path, **kwargs))
    assert_continues(plain, full)
    assert read_checkpoint(path, payload=False)[0]["scans"] == 30  # the last multiple of 5
    assert_continues(full, resume(path, 30, kwargs))
    assert [p.name for p in tmp_path.iterdir()] == ["periodic.pt"]  # no temporary file left


# ----- across numbers of processes -----

DISTRIBUTED = {name: {**LADDER, **KERNELS[name]} for name in ("rwmh", "hmc")}
# Two ladders (pyro_pt.ensemble): each rank's rungs of both in one group, gathered per ladder
DISTRIBUTED["hmc_ensemble"] = {**DISTRIBUTED["hmc"], "num_ladders": 2}
# Short runs (collectives are slow on busy cores): the ladder adapts at scan 4, the checkpoint
# is in the sampling phase.
SHORT = {"warmup": 6, "samples": 6}
SHORT_SCAN = 9
# A seed at which every pair swaps in those 6 sampling scans (the test checks it: at seeds 0
# and 5 the batched HMC's hot pair never does, at 2 the random walk's).
SHORT_SEED = 1


def write_on_ranks(folder):
    return {name: run(ParallelTempering(linear_model, **kwargs), **SHORT, seed=SHORT_SEED,
                      write={SHORT_SCAN: os.path.join(folder, f"{name}.pt")})
            for name, kwargs in DISTRIBUTED.items()}


def resume_on_ranks(folder, names=tuple(DISTRIBUTED)):
    # From the path alone: every rank reads the kernel's settings from the checkpoint.
    return {name: resume(os.path.join(folder, f"{name}.pt"), SHORT_SCAN, {}, **SHORT)
            for name in names}


@pytest.mark.slow
def test_checkpoint_of_two_ranks_resumes_on_one_and_four(two_rank_group, four_rank_group):
    # The 2-rank checkpoints and their resumption on 4 ranks come from the spawns that
    # tests/pt/conftest.py shares with test_distributed.
    torch.set_num_threads(1)
    folder = two_rank_group["folder"]
    written = [r["checkpoints"] for r in two_rank_group["ranks"]]
    for name in DISTRIBUTED:
        header, _ = read_checkpoint(os.path.join(folder, f"{name}.pt"), payload=False)
        assert header["world_size"] == 2
    one = resume_on_ranks(folder)  # the batched HMC's two engines of 2 slots join in one of 4
    # Four ranks of one rung (of each ladder) each: the random walk and two ladders.
    four = [r["resumed"] for r in four_rank_group]
    for name, kwargs in DISTRIBUTED.items():
        reference = run(ParallelTempering(linear_model, **kwargs), **SHORT,
                        seed=SHORT_SEED)  # one process
        # Every pair swaps in sampling: states cross every rank boundary of 2 and of 4 ranks.
        assert reference["swap_accepted"].eq(1).any(0).all()
        for result in [one] + written + four:
            if name in result:
                assert_continues(reference, result[name])
        # each rank of both spawns gave its result of this kernel (the random walk on 4)
        assert all(name in result for result in written)
    assert len(four) == 4 and all({"rwmh", "hmc_ensemble"} <= set(result) for result in four)


# ----- the state each part declares -----


def _planted(run, where):
    """The object of a finished ``run`` that ``where`` names."""
    explorers = run.rungs.explorers
    return {"ladder": lambda: run.ladder, "recorder's index": lambda: run.recorder.index,
            "report": lambda: run.report, "random stream": lambda: explorers[0].stream,
            "batched HMC's warmup": lambda: explorers[0].group.engine._warmup,
            "batched HMC's step size": lambda: explorers[0].group.engine._warmup.dual,
            "Pyro's NUTS": lambda: explorers[0].kernel,
            "Pyro's adapter": lambda: explorers[0].kernel._adapter,
            "the prior rung": lambda: explorers[-1]}[where]()


@pytest.mark.parametrize("explorer, where", [
    ("rwmh", "ladder"), ("rwmh", "recorder's index"), ("rwmh", "report"),
    ("rwmh", "random stream"), ("hmc", "batched HMC's warmup"), ("hmc", "batched HMC's step size"),
    ("nuts", "Pyro's NUTS"), ("nuts", "Pyro's adapter"), ("hmc", "the prior rung"),
])
def test_an_attribute_a_part_does_not_declare_is_refused_naming_it(explorer, where, tmp_path):
    # A new attribute is neither saved silently (a cache) nor dropped silently (state): a
    # checkpoint refuses it until its class lists it in STATE or REBUILT.
    kernel = ParallelTempering(linear_model, num_replicas=3, max_temperature=float("inf"),
                               explorer=explorer, explorer_kwargs={"max_tree_depth": 2}
                               if explorer == "nuts" else None, num_ladders=1)
    run(kernel, warmup=6, samples=2)
    kernel.checkpoint(str(tmp_path / "before.pt"))  # every part declares all it holds
    part = _planted(kernel.run, where)
    part.new_cache = 0.5
    name = type(part).__name__
    with pytest.raises(TypeError, match=rf"cannot checkpoint a {name}: its attribute\(s\) "
                                        rf"\['new_cache'\] are declared neither in "
                                        rf"{name}.STATE \(saved\) nor in REBUILT"):
        kernel.checkpoint(str(tmp_path / "after.pt"))


class UndeclaredKernel(MCMCKernel):
    """A user's kernel written without a declaration of its state: it never moves."""

    def __init__(self, potential_fn):
        self.potential_fn, self.moves, self.start = potential_fn, 0, None

    @property
    def initial_params(self):
        return self.start

    @initial_params.setter
    def initial_params(self, params):
        self.start = params

    def setup(self, warmup_steps, *args, **kwargs):
        pass

    def sample(self, params):
        self.moves += 1
        return params

    def clear_cache(self):
        pass

    def diagnostics(self):
        return {"divergences": [], "acceptance rate": 0.0}


class CountingNUTS(NUTS):
    """A user's subclass of Pyro's NUTS with an attribute of its own, undeclared."""

    def sample(self, params):
        self.calls = getattr(self, "calls", 0) + 1
        return super().sample(params)


@pytest.mark.parametrize("explorer, match", [
    (UndeclaredKernel, "cannot checkpoint PyroKernelExplorer.kernel: it holds a "
                       "UndeclaredKernel, whose class declares no state; give that class STATE "
                       "and REBUILT"),
    (CountingNUTS, r"cannot checkpoint a CountingNUTS: its attribute\(s\) \['calls'\]"),
])
def test_a_users_kernel_without_a_declared_state_cannot_be_checkpointed(explorer, match,
                                                                        tmp_path):
    kwargs = {"max_tree_depth": 2} if explorer is CountingNUTS else None
    kernel = ParallelTempering(linear_model, num_replicas=2, explorer=explorer,
                               explorer_kwargs=kwargs)
    run(kernel, warmup=3, samples=2)
    with pytest.raises(TypeError, match=match):
        kernel.checkpoint(str(tmp_path / "run.pt"))


def test_a_checkpoint_saves_the_declared_state_and_nothing_else(tmp_path):
    kernel = ParallelTempering(linear_model, num_replicas=3, max_temperature=float("inf"),
                               explorer="hmc", num_ladders=1)
    run(kernel, warmup=6, samples=2)
    path = str(tmp_path / "run.pt")
    kernel.checkpoint(path)
    _, payload = read_checkpoint(path)
    hmc = payload["rungs"][0]["explorer"]
    assert set(hmc) == {"engine", "_ready", "_betas", "_seeds"}  # HMCGroup: STATE and SLOTS
    engine = hmc["engine"][1]
    assert set(engine) == set(BatchedHMC.STATE + BatchedHMC.SLOTS)
    assert set(engine["_warmup"][1]) == {"windows", "welford", "dual", "trajectory", "divergent"}
    # the prior rung's: its stream, its pool of draws made at once and the version of their
    # source (a refitted q's) the pool was drawn from
    assert set(payload["rungs"][2]["explorer"]) == {"stream", "_pool", "_next", "_version"}
    assert set(payload["ladder"]) == {"initial", "legs", "betas", "history"}
    assert set(payload["recorder"]["index"][1]) == set(IndexProcess.STATE)
    assert set(payload["report"]) == set(Report.STATE)  # what each column keeps, by heading
    assert set(payload["report"]["kept"][1]) == {c.heading for c in COLUMNS}


# ----- a process killed while writing -----

CHILD = textwrap.dedent("""
    import os, sys, time
    import pyro
    from pyro.infer import MCMC
    import pyro_pt.checkpoint as checkpoint
    from pyro_pt import ParallelTempering
    from tests.pt.models import linear_data, linear_model

    path, marker = sys.argv[1], sys.argv[2]
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_replicas=2, explorer="rwmh")
    MCMC(kernel, 3, 3, disable_progbar=True).run(*linear_data())
    kernel.checkpoint(path)

    def half_then_wait(handle, data):  # the next checkpoint stops half-way, until killed
        handle.write(data[: len(data) // 2])
        handle.flush()
        open(marker, "w").close()
        time.sleep(600)

    checkpoint._write = half_then_wait
    kernel.checkpoint(path)
""")


def test_killed_while_writing_leaves_the_previous_checkpoint(tmp_path):
    path, marker = tmp_path / "run.pt", tmp_path / "half-written"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(marker)], env=env,
                             cwd=root)
    deadline = time.monotonic() + 120
    while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the child never reached the second write"
    previous = path.read_bytes()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert path.read_bytes() == previous
    header, payload = read_checkpoint(path)
    assert header["scans"] == 6 and len(payload["rungs"]) == 2
    assert len(list(tmp_path.glob("run.pt.*.tmp"))) == 1  # the half-written one, never renamed


# ----- bad checkpoints -----

BAD = {"num_replicas": 3, "max_temperature": 10.0, "explorer": "rwmh"}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("checkpoint") / "good.pt")
    run(ParallelTempering(linear_model, **BAD), warmup=4, samples=2, write={4: path})
    return path


def wider_model(x, y):
    zero = torch.zeros(3, dtype=x.dtype)
    w = pyro.sample("w", pyro.distributions.Normal(zero, 1.0).to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", pyro.distributions.Normal(w @ torch.cat([x, x[:, :1]], 1).T, 1.0),
                    obs=y)


def renamed_model(x, y):
    v = pyro.sample("v", pyro.distributions.Normal(torch.zeros(2, dtype=x.dtype), 1.0)
                    .to_event(1))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", pyro.distributions.Normal(v @ x.T, 1.0), obs=y)


@pytest.mark.parametrize("model, data, match", [
    (wider_model, None, r"latent site 'w' has shape \[3\] in this model but \[2\]"),
    (renamed_model, None, r"latent site 'w' of the checkpoint is missing.*latent site 'v' of "
                          r"this model is not in the checkpoint"),
    (linear_model, [t.float() for t in linear_data()],
     "latent site 'w' is torch.float32 in this model but torch.float64.*needs torch.float64"),
])
def test_another_model_is_refused(good, model, data, match):
    kernel = ParallelTempering.resume(good, model, **BAD)
    with pytest.raises(ValueError, match=match):
        MCMC(kernel, 2, 0, disable_progbar=True).run(*(data or linear_data()))


@pytest.mark.parametrize("change, match", [
    ({"num_replicas": 5}, "ladder"),
    ({"max_temperature": 20.0}, "ladder"),
    ({"explorer": "nuts"}, "other kernel settings.*explorer"),
    ({"swap_scheme": "seo"}, "other kernel settings.*swap_scheme"),
    ({"explorer_kwargs": {"scale": 0.5}}, "other kernel settings.*explorer_kwargs"),
])
def test_another_kernel_is_refused(good, change, match):
    with pytest.raises(ValueError, match=match):
        ParallelTempering.resume(good, linear_model, **{**BAD, **change})


def test_the_wrong_warmup_is_refused_with_the_numbers_to_pass(good):
    kernel = ParallelTempering.resume(good, linear_model, **BAD)
    with pytest.raises(ValueError, match=r"0 warmup scans are left.*warmup_steps=0, "
                                         r"num_samples=2 to finish the run\)"):
        MCMC(kernel, 2, 4, disable_progbar=True).run(*linear_data())


def test_the_ladder_comes_from_the_checkpoint(good):
    kernel = ParallelTempering.resume(good, linear_model, explorer="rwmh")  # no ladder given
    MCMC(kernel, 2, 0, disable_progbar=True).run(*linear_data())
    assert kernel.num_replicas == 3
    assert kernel.temperatures == read_checkpoint(good, payload=False)[0]["temperatures"]


def test_damaged_files_are_refused(good, tmp_path):
    data = open(good, "rb").read()
    truncated, corrupt, foreign = tmp_path / "t.pt", tmp_path / "c.pt", tmp_path / "f.pt"
    truncated.write_bytes(data[: len(data) - 100])
    flipped = bytearray(data)
    flipped[-50] ^= 0xFF
    corrupt.write_bytes(bytes(flipped))
    torch.save({"w": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_checkpoint(truncated)
    with pytest.raises(ValueError, match="truncated or corrupt.*checksum wrong"):
        read_checkpoint(corrupt)
    (tmp_path / "h.pt").write_bytes(data[: len(MAGIC) + 20])  # cut inside the header
    with pytest.raises(ValueError, match="header does not parse"):
        ParallelTempering.resume(tmp_path / "h.pt", linear_model)
    with pytest.raises(ValueError, match="not a pyro_pt checkpoint"):
        ParallelTempering.resume(foreign, linear_model)
    kernel = ParallelTempering.resume(truncated, linear_model, explorer="rwmh")
    with pytest.raises(ValueError, match="truncated or corrupt"):
        MCMC(kernel, 2, 0, disable_progbar=True).run(*linear_data())


@pytest.mark.parametrize("every, path, error", [
    (0, "x.pt", ValueError), (2.5, "x.pt", ValueError), (None, "x.pt", ValueError),
    (5, None, TypeError),
])
def test_bad_checkpoint_arguments(every, path, error):
    with pytest.raises(error, match="checkpoint_"):
        ParallelTempering(linear_model, checkpoint_every=every, checkpoint_path=path)
