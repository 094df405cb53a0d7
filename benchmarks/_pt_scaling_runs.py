"""The runs of pt_scaling.py: TorchComm's methods wrapped with timers and byte counts, one timed
ParallelTempering run of the seed BNN in any process, and the processes spawned to run it."""

import datetime
import os
import socket
import statistics
import tempfile
import time

import torch
import torch.distributed as tdist
import torch.multiprocessing as mp

import pyro
from pyro.infer import MCMC

from _bnn import CountingModel, initial_params, make_data

import pyro_pt.comm
from pyro_pt import ParallelTempering


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

    # the counters take what the comm's methods take (``what=``: the collective's name in errors)
    def gather_bytes(self, values, block_sizes, **_):
        width = 8 * max(block_sizes)  # float64, padded to the largest block
        return width, width * (self.world_size - 1)

    def exchange_bytes(self, sends, receives, **_):
        return sum(_nbytes(t) for _, t in sends), sum(_nbytes(t) for _, t in receives)

    def broadcast_bytes(self, tensor, src, **_):
        n = _nbytes(tensor)
        return (n * (self.world_size - 1), 0) if self.rank == src else (0, n)

    def object_bytes(self, obj, **_):
        return 0, 0  # setup and diagnostics only, not per iteration

    cls.all_gather_floats = timed(cls.all_gather_floats, gather_bytes)
    cls.exchange = timed(cls.exchange, exchange_bytes)
    cls.broadcast = timed(cls.broadcast, broadcast_bytes)
    cls.all_gather_object = timed(cls.all_gather_object, object_bytes)
    if hasattr(cls, "heartbeat"):  # a TCPStore write before each all-gather (lost-rank report)
        cls.heartbeat = timed(cls.heartbeat, lambda self, *_, **__: (0, 0))


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
