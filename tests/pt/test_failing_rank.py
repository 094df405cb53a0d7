"""A rank that fails under torchrun, or hangs in a job launched by hand, is named; no process
waits for the hung rank (subprocesses: gloo on 127.0.0.1)."""

import os
import subprocess
import sys

import pytest

from .distributed import free_port
from .test_torchrun_example import ROOT, _env

SCRIPT = os.path.join(ROOT, "tests", "pt", "failing_rank.py")
GUARD = 240  # seconds: a hang guard only, far above what a run takes under load


@pytest.mark.slow
@pytest.mark.parametrize("how", ["raise", "exit"])
def test_under_torchrun_the_survivors_name_the_failed_rank(how):
    # torchrun SIGTERMs the survivors as soon as rank 1 fails, before their own collective
    # fails: they name rank 1 from their SIGTERM handler (pyro_pt/torchrun.py).
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
         "--master-addr=127.0.0.1", f"--master-port={free_port()}", SCRIPT, how],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=GUARD)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    said = [line for line in out.splitlines() if "pyro_pt: " in line and "rank 0 of 2" in line]
    assert said, out[-5000:]
    assert "lost rank(s) [1]" in said[0]
    if how == "raise":
        # Its reason, left in the store, and in torchrun's error file: the summary's root
        # cause shows it instead of "error_file: <N/A>".
        assert "rank 1 stopped with RuntimeError: rank 1's model blew up" in said[0]
        root_cause = out[out.index("Root Cause"):]
        assert "RuntimeError: rank 1's model blew up" in root_cause


@pytest.mark.slow
def test_a_hung_rank_is_named_and_the_survivor_exits_without_it():
    env = dict(_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, SCRIPT, "hang", "--timeout", "5"], cwd=ROOT,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    try:
        out, _ = procs[0].communicate(timeout=GUARD)
        # Rank 0 has stopped while rank 1 still sleeps: its exit did not wait for rank 1.
        assert procs[1].poll() is None
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert procs[0].returncode != 0
    assert "pyro_pt: all_gather of log-likelihoods failed on rank 0 of 2" in out, out[-5000:]
    assert "lost rank(s) [1]: they stopped responding" in out


def test_the_watch_keeps_the_scripts_own_sigterm_handler_and_chains_its_excepthook():
    # In a subprocess: pytest's own handlers must not be touched.
    code = """
import signal, sys
from pyro_pt.torchrun import watch
mine = lambda *a: None
signal.signal(signal.SIGTERM, mine)
seen = []
sys.excepthook = lambda kind, value, tb: seen.append(("user hook", str(value)))
class Comm:
    rank, world_size = 1, 2
    def leave_note(self, error):
        seen.append(("note", str(error)))
watch(Comm())
watch(Comm())  # a second kernel: installed once
assert signal.getsignal(signal.SIGTERM) is mine
sys.excepthook(ValueError, ValueError("boom"), None)
assert seen == [("note", "boom"), ("user hook", "boom")], seen
print("ok")
"""
    env = {k: v for k, v in _env().items() if k != "TORCHELASTIC_ERROR_FILE"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=GUARD)
    assert proc.stdout.strip() == "ok", proc.stderr[-3000:]
