"""A 1-20-1 tanh BNN (PyroSample priors, 40 points) under ParallelTempering with explorer="hmc":
the worst pair's swap acceptance and the sampling phase's round trips, for a given number of
rungs (issue 13's bottleneck case). Prints one line per run; asserts nothing.

    PYTHONPATH=$PWD python benchmarks/pt_bnn_bottleneck.py --replicas 6 --seed 0
"""

import argparse
import math
import warnings

import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC
from pyro.nn import PyroModule, PyroSample

from pyro_pt import ParallelTempering


class BNN(PyroModule):
    def __init__(self, hidden=20):
        super().__init__()
        self.fc1 = PyroModule[torch.nn.Linear](1, hidden)
        self.fc1.weight = PyroSample(dist.Normal(0.0, 1.0).expand([hidden, 1]).to_event(2))
        self.fc1.bias = PyroSample(dist.Normal(0.0, 1.0).expand([hidden]).to_event(1))
        self.fc2 = PyroModule[torch.nn.Linear](hidden, 1)
        self.fc2.weight = PyroSample(dist.Normal(0.0, 1.0).expand([1, hidden]).to_event(2))
        self.fc2.bias = PyroSample(dist.Normal(0.0, 1.0).expand([1]).to_event(1))

    def forward(self, x, y=None):
        mean = self.fc2(torch.tanh(self.fc1(x))).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(mean, 0.1), obs=y)
        return mean


def data(num=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.linspace(-3, 3, num).unsqueeze(-1)
    y = torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(num, generator=g)
    return x, y


def run(replicas, seed, warmup, samples, max_temperature):
    x, y = data()
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(BNN(), num_replicas=replicas, max_temperature=max_temperature,
                               explorer="hmc")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(kernel, samples, warmup, disable_progbar=True)
        mcmc.run(x, y)
    d = kernel.diagnostics()
    said = [str(w.message) for w in caught if "ParallelTempering" in str(w.message)]
    print(f"K={replicas} seed={seed}: worst pair acc {min(d['swap_acceptance']):.4f} "
          f"(pairs {[round(a, 3) for a in d['swap_acceptance']]}), round trips "
          f"{d['round_trips']}, barrier {d['barrier']:.2f}, recommended "
          f"{d['recommended_replicas']}, temperatures "
          f"{[round(t, 2) for t in kernel.temperatures]}")
    for line in said:
        print("   warned:", line)
    return d


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--max-temperature", type=float, default=50.0)
    args = parser.parse_args()
    run(args.replicas, args.seed, args.warmup, args.samples, args.max_temperature)
