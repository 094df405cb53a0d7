"""Subnetwork Laplace of a Bayesian MLP whose data are sharded over processes by ``torchrun``.

A 1-H-H-1 tanh network (Normal(0, 1) priors on every weight and bias, LogNormal noise) on
synthetic regression data. Each rank holds its own shard of the points (``torch.tensor_split``:
sizes may differ by one) and runs the same script: the MAP phase with
:class:`~pyro_subnet.DataParallelELBO` (each rank's likelihood counted ``W`` times, gradients
averaged, so the prior counts once and every rank takes the one-process step), then
``guide.laplace_approximation(x_shard, y_shard)``, whose selection statistics, GGN, evidence and
prior-scale fit are summed over the ranks: every rank ends with the posterior of one process
holding all the data. ``predict`` and the ArviZ export then work per rank on its own inputs;
the exports' pointwise log-likelihoods are gathered for ``pyro_subnet.loo``.

When ``torchrun`` launches it (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` set) it initializes
``torch.distributed``: ``nccl`` with the model on ``cuda:LOCAL_RANK`` when CUDA is available,
``gloo`` on the CPU otherwise. With ``--quick`` the printed results (``result:`` lines) are
the same for any number of processes up to float64 rounding in the last digits (the sums add up
in another order). Over a long MAP phase Adam amplifies that rounding, as it would a change of
thread count: with 600 points the MAP loss agrees to 10 digits after 100 steps, 8 after 250 and
2 after 500, and the posterior is then that of a nearby MAP::

    torchrun --standalone --nproc-per-node=2 examples/subnet_torchrun.py
    python examples/subnet_torchrun.py                       # one process, all the data

``--quick`` is a tiny run (seconds) for the test suite.
"""

import argparse
import datetime
import os

import torch
import torch.distributed as tdist

import pyro
import pyro.distributions as dist
from pyro.infer import SVI, Trace_ELBO

from pyro_subnet import DataParallelELBO, SubnetworkLaplace, gather_log_likelihood, loo, to_inference_data


def model(x, y=None, hidden=20):
    zero, one = x.new_zeros(()), x.new_ones(())
    W1 = pyro.sample("W1", dist.Normal(zero, one).expand([1, hidden]).to_event(2))
    b1 = pyro.sample("b1", dist.Normal(zero, one).expand([hidden]).to_event(1))
    W2 = pyro.sample("W2", dist.Normal(zero, one).expand([hidden, hidden]).to_event(2))
    b2 = pyro.sample("b2", dist.Normal(zero, one).expand([hidden]).to_event(1))
    W3 = pyro.sample("W3", dist.Normal(zero, one).expand([hidden]).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(-2.0 * one, one))
    f = torch.tanh(torch.tanh(x @ W1 + b1) @ W2 + b2) @ W3
    with pyro.plate("data", x.shape[0]):  # the shard's own size: each rank's sum over its points
        pyro.sample("y", dist.Normal(f, sigma), obs=y)
    return f


def make_data(num_data, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(num_data, 1, generator=g, dtype=torch.float64) * 4 - 2
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(num_data, generator=g, dtype=torch.float64)
    return x, y


def init_distributed():
    """Initialize torch.distributed when launched by torchrun; returns (rank, world, device)."""
    if not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return 0, 1, torch.device("cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    # a lost rank makes the others fail after this timeout instead of hanging
    tdist.init_process_group(backend, timeout=datetime.timedelta(minutes=5))
    return tdist.get_rank(), tdist.get_world_size(), device


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-data", type=int, default=2000, help="points over all ranks (default 2000)")
    p.add_argument("--hidden", type=int, default=20, help="hidden units per layer (default 20)")
    p.add_argument("--steps", type=int, default=2000, help="MAP steps (default 2000)")
    p.add_argument("--subnetwork-size", type=int, default=100)
    p.add_argument("--num-samples", type=int, default=1000, help="draws of the ArviZ export (default 1000)")
    p.add_argument("--quick", action="store_true", help="tiny run for tests (seconds)")
    args = p.parse_args(argv)
    if args.quick:
        args.num_data, args.hidden, args.steps, args.subnetwork_size, args.num_samples = 60, 6, 100, 20, 100
    torch.set_default_dtype(torch.float64)
    rank, world_size, device = init_distributed()
    try:
        return run(args, rank, world_size, device)
    finally:
        if tdist.is_initialized():
            tdist.destroy_process_group()


def run(args, rank, world_size, device):
    say = print if rank == 0 else (lambda *a, **k: None)
    x, y = make_data(args.num_data)
    mine = torch.tensor_split(torch.arange(args.num_data), world_size)[rank]
    x, y = x[mine].to(device), y[mine].to(device)
    sizes = [len(s) for s in torch.tensor_split(torch.arange(args.num_data), world_size)]
    backend = tdist.get_backend() if tdist.is_initialized() else "none"
    say(f"world size {world_size} (backend {backend}, {device}), shards of {sizes} points")

    pyro.set_rng_seed(0)  # the same start on every rank
    guide = SubnetworkLaplace(model, subnetwork_size=args.subnetwork_size, prior_scale="marglik")
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), DataParallelELBO(Trace_ELBO()))
    for step in range(args.steps):
        loss = svi.step(x, y, args.hidden)  # the one-process loss, on every rank
    posterior = guide.laplace_approximation(x, y, args.hidden)

    say(f"result: MAP loss {loss:.10g}")
    say(f"result: subnetwork of {len(posterior.subnetwork_indices)} coordinates, sites "
        f"{sorted({site for site, _ in posterior.subnetwork})}, index sum {int(posterior.subnetwork_indices.sum())}")
    say(f"result: prior scale {posterior.prior_scale:.10g}, log evidence {posterior.log_marginal_likelihood():.10g}")
    say(f"result: covariance trace {float(posterior.covariance.trace()):.10g}")

    x_test = torch.linspace(-3, 3, 4, device=device)[:, None]  # every rank may predict its own inputs
    pred = posterior.predict(x_test, None, args.hidden)["y"]
    say("result: predictive at x = -3, -1, 1, 3: " + ", ".join(
        f"{float(m):+.6f} +- {float(s):.6f}" for m, s in zip(pred.mean, pred.stddev)))

    pyro.set_rng_seed(1)  # the same draws on every rank, so their log-likelihoods line up
    idata = gather_log_likelihood(to_inference_data(posterior, x, y, args.hidden, num_samples=args.num_samples))
    # without the model this leave-one-out can neither move the MAP nor correct for q, and warns so
    result = loo(idata)
    elpd = result["elpd_loo"] if hasattr(result, "index") else result.elpd  # ArviZ < 1 / >= 1
    say(f"result: pyro_subnet.loo elpd over all {sum(sizes)} points {float(elpd):.6f}")
    return posterior


if __name__ == "__main__":
    main()
