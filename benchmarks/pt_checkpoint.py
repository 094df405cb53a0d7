"""What a checkpoint costs on the seed BNN: one write against 100 scans of the run it saves.

``ParallelTempering(num_replicas=8, max_temperature=50.0, explorer="hmc")`` on the seed BNN
(``benchmarks/_bnn.py``: 10 -> 64 -> 64 -> 1, ReLU, 4929 latents, 500 points), one torch thread.
A short run sets the kernel up and warms it; then, interleaved in rounds, a stretch of timed
scans (``kernel.sample`` wall time, from ``kernel.timings``) and timed checkpoint writes
(``kernel.checkpoint``: gather, serialize, write, fsync, rename). Printed: the median seconds
per scan, per write, the checkpoint's size, and the ratio write / (100 scans) (target < 5%).
Benchmarks print; they never assert.

Run::

    python benchmarks/pt_checkpoint.py                     # about a minute on a 2-core CPU
    python benchmarks/pt_checkpoint.py --rounds 1 --scans 2 --writes 1 --warmup 2  # smoke
"""

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

import pyro
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bnn import CountingModel, initial_params, make_data  # noqa: E402

from pyro_pt import ParallelTempering  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scans", type=int, default=5, help="timed scans per round")
    parser.add_argument("--writes", type=int, default=3, help="timed writes per round")
    parser.add_argument("--warmup", type=int, default=10, help="scans before timing")
    parser.add_argument("--num-steps", type=int, default=10, help="leapfrog steps per scan")
    parser.add_argument("--folder", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    x, y = make_data()
    kernel = ParallelTempering(CountingModel(), num_replicas=8, max_temperature=50.0,
                               explorer="hmc", explorer_kwargs={"num_steps": args.num_steps})
    kernel.initial_params = initial_params()
    mcmc = MCMC(kernel, num_samples=1, warmup_steps=args.warmup, disable_progbar=True)
    mcmc.run(x, y)  # sets the kernel up; the timed scans continue its sampling phase

    scan_times, write_times = [], []
    folder = args.folder or tempfile.mkdtemp(prefix="pt_checkpoint_")
    path = os.path.join(folder, "bnn.pt")
    params = None
    for _ in range(args.rounds):
        before = kernel.timings["total"]
        for _ in range(args.scans):
            params = kernel.sample(params)
        scan_times.append((kernel.timings["total"] - before) / args.scans)
        for _ in range(args.writes):
            start = time.perf_counter()
            kernel.checkpoint(path)
            write_times.append(time.perf_counter() - start)
    scan, write = statistics.median(scan_times), statistics.median(write_times)
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"pyro {pyro.__version__}, Python {platform.python_version()}")
    print(f"seed BNN, K = 8, explorer='hmc' (num_steps={args.num_steps}), one thread; "
          f"{args.rounds} rounds of {args.scans} scans and {args.writes} writes")
    print(f"scan: {scan * 1e3:.1f} ms (median of rounds)   checkpoint write: {write * 1e3:.1f} ms "
          f"(median), {os.path.getsize(path) / 1e6:.2f} MB")
    print(f"write / (100 scans) = {write / (100 * scan):.2%}  (target < 5%)")


if __name__ == "__main__":
    main()
