"""ESS per second of the cold chain: batched HMC with a fixed ``num_steps=10`` against the adapted
(ChEES) trajectory length, on a 10-d anisotropic Gaussian.

The model: ``z ~ N(0, I_10)``, ``y ~ N(z, s^2)`` observed at 0 with ``s`` log-spaced from 0.1
to 10, so the cold posterior's scales run from ~0.1 to ~1 (a diagonal metric removes most of
that; the adapted length then matters). ``ParallelTempering(num_replicas=3, explorer="hmc")``,
one torch thread; per setting and seed: the minimum over coordinates of the ESS of ``z`` and of
``z^2`` (``pyro.ops.stats.effective_sample_size``) over the sampling phase, divided by the
wall time of the whole run (warmup included), and the leapfrog steps per iteration.

    PYTHONPATH=$PWD python benchmarks/trajectory_ess.py --seeds 3 --warmup 500 --samples 1000
"""

import argparse
import time

import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size

from pyro_pt import ParallelTempering

SCALES = torch.logspace(-1.0, 1.0, 10, dtype=torch.float64)


def model():
    z = pyro.sample("z", dist.Normal(torch.zeros(10, dtype=torch.float64), 1.0).to_event(1))
    pyro.sample("y", dist.Normal(z, SCALES).to_event(1), obs=torch.zeros(10, dtype=torch.float64))


def run(explorer_kwargs, seed, warmup, samples):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(model, num_replicas=3, max_temperature=10.0, explorer="hmc",
                               explorer_kwargs=explorer_kwargs)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True)
    start = time.perf_counter()
    mcmc.run()
    seconds = time.perf_counter() - start
    z = mcmc.get_samples()["z"]
    ess = min(float(effective_sample_size(z[None]).min()),
              float(effective_sample_size((z * z)[None]).min()))
    cold = kernel.run.rungs.explorers[0].diagnostics()
    return ess, seconds, cold.get("num steps", explorer_kwargs.get("num_steps")), cold


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = {"fixed num_steps=10": {"num_steps": 10}, "adaptive (ChEES)": {}}
    print(f"{'setting':20s} {'seed':>4s} {'min ESS':>8s} {'s':>6s} {'ESS/s':>7s} "
          f"{'steps':>5s} {'acc.':>5s}")
    for seed in range(args.seeds):
        for name, kwargs in settings.items():  # interleaved, under the same load
            ess, seconds, steps, cold = run(kwargs, seed, args.warmup, args.samples)
            print(f"{name:20s} {seed:4d} {ess:8.1f} {seconds:6.1f} {ess / seconds:7.2f} "
                  f"{steps:5d} {cold['acceptance rate']:5.2f}")


if __name__ == "__main__":
    main()
