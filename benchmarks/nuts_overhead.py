"""Milliseconds per NUTS leapfrog step: plain Pyro NUTS against a NUTS rung of ParallelTempering.

On two small models (eight schools non-centered, 10 parameters; a GP Poisson regression on 10
points, 12 parameters), one torch thread, interleaved rounds, medians:

(a) plain Pyro ``NUTS`` on the potential ``initialize_model`` makes of the same model;
(b) the rung of ``ParallelTempering(temperatures=[1.0], explorer="nuts")`` (K = 1: no swaps);
    (b-off) the same with ``pyro_kernels.GRAPH_GRADIENTS`` off: every leapfrog through Pyro's
    autograd, the path before the graph gradients (same trees and draws, bitwise);
(c) the captured graph alone, ``FunctionalSplit.evaluate`` (potential and gradient, no wrapping);
(d) one potential-and-gradient evaluation as Pyro's integrator makes it
    (``pyro.ops.integrator.potential_grad``) on each sampler's potential: (d-a) Pyro's traced
    potential, (d-b) the rung's :class:`~pyro_pt.potential.TemperedPotential`, as the rung's
    leapfrog steps get it (under ``graph_gradients`` where it exists).

ms per leapfrog = wall time of the sampling phase / leapfrog steps in it (counted as calls of
``NUTS._build_basetree``, one per leapfrog step, for both samplers). Both samplers adapt step
size and a diagonal mass matrix in the same warmup; their trees differ in size, which the
per-leapfrog figure divides out. (b) - (c) is what the rung spends outside the graph. Benchmarks
print; they never assert.

Run::

    python benchmarks/nuts_overhead.py                       # several minutes on a 2-core CPU
    python benchmarks/nuts_overhead.py --rounds 1 --warmup 20 --samples 20    # smoke test
    python benchmarks/nuts_overhead.py --profile schools     # cProfile of (b)'s sampling phase
"""

import argparse
import contextlib
import cProfile
import os
import platform
import pstats
import statistics
import sys
import time
import warnings

import torch

import pyro
import pyro.distributions as dist
from pyro.infer import MCMC, NUTS
from pyro.infer.mcmc.util import initialize_model
import pyro.ops.integrator as integrator
from pyro.ops.integrator import potential_grad

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyro_pt import ParallelTempering  # noqa: E402
from pyro_pt.potential import FunctionalSplit, ModelSplit, TemperedPotential  # noqa: E402
from tests.pt.test_trajectory import eight_schools_noncentered  # noqa: E402

from pyro_pt.explorers import pyro_kernels  # noqa: E402

# What a rung's leapfrog steps run under (absent in versions without the graph gradients).
graph_gradients = getattr(pyro_kernels, "graph_gradients", contextlib.nullcontext)

F64 = torch.float64


GP_X = torch.linspace(0.0, 1.0, 10, dtype=F64)
GP_COUNTS = torch.tensor([1.0, 0.0, 2.0, 4.0, 6.0, 5.0, 3.0, 1.0, 1.0, 0.0], dtype=F64)


def gp_poisson():
    """Counts ~ Poisson(exp(f)), f = L eta with L the Cholesky factor of an RBF kernel."""
    length = pyro.sample("length", dist.LogNormal(torch.tensor(-1.0, dtype=F64), 0.5))
    amplitude = pyro.sample("amplitude", dist.HalfNormal(torch.tensor(2.0, dtype=F64)))
    eta = pyro.sample("eta", dist.Normal(torch.zeros(10, dtype=F64), 1.0).to_event(1))
    d = (GP_X[:, None] - GP_X[None, :]) / length
    k = amplitude ** 2 * torch.exp(-0.5 * d * d) + 1e-6 * torch.eye(10, dtype=F64)
    f = torch.linalg.cholesky(k) @ eta
    pyro.sample("counts", dist.Poisson(f.exp()).to_event(1), obs=GP_COUNTS)


MODELS = {"schools": eight_schools_noncentered, "gp": gp_poisson}

LEAPFROGS = [0]
_basetree = NUTS._build_basetree


def _counted_basetree(self, *args, **kwargs):
    LEAPFROGS[0] += 1
    return _basetree(self, *args, **kwargs)


NUTS._build_basetree = _counted_basetree


def sampling_ms_per_leapfrog(kernel, warmup, samples, initial_params=None):
    """Wall time of the sampling phase over its leapfrog steps, and leapfrogs per draw."""
    marks = {}

    def hook(kernel, params, stage, i):
        if stage == "Warmup" and i == warmup - 1:
            marks["start"] = (time.perf_counter(), LEAPFROGS[0])
        marks["stop"] = (time.perf_counter(), LEAPFROGS[0])

    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, initial_params=initial_params,
                hook_fn=hook, disable_progbar=True)
    mcmc.run()
    (t0, n0), (t1, n1) = marks["start"], marks["stop"]
    return 1e3 * (t1 - t0) / max(n1 - n0, 1), (n1 - n0) / samples


def plain_nuts(model, warmup, samples):
    init, potential_fn, _, _ = initialize_model(model, model_args=())
    return sampling_ms_per_leapfrog(NUTS(potential_fn=potential_fn), warmup, samples, init)


def pt_nuts(model, warmup, samples, hook=True):
    """(b); with ``hook=False`` the rung's leapfrogs take Pyro's autograd path instead of the
    graph gradients: the same trees and draws, bitwise."""
    saved = getattr(pyro_kernels, "GRAPH_GRADIENTS", None)
    if saved is not None:
        pyro_kernels.GRAPH_GRADIENTS = hook and saved
    try:
        kernel = ParallelTempering(model, temperatures=[1.0], explorer="nuts")
        return sampling_ms_per_leapfrog(kernel, warmup, samples)
    finally:
        if saved is not None:
            pyro_kernels.GRAPH_GRADIENTS = saved


def per_call_ms(fn, calls):
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e3 * (time.perf_counter() - start) / calls


def evaluations(model, calls):
    """(c), (d-a), (d-b): ms per call at the split's initial point."""
    split = ModelSplit(model, ())
    fast = FunctionalSplit(split)
    z = {k: v.detach() for k, v in split.initial_point().items()}
    flat = fast.flatten(z)
    init, pyro_potential, _, _ = initialize_model(model, model_args=())
    z_pyro = {k: v.detach() for k, v in init.items()}
    tempered = TemperedPotential(fast, 1.0)
    graph = per_call_ms(lambda: fast.evaluate(flat), calls)
    pyros = per_call_ms(lambda: potential_grad(pyro_potential, z_pyro), calls)
    with graph_gradients():
        # potential_grad as the integrator looks it up while a rung moves
        ours = per_call_ms(lambda: integrator.potential_grad(tempered, z), calls)
    return graph, pyros, ours, fast.compiled.engine


def profile(model, warmup, samples, top):
    """cProfile of (b)'s sampling phase (set-up, captures and warmup left out)."""
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(model, temperatures=[1.0], explorer="nuts")
    profiler = cProfile.Profile()

    def hook(kernel, params, stage, i):
        if stage == "Warmup" and i == warmup - 1:
            LEAPFROGS[0] = 0
            profiler.enable()

    MCMC(kernel, num_samples=samples, warmup_steps=warmup, hook_fn=hook,
         disable_progbar=True).run()
    profiler.disable()
    print(f"{LEAPFROGS[0]} leapfrog steps")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=100, help="warmup per run (default 100)")
    parser.add_argument("--samples", type=int, default=100, help="draws per run (default 100)")
    parser.add_argument("--calls", type=int, default=2000,
                        help="evaluations per round in (c) and (d) (default 2000)")
    parser.add_argument("--models", default="schools,gp", help="comma-separated: schools, gp")
    parser.add_argument("--profile", choices=sorted(MODELS), default=None,
                        help="profile (b) on this model instead of timing")
    parser.add_argument("--top", type=int, default=30, help="profile entries shown")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    # K = 1 has no swaps: ParallelTempering's warning that the ladder is short is expected.
    warnings.filterwarnings("ignore", message="ParallelTempering, at the end of warmup: too few rungs")
    print(f"torch {torch.__version__}, pyro {pyro.__version__}, {torch.get_num_threads()} torch "
          f"thread, {os.cpu_count()} CPUs, {platform.machine()}; warmup {args.warmup}, "
          f"{args.samples} draws, {args.rounds} interleaved rounds")
    if args.profile:
        profile(MODELS[args.profile], args.warmup, args.samples, args.top)
        return
    rows = []
    for name in args.models.split(","):
        model = MODELS[name]
        a, b, b_off, c, da, db, depth_a, depth_b = ([] for _ in range(8))
        for r in range(args.rounds):
            # Rotate which sampler goes first so drift (load, caches) favours none.
            order = ("a", "b", "b-off")[r % 3:] + ("a", "b", "b-off")[:r % 3]
            for which in order:
                pyro.set_rng_seed(args.seed + r)
                if which == "a":
                    ms, per_draw = plain_nuts(model, args.warmup, args.samples)
                    a.append(ms)
                    depth_a.append(per_draw)
                else:
                    ms, per_draw = pt_nuts(model, args.warmup, args.samples, which == "b")
                    (b if which == "b" else b_off).append(ms)
                    depth_b.append(per_draw)
            graph, pyro_pe, ours_pe, engine = evaluations(model, args.calls)
            c.append(graph)
            da.append(pyro_pe)
            db.append(ours_pe)
            print(f"{name} round {r + 1}: (a) {a[-1]:.3f} (b) {b[-1]:.3f} (b-off) {b_off[-1]:.3f} "
                  f"(c) {graph:.3f} (d-a) {pyro_pe:.3f} (d-b) {ours_pe:.3f} ms; leapfrogs/draw "
                  f"{depth_a[-1]:.1f} / {depth_b[-1]:.1f}; graph engine {engine}", flush=True)
        med = statistics.median
        rows.append((name, med(a), med(b), med(b_off), med(c), med(da), med(db),
                     med(x / y for x, y in zip(b, a)), med(x / y for x, y in zip(b, b_off)),
                     med(depth_a), med(depth_b)))
    print()
    print(f"{'model':<9}{'(a) NUTS':>10}{'(b) PT':>9}{'(b-off)':>9}{'(c) graph':>10}{'(d-a)':>8}"
          f"{'(d-b)':>8}{'(b)/(a)':>9}{'(b)/(b-off)':>12}{'(b)-(c)':>9}   leapfrogs/draw a, b")
    for name, a, b, b_off, c, da, db, ratio, gain, la, lb in rows:
        print(f"{name:<9}{a:>10.3f}{b:>9.3f}{b_off:>9.3f}{c:>10.3f}{da:>8.3f}{db:>8.3f}"
              f"{ratio:>9.3f}{gain:>12.3f}{b - c:>9.3f}   {la:.1f}, {lb:.1f}")
    print("(ms per leapfrog step, medians over rounds; ratios are medians of per-round ratios)")


if __name__ == "__main__":
    main(sys.argv[1:])
