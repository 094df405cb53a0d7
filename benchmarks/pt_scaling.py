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
import datetime
import os
import platform
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as tdist
import torch.multiprocessing as mp

import pyro
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bnn import CountingModel, initial_params, make_data  # noqa: E402

import pyro_pt.comm  # noqa: E402
from pyro_pt import ParallelTempering  # noqa: E402


# ----- instrumentation of the communication, from outside pyro_pt -----

COMM = {"seconds": 0.0, "sent": 0, "received": 0, "calls": 0}
METHODS = ("all_gather_floats", "exchange", "broadcast", "all_gather_object", "heartbeat")


def _nbytes(t):
    return t.numel() * t.element_size()


def instrument_comm():
    """Wrap TorchComm's methods: wall time (incl. waiting for peers) and bytes per rank."""
    cls = pyro_pt.comm.TorchComm

    def timed(fn, count):
        def wrapper(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                seconds = time.perf_counter() - start
                COMM[fn.__name__] = COMM.get(fn.__name__, 0.0) + seconds
                if fn.__name__ == "heartbeat":
                    return  # inside all_gather_floats (counted there) or setup
                COMM["seconds"] += seconds
                COMM["calls"] += 1
                sent, received = count(self, *args, **kwargs)
                COMM["sent"] += sent
                COMM["received"] += received
        return wrapper

    def gather_bytes(self, values, block_sizes):
        width = 8 * max(block_sizes)  # float64, padded to the largest block
        return width, width * (self.world_size - 1)

    def exchange_bytes(self, sends, receives):
        return sum(_nbytes(t) for _, t in sends), sum(_nbytes(t) for _, t in receives)

    def broadcast_bytes(self, tensor, src):
        n = _nbytes(tensor)
        return (n * (self.world_size - 1), 0) if self.rank == src else (0, n)

    def object_bytes(self, obj):
        return 0, 0  # setup and diagnostics only, not per iteration

    cls.all_gather_floats = timed(cls.all_gather_floats, gather_bytes)
    cls.exchange = timed(cls.exchange, exchange_bytes)
    cls.broadcast = timed(cls.broadcast, broadcast_bytes)
    cls.all_gather_object = timed(cls.all_gather_object, object_bytes)
    if hasattr(cls, "heartbeat"):  # a TCPStore write before each all-gather (lost-rank report)
        cls.heartbeat = timed(cls.heartbeat, lambda self: (0, 0))


# ----- one timed run, in any process -----

def timed_run(args, temperatures, device):
    """Time per iteration (sampling phase) and per-iteration communication of one run."""
    torch.set_num_threads(1)
    model = CountingModel(device=device)
    x, y = (t.to(device) for t in make_data())
    init = {k: v.to(device) for k, v in initial_params().items()}
    kernel = ParallelTempering(
        model, temperatures=temperatures, explorer="hmc",
        explorer_kwargs={"num_steps": args.num_steps, "step_size": args.step_size,
                         "adapt_step_size": False, "adapt_mass_matrix": False},
    )
    stamps, cpu, comm = [], [], []

    def hook(kernel, params, stage, i):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        comm.append(dict(COMM))

    mcmc = MCMC(kernel, num_samples=args.iters, warmup_steps=args.warmup, initial_params=init,
                hook_fn=hook, disable_progbar=True)
    model.calls = 0
    mcmc.run(x, y)
    first = args.warmup - 1 if args.warmup else 0
    stamps, cpu, comm = stamps[first:], cpu[first:], comm[first:]
    n = len(stamps) - 1

    def per_iter(key):
        return (comm[-1][key] - comm[0][key]) / n

    diag = mcmc.diagnostics()
    swaps = diag["tempering_record"]["chain 0"]["swap_accepted"]
    return {
        "per_iter": statistics.median(b - a for a, b in zip(stamps, stamps[1:])),
        "comm_each_iter": [b["seconds"] - a["seconds"] for a, b in zip(comm, comm[1:])],
        # CPU seconds of this process (all its threads, gloo's included): if they stay put
        # while the wall time grows, the cores were busy with something else.
        "cpu_per_iter": (cpu[-1] - cpu[0]) / n,
        "comm_per_iter": per_iter("seconds"),
        "by_method": {m: (comm[-1].get(m, 0.0) - comm[0].get(m, 0.0)) / n for m in METHODS},
        "sent_per_iter": per_iter("sent"),
        "received_per_iter": per_iter("received"),
        "explorers_per_iter": kernel.timings["explorers"] / (args.warmup + args.iters),
        "calls_per_iter": model.calls / (args.warmup + args.iters) / len(kernel.local_temperatures),
        "accepted_swaps": int(swaps.nan_to_num(0).sum()),
        "num_latent": sum(v.numel() for v in init.values()),
    }


def _worker(rank, world_size, port, backend, out_dir, args, temperatures):
    torch.set_num_threads(1)
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if backend != "none" and (world_size > 1 or backend == "nccl"):
        tdist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
            timeout=datetime.timedelta(seconds=120),
        )
        instrument_comm()
    pyro.set_rng_seed(args.seed)
    try:
        out = timed_run(args, temperatures, device)
    finally:
        if tdist.is_initialized():
            tdist.destroy_process_group()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world_size, backend, args, temperatures):
    """
    Spawn ``world_size`` processes (a process group only if > 1 or nccl; none at all with
    backend "none": independent runs side by side); their results.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_worker, args=(world_size, free_port(), backend, out_dir, args, temperatures),
                 nprocs=world_size, join=True)
        return [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world_size)]


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
