"""Parallel tempering on a bimodal posterior with unequal mode weights, beside plain NUTS.

Two instruments look at one unknown theta: a precise one that can only measure its square, and
a crude one that reads theta itself with a large error,

    theta ~ Normal(0, 2),   y_i ~ Normal(theta^2, 1),  i = 1..10,   z ~ Normal(theta, 2).

The precise readings cannot tell theta from -theta: the posterior has two sharp modes near
+-sqrt(mean(y)), and only the crude reading weighs them (about 0.7 on the right, 0.3 on the
left). Between the modes, at theta = 0, the log likelihood drops by about 23 nats, a wall NUTS
never climbs: started in the small mode it stays there and reports the wrong answer with a
perfectly healthy R-hat.

ParallelTempering runs replicas at temperatures 1 = T_0 < ... < T_{K-1}; the hot ones see the
likelihood flattened (``lp + ll / T``), cross freely, and hand their states down by swaps. The
script prints the ladder, the swap acceptance of each adjacent pair, the round trips, and the
mass each sampler puts in each mode beside the exact weights from numerical quadrature.

Run::

    python examples/pt_bimodal.py                    # default run, under a minute on 2 cores
    python examples/pt_bimodal.py --quick            # a few seconds, for tests
    python examples/pt_bimodal.py --plot bimodal.png # also save the cold chain's histogram,
                                                     # and the tempering plot beside it
                                                     # (bimodal_tempering.png)
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import torch
from scipy import integrate

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC, NUTS

from pyro_pt import ParallelTempering, plot_tempering

NUM_DATA = 10
NOISE = 1.0  # error of the precise instrument, which measures theta^2
READING = 1.2  # the crude instrument's one reading of theta itself ...
READING_NOISE = 2.0  # ... and its error: together they tilt the weights to about 0.7 / 0.3
PRIOR_SCALE = 2.0
TRUE_SQUARE = 2.25  # the data are drawn around theta^2 = 2.25, so the modes sit near +-1.5
DATA_SEED = 20261130  # the data are fixed; --seed only changes the samplers' randomness


def make_data():
    generator = torch.Generator().manual_seed(DATA_SEED)
    y = TRUE_SQUARE + NOISE * torch.randn(NUM_DATA, generator=generator)
    return y, torch.tensor(READING)


def model(y, z):
    theta = pyro.sample("theta", dist.Normal(0.0, PRIOR_SCALE))
    with pyro.plate("data", len(y)):
        pyro.sample("y", dist.Normal(theta**2, NOISE), obs=y)
    pyro.sample("z", dist.Normal(theta, READING_NOISE), obs=z)


def log_posterior_unnormalized(theta, y, z):
    """log p(theta) + log p(y, z | theta) on a numpy array of theta (float64)."""
    theta = np.asarray(theta, dtype=np.float64)
    y = y.double().numpy()
    log_prior = -0.5 * (theta / PRIOR_SCALE) ** 2
    log_lik = -0.5 * (((y - theta[..., None] ** 2) / NOISE) ** 2).sum(-1)
    log_lik = log_lik - 0.5 * ((float(z) - theta) / READING_NOISE) ** 2
    return log_prior + log_lik


def true_mode_weights(y, z):
    """Posterior mass of theta < 0 and theta > 0, by adaptive quadrature (scipy.integrate.quad)."""
    mode = math.sqrt(max(float(y.mean()), 0.0))
    # Shift by the log density at the mode so exp() neither under- nor overflows.
    shift = float(log_posterior_unnormalized(np.array([mode]), y, z)[0])

    def density(t):
        return math.exp(float(log_posterior_unnormalized(np.array([t]), y, z)[0]) - shift)

    # Outside [-10, 10] the prior (sd 2) and the likelihood leave nothing to integrate.
    left, _ = integrate.quad(density, -10.0, 0.0, points=[-mode], limit=200, epsabs=0, epsrel=1e-10)
    right, _ = integrate.quad(density, 0.0, 10.0, points=[mode], limit=200, epsabs=0, epsrel=1e-10)
    total = left + right
    return left / total, right / total


def mode_weights(samples):
    """Fraction of draws in the left (theta < 0) and right (theta > 0) mode."""
    right = float((samples > 0).double().mean())
    return 1.0 - right, right


def batch_means_se(indicator, num_batches=20):
    """Monte Carlo standard error of a chain's mean by batch means (autocorrelation included)."""
    x = np.asarray(indicator, dtype=np.float64)
    size = len(x) // num_batches
    if size < 2:
        return math.nan
    means = x[: size * num_batches].reshape(num_batches, size).mean(1)
    return float(means.std(ddof=1) / math.sqrt(num_batches))


def _chain0(value):
    # MCMC.diagnostics() keys kernel diagnostics by chain: {"chain 0": ...}.
    return value["chain 0"] if isinstance(value, dict) and "chain 0" in value else value


def run_parallel_tempering(data, args):
    kernel = ParallelTempering(
        model,
        num_replicas=args.replicas,
        max_temperature=args.max_temperature,
        explorer="nuts",
        explorer_kwargs={"max_tree_depth": args.max_tree_depth},
    )
    mcmc = MCMC(kernel, num_samples=args.num_samples, warmup_steps=args.warmup,
                disable_progbar=not args.progress)
    start = time.perf_counter()
    mcmc.run(*data)
    elapsed = time.perf_counter() - start
    return kernel, mcmc, elapsed


def run_nuts(data, args, start_at):
    kernel = NUTS(model, max_tree_depth=args.max_tree_depth)
    mcmc = MCMC(kernel, num_samples=args.num_samples, warmup_steps=args.warmup,
                initial_params={"theta": torch.tensor(start_at)}, disable_progbar=not args.progress)
    start = time.perf_counter()
    mcmc.run(*data)
    elapsed = time.perf_counter() - start
    return mcmc, elapsed


def save_plot(path, pt_samples, nuts_samples, data):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot written to {path}")
        return
    grid = np.linspace(-2.5, 2.5, 1001)
    log_density = log_posterior_unnormalized(grid, *data)
    density = np.exp(log_density - log_density.max())
    density /= np.trapezoid(density, grid) if hasattr(np, "trapezoid") else np.trapz(density, grid)
    fig, ax = plt.subplots(figsize=(7, 4))
    bins = np.linspace(-2.5, 2.5, 101)
    ax.hist(pt_samples.numpy(), bins=bins, density=True, alpha=0.6,
            label="ParallelTempering, cold chain")
    ax.hist(nuts_samples.numpy(), bins=bins, density=True, alpha=0.4,
            label="NUTS from the small mode")
    ax.plot(grid, density, "k-", lw=1.5, label="true posterior (quadrature)")
    ax.set_xlabel("theta")
    ax.set_ylabel("density")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot written to {path}")


def tempering_plot_path(path):
    """``bimodal.png`` -> ``bimodal_tempering.png``, beside the histogram."""
    root, ext = os.path.splitext(path)
    return f"{root}_tempering{ext or '.png'}"


def save_tempering_plot(path, kernel):
    try:
        fig = plot_tempering(kernel, path=path)
    except ImportError as error:
        print(f"{error}; no tempering plot written to {path}")
        return
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"tempering plot (swap acceptance, communication barrier) written to {path}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-samples", type=int, default=2500, help="draws kept (default 2500)")
    parser.add_argument("--warmup", type=int, default=300, help="warmup iterations (default 300)")
    parser.add_argument("--replicas", type=int, default=4, help="temperatures K (default 4)")
    parser.add_argument("--max-temperature", type=float, default=30.0,
                        help="hottest temperature of the geometric ladder (default 30)")
    parser.add_argument("--max-tree-depth", type=int, default=5, help="NUTS tree depth (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="pyro.set_rng_seed (default 0)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (100 draws, 50 warmup) that takes a few seconds")
    parser.add_argument("--plot", metavar="PATH", default=None,
                        help="save the cold chain's histogram against the true density (PNG), "
                        "and the tempering plot (swap acceptance, barrier) as PATH_tempering.png")
    parser.add_argument("--progress", action="store_true", help="show Pyro's progress bars")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_samples, args.warmup = 100, 50
    return args


def main(argv=None):
    """Run the comparison; returns the numbers it prints (a dict), for tests."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    pyro.set_rng_seed(args.seed)
    data = make_data()
    truth = true_mode_weights(*data)
    small_mode = -1.5 if truth[0] < truth[1] else 1.5

    kernel, pt_mcmc, pt_seconds = run_parallel_tempering(data, args)
    nuts_mcmc, nuts_seconds = run_nuts(data, args, small_mode)
    pt_samples = pt_mcmc.get_samples()["theta"]
    nuts_samples = nuts_mcmc.get_samples()["theta"]
    pt_weights, nuts_weights = mode_weights(pt_samples), mode_weights(nuts_samples)
    pt_se = batch_means_se((pt_samples > 0).double().numpy())

    diagnostics = pt_mcmc.diagnostics()
    swap_acceptance = _chain0(diagnostics["swap_acceptance"])
    round_trips = _chain0(diagnostics["round_trips"])
    local_acceptance = _chain0(diagnostics["local_acceptance"])

    print(f"Bimodal posterior: theta ~ N(0, {PRIOR_SCALE}), {NUM_DATA} obs y_i ~ "
          f"N(theta^2, {NOISE}) with mean(y) = {float(data[0].mean()):.3f}, "
          f"one z ~ N(theta, {READING_NOISE}) = {float(data[1]):.2f}")
    print(f"{args.num_samples} draws after {args.warmup} warmup, seed {args.seed}\n")
    # The ladder in use: the geometric start, re-placed by the warmup's adaptation if it ran.
    if kernel.adaptation_history:
        print(f"Ladder (adapted in warmup, from the geometric one up to T = "
              f"{args.max_temperature:g}):")
    else:
        print("Ladder (geometric):")
    print(f"  {'rung':>4}  {'T':>8}  {'beta':>7}  {'local acc.':>10}  {'swap acc. with next':>19}")
    for k, temperature in enumerate(kernel.temperatures):
        swap = f"{swap_acceptance[k]:.3f}" if k < len(swap_acceptance) else ""
        print(f"  {k:>4}  {temperature:>8.3f}  {1 / temperature:>7.4f}  "
              f"{local_acceptance[k]:>10.3f}  {swap:>19}")
    print(f"Round trips (cold -> hottest -> cold) in the sampling phase: {round_trips}\n")

    print("Posterior mass per mode:")
    print(f"  {'':<34}{'theta < 0':>10}{'theta > 0':>11}{'|error|':>9}{'seconds':>9}")
    print(f"  {'truth (quadrature)':<34}{truth[0]:>10.3f}{truth[1]:>11.3f}")
    rows = [
        (f"ParallelTempering, K={kernel.num_replicas}", pt_weights, pt_seconds),
        (f"NUTS started at theta={small_mode:+.1f}", nuts_weights, nuts_seconds),
    ]
    for label, weights, seconds in rows:
        error = abs(weights[1] - truth[1])
        print(f"  {label:<34}{weights[0]:>10.3f}{weights[1]:>11.3f}{error:>9.3f}{seconds:>9.1f}")
    print(f"  (PT Monte Carlo standard error by batch means: {pt_se:.3f})")

    pt_ok = abs(pt_weights[1] - truth[1]) <= 0.05
    nuts_stuck = min(nuts_weights) == 0.0
    print(f"\nPT within 0.05 of the truth: {'yes' if pt_ok else 'NO'}; "
          f"NUTS stayed in the mode it started in: {'yes' if nuts_stuck else 'no'}")
    if args.plot:
        save_plot(args.plot, pt_samples, nuts_samples, data)
        save_tempering_plot(tempering_plot_path(args.plot), kernel)
    return {
        "truth": truth,
        "pt_weights": pt_weights,
        "nuts_weights": nuts_weights,
        "temperatures": kernel.temperatures,
        "swap_acceptance": list(swap_acceptance),
        "round_trips": round_trips,
        "pt_seconds": pt_seconds,
        "nuts_seconds": nuts_seconds,
    }


if __name__ == "__main__":
    main(sys.argv[1:])
