"""
Weak scaling of a data-parallel subnetwork Laplace: the data per rank fixed, 1, 2 and 4 gloo
processes on the CPU (one torch thread each), so the total data grow with the ranks.

A 1-H-H-1 tanh MLP with Normal(0, 1) priors and a Gaussian likelihood (LogNormal noise),
``--per-rank`` points on every rank, ``SubnetworkLaplace(model, subnetwork_size=S,
prior_scale="marglik")`` at a fixed MAP (a random point: the MAP phase is not timed). Every rank
runs ``laplace_approximation`` on its shard after a warm-up call, ``--repeats`` times; the figure
of a configuration is the median over repeats of the slowest rank, and its median over
``--rounds`` sweeps of the world sizes (interleaved, so that other jobs' load falls on each). For each world size P it
prints

- the curvature (:class:`~pyro_subnet.evidence.SubnetworkCurvature`: the subnetwork's GGN, prior
  Hessian and gradients on the rank's shard, and their sum over the ranks) and the whole
  ``laplace_approximation`` (set-up checks, the selection's Jacobian energies and their sum,
  the curvature, the prior-scale fit), in seconds;
- the weak-scaling efficiency t1 / tP of each (1 is ideal: P times the data in the same time),
  and for the curvature also its CPU seconds per rank (``time.process_time``), whose ratio is
  the efficiency of the work itself, apart from waiting for a core;
- memory per rank: the peak resident set (VmHWM, reset before the timed calls) and its rise
  over the resident set before them, which is what the curvature's work adds.

    python benchmarks/subnet_weak_scaling.py                    # 1, 2, 4 processes
    python benchmarks/subnet_weak_scaling.py --ranks 1 2 --per-rank 128

Nothing is asserted; with fewer cores than ranks the ranks share cores and the efficiency
measures the machine, not the method.
"""

import argparse
import datetime
import os
import socket
import statistics
import time

import torch

from subnet_curvature import reset_peak, rss_mib  # benchmarks/ is the script's folder

HIDDEN = 32


def model(x, y=None):
    import pyro
    import pyro.distributions as dist

    W1 = pyro.sample("W1", dist.Normal(0.0, 1.0).expand([1, HIDDEN]).to_event(2))
    b1 = pyro.sample("b1", dist.Normal(0.0, 1.0).expand([HIDDEN]).to_event(1))
    W2 = pyro.sample("W2", dist.Normal(0.0, 1.0).expand([HIDDEN, HIDDEN]).to_event(2))
    b2 = pyro.sample("b2", dist.Normal(0.0, 1.0).expand([HIDDEN]).to_event(1))
    W3 = pyro.sample("W3", dist.Normal(0.0, 1.0).expand([HIDDEN]).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(-2.0, 1.0))
    f = torch.tanh(torch.tanh(x @ W1 + b1) @ W2 + b2) @ W3
    with pyro.plate("data", x.shape[0]):
        pyro.sample("y", dist.Normal(f, sigma), obs=y)


def worker(rank, world_size, port, args, out):
    import pyro
    import torch.distributed as tdist

    from pyro_subnet import SubnetworkLaplace, evidence

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    if world_size > 1:
        tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                 timeout=datetime.timedelta(minutes=10))
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own points
    x = torch.rand(args.per_rank, 1, generator=g) * 4 - 2
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(args.per_rank, generator=g)
    pyro.set_rng_seed(0)
    guide = SubnetworkLaplace(model, subnetwork_size=args.subnetwork_size, prior_scale="marglik")
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(0.3 * torch.randn(guide.loc.shape, generator=torch.Generator().manual_seed(0)))

    curvature_seconds = []
    original = evidence.SubnetworkCurvature.__init__

    def timed(self, *a, **k):
        t, c = time.perf_counter(), time.process_time()
        original(self, *a, **k)
        curvature_seconds.append((time.perf_counter() - t, time.process_time() - c))

    evidence.SubnetworkCurvature.__init__ = timed
    import warnings

    warnings.simplefilter("ignore")
    guide.laplace_approximation(x, y)  # warm-up
    before = rss_mib("VmRSS")
    reset_peak()
    totals = []
    for _ in range(args.repeats):
        if world_size > 1:
            tdist.barrier()
        t = time.perf_counter()
        guide.laplace_approximation(x, y)
        totals.append(time.perf_counter() - t)
    result = {"curvature": [w for w, _ in curvature_seconds[1:]], "cpu": [c for _, c in curvature_seconds[1:]],
              "total": totals, "peak": rss_mib("VmHWM"),
              "rise": rss_mib("VmHWM") - before, "D": guide.loc.numel()}
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    if world_size > 1:
        tdist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world_size, args, out):
    import torch.multiprocessing as mp

    load = os.getloadavg()[0]  # other jobs on the machine take cores from the ranks
    mp.spawn(worker, args=(world_size, free_port(), args, out), nprocs=world_size, join=True)
    ranks = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(world_size)]
    def median_of_slowest(key):
        return statistics.median(max(r[key][i] for r in ranks) for i in range(args.repeats))

    return {key: median_of_slowest(key) for key in ("curvature", "cpu", "total")} | {
            "load": load, "peak": max(r["peak"] for r in ranks), "rise": max(r["rise"] for r in ranks),
            "D": ranks[0]["D"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--per-rank", type=int, default=256, help="data points per rank (default 256)")
    p.add_argument("--subnetwork-size", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3, help="timed calls per spawn (default 3)")
    p.add_argument("--rounds", type=int, default=3, help="sweeps over the world sizes (default 3)")
    args = p.parse_args()
    import tempfile

    runs = {P: [] for P in args.ranks}
    for _ in range(args.rounds):  # interleaved, so that other jobs' load falls on every world size
        for P in args.ranks:
            with tempfile.TemporaryDirectory() as out:
                runs[P].append(run(P, args, out))
    rows = {P: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for P, rs in runs.items()}
    first = rows[args.ranks[0]]
    print(f"MLP 1-{HIDDEN}-{HIDDEN}-1 (D = {first['D']}), S = {args.subnetwork_size}, {args.per_rank} points per rank, "
          f"gloo, 1 thread per rank, {os.cpu_count()} CPUs; median over {args.rounds} rounds of the median of "
          f"{args.repeats} calls of the slowest rank")
    print("| ranks | points | curvature s | efficiency | curvature CPU s | efficiency | laplace_approximation s "
          "| efficiency | peak RSS MiB | rise MiB | load before |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for P, r in rows.items():
        print(f"| {P} | {P * args.per_rank} | {r['curvature']:.2f} | {first['curvature'] / r['curvature']:.2f} | "
              f"{r['cpu']:.2f} | {first['cpu'] / r['cpu']:.2f} | "
              f"{r['total']:.2f} | {first['total'] / r['total']:.2f} | {r['peak']:.0f} | {r['rise']:.1f} | "
              f"{r['load']:.1f} |")


if __name__ == "__main__":
    main()
