"""Weak scaling of ParallelTempering over torch.distributed on the seed BNN (benchmarks/_bnn.py).

The BNN of ``benchmarks/_bnn.py`` (10 -> 64 -> 64 -> 1, ReLU, 4929 latents, 500 points,
sigma = 0.1). Every process holds one replica and does the same work per iteration: HMC with a
fixed number of leapfrog steps and a fixed step size (no adaptation, identity mass matrix),
plus the one forward pass per replica that gives the swaps ``ll(z)``.

``--backend gloo`` (default, CPU): in interleaved rounds, one process with one replica
(``temperatures=[1.0]``, no process group) against two processes with one replica each
(``temperatures=[1.0, T]``, gloo on 127.0.0.1). Efficiency = t1 / t2 of the median times per
iteration (1.0 is perfect weak scaling). A third side, two independent single-replica
processes side by side without a process group, measures what the machine gives two busy
processes at once (other jobs, shared caches): the ceiling of any 2-process run. Communication time per iteration is measured by
wrapping the methods of ``pyro_pt.comm.TorchComm`` with timers (it includes waiting for the
other rank, i.e. load imbalance), and the bytes each rank sends and receives are counted.

``--backend nccl`` (GPU): one process per visible GPU on ``cuda:rank``; for each number of
replicas per GPU in ``--replicas-per-gpu`` the time per iteration of the whole ladder. Skips
with a message when CUDA is not available.

Processes are started by ``torch.multiprocessing.spawn``, so one command runs everything. One
torch thread per process. Benchmarks print; they never assert.

Run::

    python benchmarks/pt_scaling.py                       # gloo, about 4 minutes on 2 cores
    python benchmarks/pt_scaling.py --rounds 1 --iters 5 --num-steps 3   # smoke test
    python benchmarks/pt_scaling.py --backend nccl        # on a GPU machine
"""

import argparse
import os
import platform
import statistics
import sys

import torch

import pyro

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bnn import initial_params, make_data  # noqa: E402
from _pt_scaling_runs import launch  # noqa: E402


# ----- the two modes -----

def gloo_mode(args):
    med = statistics.median
    t1, tind, t2, c2, cmin, effs, runs2, cpu1, cpu2, cpuind = ([] for _ in range(10))
    temps2 = [1.0, args.max_temperature]
    sides = ("one", "independent", "two")
    for r in range(args.rounds):
        # Rotate the order so drift (thermal, other jobs) does not favour one side.
        for side in sides[r % 3:] + sides[: r % 3]:
            if side == "one":
                (one,) = launch(1, "gloo", args, [1.0])
                t1.append(one["per_iter"])
                cpu1.append(one["cpu_per_iter"])
            elif side == "independent":
                # Two single-replica runs side by side, no process group: what this machine
                # gives two busy processes at once, the ceiling for any 2-process run.
                ind = launch(2, "none", args, [1.0])
                tind.append(max(res["per_iter"] for res in ind))
                cpuind.append(max(res["cpu_per_iter"] for res in ind))
            else:
                two = launch(2, "gloo", args, temps2)
                runs2.append(two)
                # Collectives keep the ranks in step: the iteration takes the slower rank.
                t2.append(max(res["per_iter"] for res in two))
                cpu2.append(max(res["cpu_per_iter"] for res in two))
                c2.append(med(res["comm_per_iter"] for res in two))
                # The rank that arrives last at a collective hardly waits: the smaller of the
                # two ranks' communication times, iteration by iteration, is the transfer cost.
                each = [min(pair) for pair in zip(*(res["comm_each_iter"] for res in two))]
                cmin.append(med(each))
        effs.append(t1[-1] / t2[-1])
        print(f"round {r + 1}/{args.rounds}: 1 process {t1[-1] * 1e3:6.1f} ms/it; 2 independent "
              f"processes {tind[-1] * 1e3:6.1f} ms/it; PT on 2 ranks {t2[-1] * 1e3:6.1f} ms/it "
              f"(comm {c2[-1] * 1e3:5.2f} ms/it, transfer {cmin[-1] * 1e3:5.2f} ms/it); "
              f"efficiency {effs[-1]:.3f}; CPU ms/it {cpu1[-1] * 1e3:.1f}, "
              f"{cpuind[-1] * 1e3:.1f}, {cpu2[-1] * 1e3:.1f}; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)

    eff = med(t1) / med(t2)
    last = runs2[-1]
    print()
    print(f"{'':<62}{'measured':>10}{'target':>10}")
    print(f"{'weak-scaling efficiency t1/t2 (medians over rounds)':<62}{eff:>10.3f}"
          f"{'>= 0.9':>10}  {'met' if eff >= 0.9 else 'MISSED'}")
    print(f"{'  median of per-round efficiencies':<62}{med(effs):>10.3f}")
    print(f"{'  machine ceiling: t1 / t(2 independent processes)':<62}"
          f"{med(t1) / med(tind):>10.3f}")
    print(f"{'  PT against that ceiling: t(2 independent) / t2':<62}"
          f"{med(tind) / med(t2):>10.3f}")
    print(f"{'  CPU-time ratio (1 process / slower rank of 2)':<62}"
          f"{med(cpu1) / med(cpu2):>10.3f}")
    print()
    print("raw medians over rounds:")
    print(f"  1 process,   [1.0]:          {med(t1) * 1e3:7.2f} ms/iteration "
          f"(CPU {med(cpu1) * 1e3:.2f} ms)")
    print(f"  2 independent processes:     {med(tind) * 1e3:7.2f} ms/iteration (slower of two; "
          f"CPU {med(cpuind) * 1e3:.2f} ms)")
    print(f"  PT, 2 ranks, {temps2}:   {med(t2) * 1e3:7.2f} ms/iteration (CPU "
          f"{med(cpu2) * 1e3:.2f} ms); communication {med(c2) * 1e3:.3f} ms/iteration incl. "
          f"waiting for the other rank, transfer alone {med(cmin) * 1e3:.3f} ms/iteration")
    for rank, res in enumerate(last):
        print(f"  rank {rank} (last round): {res['per_iter'] * 1e3:.2f} ms/it, explorers "
              f"{res['explorers_per_iter'] * 1e3:.2f} ms/it, CPU {res['cpu_per_iter'] * 1e3:.2f} "
              f"ms/it, comm {res['comm_per_iter'] * 1e3:.3f} ms/it, sent "
              f"{res['sent_per_iter']:.0f} B/it, received {res['received_per_iter']:.0f} B/it, "
              f"{res['calls_per_iter']:.1f} model executions/it/replica "
              f"(setup and traced fallbacks), "
              f"{res['accepted_swaps']} accepted swaps in {args.iters} draws")
        print("    comm by method, ms/it: " + ", ".join(
            f"{m} {t * 1e3:.3f}" for m, t in res["by_method"].items() if t > 0))


def nccl_mode(args):
    if not torch.cuda.is_available():
        print("--backend nccl: CUDA is not available on this machine; skipping.")
        return
    num_gpus = torch.cuda.device_count()
    print(f"{num_gpus} GPU(s): {torch.cuda.get_device_name(0)}; one process per GPU, nccl")
    print(f"{'replicas/GPU':>12}{'K':>5}{'ms/iteration':>14}{'comm ms/it':>12}"
          f"{'ms/it/replica':>15}")
    for per_gpu in args.replicas_per_gpu:
        k = per_gpu * num_gpus
        temps = [args.max_temperature ** (i / (k - 1)) for i in range(k)] if k > 1 else [1.0]
        times, comms = [], []
        for _ in range(args.rounds):
            res = launch(num_gpus, "nccl", args, temps)
            times.append(max(r["per_iter"] for r in res))
            comms.append(statistics.median(r["comm_per_iter"] for r in res))
        t, c = statistics.median(times), statistics.median(comms)
        print(f"{per_gpu:>12}{k:>5}{t * 1e3:>14.2f}{c * 1e3:>12.3f}{t / per_gpu * 1e3:>15.2f}",
              flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--iters", type=int, default=200,
                        help="timed draws per run (default 200)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed first iterations")
    # 30 leapfrog steps ~ the 31 gradients of a depth-5 NUTS tree (benchmarks/pt_overhead.py).
    parser.add_argument("--num-steps", type=int, default=30,
                        help="HMC leapfrog steps per iteration (default 30)")
    parser.add_argument("--step-size", type=float, default=1e-3, help="fixed HMC step size")
    parser.add_argument("--max-temperature", type=float, default=1.1,
                        help="the 2-process run's second temperature (default 1.1: some "
                             "swaps pass, so states cross the rank boundary)")
    parser.add_argument("--replicas-per-gpu", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="nccl mode: replicas per GPU to time")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data = make_data()
    num_latent = sum(v.numel() for v in initial_params().values())
    print(f"BNN 10 -> 64 -> 64 -> 1, ReLU, D = {num_latent} latents, {data[0].shape[0]} points, "
          f"sigma = 0.1; torch {torch.__version__}, pyro {pyro.__version__}, {os.cpu_count()} "
          f"CPUs, {platform.machine()}; 1 torch thread per process")
    print(f"explorer: HMC, {args.num_steps} leapfrog steps, fixed step size {args.step_size}, "
          f"identity mass matrix; {args.warmup} + {args.iters} iterations per run, "
          f"{args.rounds} rounds; backend {args.backend}\n")
    if args.backend == "gloo":
        gloo_mode(args)
    else:
        nccl_mode(args)


if __name__ == "__main__":
    main(sys.argv[1:])
