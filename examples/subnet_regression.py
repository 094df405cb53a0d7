"""
Subnetwork Laplace on the 1-D regression of Daxberger et al. (2021), Figure 2.

Two separated clusters of inputs, a 1-50-50-1 ReLU network with a Gaussian likelihood, one MAP
fit, then linearized Laplace posteriors over Wasserstein-selected and random subnetworks of
50%, 3% and 1% of the weights, over all weights (full covariance), over all weights with a
diagonal covariance, and none (MAP). Saves a grid of predictive mean +- 2 std and prints the
predictive std between the clusters, where a good posterior is uncertain.

    python examples/subnet_regression.py            # about a minute on 2 CPU cores
    python examples/subnet_regression.py --quick    # a few seconds (used by the tests)
"""

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pyro  # noqa: E402
import pyro.distributions as dist  # noqa: E402
import torch  # noqa: E402
from pyro.infer import SVI, Trace_ELBO  # noqa: E402
from pyro.infer.autoguide import init_to_sample  # noqa: E402

from pyro_subnet import SubnetworkLaplace  # noqa: E402


def make_model(hidden, noise, prior_std):
    def model(x, y=None):
        sizes = [1, hidden, hidden, 1]
        h = x
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            W = pyro.sample(f"W{i}", dist.Normal(0.0, prior_std).expand([b, a]).to_event(2))
            c = pyro.sample(f"b{i}", dist.Normal(0.0, prior_std).expand([b]).to_event(1))
            h = h @ W.T + c
            if i < len(sizes) - 2:
                h = torch.relu(h)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(h, noise).to_event(1), obs=y)

    return model


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.rand(n // 2, 1, generator=g) - 2.0, torch.rand(n - n // 2, 1, generator=g) + 1.0])
    y = torch.sin(2 * x) + 0.1 * torch.randn(x.shape, generator=g)
    return x, y


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny network and short MAP fit (seconds)")
    p.add_argument("--hidden", type=int, default=None, help="hidden units per layer (50; 8 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="MAP steps (2000; 200 with --quick)")
    p.add_argument("--num-data", type=int, default=80)
    p.add_argument("--noise", type=float, default=0.1, help="observation noise std")
    p.add_argument("--variance", default="diag_laplace", choices=["diag_laplace", "swag"],
                   help="marginal variances that rank the Wasserstein subnetwork")
    p.add_argument("--swag-lr", type=float, default=1e-5, help="SGD step of SWAG (loss per data point)")
    p.add_argument("--prior-std", type=float, default=1.0, help="std of the Normal prior on every weight")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="subnet_regression.png", help="where to save the figure")
    a = p.parse_args(argv)
    hidden = a.hidden or (8 if a.quick else 50)
    steps = a.steps or (200 if a.quick else 2000)

    pyro.set_rng_seed(a.seed)
    pyro.clear_param_store()
    x, y = data(a.num_data, a.seed)
    model = make_model(hidden, a.noise, a.prior_std)
    guide = SubnetworkLaplace(model, subnetwork_size=1.0, init_loc_fn=init_to_sample, variance=a.variance,
                              variance_options={"lr": a.swag_lr, "num_steps": 100 if a.quick else 1000} if a.variance == "swag" else None)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
    t0 = time.perf_counter()
    for _ in range(steps):
        svi.step(x, y)
    D = guide.loc.numel()
    print(f"MAP of a 1-{hidden}-{hidden}-1 ReLU net (D={D}) in {time.perf_counter() - t0:.1f} s")

    xt = torch.linspace(-4, 4, 50 if a.quick else 200)[:, None]
    gap = torch.tensor([[-0.5], [0.0], [0.5]])  # between the clusters
    bands, between = {}, {}

    def record(label, post, S, seconds=None):
        pred = post.predict(xt)["obs"]
        bands[label] = (pred.mean[:, 0].detach(), pred.stddev[:, 0].detach())
        between[label] = float(post.predict(gap)["obs"].stddev.mean())
        fit = f"fit {seconds:5.2f} s" if seconds is not None else " " * 10
        print(f"  {label:<18} S={S:>5}  {fit}  std between clusters {between[label]:.3f}")

    def run(label, **kw):
        for k, v in kw.items():
            setattr(guide, k, v)
        t = time.perf_counter()
        post = guide.laplace_approximation(x, y)
        record(label, post, len(post.subnetwork_indices), time.perf_counter() - t)
        return post

    for frac, name in [(0.5, "50%"), (0.03, "3%"), (0.01, "1%")]:
        run(f"Wasserstein {name}", selection="wasserstein", subnetwork_size=frac)
        run(f"random {name}", selection="random", subnetwork_size=frac)
    full = run("full covariance", selection="wasserstein", subnetwork_size=1.0)
    # 1 / diag(GGN + P) over all D coordinates (the diagonal Laplace variances)
    from pyro_subnet import curvature, selection

    variance = selection.diag_laplace_variance(
        curvature.LatentModel(guide, model, guide._observed, guide._factors, guide._spec_options),
        guide.loc.detach(), [((x, y), {})])
    mean = bands["full covariance"][0]
    # a diagonal Laplace posterior over all weights: the full posterior with a diagonal precision
    full.precision = torch.diag(variance.reciprocal())
    full.precision_tril = torch.diag(variance.rsqrt())
    record("diagonal", full, D)
    bands["MAP"] = (mean, torch.full_like(mean, a.noise))
    between["MAP"] = a.noise
    print(f"  {'MAP':<18} S={0:>5}  {' ' * 10}  std between clusters {a.noise:.3f} (noise only)")

    fig, axes = plt.subplots(3, 3, figsize=(12, 10), sharex=True, sharey=True)
    order = ["full covariance", "Wasserstein 50%", "random 50%", "diagonal", "Wasserstein 3%",
             "random 3%", "MAP", "Wasserstein 1%", "random 1%"]
    for ax, label in zip(axes.flat, order):
        mean, std = bands[label]
        ax.fill_between(xt[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.3)
        ax.plot(xt[:, 0], mean)
        ax.scatter(x[:, 0], y[:, 0], s=4, c="k")
        ax.set_title(f"{label} (std at gap {between[label]:.2f})")
        ax.set_ylim(-4, 4)
    fig.tight_layout()
    fig.savefig(a.out, dpi=80)
    print(f"saved {a.out}")
    return between


if __name__ == "__main__":
    main()
