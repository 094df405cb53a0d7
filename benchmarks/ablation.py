"""Ablation of the compiled path's accelerators: what each one gains on a whole PT run.

Every run is ``MCMC(ParallelTempering(model, explorer="hmc", compile="inductor", ...),
warmup_steps=W, num_samples=N)`` with a fixed seed, in a fresh process with one torch thread,
either with every accelerator on ("all on") or with one of them switched off by monkeypatching
inside that process (no package option exists for it):

- ``matmul``: the native AVX-512 matrix product (``PYRO_PT_MATMUL=aten``);
- ``native loop``: the C++ loop of a lockstep trajectory's calls (``native_loop`` gives None);
- ``inlining``: constants with all entries equal written as ``full`` nodes
  (``potential/constants.py``; the identity instead);
- ``fused``: the fused leapfrog step (``potential/fused.py``; ``FusedSteps.step`` gives None,
  and with it the step against a fitted reference, ``reference/split.py``'s
  ``ReferencedFused``, which calls it);
- ``lockstep``: all slots in one call per leapfrog step (``MAX_FLOPS = -1``: it refuses);
- ``direct call``: the call past Inductor's wrappers (``direct_call`` gives None; the C++ loop
  needs its entry point, so this also turns the native loop off).

Per run it prints the wall time of the sampling phase (from the last warmup iteration's hook to
the end of ``MCMC.run``) and the process's CPU time over it (steadier on a shared machine), the
wall time of the whole run (set-up + warmup + sampling), and that of the set-up of a second
kernel on the same model in the same process (``kernel.setup`` with validation off, as
``MCMC.run`` sets up a kernel: what an in-process reuse of compilations would save, 3-11 % of a
whole run when it was measured, so it was removed), with ``explorer_info`` and
counters of what each accelerator did, so the table shows that the one switched off really was
off. Settings are interleaved in rounds; the table
gives min-max over rounds, and each setting's slowdown against "all on" of the same round.
Workloads: (a) the seed BNN (``_bnn.py``, K = 8, T = 50), (b) the 25-weight BNN of
``vs_numpyro_ess.py`` (K = 4, T = 4), (c) non-centered eight schools (``funnel.py``'s
LocScaleReparam setting, K = 4, T = 10), (d) the BNN of (b) with ``reference="variational"``
(two legs of 2 rungs, to q and to the prior; ``--workloads d --settings
"all on,lockstep,lockstep+fused"``: the lockstep step against q, then the fused step against q
with lockstep off). A setting ``a+b`` switches both off. Without ``--quick``, one untimed pass
of tiny runs first warms Inductor's on-disk cache.

    PYTHONPATH=$PWD python benchmarks/ablation.py --quick        # seconds per run
    PYTHONPATH=$PWD python benchmarks/ablation.py --rounds 3     # ~33 minutes on 2 cores
"""

import argparse
import inspect
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SETTINGS = ("all on", "matmul", "native loop", "inlining", "fused", "lockstep",
            "direct call")
WORKLOADS = {"a": "seed BNN, K=8", "b": "25-weight BNN, K=4", "c": "eight schools NC, K=4",
             "d": "25-weight BNN against q, K=4"}
# (W, N) per workload: full run, --quick
STEPS = {"a": ((100, 100), (10, 10)), "b": ((1000, 2000), (20, 20)),
         "c": ((1000, 2000), (20, 20)), "d": ((1000, 2000), (20, 20))}
# accelerator -> (its code: module[:function], ...), the torch_compat entries it needs
CODE = {
    "matmul": (("matmul", "matmul.cpp"), ("CppCodeCache", "custom_ops_to_c_shims")),
    "native loop": (("native", "lockstep:_checked_loop"),
                    ("CppCodeCache", "unsafe_alloc_void_ptrs_from_tensors",
                     "alloc_tensors_by_stealing_from_void_ptrs")),
    "inlining": (("constants",), ()),
    "fused": (("fused", "explorers.hmc_dynamics:leapfrog_rows"), ()),
    "lockstep": (("lockstep", "explorers.hmc_dynamics:leapfrog_lockstep",
                  "explorers.hmc_dynamics:evaluate_lockstep",
                  "explorers.hmc_dynamics:_in_lockstep"), ()),
    "direct call": (("direct_call",), ("OutputCode", "unsafe_alloc_void_ptrs_from_tensors",
                                       "alloc_tensors_by_stealing_from_void_ptrs")),
}


def lines_of(spec):
    """Lines of ``module`` (under pyro_pt/potential unless dotted) or of one function in it."""
    import importlib
    module, _, name = spec.partition(":")
    if module.endswith(".cpp"):
        import pyro_pt.potential
        with open(os.path.join(os.path.dirname(pyro_pt.potential.__file__), module)) as f:
            return len(f.readlines())
    mod = importlib.import_module(("pyro_pt." if "." in module else "pyro_pt.potential.")
                                  + module)
    obj = mod
    for part in filter(None, name.split(".")):
        obj = getattr(obj, part)
    return len(inspect.getsourcelines(obj)[0])


def switch_off(setting, counts):
    """Switch ``setting`` off (``"all on"``: nothing; ``"a+b"``: both), and count what the
    others do."""
    from pyro_pt.potential import fused, inductor, lockstep
    off = setting.split("+")
    if "matmul" in off:
        os.environ["PYRO_PT_MATMUL"] = "aten"
    if "lockstep" in off:
        lockstep.MAX_FLOPS = -1.0
    if "fused" in off:
        fused.FusedSteps.step = lambda self, dtype, device: None
    loop, direct, inline = lockstep.native_loop, inductor.direct_call, \
        inductor.inline_uniform_constants

    def counted_loop(run):
        out = None if "native loop" in off else loop(run)
        counts["native loops"] = counts.get("native loops", 0) + (out is not None)
        return out

    def counted_direct(fn, example):
        out = None if "direct call" in off else direct(fn, example)
        counts["direct calls"] = counts.get("direct calls", 0) + (out is not None)
        return out

    def counted_inline(gm):
        before = sum(n.op == "get_attr" for n in gm.graph.nodes)
        if "inlining" not in off:
            inline(gm)
        after = sum(n.op == "get_attr" for n in gm.graph.nodes)
        counts["inlined"] = counts.get("inlined", 0) + before - after

    lockstep.native_loop, inductor.direct_call = counted_loop, counted_direct
    inductor.inline_uniform_constants = counted_inline


def workload(name):
    """``(model, args, kernel kwargs)``."""
    import torch
    from pyro.infer.autoguide import init_to_uniform
    if name == "a":
        from _bnn import CountingModel, make_data
        return CountingModel(), make_data(), dict(num_replicas=8, max_temperature=50.0,
                                                  init_strategy=init_to_uniform(radius=0.1))
    if name in "bd":
        from vs_numpyro_ess import NOISE, NUM_DATA, bnn
        x = torch.linspace(-2.0, 2.0, NUM_DATA)
        eps = torch.randn(NUM_DATA, generator=torch.Generator().manual_seed(0))
        ladder = (dict(max_temperature=4.0) if name == "b"  # d: two legs, to q and the prior
                  else dict(reference="variational"))
        return bnn(8), (x, torch.sin(2 * x) + NOISE * eps), dict(num_replicas=4, **ladder)
    from funnel import SIGMA, Y, non_centered
    return non_centered, (Y, SIGMA), dict(num_replicas=4, max_temperature=10.0)


def child(name, setting, warmup, samples):
    import warnings

    import torch
    import pyro
    from pyro.infer import MCMC
    from pyro_pt import ParallelTempering
    torch.set_num_threads(1)
    counts = {}
    switch_off(setting, counts)
    model, args, options = workload(name)
    marks = []
    hook = lambda kernel, params, stage, i: marks.append(  # noqa: E731
        (stage, time.perf_counter(), time.process_time()))
    warnings.simplefilter("ignore")
    pyro.set_rng_seed(0)
    begin = time.perf_counter()
    kernel = ParallelTempering(model, explorer="hmc", compile="inductor", **options)
    MCMC(kernel, warmup_steps=warmup, num_samples=samples, disable_progbar=True,
         hook_fn=hook).run(*args)
    end, end_cpu = time.perf_counter(), time.process_time()
    _, last_warmup, last_warmup_cpu = [m for m in marks if m[0] == "Warmup"][-1]
    second = ParallelTempering(model, explorer="hmc", compile="inductor", **options)
    start = time.perf_counter()
    with pyro.validation_enabled(False):  # as MCMC.run sets it up (another setting would
        second.setup(warmup, *args)       # be another graph, not reused)
    info = {k: str(v) for k, v in kernel.explorer_info.items() if k in (
        "potential_engine", "potential_matmul", "batched", "leapfrog", "leapfrog_reason",
        "setup_seconds", "private_api")}
    print(json.dumps({"sampling": end - last_warmup, "cpu": end_cpu - last_warmup_cpu,
                      "whole": end - begin,
                      "setup2": time.perf_counter() - start, "info": info, "counts": counts}))


def run(name, setting, warmup, samples):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", name, setting, str(warmup),
                          str(samples)], env=env, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        print(f"  {name}/{setting} failed: {out.stderr[-2000:]}", flush=True)
        return None
    return json.loads(lines[-1])


def span(values, fmt="{:.2f}"):
    """``min-max`` of ``values``, with the median where there are more than three."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return "-"
    lo, hi, mid = (fmt.format(v) for v in (values[0], values[-1], values[len(values) // 2]))
    text = lo if lo == hi else f"{lo}-{hi}"
    return f"{text} (median {mid})" if len(values) > 3 and lo != hi else text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default="abc")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, setting, warmup, samples = args.child
        return child(name, setting, int(warmup), int(samples))
    settings = args.settings.split(",")
    rounds = 1 if args.quick else args.rounds
    steps = {w: STEPS[w][1 if args.quick else 0] for w in args.workloads}
    print(f"steps (W, N): {steps}; {rounds} round(s); python {sys.version.split()[0]}")
    print("accelerator: lines of code; private torch APIs (torch_compat entries)")
    for setting in SETTINGS[1:]:
        specs, apis = CODE[setting]
        print(f"  {setting:12s} {sum(lines_of(s) for s in specs):4d} "
              f"({', '.join(specs)}); {', '.join(apis) or 'none'}")
    begin = time.perf_counter()
    for w in args.workloads if not args.quick else ():  # warm Inductor's disk cache, untimed
        for setting in settings:
            run(w, setting, *STEPS[w][1])
    print(f"warm-up pass {time.perf_counter() - begin:.0f} s", flush=True)
    results = {}  # (workload, setting) -> [result per round]
    for r in range(rounds):
        for w in args.workloads:
            for setting in settings:
                out = run(w, setting, *steps[w])
                results.setdefault((w, setting), []).append(out)
                if out:
                    print(f"round {r} {w} {setting:12s} sampling {out['sampling']:.2f} s "
                          f"(CPU {out['cpu']:.2f} s), whole {out['whole']:.2f} s, "
                          f"2nd set-up {out['setup2']:.2f} s "
                          f"{out['counts']}", flush=True)
    print("\nworkload | off | sampling s | whole s | 2nd set-up s | sampling / all on | "
          "CPU / all on | 2nd set-up - all on's, / whole | leapfrog, matmul, counters")
    for w in args.workloads:
        base = results.get((w, "all on"), [])
        for setting in settings:
            rows = results.get((w, setting), [])
            ok = [(x, b) for x, b in zip(rows, base) if x and b]
            ratio = span([x["sampling"] / b["sampling"] for x, b in ok], "{:.3f}")
            cpu = span([x["cpu"] / b["cpu"] for x, b in ok], "{:.3f}")
            extra = span([(x["setup2"] - b["setup2"]) / b["whole"] for x, b in ok], "{:+.3f}")
            last = next((x for x in reversed(rows) if x), None)
            what = "" if last is None else (
                f"{last['info'].get('leapfrog')}, {last['info'].get('potential_matmul')}, "
                f"{last['counts']}")
            print(f"{WORKLOADS[w]} | {setting} | {span([x['sampling'] for x, _ in ok])} | "
                  f"{span([x['whole'] for x, _ in ok])} | "
                  f"{span([x['setup2'] for x, _ in ok])} | {ratio} | {cpu} | {extra} | {what}")
    print(f"total {time.perf_counter() - begin:.0f} s")


if __name__ == "__main__":
    main()
