"""examples/pt_torchrun.py under torchrun (2 gloo ranks on 127.0.0.1) and in one process."""

import os
import re
import subprocess
import sys

import pytest

from .distributed import free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "pt_torchrun.py")
TIMEOUT = 300


def _env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                        "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env["CUDA_VISIBLE_DEVICES"] = ""  # gloo on the CPU even where GPUs are present
    if os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own sockets on the loopback too
    return env


def _run(cmd, env):
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr[-5000:]}"
    return proc.stdout


def _results(out):
    """The lines that must not depend on the number of processes."""
    keys = ("swap acceptance per pair", "round trips", "local acceptance", "  x_test[",
            "cold log-likelihood", "cold-chain checksum")
    return [line for line in out.splitlines() if line.startswith(keys)]


@pytest.mark.slow
def test_torchrun_two_ranks_match_one_process():
    env = _env()
    port = free_port()
    two = _run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={port}",
                EXAMPLE, "--quick"], env)
    one = _run([sys.executable, EXAMPLE, "--quick"], env)

    assert "world size 2 (torchrun, backend gloo)" in two
    assert "world size 1 (one process" in one
    assert "latent dimension 4929" in two
    # Each rank reports its own contiguous block of the 8-rung ladder from 1 to 1.5, adapted
    # in warmup (the ends stay where they were).
    blocks = re.findall(r"^rank (\d) \(.*\) rungs (\d)\.\.(\d): temperatures (.*)$", two, re.M)
    assert [b[:3] for b in blocks] == [("0", "0", "3"), ("1", "4", "7")]
    temps = [float(t) for b in blocks for t in b[3].split(", ")]
    assert temps[0] == 1.0 and temps[-1] == pytest.approx(1.5, rel=1e-3)
    assert all(a < b for a, b in zip(temps, temps[1:]))
    for key in ("swap acceptance per pair: 1<->", "round trips: ", "x_test[4]",
                "95% f [", "R-hat", "ESS", "cold log-likelihood", "cold-chain checksum"):
        assert key in two, key
    # Swaps across the rank boundary (rungs 3 <-> 4) were accepted: states crossed processes.
    swap_line = next(line for line in two.splitlines() if line.startswith("swap acceptance"))
    rates = [float(r) for r in re.findall(r": (\d\.\d+)", swap_line)]
    assert len(rates) == 7 and rates[3] > 0
    # Printed by rank 0 only.
    assert two.count("cold-chain checksum") == 1

    # Parallelism invariance: the same seed gives the same cold chain, statistics and
    # predictions on 1 process and on 2.
    assert _results(two) == _results(one)
    assert len(_results(one)) == 10
