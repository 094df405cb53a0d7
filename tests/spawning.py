"""Running a function on several ranks of one process group (gloo on 127.0.0.1, or nccl) from a
test: one spawn serves many tasks, since starting processes (each imports torch and Pyro)
dominates. Shared by the pyro_pt and pyro_subnet tests."""

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _error(error):
    return {"error": type(error).__name__, "message": str(error)}


def run_tasks(tasks):
    """
    Run each of ``tasks``, ``[(name, fn, args, catch)]``, in turn on one process group; returns
    {name: result}. A task with ``catch`` records this rank's error dict in place of a result
    (a refusal every rank raises before any collective, so the group stays in step); any other
    exception stops the rank.
    """
    out = {}
    for name, fn, args, catch in tasks:
        try:
            out[name] = fn(*args)
        except Exception as error:
            if not catch:
                raise
            out[name] = _error(error)
    return out


def _worker(rank, world_size, port, out_dir, fn, args, timeout=60.0, catch=False, backend="gloo"):
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout))
    path = os.path.join(out_dir, f"rank{rank}.pt")
    try:
        torch.save(fn(*args), path)
    except Exception as error:
        if not catch:
            raise
        torch.save(_error(error), path)
    finally:
        dist.destroy_process_group()


def spawn_catching(world_size, out_dir, fn, *args, timeout=10.0, wait=120.0, backend="gloo"):
    """
    ``fn(*args)`` on ``world_size`` ranks, every rank recording its own exception instead of the
    first failure killing the rest (for tests of how ranks fail). Returns each rank's result,
    error dict, or None (the rank left nothing: it died or hung past ``wait`` seconds).
    """
    context = mp.get_context("spawn")
    port = free_port()
    procs = [context.Process(target=_worker, args=(r, world_size, port, str(out_dir), fn, args,
                                                   timeout, True, backend))
             for r in range(world_size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(wait)
        if p.is_alive():
            p.kill()
    paths = [os.path.join(out_dir, f"rank{r}.pt") for r in range(world_size)]
    return [torch.load(p, weights_only=False) if os.path.exists(p) else None for p in paths]


def spawn(world_size, out_dir, fn, *args):
    """``fn(*args)`` on ``world_size`` gloo ranks, a failure on any failing the test; returns each
    rank's result."""
    mp.spawn(_worker, args=(world_size, free_port(), str(out_dir), fn, args),
             nprocs=world_size, join=True)
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False)
            for r in range(world_size)]
