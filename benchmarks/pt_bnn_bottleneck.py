"""Two bottleneck cases under ParallelTempering with explorer="hmc": a 1-20-1 tanh BNN
(PyroSample priors, 40 points) and the constrained model of tests/pt/models.py with a prior
rung (max_temperature=inf, 40 points). For a given number of rungs, or ``--replicas auto``
(the ladder grows in warmup, pyro_pt.growth), prints the worst pair's swap acceptance, the
sampling phase's round trips and the ladder. Asserts nothing.

    PYTHONPATH=$PWD python benchmarks/pt_bnn_bottleneck.py --replicas 6 --seed 0
    PYTHONPATH=$PWD python benchmarks/pt_bnn_bottleneck.py --replicas auto --samples 2000
    PYTHONPATH=$PWD python benchmarks/pt_bnn_bottleneck.py --model constrained --replicas auto \
        --start 3 --samples 2000
"""

import argparse
import json
import math
import time
import warnings

import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC
from pyro.nn import PyroModule, PyroSample

from pyro_pt import ParallelTempering
from pyro_pt.barrier import autocorrelation_time
from pyro_pt.ladder import geometric_ladder


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


def constrained_data(num=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (3.0 + 0.5 * torch.randn(num, generator=g),)


def passages(swap_accepted):
    """From the sampling phase's swap record ``(scans, K - 1)``: how many times a lineage went
    from the cold rung to the hottest (up) and from the hottest to the cold one (down); a round
    trip is an up followed by a down. Tells which way the ladder is blocked when there are none."""
    num = swap_accepted.shape[1] + 1
    lineage, last_end, up, down = list(range(num)), [None] * num, 0, 0
    for row in swap_accepted.tolist():
        for pair, accepted in enumerate(row):
            if accepted == 1.0:
                lineage[pair], lineage[pair + 1] = lineage[pair + 1], lineage[pair]
        cold, hot = lineage[0], lineage[-1]
        up += last_end[hot] == "cold"
        down += last_end[cold] == "hot"
        last_end[hot], last_end[cold] = "hot", "cold"
    return up, down


def run(replicas, seed, warmup, samples, max_temperature, model="bnn", start=None,
        max_replicas=None, progress=False, explorer_kwargs=None):
    if model == "bnn":
        args, fn = data(), BNN()
    else:
        import sys, pathlib  # noqa: E401 - the tests' models, from the repository root

        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
        from tests.pt.models import constrained_model as fn

        args, max_temperature = constrained_data(), math.inf
    pyro.set_rng_seed(seed)
    began = time.perf_counter()
    ladder = dict(num_replicas=replicas, max_temperature=max_temperature)
    if start is not None:  # "auto" from a geometric ladder of `start` rungs
        ladder = dict(num_replicas=replicas,
                      temperatures=geometric_ladder(start, max_temperature))
    if max_replicas is not None:
        ladder["max_replicas"] = max_replicas
    kernel = ParallelTempering(fn, explorer="hmc", explorer_kwargs=explorer_kwargs, **ladder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # With the progress bar on, the report's rows are printed as the rounds end.
        mcmc = MCMC(kernel, samples, warmup, disable_progbar=not progress)
        mcmc.run(*args)
    d = kernel.diagnostics()
    grown = [(h["scans"], h["grown_to"]) for h in kernel.adaptation_history if "grown_to" in h]
    said = [str(w.message) for w in caught if "ParallelTempering" in str(w.message)]
    print(f"{model} K={replicas} -> {kernel.num_replicas} (grown at scan, to: {grown}) "
          f"seed={seed} warmup={warmup} samples={samples} "
          f"({time.perf_counter() - began:.0f} s): worst pair acc "
          f"{min(d['swap_acceptance']):.4f} "
          f"(pairs {[round(a, 3) for a in d['swap_acceptance']]}), round trips "
          f"{d['round_trips']}, barrier {d['barrier']:.2f}, recommended "
          f"{d['recommended_replicas']}, temperatures "
          f"{[round(t, 2) for t in kernel.temperatures]}")
    up, down = passages(d["tempering_record"]["swap_accepted"])
    # A replica whose ll hardly changes between swap rounds goes back and forth across one
    # pair (accepted both ways) instead of travelling: high acceptance, no round trip.
    ll = d["tempering_record"]["log_likelihood"]
    tau = [round(autocorrelation_time(ll[:, k]), 1) for k in range(ll.shape[1])]
    print(f"   sampling phase: {up} passages cold -> hottest, {down} hottest -> cold; "
          f"cold rung's local acceptance {d['local_acceptance'][0]:.3f}; ll autocorrelation "
          f"time per rung (scans) {tau}")
    for line in said:
        print("   warned:", line)
    return d


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", default="6", help="an int, or auto")
    parser.add_argument("--start", type=int, default=None,
                        help="with --replicas auto: start from a geometric ladder of this many")
    parser.add_argument("--max-replicas", type=int, default=None)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--model", choices=("bnn", "constrained"), default="bnn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--max-temperature", type=float, default=50.0)
    parser.add_argument("--explorer-kwargs", type=json.loads, default=None,
                        help='JSON, e.g. \'{"num_steps": 10}\' (default: adapted trajectories)')
    args = parser.parse_args()
    replicas = args.replicas if args.replicas == "auto" else int(args.replicas)
    run(replicas, args.seed, args.warmup, args.samples, args.max_temperature, args.model,
        args.start, args.max_replicas, args.progress, args.explorer_kwargs)
