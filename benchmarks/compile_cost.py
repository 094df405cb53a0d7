"""Where the set-up of an Inductor-compiled kernel spends its time, cold and warm.

Each measurement is a fresh process that sets up ``ParallelTempering(seed BNN,
num_replicas=K, max_temperature=50.0, explorer="hmc", compile="inductor",
adapt_temperatures=False)`` (``kernel.setup``: capture, checks and every compilation; nothing
is sampled) under cProfile:

- ``cold``: an empty ``TORCHINDUCTOR_CACHE_DIR``, as on a user's first run;
- ``warm``: the cache the cold process left, as on every later run of the same model.

Per process it prints the seconds of the two C++ helpers built once per machine (timed first,
apart), then the set-up's seconds, then per phase the calls and cumulative seconds of
the functions that mark it (graphs compiled by Inductor, C++ builds, autotuning, Python code
generation, the set-up's own correctness checks), and the slowest Inductor functions.

    PYTHONPATH=$PWD python benchmarks/compile_cost.py [--replicas 8] [--top 12]
"""

import argparse
import cProfile
import importlib
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
import warnings

# Function names that mark a phase, matched on (file fragment, function name).
PHASES = {
    "Inductor graph compilations": ("compile_fx.py", "compile_fx_inner"),
    "FX graph cache lookups": ("codecache.py", "_lookup_graph"),
    "C++ builds": ("cpp_builder.py", "build"),
    "C++ module loads": ("codecache.py", "load"),
    "autotuning": ("select_algorithm.py", "autotune"),
    "Python wrapper codegen": ("graph.py", "codegen"),
    "Inductor lowering": ("graph.py", "run"),
    "capture (make_fx)": ("proxy_tensor.py", "make_fx"),
    "set-up checks against Pyro's trace": ("compiled.py", "_check"),
}


def child(replicas, top):
    import torch

    sys.path.insert(0, os.path.dirname(__file__))
    import pyro
    from pyro.infer.autoguide import init_to_uniform

    from _bnn import CountingModel, make_data
    from pyro_pt import ParallelTempering

    torch.set_num_threads(1)
    # The two C++ helpers built once per machine, timed apart from the graphs' compilations.
    helpers = {}
    for label, module, name in (("native matmul (matmul.cpp)", "pyro_pt.potential.matmul",
                                 "operator"),
                                ("lockstep C loop (native.py)", "pyro_pt.potential.native",
                                 "_load_helper")):
        build = getattr(importlib.import_module(module), name, None)
        start = time.perf_counter()
        if build is not None:
            build()
        helpers[label] = time.perf_counter() - start
    x, y = make_data()
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(CountingModel(), num_replicas=replicas, max_temperature=50.0,
                               explorer="hmc", compile="inductor", adapt_temperatures=False,
                               init_strategy=init_to_uniform(radius=0.1))
    profile = cProfile.Profile()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profile.enable()
        kernel.setup(10, x, y)
        profile.disable()
    seconds = time.perf_counter() - start
    stats = pstats.Stats(profile).stats
    phases = {}
    for name, (fragment, function) in PHASES.items():
        calls = total = 0.0
        for (path, _, func), (_, num_calls, _, cumulative, _) in stats.items():
            if func == function and path.endswith(fragment):
                calls += num_calls
                total = max(total, cumulative)  # recursive entries repeat the outer time
        phases[name] = (int(calls), total)
    inductor = sorted(((cumulative, f"{os.path.basename(path)}:{func}")
                       for (path, _, func), (_, _, _, cumulative, _) in stats.items()
                       if "_inductor" in path), reverse=True)[:top]
    info = {k: v for k, v in kernel.explorer_info.items() if "engine" in k or "potential" in k}
    print(json.dumps({"seconds": seconds, "helpers": helpers, "phases": phases,
                      "inductor": inductor,
                      "explorer_info": {k: str(v) for k, v in info.items()}}))


def run(cache, replicas, top):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, OMP_NUM_THREADS="1",
               PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, __file__, "--child", "--replicas", str(replicas),
                          "--top", str(top)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-4000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.replicas, args.top)
    with tempfile.TemporaryDirectory() as cache:
        for label in ("cold", "warm"):
            result = run(cache, args.replicas, args.top)
            print(f"\n{label}: {result['explorer_info']}")
            for name, seconds in result["helpers"].items():
                print(f"  {name:36s} {seconds:7.1f} s (before the set-up)")
            print(f"  {'kernel.setup':36s} {result['seconds']:7.1f} s, of which:")
            for name, (calls, seconds) in result["phases"].items():
                print(f"  {name:36s} {calls:5d} calls {seconds:7.1f} s")
            print("  slowest Inductor functions (cumulative s):")
            for seconds, name in result["inductor"]:
                print(f"    {seconds:7.1f}  {name}")


if __name__ == "__main__":
    main()
