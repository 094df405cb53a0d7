"""Where the seed BNN's posterior mass lies, probed with long plain-torch HMC trajectories.

A target of >= 1 effective draw per second for the cold chain's held-out predictions
(``pt_speed.py`` section (c)) presumes that a few hundred short-trajectory draws are in the posterior's typical set.
This probe checks that presumption independently of ``pyro_pt``: the BNN of ``_bnn.py``
(4929 weights, Normal(0, 1) priors, 500 points, sigma = 0.1) written in plain torch, sampled by
textbook HMC with an identity metric, long jittered trajectories (``--steps``, 1000 by default,
drawn uniformly in [0.5, 1.5] times that) and the step size tuned by dual averaging
(Hoffman & Gelman 2014, target acceptance 0.8) during ``--warmup``, from two starting points:
weights uniform in (-0.1, 0.1) (``small``, what (c) uses) and a draw from the prior
(``prior``). Every ``--every`` iterations it prints the weights' norm |z| (the prior's radius
is sqrt(4929) = 70.2), the log-likelihood ll, the step size and the acceptance; at the end the
split R-hat of f(x_test) across the two chains; per chain, the ESS of f(x_test) over its draws and
per CPU second of its sampling phase.

What to read: if the chains keep drifting (|z| or ll moving across the whole run) or end in
different places (R-hat far above 1), no run of the length section (c) affords is in the
typical set, and no ESS computed from one is a rate.

Run::

    python benchmarks/bnn_posterior_probe.py            # about 2 minutes on one thread
    python benchmarks/bnn_posterior_probe.py --starts small --draws 200   # about 2.2 minutes
    python benchmarks/bnn_posterior_probe.py --quick    # seconds
"""

import argparse
import math
import os
import sys
import time

import torch

from pyro.ops.stats import effective_sample_size, split_gelman_rubin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bnn import NOISE, WIDTHS, make_data  # noqa: E402

SHAPES = [shape for n_in, n_out in zip(WIDTHS, WIDTHS[1:]) for shape in ((n_in, n_out), (n_out,))]
SIZES = [math.prod(shape) for shape in SHAPES]
DIM = sum(SIZES)


def network(z, x):
    """The MLP's output at inputs ``x`` for flat weights ``z`` (the layout of ``SHAPES``)."""
    h = x
    parts = torch.split(z, SIZES)
    layers = len(WIDTHS) - 1
    for layer in range(layers):
        h = h @ parts[2 * layer].view(SHAPES[2 * layer]) + parts[2 * layer + 1]
        if layer < layers - 1:
            h = torch.relu(h)
    return h.squeeze(-1)


def log_likelihood(z, x, y):
    residual = (y - network(z, x)) / NOISE
    return -0.5 * (residual * residual).sum() - y.numel() * (math.log(NOISE)
                                                             + 0.5 * math.log(2 * math.pi))


def potential_and_grad(z, x, y):
    """``-(log prior + ll)`` up to a constant, and its gradient."""
    z = z.detach().requires_grad_(True)
    potential = 0.5 * (z * z).sum() - log_likelihood(z, x, y)
    (grad,) = torch.autograd.grad(potential, z)
    return potential.detach(), grad


def hmc_step(z, potential, grad, step_size, num_steps, x, y):
    """One HMC transition (identity metric, leapfrog); returns the new state and the
    acceptance probability. A non-finite energy is a rejection."""
    momentum = torch.randn_like(z)
    energy = potential + 0.5 * (momentum * momentum).sum()
    z_new, grad_new = z, grad
    momentum = momentum - 0.5 * step_size * grad_new
    for step in range(num_steps):
        z_new = z_new + step_size * momentum
        potential_new, grad_new = potential_and_grad(z_new, x, y)
        if step < num_steps - 1:
            momentum = momentum - step_size * grad_new
    momentum = momentum - 0.5 * step_size * grad_new
    energy_new = potential_new + 0.5 * (momentum * momentum).sum()
    accept = float(torch.exp(torch.clamp(energy - energy_new, max=0.0)))
    if not math.isfinite(float(energy_new)):
        accept = 0.0
    if float(torch.rand(())) < accept:
        return z_new, potential_new, grad_new, accept
    return z, potential, grad, accept


def run_chain(z, args, x, y, x_test, label):
    """Warmup with dual averaging of the step size, then draws; f(x_test) per draw."""
    potential, grad = potential_and_grad(z, x, y)
    step_size = 1e-3
    # Dual averaging (Hoffman & Gelman 2014, Algorithm 5) with their constants.
    mu, h_bar, log_step_bar = math.log(10 * step_size), 0.0, 0.0
    predictions, start = [], time.process_time()
    sampling_start = start
    for it in range(args.warmup + args.draws):
        if it == args.warmup:
            sampling_start = time.process_time()
        num_steps = max(1, round(args.steps * (0.5 + float(torch.rand(())))))
        z, potential, grad, accept = hmc_step(z, potential, grad, step_size, num_steps, x, y)
        if it < args.warmup:
            m = it + 1
            h_bar += ((0.8 - accept) - h_bar) / (m + 10)
            log_step = mu - math.sqrt(m) / 0.05 * h_bar
            weight = m ** -0.75
            log_step_bar = weight * log_step + (1 - weight) * log_step_bar
            step_size = math.exp(log_step if it < args.warmup - 1 else log_step_bar)
        else:
            predictions.append(network(z, x_test))
        if it % args.every == 0 or it == args.warmup + args.draws - 1:
            print(f"{label} iteration {it:4d}: |z| {float(z.norm()):6.2f}  ll "
                  f"{float(log_likelihood(z, x, y)):9.1f}  step size {step_size:.2e}  "
                  f"acceptance {accept:.2f}  CPU {time.process_time() - start:6.1f} s",
                  flush=True)
    f = torch.stack(predictions)
    cpu = time.process_time() - sampling_start
    if f.shape[0] >= 20:  # fewer draws give no usable ESS
        columns = f.double().T.unsqueeze(1)  # inputs x 1 chain x draws
        ess = effective_sample_size(columns, chain_dim=1, sample_dim=2).flatten()
        rhat = split_gelman_rubin(columns, chain_dim=1, sample_dim=2).flatten()
        print(f"{label}: {f.shape[0]} draws in {cpu:.1f} CPU s: ESS of f(x_test) min "
              f"{float(ess.min()):.1f}, median {float(ess.median()):.1f}; split R-hat max "
              f"{float(rhat.max()):.3f}; min ESS per CPU second of sampling "
              f"{float(ess.min()) / cpu:.3f}", flush=True)
    return f


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="mean leapfrog steps per draw")
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="print every this many iterations")
    parser.add_argument("--starts", default="small,prior",
                        help="comma-separated starting points: small, prior (default both)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a smoke test (seconds)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.draws, args.every = 5, 4, 4, 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y = make_data()
    x_test = torch.randn(10, WIDTHS[0], generator=torch.Generator().manual_seed(7))
    print(f"seed BNN, {DIM} weights, plain-torch HMC, identity metric, ~{args.steps} leapfrog "
          f"steps per draw, {args.warmup} warmup + {args.draws} draws per start, "
          f"{torch.get_num_threads()} thread(s); prior radius sqrt({DIM}) = {DIM ** 0.5:.1f}")
    starts = {"small": 0.2 * torch.rand(DIM) - 0.1, "prior": torch.randn(DIM)}
    labels = args.starts.split(",")
    unknown = set(labels) - set(starts)
    if unknown:
        parser.error(f"--starts: unknown {sorted(unknown)}; choose from {sorted(starts)}")
    chains = [run_chain(starts[label], args, x, y, x_test, label) for label in labels]
    if len(chains) < 2:
        return
    f = torch.stack(chains).double().permute(2, 0, 1)  # inputs x chains x draws
    rhat = split_gelman_rubin(f, chain_dim=1, sample_dim=2)
    print(f"split R-hat of f(x_test) across the two starts: max {float(rhat.max()):.2f}, "
          f"median {float(rhat.median()):.2f}")


if __name__ == "__main__":
    main()
