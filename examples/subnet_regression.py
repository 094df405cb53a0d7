"""
Figure 2 of Daxberger et al. (2021), done with the paper's settings and measured over seeds.

Data: two clusters of 50 inputs, x in [-2, -1] and [1, 2], y = cos(2x) + N(0, 0.1^2); between
them (|x| < 0.8) and beyond them (2.2 < |x| < 3.5) there are no data, and a good posterior
is uncertain there. Model (the paper's): a 1-50-50-1 ReLU network whose weights are latent with
prior precision 3 (std 1/sqrt 3); the biases are latent too (their prior counts in the MAP
fit) but are not inferred: ``selection_sites`` keeps them at the MAP; the noise std is a
``pyro.param`` fitted by maximum likelihood. One setting differs from the paper, and is
stated: the subnetworks keep the model's prior precision (``prior_scale=1``, as the full and the
diagonal posteriors) instead of the paper's lambda S / D (``--subnet-prior subnet``). That
rescaling makes a 3 % subnetwork's band wider than the full posterior's (gap std 1.26 against
0.46) and costs the 50 % subnetwork log-likelihood; with it, ``"predictive"`` still wins at 1 %
and 3 % but loses to random at 50 % (second table below).

Methods: the full-covariance linearized Laplace over all D = 2600 weights, diagonal Laplace
(:class:`pyro_subnet.DiagonalLaplace`), and subnetworks of 50 %, 3 % and 1 % of the weights
chosen by ``"predictive"`` (the default), ``"wasserstein"`` (the paper's rule, with exact
marginal variances as in the paper) and ``"random"`` (averaged over ``--random-draws``).
Printed: mean over seeds of the predictive std between and outside the clusters and the
held-out log-likelihood per point between them (gap) and inside them (fresh points).
The figure shows the first seed: predictive mean and a band of +-2 predictive std. The bands
jump where a ReLU unit switches on: the Jacobian of a ReLU network in its weights is
discontinuous in x there, and so is the linearized predictive.

Measured (3 seeds, ``python examples/subnet_regression.py``; means per point; S is the number of
coordinates with a covariance: ``"predictive"`` at 50 % keeps only the ~890 weights the data
move, the rest belong to dead units)::

    method               S  gap std  out std   gap ll    in ll   out ll
    full              2600    0.455    0.542   -0.480    0.732   -1.321
    diagonal          2600    0.210    0.591   -1.801    0.421   -0.923
    predictive 50%     884    0.444    0.525   -0.469    0.732   -1.325
    wasserstein 50%   1300    0.126    0.144   -5.512    0.709  -14.140
    random 50%        1300    0.331    0.411   -0.548    0.732   -1.716
    predictive 3%       78    0.314    0.385   -0.544    0.734   -2.403
    wasserstein 3%      78    0.104    0.095   -7.267    0.709  -19.015
    random 3%           78    0.106    0.130   -6.186    0.724  -10.951
    predictive 1%       26    0.204    0.266   -1.181    0.727   -4.219
    wasserstein 1%      26    0.095    0.095   -7.684    0.709  -19.016
    random 1%           26    0.102    0.111   -6.608    0.718  -13.795
    MAP                  0    0.095    0.095   -7.750    0.709  -19.016

With the paper's ``--subnet-prior subnet`` (full, diagonal and MAP rows unchanged)::

    method               S  gap std  out std   gap ll    in ll   out ll
    predictive 50%     884    0.702    0.785   -0.668    0.727   -1.271
    wasserstein 50%   1300    0.149    0.171   -4.612    0.709  -14.024
    random 50%        1300    0.433    0.526   -0.495    0.730   -1.519
    predictive 3%       78    1.262    1.327   -1.044    0.736   -2.105
    wasserstein 3%      78    0.198    0.095   -6.214    0.709  -19.005
    random 3%           78    0.200    0.236   -2.607    0.730   -4.845
    predictive 1%       26    0.633    0.782   -0.725    0.733   -2.470
    wasserstein 1%      26    0.122    0.095   -6.409    0.710  -19.004
    random 1%           26    0.202    0.152   -3.536    0.726   -8.969

What it supports of the paper's claims: small subnetworks keep much of the full posterior's
uncertainty between the clusters (3 % of the weights: gap log-likelihood -0.54 against the
full -0.48 and the MAP -7.75), and do better than diagonal Laplace over all weights inside the
clusters (0.73 against 0.42), where the diagonal's missing correlations inflate the band. What
it does not: the paper's Wasserstein rule, whose subnetworks here are the MAP's noise band,
because the weights of the dead ReLU units keep their prior variance and win its ranking.

    python examples/subnet_regression.py            # 3 seeds, a few minutes on 2 CPU cores
    python examples/subnet_regression.py --quick    # seconds (used by the tests)
"""

import argparse
import time
import warnings

import pyro
import pyro.distributions as dist
import torch
from pyro.infer import SVI, JitTrace_ELBO
from pyro.infer.autoguide import init_to_sample

from pyro_subnet import DiagonalLaplace, SubnetWarning, SubnetworkLaplace

GAP, OUTSIDE = 0.8, (2.2, 3.5)


def make_model(hidden, prior_precision=3.0):
    std = prior_precision**-0.5

    def model(x, y=None):
        sizes = [1, hidden, hidden, 1]
        h = x
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            W = pyro.sample(f"W{i}", dist.Normal(0.0, std).expand([b, a]).to_event(2))
            c = pyro.sample(f"b{i}", dist.Normal(0.0, std).expand([b]).to_event(1))
            h = h @ W.T + c
            if i < len(sizes) - 2:
                h = torch.relu(h)
        sigma = pyro.param("sigma", torch.tensor(0.5), constraint=dist.constraints.positive)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(h, sigma).to_event(1), obs=y)

    return model


WEIGHTS = ["W0", "W1", "W2"]


def truth(x):
    return torch.cos(2 * x)


def clusters(n, g):
    return torch.cat([torch.rand(n // 2, 1, generator=g) - 2.0, torch.rand(n - n // 2, 1, generator=g) + 1.0])


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = clusters(n, g)
    return x, truth(x) + 0.1 * torch.randn(x.shape, generator=g)


def held_out(seed, n=40):
    """Noisy test points between the clusters, outside them and inside them (fresh draws)."""
    g = torch.Generator().manual_seed(10_000 + seed)
    lo, hi = OUTSIDE
    xs = {"gap": torch.linspace(-GAP, GAP, n)[:, None],
          "outside": torch.cat([torch.linspace(-hi, -lo, n // 2), torch.linspace(lo, hi, n // 2)])[:, None],
          "in": clusters(n, g)}
    return {k: (x, truth(x) + 0.1 * torch.randn(x.shape, generator=g)) for k, x in xs.items()}


def fit_map(model, x, y, steps, lr=1e-2, decay=1.0, clip_norm=float("inf")):
    """MAP by Adam, its step shrinking by ``decay`` over the run, gradients clipped to ``clip_norm``;
    the ELBO is traced once (JIT: 4x faster per step)."""
    guide = SubnetworkLaplace(model, subnetwork_size=1.0, selection_sites=WEIGHTS, init_loc_fn=init_to_sample)
    optim = pyro.optim.ClippedAdam({"lr": lr, "lrd": decay ** (1 / steps), "clip_norm": clip_norm})
    svi = SVI(model, guide, optim, JitTrace_ELBO())
    with warnings.catch_warnings():  # the tracer's notes on the constant initial noise
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        for _ in range(steps):
            svi.step(x, y)
    return guide


def scores(post, tests):
    out = {}
    for k, (xt, yt) in tests.items():
        pred = post.predict(xt)["obs"]
        out[f"{k} std"] = float(pred.stddev.mean())
        out[f"{k} ll"] = float(pred.log_prob(yt).mean())
    return out


def run_seed(seed, hidden=50, steps=3000, num_data=100, fracs=(0.5, 0.03, 0.01), random_draws=3, grid=None,
             subnet_prior=1.0, lr=1e-2, decay=1.0, clip_norm=float("inf"), baselines=True, log=print):
    """
    One data set and MAP fit, then every method. Returns ``{label: scores}`` (with ``"S"``, and
    for the predictive subnetworks the smallest training Jacobian energy of a selected
    coordinate, ``"min energy"``) and, when ``grid`` is given, ``{label: (mean, std, scores)}`` on it.
    ``baselines=False`` leaves out the full-covariance and Wasserstein posteriors (faster).
    """
    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    x, y = data(num_data, seed)
    model = make_model(hidden)
    t0 = time.perf_counter()
    guide = fit_map(model, x, y, steps, lr, decay, clip_norm)
    sigma = float(pyro.param("sigma").detach())
    log(f"seed {seed}: MAP of a 1-{hidden}-{hidden}-1 ReLU net in {time.perf_counter() - t0:.1f} s, noise {sigma:.3f}")
    tests = held_out(seed)
    rows, bands = {}, {}

    def record(label, post, **extra):
        rows[label] = {"S": len(post.subnetwork_indices), **scores(post, tests), **extra}
        if grid is not None and label not in bands:  # a random size shows its first draw
            pred = post.predict(grid)["obs"]
            bands[label] = (pred.mean[:, 0], pred.stddev[:, 0], rows[label])

    def laplace(**kw):
        for k, v in kw.items():
            setattr(guide, k, v)
        with warnings.catch_warnings():  # "predictive" at 50 % keeps the coordinates the data see
            warnings.simplefilter("ignore", SubnetWarning)
            return guide.laplace_approximation(x, y)

    if baselines:
        record("full", laplace(selection="random", subnetwork_size=1.0, prior_scale=1.0))
    diagonal = DiagonalLaplace(model, selection_sites=WEIGHTS)
    diagonal(x, y)
    with torch.no_grad():
        diagonal.loc.copy_(guide.loc)  # the same MAP
    record("diagonal", diagonal.laplace_approximation(x, y))
    for frac in fracs:
        tag = f"{frac:.0%}"
        post = laplace(selection="predictive", subnetwork_size=frac, prior_scale=subnet_prior, variance="diag_laplace")
        record(f"predictive {tag}", post, **{"min energy": float(guide.jacobian_energy[post.subnetwork_indices].min())})
        if baselines:
            record(f"wasserstein {tag}", laplace(selection="wasserstein", variance="exact"))
        draws = []
        for _ in range(random_draws):
            record(f"random {tag}", laplace(selection="random"))
            draws.append(rows[f"random {tag}"])
        rows[f"random {tag}"] = {k: sum(d[k] for d in draws) / len(draws) for k in draws[0]}
    with torch.no_grad():  # the network at the MAP, noise only
        rows["MAP"] = {"S": 0}
        for k, (xt, yt) in tests.items():
            rows["MAP"].update({f"{k} std": sigma, f"{k} ll": float(dist.Normal(map_mean(model, guide, xt), sigma)
                                                                      .log_prob(yt).mean())})
        if grid is not None:
            bands["MAP"] = (map_mean(model, guide, grid)[:, 0], torch.full((len(grid),), sigma), rows["MAP"])
    return rows, bands, (x, y)


def map_mean(model, guide, xt):
    """The network at the MAP (no posterior)."""
    tr = pyro.poutine.trace(pyro.poutine.condition(model, guide.median())).get_trace(xt)
    return tr.nodes["obs"]["fn"].mean


def table(all_rows, log=print):
    """Means over seeds per method: ``{label: {column: value}}``."""
    cols = ["S", "gap std", "outside std", "gap ll", "in ll", "outside ll"]
    mean = {lab: {c: sum(r[lab][c] for r in all_rows) / len(all_rows) for c in cols} for lab in all_rows[0]}
    log(f"{'method':<17}" + "".join(f"{c:>12}" for c in cols))
    for lab, m in mean.items():
        log(f"{lab:<17}{m['S']:>12.0f}" + "".join(f"{m[c]:>12.3f}" for c in cols[1:]))
    return mean


def plot(bands, x, y, grid, path, hidden):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [lab.split()[1] for lab in bands if lab.startswith("predictive")]
    layout = [["MAP", "full", "diagonal"]] + [[f"{r} {s}" for r in ("predictive", "wasserstein", "random")]
                                              for s in sizes]
    lo = min(float((m - 2 * s).min()) for m, s, _ in bands.values())
    hi = max(float((m + 2 * s).max()) for m, s, _ in bands.values())
    pad = 0.05 * (hi - lo)
    fig, axes = plt.subplots(len(layout), 3, figsize=(12, 2.8 * len(layout)), sharex=True, sharey=True, squeeze=False)
    g = grid[:, 0]
    for row, labels in zip(axes, layout):
        for ax, lab in zip(row, labels):
            m, s, r = bands[lab]
            ax.axvspan(-GAP, GAP, color="0.93", lw=0)
            ax.fill_between(g, m - 2 * s, m + 2 * s, alpha=0.35, color="C0", lw=0, label="±2σ predictive band")
            ax.plot(g, m, color="C0", label="predictive mean")
            ax.plot(g, truth(grid)[:, 0], color="k", ls=":", lw=1, label="true function")
            ax.scatter(x[:, 0], y[:, 0], s=5, c="k", zorder=3, label="training data")
            ax.set_title(f"{lab} (S={r['S']:.0f}): gap std {r['gap std']:.2f}, gap ll {r['gap ll']:.1f}", fontsize=9)
            ax.set_ylim(lo - pad, hi + pad)
            ax.set_xlim(float(g[0]), float(g[-1]))
    for ax in axes[-1]:
        ax.set_xlabel("x")
    for ax in axes[:, 0]:
        ax.set_ylabel("y")
    axes[0, 0].legend(loc="upper right", fontsize=7)
    fig.suptitle(f"Linearized Laplace on a 1-{hidden}-{hidden}-1 ReLU net (weights inferred, biases at the MAP); "
                 "grey: the gap between the clusters", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=90)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1-8-8-1 net, short MAP fit, one seed (seconds)")
    p.add_argument("--hidden", type=int, default=None, help="hidden units per layer (50; 8 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="MAP steps (3000; 300 with --quick)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (3; 1 with --quick)")
    p.add_argument("--random-draws", type=int, default=3, help="random subnetworks per size and seed")
    p.add_argument("--subnet-prior", default=1.0, type=lambda v: v if v == "subnet" else float(v),
                   help='prior_scale of the subnetworks: 1 (the model\'s prior, default) or "subnet" (the paper\'s S / D)')
    p.add_argument("--out", default="subnet_regression.png", help="where to save the figure")
    a = p.parse_args(argv)
    hidden = a.hidden or (8 if a.quick else 50)
    steps = a.steps or (300 if a.quick else 3000)
    fracs = (0.5, 0.1) if a.quick else (0.5, 0.03, 0.01)  # 1 % of a small net is no coordinate
    grid = torch.linspace(-3.5, 3.5, 60 if a.quick else 300)[:, None]
    all_rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a net this small runs fastest on one thread (and on a shared machine)
    try:
        for seed in range(a.seeds or (1 if a.quick else 3)):
            rows, bands, (x, y) = run_seed(seed, hidden, steps, fracs=fracs, random_draws=a.random_draws,
                                           subnet_prior=a.subnet_prior, grid=grid if seed == 0 else None)
            if seed == 0:
                first = (rows, bands, x, y)
            all_rows.append(rows)
    finally:
        torch.set_num_threads(threads)
    mean = table(all_rows)
    rows, bands, x, y = first
    plot(bands, x, y, grid, a.out, hidden)
    print(f"saved {a.out} (seed 0)")
    return mean


if __name__ == "__main__":
    main()
