"""examples/subnet_torchrun.py under torchrun (2 gloo ranks on 127.0.0.1) gives the results of one process."""

import os
import re
import subprocess
import sys

import pytest
from shards import free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "subnet_torchrun.py")
sys.path.insert(0, os.path.join(ROOT, "examples"))


def _env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                        "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env["CUDA_VISIBLE_DEVICES"] = ""  # gloo on the CPU even where GPUs are present
    if os.path.exists("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def results(out):
    """``{line label: [numbers]}`` of the ``result:`` lines."""
    lines = [line[len("result: "):] for line in out.splitlines() if line.startswith("result: ")]
    number = r"[-+]?\d+\.?\d*(?:e[-+]?\d+)?"
    return {re.sub(number, "#", line): [float(v) for v in re.findall(number, line)] for line in lines}


@pytest.mark.slow
def test_torchrun_two_ranks_match_one_process(capsys):
    import subnet_torchrun

    subnet_torchrun.main(["--quick"])
    one = capsys.readouterr().out
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                           "--master-addr=127.0.0.1", f"--master-port={free_port()}", EXAMPLE, "--quick"],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr[-5000:]}"
    two = proc.stdout
    assert "world size 1 (backend none, cpu), shards of [60] points" in one
    assert "world size 2 (backend gloo, cpu), shards of [30, 30] points" in two
    one, two = results(one), results(two)
    assert len(one) == 6 and one.keys() == two.keys()
    for label, values in one.items():  # printed to 6-10 digits; they agree to ~1e-12
        assert two[label] == pytest.approx(values, rel=1e-8, abs=1e-6), label
