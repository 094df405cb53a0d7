"""A script whose rank ``--rank`` fails at scan 8 of a small run: ``raise`` (a Python error),
``exit`` (dies without a word) or ``hang`` (sleeps for good). Launched by torchrun or by hand
(``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set), with gloo on the CPU."""

import argparse
import datetime
import os
import time

import torch.distributed as dist

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from tests.pt.models import linear_data, linear_model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("how", choices=("raise", "exit", "hang"))
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=30.0, help="process group's, seconds")
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))

    def hook(kernel, params, stage, i):
        if dist.get_rank() == args.rank and i == 8:
            if args.how == "raise":
                raise RuntimeError(f"rank {args.rank}'s model blew up")
            if args.how == "exit":
                os._exit(3)
            time.sleep(10**6)

    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_replicas=2, explorer="rwmh")
    MCMC(kernel, 40, 5, disable_progbar=True, hook_fn=hook).run(*linear_data())


if __name__ == "__main__":
    main()
