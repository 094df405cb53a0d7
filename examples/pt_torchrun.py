"""Parallel tempering of a Bayesian MLP with its rungs spread over processes by ``torchrun``.

A ``BayesianMLP`` (10 -> 64 -> 64 -> 1, ReLU, Normal(0, 1) priors on every
weight and bias: 4929 latents, Gaussian likelihood with sigma = 0.1) as a
:class:`~pyro.nn.PyroModule`, on 500 synthetic points from a random teacher network. The
script is the same for one process and many: when ``torchrun`` launches it (``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK`` are set) it initializes ``torch.distributed`` -- the ``nccl``
backend on ``cuda:LOCAL_RANK`` when CUDA is available, ``gloo`` on the CPU otherwise -- and
:class:`~pyro_pt.ParallelTempering` splits its K rungs over the ranks in contiguous blocks.
Every rank seeds Pyro alike and ends up with the same cold chain, so any rank could print;
rank 0 does.

It prints which temperatures each rank holds, the swap acceptance of every adjacent pair, the
round trips, and the posterior predictive on a few held-out inputs (mean and 95% intervals),
with function-space diagnostics: split R-hat and effective sample size of the held-out
predictions and of the cold chain's log-likelihood (not of raw weights, whose labels are
not identifiable in a neural network). A chain that never moved is flagged: ArviZ would give
it ESS = n. The last line is a checksum of the cold-chain samples: with the same seed it is
the same for any number of processes (same ``--threads`` everywhere; CPU/gloo).

Run on one node, two processes (CPU or two GPUs)::

    torchrun --standalone --nproc-per-node=2 examples/pt_torchrun.py

on several nodes (run the same command on every node; HOST:PORT is reachable from all)::

    torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d \\
        --rdzv-endpoint=HOST:PORT examples/pt_torchrun.py --replicas 16

or in one process, without torchrun::

    python examples/pt_torchrun.py

``--quick`` is a tiny run (seconds) for the test suite. The number of replicas must be at least
the number of processes. ``--plot PATH`` saves the tempering plot (swap acceptance and
communication barrier per pair, :func:`~pyro_pt.plot_tempering`) from rank 0.
"""

import argparse
import datetime
import hashlib
import os
import socket

import torch
import torch.distributed as tdist
import torch.nn as nn

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC, Predictive
from pyro.infer.autoguide.initialization import init_to_uniform
from pyro.nn import PyroModule, PyroSample
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from pyro_pt import ParallelTempering, plot_tempering

WIDTHS = (10, 64, 64, 1)
NOISE = 0.1


class BayesianMLP(PyroModule):
    """
    MLP with Normal(0, 1) priors on all weights and biases and a Gaussian likelihood with a
    fixed noise ``sigma``. The priors' parameters live on ``device``, so every sample site
    (and so every latent) is created there.
    """

    def __init__(self, widths=WIDTHS, noise=NOISE, device="cpu"):
        super().__init__()
        zero = torch.tensor(0.0, device=device)
        one = torch.tensor(1.0, device=device)
        layers = []
        for n_in, n_out in zip(widths, widths[1:]):
            layer = PyroModule[nn.Linear](n_in, n_out)
            layer.weight = PyroSample(dist.Normal(zero, one).expand([n_out, n_in]).to_event(2))
            layer.bias = PyroSample(dist.Normal(zero, one).expand([n_out]).to_event(1))
            layers.append(layer)
        self.layers = PyroModule[nn.ModuleList](layers)
        self.noise = noise

    def forward(self, x, y=None):
        h = x
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = torch.relu(h)
        mean = pyro.deterministic("mean", h.squeeze(-1))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, self.noise), obs=y)
        return mean


def make_data(num_data, num_test, widths=WIDTHS, noise=NOISE, seed=0):
    """x ~ N(0, I); y from a random teacher MLP plus N(0, noise^2); and held-out inputs."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_data + num_test, widths[0], generator=generator)
    h = x
    for layer, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        h = h @ (torch.randn(n_in, n_out, generator=generator) / n_in**0.5)
        if layer < len(widths) - 2:
            h = torch.relu(h)
    y = h.squeeze(-1) + noise * torch.randn(num_data + num_test, generator=generator)
    return x[:num_data], y[:num_data], x[num_data:], y[num_data:]


def init_distributed():
    """Initialize torch.distributed when launched by torchrun; returns (rank, world, device)."""
    if not all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return 0, 1, torch.device("cpu")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    # A lost rank makes the others fail after this timeout instead of hanging.
    tdist.init_process_group(backend, timeout=datetime.timedelta(minutes=5))
    return tdist.get_rank(), tdist.get_world_size(), device


def chain_diagnostics(values):
    """Split R-hat and ESS of one chain per column (values: num_samples x columns)."""
    x = values.detach().double().cpu().T.unsqueeze(1)  # columns x chain x samples
    constant = (x.amax(-1) == x.amin(-1)).reshape(-1)
    # Column by column: in one batched call Pyro's ESS turns every column NaN as soon as one
    # is constant. A constant column gets NaN here (and a flag), never ESS = n.
    rhat = torch.full((x.shape[0],), float("nan"), dtype=torch.float64)
    ess = rhat.clone()
    for j in (~constant).nonzero().flatten().tolist():
        rhat[j] = split_gelman_rubin(x[j], chain_dim=0, sample_dim=1)
        ess[j] = effective_sample_size(x[j], chain_dim=0, sample_dim=1)
    return rhat, ess, constant


# Vehtari et al. (2021, Bayesian Analysis 16(2)) recommend trusting draws only below 1.01 (with
# several chains and hundreds of effective draws; one short chain can exceed it by chance).
RHAT_LIMIT = 1.01


def format_diag(rhat, ess, constant, n):
    if constant:
        return f"CONSTANT CHAIN (never moved in {n} draws): R-hat/ESS meaningless"
    text = f"R-hat {rhat:6.3f}  ESS {ess:7.1f} / {n}"
    if rhat > RHAT_LIMIT:
        # The chain's halves disagree: it is still drifting, or has too few effective draws to
        # tell. Either way its ESS is not yet a measure of mixing.
        text += f"  CHECK: R-hat > {RHAT_LIMIT} (drifting, or too few effective draws to tell)"
    return text


def checksum(samples):
    """Bitwise fingerprint of the cold-chain samples (sorted site names, float32 bytes)."""
    digest = hashlib.sha256()
    for name in sorted(samples):
        digest.update(samples[name].detach().cpu().contiguous().numpy().tobytes())
    total = sum(float(v.double().sum()) for v in samples.values())
    return digest.hexdigest()[:16], total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-samples", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=8,
                        help="K rungs, at least the number of processes (default 8)")
    # 4929 latents and 500 points at sigma = 0.1 make ll(z) vary by tens of nats, so rungs
    # must be close in beta for swaps to pass: 8 rungs up to T = 1.5 accept ~60% per pair.
    parser.add_argument("--max-temperature", type=float, default=1.5,
                        help="hottest rung of the geometric ladder (default 1.5)")
    parser.add_argument("--explorer", choices=("hmc", "nuts"), default="hmc")
    parser.add_argument("--num-steps", type=int, default=10,
                        help="leapfrog steps per HMC iteration (default 10)")
    parser.add_argument("--max-tree-depth", type=int, default=4, help="for --explorer nuts")
    parser.add_argument("--num-data", type=int, default=500)
    parser.add_argument("--num-test", type=int, default=5, help="held-out inputs to report")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--quick", action="store_true", help="tiny run for tests (seconds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", metavar="PATH", default=None,
                        help="save the tempering plot (PNG), from rank 0")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_samples, args.warmup, args.num_steps, args.num_data = 20, 10, 3, 100
        args.max_tree_depth = 2

    torch.set_num_threads(args.threads)
    rank, world_size, device = init_distributed()
    try:
        run(args, rank, world_size, device)
    finally:
        if tdist.is_initialized():
            tdist.destroy_process_group()


def run(args, rank, world_size, device):
    say = print if rank == 0 else (lambda *a, **k: None)
    pyro.set_rng_seed(args.seed)  # the same on every rank: the swap stream is shared
    x, y, x_test, y_test = (t.to(device) for t in make_data(args.num_data, args.num_test))
    model = BayesianMLP(device=device)
    if args.explorer == "hmc":
        explorer_kwargs = {"num_steps": args.num_steps, "adapt_mass_matrix": False}
    else:
        explorer_kwargs = {"max_tree_depth": args.max_tree_depth, "adapt_mass_matrix": False}
    kernel = ParallelTempering(
        model, num_replicas=args.replicas, max_temperature=args.max_temperature,
        explorer=args.explorer, explorer_kwargs=explorer_kwargs,
        # Small weights to start: a ReLU net with uniform(-2, 2) weights and sigma = 0.1 sits
        # in an enormous likelihood; every rung starts from its own draw.
        init_strategy=init_to_uniform(radius=0.1),
    )
    mcmc = MCMC(kernel, num_samples=args.num_samples, warmup_steps=args.warmup,
                disable_progbar=rank != 0 or args.quick)
    say(f"world size {world_size} ({'torchrun' if tdist.is_initialized() else 'one process'}"
        f", backend {tdist.get_backend() if tdist.is_initialized() else 'none'}), "
        f"{args.replicas} replicas, {args.explorer} {explorer_kwargs}, "
        f"{args.warmup} warmup + {args.num_samples} draws, {args.num_data} points")
    mcmc.run(x, y)

    # Which rungs each rank holds, reported by the ranks themselves.
    start, stop = kernel.rung_blocks[rank]
    mine = (rank, socket.gethostname(), str(device), start, stop)
    views = [mine]
    if tdist.is_initialized():
        views = [None] * world_size
        tdist.all_gather_object(views, mine)
    temps = kernel.temperatures
    say(f"latent dimension {sum(v[0].numel() for v in mcmc.get_samples().values())}")
    for r, host, dev, a, b in views:
        say(f"rank {r} ({host}, {dev}) rungs {a}..{b - 1}: temperatures "
            + ", ".join(f"{t:.3g}" for t in temps[a:b]))

    diag = mcmc.diagnostics()
    swap = diag["swap_acceptance"]["chain 0"]
    say("swap acceptance per pair: " + ", ".join(
        f"{temps[i]:.3g}<->{temps[i + 1]:.3g}: {a:.3f}" for i, a in enumerate(swap)))
    say(f"round trips: {diag['round_trips']['chain 0']}")
    local = diag["local_acceptance"]["chain 0"]
    say("local acceptance per rung: " + ", ".join(f"{a:.3f}" for a in local))

    samples = mcmc.get_samples()
    n = args.num_samples
    pyro.set_rng_seed(args.seed + 1)
    predictive = Predictive(model, posterior_samples=samples, return_sites=("mean", "y"))
    pred = predictive(x_test)
    f, y_rep = pred["mean"].reshape(n, -1), pred["y"].reshape(n, -1)
    rhat, ess, constant = chain_diagnostics(f)
    say("posterior predictive on held-out inputs (f: network output, y: with noise):")
    for j in range(args.num_test):
        lo, hi = torch.quantile(f[:, j].double().cpu(), torch.tensor([0.025, 0.975]).double())
        ylo, yhi = torch.quantile(y_rep[:, j].double().cpu(),
                                  torch.tensor([0.025, 0.975]).double())
        say(f"  x_test[{j}]: mean {float(f[:, j].mean()):+.3f}  95% f [{lo:+.3f}, {hi:+.3f}]  "
            f"95% y [{ylo:+.3f}, {yhi:+.3f}]  truth y {float(y_test[j]):+.3f}  "
            f"{format_diag(float(rhat[j]), float(ess[j]), bool(constant[j]), n)}")
    ll = diag["tempering_record"]["chain 0"]["log_likelihood"][:, 0]
    rhat, ess, constant = chain_diagnostics(ll.unsqueeze(-1))
    say(f"cold log-likelihood: mean {float(ll.mean()):.1f}  "
        f"{format_diag(float(rhat[0]), float(ess[0]), bool(constant[0]), n)}")
    digest, total = checksum(samples)
    say(f"cold-chain checksum: sha256 {digest} sum {total:.10e}")
    if args.plot:
        save_tempering_plot(kernel, args.plot if rank == 0 else None, say)
    return samples


def save_tempering_plot(kernel, path, say):
    # Every rank draws (cheap; the kernel reuses the diagnostics gathered at the end of the
    # run), rank 0 saves.
    try:
        fig = plot_tempering(kernel, path=path)
    except ImportError as error:
        say(f"{error}; no tempering plot written")
        return
    import matplotlib.pyplot as plt

    plt.close(fig)
    say(f"tempering plot written to {path}")


if __name__ == "__main__":
    main()
