"""compile="auto" on a whole run: does the switch to Inductor pay, and when does it come?

``--case bnn`` (the default): the seed BNN (benchmarks/_bnn.py, 4929 weights, 500 points) under
``ParallelTempering(model, num_replicas=8, max_temperature=50.0, explorer="hmc")`` (the
geometric ladder of 8 rungs to T = 50 that the recorded figures ran with, when it was the
default) with every other setting at its default (the ladder, step sizes, mass matrices and
trajectory lengths adapted in warmup), started from the benchmarks' small random point.
``--case mix2 | mix3 | logistic | schools``: ``ParallelTempering(model)`` with every default
on the models of ``benchmarks/explorers.py``. One torch thread. Each setting is a fresh
process, in this order:

- ``torchscript``: ``compile="torchscript"``, what ``"auto"`` runs before it switches;
- ``auto, cold``: ``compile="auto"`` with an empty ``TORCHINDUCTOR_CACHE_DIR`` (a first run);
- ``auto, warm``: ``compile="auto"`` again, with the cache and the cost record the cold run
  left (every later run of the model);
- ``inductor``: ``compile="inductor"`` from set-up, with the warm cache.

Per setting it prints the whole run's wall seconds, the explorers' seconds, the switch's
seconds and ``explorer_info["compile"]``; then the ratios of the wall times to TorchScript's,
and the share of TorchScript's explorer time that Inductor's saved (``1 - inductor /
torchscript``, explorers only), the figure behind ``pyro_pt.autocompile.SAVED``. The ladder
may adapt differently under the two engines (a run's last bits differ), so the explorer times
are per scan of the same counts but not of identical ladders. ``--force`` makes every switch
pay (its cost expected to be 0 s), to time the switch alone on a short run, e.g. on a GPU
(``--device cuda``). Prints; asserts nothing.

    PYTHONPATH=$PWD python benchmarks/auto_compile.py [--case bnn] [--warmup 300]
        [--samples 700] [--device cuda] [--force]
    PYTHONPATH=$PWD python benchmarks/auto_compile.py --case mix2 --warmup 1000 --samples 1000
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings


CASES = ("bnn", "mix2", "mix3", "logistic", "schools")


def _case(case, device):
    """``(model, args, kernel keywords, initial params)`` of a case."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if case == "bnn":
        from _bnn import CountingModel, initial_params, make_data

        start = {name: v.to(device) for name, v in initial_params().items()}
        return (CountingModel(device=device), tuple(t.to(device) for t in make_data()),
                dict(num_replicas=8, max_temperature=50.0, explorer="hmc"), start)
    import _explorers_models as models

    if case == "logistic":
        args = models.logistic_data()
    elif case == "schools":
        args = (torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]),
                torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]))
    else:
        centres, per, seed = ((-3.0, 3.0), 60, 1) if case == "mix2" else ((-4.0, 0.0, 4.0), 50, 2)
        args = (models.mixture_data(centres, per, seed).float(),)
    return getattr(models, case), tuple(a.to(device) for a in args), {}, None


def child(case, compile, warmup, samples, device, force):
    import torch

    import pyro
    from pyro.infer import MCMC

    from pyro_pt import ParallelTempering, autocompile

    if force:
        autocompile.expected_seconds = lambda *args: (0.0, "forced")
    torch.set_num_threads(1)
    model, data, options, start = _case(case, device)
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(model, compile=compile, **options)
    began = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run may warn of its barrier; not measured here
        mcmc = MCMC(kernel, samples, warmup, initial_params=start, disable_progbar=True)
        mcmc.run(*data)
    info = kernel.explorer_info
    print(json.dumps({"wall": time.perf_counter() - began,
                      "explorers": kernel.timings["explorers"],
                      "compile_seconds": info.get("compile_seconds"),
                      "compile": info.get("compile", f"compile={compile!r}"),
                      "engine": info["potential_engine"], "leapfrog": info.get("leapfrog")}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=CASES, default="bnn")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--samples", type=int, default=700)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--force", action="store_true", help="every switch pays (time it)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.case, args.child[0], int(args.child[1]), int(args.child[2]), args.device,
              args.force)
        return
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        for label, compile in (("torchscript", "torchscript"), ("auto, cold", "auto"),
                               ("auto, warm", "auto"), ("inductor", "inductor")):
            command = [sys.executable, __file__, "--child", compile, str(args.warmup),
                       str(args.samples), "--case", args.case,
                       "--device", args.device] + ["--force"] * args.force
            out = subprocess.run(command, env=env, capture_output=True, text=True,
                                 check=True).stdout
            results[label] = json.loads(out.strip().splitlines()[-1])
            r = results[label]
            switch = "-" if r["compile_seconds"] is None else f"{r['compile_seconds']:.1f}"
            print(f"{label:12s} wall {r['wall']:7.1f} s  explorers {r['explorers']:7.1f} s  "
                  f"switch {switch:>5s} s  engine {r['engine']}, {r['leapfrog']}  "
                  f"[{r['compile']}]", flush=True)
    base = results["torchscript"]["wall"]
    print(f"{args.case}, wall / TorchScript's ({args.warmup} + {args.samples} scans): " + ", ".join(
        f"{label} {r['wall'] / base:.2f}" for label, r in results.items()))
    saved = 1.0 - results["inductor"]["explorers"] / results["torchscript"]["explorers"]
    print(f"{args.case}: Inductor saved {saved:.2f} of TorchScript's explorer time")


if __name__ == "__main__":
    main()
