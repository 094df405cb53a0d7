"""Helpers to run ParallelTempering under torch.distributed (gloo, 127.0.0.1) from pytest."""

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering

from .models import linear_data, linear_model


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_linear(kernel_kwargs, num_samples=20, warmup_steps=10, seed=0):
    """The same seeded run in any process; returns what every rank must agree on."""
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(linear_model, **kernel_kwargs)
    mcmc = MCMC(kernel, num_samples, warmup_steps, disable_progbar=True)
    mcmc.run(*linear_data())
    diag = mcmc.diagnostics()
    return {
        "w": mcmc.get_samples()["w"],
        "swap_accepted": diag["tempering_record"]["chain 0"]["swap_accepted"],
        "log_likelihood": diag["tempering_record"]["chain 0"]["log_likelihood"],
        "swap_acceptance": diag["swap_acceptance"]["chain 0"],
        "local_acceptance": diag["local_acceptance"]["chain 0"],
        "round_trips": diag["round_trips"]["chain 0"],
        "world_size": kernel._rungs.comm.world_size,
    }


def _worker(rank, world_size, port, out_dir, fn, args):
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        torch.save(fn(*args), os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def spawn(world_size, out_dir, fn, *args):
    """Run ``fn(*args)`` on ``world_size`` gloo ranks; returns each rank's result."""
    mp.spawn(_worker, args=(world_size, free_port(), str(out_dir), fn, args),
             nprocs=world_size, join=True)
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world_size)]
