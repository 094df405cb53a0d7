"""Tempered restarts per second against ``num_ladders`` (pyro_pt/ensemble.py).

Per case of ``benchmarks/explorers.py`` and per C in ``--ladders``, one run of
``ParallelTempering(model, num_replicas=8, num_ladders=C, compile="inductor")`` under
``MCMC(warmup_steps=W, num_samples=N)`` (each ladder runs W and about N scans; MCMC holds
each ladder's every C-th cold draw), one torch thread, a warm Inductor cache (an untimed run first), seeds
``--seeds``. Printed per run: the sampling phase's wall seconds (from the first sampling call's
hook to the end of ``MCMC.run``: the scans and the draws handed out), its milliseconds per
scan, the pooled tempered restarts and restarts per second, the whole run's seconds after
set-up, and the ratio of restarts per second to C = 1's of the same seed. Prints; asserts
nothing.

    PYTHONPATH=$PWD python benchmarks/ensemble.py [--cases mix2 mix3] [--ladders 1 2 4 8]
        [--warmup 1000] [--samples 1000] [--seeds 1 2]

``--defaults``: the default run a user makes, ``ParallelTempering(model)`` under ``MCMC(1000,
1000)`` (``--warmup``, ``--samples``), against the same with ``num_ladders=1``, on
``vs_tempering.py``'s mixtures (exact shares and log Z by quadrature), seeds ``--seeds``, one
thread: the ladders the default rule chose, the whole run's seconds, the tempered restarts,
the worst labelling's share error, the log Z error and the run's warnings. The target: every
labelling within 0.05 of exact with no warning. Unimodal models a user writes, seeded data:
``glm`` (Poisson, 3 coefficients and an intercept, 80 points), ``hierarchy`` (non-centred,
6 groups of 10 points), ``classifier`` (a ``PyroModule`` 2-8-1 tanh network, 100 points of
an XOR-like label), ``logistic`` (explorers.py's, 500 points): the min bulk ESS over every
coordinate (ArviZ, one chain per ladder) and per second of the whole run.

    PYTHONPATH=$PWD python benchmarks/ensemble.py --defaults [--cases mix2 mix3 glm
        hierarchy classifier logistic] [--seeds 1 2 3 4] [--runs default one variational
        variational8]

``--runs`` picks the runs: ``default`` (``ParallelTempering(model)``: ``reference="auto"``),
``one`` (``num_ladders=1``), ``prior`` (``reference="prior"``: the prior alone), ``variational`` (``reference="variational"``, its default ladders) and
``variational8`` (the same with ``num_ladders=8``) and ``mixture`` (``reference="mixture"``,
its default ladders).
"""

import argparse
import os
import sys
import time
import warnings

import torch

import pyro
from pyro.infer import MCMC

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prior_draws import case  # noqa: E402

from pyro_pt import ParallelTempering  # noqa: E402


def one_run(model, args, ladders, warmup, samples, seed):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(model, num_replicas=8, num_ladders=ladders, compile="inductor")
    marks = {}

    def hook(k, params, stage, i):
        marks.setdefault(stage, time.perf_counter())

    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True,
                hook_fn=hook)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(*args)
    end = time.perf_counter()
    sampling = end - marks["Sample"]
    after_setup = end - marks["Warmup"] if "Warmup" in marks else sampling
    scans = -(-samples // ladders) * ladders  # each ladder's sampling scans
    restarts = kernel.diagnostics()["restarts"] or 0
    return sampling, 1e3 * sampling / scans, restarts, restarts / sampling, after_setup


# ``--runs``: (ladders, reference) of each run compared
RUNS = {"default": (None, "auto"), "one": (1, "auto"), "prior": (None, "prior"),
        "variational": (None, "variational"), "variational8": (8, "variational"),
        "mixture": (None, "mixture")}
RUN_LABELS = {"default": "default", "one": "`num_ladders=1`",
              "prior": "`reference=\"prior\"`",
              "variational": "`reference=\"variational\"`",
              "variational8": "`reference=\"variational\", num_ladders=8`",
              "mixture": "`reference=\"mixture\"`"}


def default_run(model, args, site, target, seed, samples, warmup, ladders=None,
                reference="auto"):
    """One ``--defaults`` run: its printed line's numbers."""
    from vs_tempering import timed_pyro_pt

    kernel, draws, seconds, d, warned = timed_pyro_pt(model, args, site, seed, warmup, samples,
                                                      ladders, reference)
    problems = [p[:60] for text in warned for p in text.split("\n  - ")[1:]]
    return dict(ladders=kernel.explorer_info["num_ladders"], seconds=seconds,
                restarts=d["restarts"], share=target.share_error(draws),
                log_z=float(d["log_Z"]) - target.log_z(), warned="; ".join(problems) or "no")


USER_MODELS = ("glm", "hierarchy", "classifier", "logistic")


def user_model(name):
    """``(model, args)`` of a unimodal ``--defaults`` case (see the module)."""
    import pyro.distributions as dist
    from pyro.nn import PyroModule, PyroSample

    generator = torch.Generator().manual_seed(0)
    if name == "logistic":
        from _explorers_models import logistic, logistic_data
        return logistic, logistic_data()
    if name == "glm":
        x = torch.randn(80, 3, generator=generator)
        y = torch.poisson((x @ torch.tensor([0.5, -0.3, 0.2]) + 1.0).exp(), generator=generator)

        def glm(x, y):
            b = pyro.sample("b", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
            a = pyro.sample("a", dist.Normal(0.0, 2.0))
            with pyro.plate("data", len(y)):
                pyro.sample("y", dist.Poisson((x @ b + a).exp()), obs=y)
        return glm, (x, y)
    if name == "hierarchy":
        group = torch.arange(6).repeat_interleave(10)
        y = torch.randn(60, generator=generator) + 0.3 * group

        def hierarchy(group, y):
            mu = pyro.sample("mu", dist.Normal(0.0, 5.0))
            tau = pyro.sample("tau", dist.HalfNormal(2.0))
            with pyro.plate("groups", 6):
                z = pyro.sample("z", dist.Normal(0.0, 1.0))
            with pyro.plate("data", len(y)):
                pyro.sample("y", dist.Normal(mu + tau * z[group], 1.0), obs=y)
        return hierarchy, (group, y)
    if name == "classifier":
        x = torch.randn(100, 2, generator=generator)
        y = (x[:, 0] * x[:, 1] > 0).float()

        class Classifier(PyroModule):
            def __init__(self):
                super().__init__()
                self.hidden = PyroModule[torch.nn.Linear](2, 8)
                self.hidden.weight = PyroSample(dist.Normal(0.0, 1.0).expand([8, 2]).to_event(2))
                self.hidden.bias = PyroSample(dist.Normal(0.0, 1.0).expand([8]).to_event(1))
                self.out = PyroModule[torch.nn.Linear](8, 1)
                self.out.weight = PyroSample(dist.Normal(0.0, 1.0).expand([1, 8]).to_event(2))
                self.out.bias = PyroSample(dist.Normal(0.0, 1.0).expand([1]).to_event(1))

            def forward(self, x, y=None):
                logits = self.out(torch.tanh(self.hidden(x))).squeeze(-1)
                with pyro.plate("data", x.shape[0]):
                    pyro.sample("y", dist.Bernoulli(logits=logits), obs=y)
        return Classifier(), (x, y)
    raise ValueError(name)


def user_run(name, seed, samples, warmup, ladders, reference="auto"):
    """One unimodal ``--defaults`` run: ladders, seconds, min bulk ESS, warnings."""
    import arviz as az
    from vs_tempering import seeded_run

    from pyro_pt import to_inference_data

    model, args = user_model(name)
    kernel, mcmc, seconds, warned = seeded_run(model, args, seed, warmup, samples,
                                               num_ladders=ladders, reference=reference)
    ess = az.ess(to_inference_data(mcmc), method="bulk")
    least = min(float(ess[site].min()) for site in ess.data_vars)
    problems = [p[:60] for text in warned for p in text.split("\n  - ")[1:]]
    return kernel.explorer_info["num_ladders"], seconds, least, "; ".join(problems) or "no"


def defaults(opts):
    from _tempering_targets import target
    from vs_tempering import pyro_model, specs

    print(f"MCMC({opts.warmup}, {opts.samples}), one thread; load "
          f"{tuple(round(v, 2) for v in os.getloadavg())}")
    users = [name for name in opts.cases if name in USER_MODELS]
    if users:
        print("| model | run | seed | ladders | s | min bulk ESS | ESS/s | warned |")
        print("|---|---|---|---|---|---|---|---|")
    for name in users:
        for seed in opts.seeds:
            for run in opts.runs:
                c, seconds, ess, warned = user_run(name, seed, opts.samples, opts.warmup,
                                                   *RUNS[run])
                print(f"| {name} | {RUN_LABELS[run]} | {seed} | {c} | {seconds:.1f} | "
                      f"{ess:.0f} | "
                      f"{ess / seconds:.1f} | {warned} |", flush=True)
    mixtures = [name for name in opts.cases if name not in USER_MODELS]
    if mixtures:
        print("| target | run | seed | ladders | s | restarts | share error | log Z error | "
              "warned |")
        print("|---|---|---|---|---|---|---|---|---|")
    for name in mixtures:
        spec = specs()[name]
        t = target(spec)
        model, args, site = pyro_model(t, spec)
        for seed in opts.seeds:
            for run in opts.runs:
                r = default_run(model, args, site, t, seed, opts.samples, opts.warmup,
                                *RUNS[run])
                print(f"| {name} | {RUN_LABELS[run]} | {seed} | {r['ladders']} | "
                      f"{r['seconds']:.1f} | "
                      f"{r['restarts']} | {r['share']:.3f} | {r['log_z']:+.2f} | {r['warned']} |",
                      flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["mix2", "mix3"])
    parser.add_argument("--ladders", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--defaults", action="store_true",
                        help="the default run against num_ladders=1 (see the module)")
    parser.add_argument("--runs", nargs="+", default=["default", "one"], choices=list(RUNS),
                        help="with --defaults: the runs compared (see RUNS)")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    if opts.defaults:
        return defaults(opts)
    print(f"warmup {opts.warmup}, samples "
          f"{opts.samples} (draws); load {tuple(round(v, 2) for v in os.getloadavg())}")
    for name in opts.cases:
        model, args = case(name)
        for c in opts.ladders:  # warm the cache of every batch size
            one_run(model, args, c, 20, 20, 0)
        for seed in opts.seeds:
            base = None
            for c in opts.ladders:
                sampling, per_scan, restarts, rate, whole = one_run(
                    model, args, c, opts.warmup, opts.samples, seed)
                base = rate if c == 1 else base
                ratio = f"{rate / base:.2f}" if base else "-"
                print(f"{name} seed {seed} C {c}: sampling {sampling:.2f} s ({per_scan:.2f} ms "
                      f"a scan), {restarts} restarts, {rate:.1f} restarts/s (x{ratio} C = 1), "
                      f"whole run after set-up {whole:.2f} s", flush=True)


if __name__ == "__main__":
    main()
