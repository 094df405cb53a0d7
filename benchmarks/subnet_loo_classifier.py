"""
Leave-one-out of an overfitted classifier: the subnetwork Laplace LOO with and without the
MAP's shift (pyro_subnet.loo's ``map_shift``), against 10-fold cross-validation with a refit
per fold and the log score of a test set.

A PyroModule MLP 30-16-2 (ReLU, Normal(0, 1) on its 530 weights and biases), two overlapping
Gaussian classes in 30-D (means +-0.25 per coordinate), 400 training and 400 test points; the
MAP by Adam fits the training set exactly. SubnetworkLaplace(model, subnetwork_size=0.05)
(S = 26). Every figure is an elpd on 400 points (the test score: 400 times its mean log
predictive density), from the linearized predictive of the fitted posterior, M draws.

    python benchmarks/subnet_loo_classifier.py [--draws 2000] [--steps 3000] [--folds 10] [--seed 0]
    # a network small enough for leave-one-out by refits (--folds = --points; about 30 minutes):
    python benchmarks/subnet_loo_classifier.py --inputs 10 --hidden 8 --points 80 --mean 0.3 \
        --steps 2500 --folds 80 --draws 1000
"""

import argparse
import time
import warnings

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.nn import PyroModule, PyroSample

from pyro_subnet import SubnetLOOWarning, SubnetworkLaplace, kfold, loo
from pyro_subnet.kfold import held_out_scores


class MLP(PyroModule):
    def __init__(self, inputs, hidden):
        super().__init__()
        self.hidden = PyroModule[torch.nn.Linear](inputs, hidden)
        self.hidden.weight = PyroSample(dist.Normal(0.0, 1.0).expand([hidden, inputs]).to_event(2))
        self.hidden.bias = PyroSample(dist.Normal(0.0, 1.0).expand([hidden]).to_event(1))
        self.out = PyroModule[torch.nn.Linear](hidden, 2)
        self.out.weight = PyroSample(dist.Normal(0.0, 1.0).expand([2, hidden]).to_event(2))
        self.out.bias = PyroSample(dist.Normal(0.0, 1.0).expand([2]).to_event(1))

    def forward(self, x, y=None):
        logits = self.out(torch.relu(self.hidden(x)))
        with pyro.plate("data", x.shape[0]):
            return pyro.sample("obs", dist.Categorical(logits=logits), obs=y)


def classes(n, inputs, mean, generator):
    y = torch.arange(n) % 2
    x = mean * (2 * y[:, None] - 1) + torch.randn(n, inputs, generator=generator)
    return x, y


def fit(x, y, a):
    pyro.clear_param_store()
    pyro.set_rng_seed(a.seed)
    model = MLP(a.inputs, a.hidden)
    guide = SubnetworkLaplace(model, subnetwork_size=a.size)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), Trace_ELBO())
    for _ in range(a.steps):
        svi.step(x, y)
    return guide.laplace_approximation(x, y)


def log_score(posterior, x, y, draws):
    """Summed log predictive density of (x, y) under the linearized predictive, ``draws`` draws."""
    return float(held_out_scores(posterior, (x, y), {}, "obs", draws)[0].sum())


def pointwise(result):
    return np.asarray(result["loo_i"] if hasattr(result, "index") else result.elpd_i)


def elpd(result):
    return float(result["elpd_loo"] if hasattr(result, "index") else result.elpd), \
        float(result["se"] if hasattr(result, "index") else result.se)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--size", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--points", type=int, default=400)
    parser.add_argument("--mean", type=float, default=0.25, help="class means +-mean per coordinate")
    a = parser.parse_args()
    g = torch.Generator().manual_seed(a.seed)
    x, y = classes(a.points, a.inputs, a.mean, g)
    x_test, y_test = classes(a.points, a.inputs, a.mean, g)
    t = time.time()
    posterior = fit(x, y, a)
    with torch.no_grad():
        acc = [float((posterior.predict(xs, ys)["obs"].probs.argmax(-1) == ys).double().mean())
               for xs, ys in ((x, y), (x_test, y_test))]
    print(f"MAP and Laplace: {time.time() - t:.1f} s, S = {len(posterior.subnetwork_indices)}, "
          f"D = {posterior.loc.numel()}, accuracy train {acc[0]:.2f} test {acc[1]:.2f}")
    rows = []
    for shift in (False, True):
        t = time.time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SubnetLOOWarning)
            result = loo(posterior, x, y, num_samples=a.draws, map_shift=shift)
        e, se = elpd(result)
        warned = "; ".join(str(w.message)[:120] for w in caught if issubclass(w.category, SubnetLOOWarning))
        rows.append((f"LOO, map_shift={shift}", e, se, time.time() - t, warned or "-"))
        if shift:
            moved = result
            ratio = result["step_ratio"] if hasattr(result, "index") else result.step_ratio
            print("step ratio quantiles (50/90/99 %):",
                  [round(float(ratio.quantile(q)), 3) for q in (0.5, 0.9, 0.99)], "curvature:",
                  result["map_shift"] if hasattr(result, "index") else result.map_shift)
    t = time.time()
    if a.folds:
        cv = kfold(lambda xs, ys: fit(xs, ys, a), x, y, folds=a.folds, num_samples=a.draws, seed=a.seed)
        what = "leave-one-out by refits" if a.folds == a.points else f"{a.folds}-fold CV (refit per fold)"
        rows.append((what, elpd(cv)[0], float("nan"), time.time() - t, "-"))
        # the two estimate one quantity point by point: the SE of their difference is the paired one
        diff = pointwise(moved) - pointwise(cv)
        print(f"LOO with the step minus {what}: {diff.sum():.1f} (paired SE "
              f"{(len(diff) * diff.var()) ** 0.5:.1f}); largest pointwise gaps {np.sort(diff)[:3].round(1)}")
    rows.append((f"test set, {a.points} points", log_score(posterior, x_test, y_test, a.draws), float("nan"), 0.0, "-"))
    rows.append(("in-sample", log_score(posterior, x, y, a.draws), float("nan"), 0.0, "-"))
    print(f"| estimate | elpd | se | time (s) | warning |\n|---|---|---|---|---|")
    for name, e, se, s, w in rows:
        print(f"| {name} | {e:.1f} | {se:.1f} | {s:.1f} | {w} |")


if __name__ == "__main__":
    main()
