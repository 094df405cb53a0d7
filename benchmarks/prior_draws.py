"""The prior rung's draws: a trace of the model against each fixed prior sampled on its own.

``pyro_pt.potential.priors.DirectPrior`` draws the prior rung's state site by site and takes
its ll from the captured graph, where no latent's prior reads another latent; otherwise each
draw is a trace of the whole model. Two figures per model of ``benchmarks/explorers.py``, one
torch thread:

- milliseconds per draw of the prior rung (``PriorExplorer.move``, its draws made 64 at a
  time), trace against direct, under TorchScript and under Inductor;
- a default run, ``ParallelTempering(model, compile="inductor")``, ``--warmup`` +
  ``--samples`` scans, with the direct draws and with the trace (``fixed_priors`` patched to
  refuse every model), alternated over ``--rounds``: the sampling phase's wall seconds (from
  the last warmup scan to the end of ``MCMC.run``), the tempered restarts, and the ratio.

A warm Inductor cache makes the runs' set-up short; the first round pays the compilations.
Prints; asserts nothing.

    PYTHONPATH=$PWD python benchmarks/prior_draws.py [--cases mix2 logistic] [--rounds 2]
"""

import argparse
import os
import sys
import time
import timeit
import warnings

import torch

import pyro
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _explorers_models as models  # noqa: E402

import pyro_pt.potential.priors as priors  # noqa: E402
from pyro_pt import ParallelTempering  # noqa: E402
from pyro_pt.explorers.prior import PriorExplorer  # noqa: E402
from pyro_pt.potential import FunctionalSplit, ModelSplit  # noqa: E402
from pyro_pt.random import RandomStream  # noqa: E402


def case(name):
    if name == "mix2":
        return models.mix2, (models.mixture_data((-3.0, 3.0), 60, 1),)
    if name == "mix3":
        return models.mix3, (models.mixture_data((-4.0, 0.0, 4.0), 50, 2),)
    if name == "logistic":
        return models.logistic, models.logistic_data()
    raise ValueError(name)


def per_draw(model, args, number=640):
    split = ModelSplit(model, args)
    out = {"trace": timeit.timeit(split.sample_prior, number=number) / number * 1e3}
    for engine in ("torchscript", "inductor"):
        rung = PriorExplorer(RandomStream(0), FunctionalSplit(split, compile=engine))
        rung.move(None)
        out[engine] = timeit.timeit(lambda: rung.move(None), number=number) / number * 1e3
    return out


def whole_run(model, args, warmup, samples, direct, seed):
    original = priors.fixed_priors
    if not direct:
        priors.fixed_priors = lambda split: (None, "switched off by the benchmark")
    try:
        pyro.set_rng_seed(seed)
        kernel = ParallelTempering(model, compile="inductor")
        marks = {}
        mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True,
                    hook_fn=lambda k, s, stage, i: marks.setdefault(stage, time.perf_counter())
                    if stage == "Sample" else None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(*args)
        end = time.perf_counter()
    finally:
        priors.fixed_priors = original
    return (end - marks["Sample"], kernel.diagnostics().get("restarts") or 0,
            kernel.explorer_info.get("prior_draws"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["mix2", "mix3", "logistic"])
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    for name in opts.cases:
        model, args = case(name)
        ms = per_draw(model, args)
        print(f"{name}: ms per prior draw: trace {ms['trace']:.3f}, direct under TorchScript "
              f"{ms['torchscript']:.3f}, under Inductor {ms['inductor']:.3f}", flush=True)
        for r in range(opts.rounds):
            seconds = {}
            for direct in (True, False):
                wall, restarts, path = whole_run(model, args, opts.warmup, opts.samples, direct,
                                                 seed=r)
                seconds[direct] = wall
                print(f"  round {r}: {path:6s} sampling phase {wall:6.2f} s, "
                      f"{restarts} restarts", flush=True)
            print(f"  round {r}: traced / direct = {seconds[False] / seconds[True]:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
