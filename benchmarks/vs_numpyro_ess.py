"""Function-space ESS per second on a small BNN: PT with adapted HMC trajectories vs NumPyro NUTS.

The model, written alike in Pyro and NumPyro: an MLP 1 -> H -> 1 (``--hidden``, default 8) with
tanh, Normal(0, 1) priors on every weight and bias, a Gaussian likelihood with sigma = 0.2, on
40 points ``x = linspace(-2, 2)``, ``y = sin(2x) + 0.2 eps`` with ``eps`` from
``torch.Generator().manual_seed(0)`` (no downloads). The quantities are the network's
predictions ``f(x*)`` at held-out inputs ``X_TEST`` (one of them outside the data's range),
computed from each draw's weights; both sides use the same function of the same layout.

- Reference: NumPyro ``NUTS`` (its defaults: adapted step size and diagonal metric, tree depth
  <= 10), ``--numpyro-chains`` (default 8) runs from their own ``init_to_uniform`` starts (one
  PRNG key each). Its split R-hat (``arviz.rhat``, rank-normalized) on every ``f(x*)`` must be
  below 1.01 for it to count as a reference; the script says whether it is.
- Ours: the cold chain of ``ParallelTempering(num_replicas=K, max_temperature=T,
  explorer="hmc")`` (adapted ChEES trajectory lengths, every other option default),
  ``--chains`` separate runs (seeds 0, 1, ...), each started by ``init_to_uniform``.

Every run is one process thread (``torch.set_num_threads(1)``, single-threaded XLA) and the
runs alternate between the sides, so both see the same load. A run's seconds are the wall time
of its whole ``MCMC.run``: NumPyro's jit compilation and our model capture, warmup, sampling.
Library imports and start-up are untimed on both sides (NumPyro's worker imports jax and
numpyro and makes its first arrays, which starts XLA's CPU backend, before its runs; torch's
Dynamo and Inductor, which the kernel imports lazily, are imported before ours and Inductor
probes the CPU's vector instructions then, and the script prints how long that took;
``--time-imports`` leaves them in our first run). ESS per second = the bulk ESS (``arviz.ess``) of ``f(x*)`` pooled over a side's runs, divided
by the sum of their seconds; min and median over ``x*``. The two sides' posterior means of
``f(x*)`` are compared in units of their combined Monte Carlo standard error
(``arviz.mcse``).

Command: ``.venv/bin/python benchmarks/vs_numpyro_ess.py --numpyro-python /tmp/vjax/bin/python
[--warmup 1000] [--samples 1000] [--chains 4] [--replicas 4] [--max-temperature 4]
[--compile auto] [--time-imports]``.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_numpyro import XLA_FLAGS, add_numpyro_arguments, ask, numpyro_bnn, start_worker  # noqa

NUM_DATA, NOISE = 40, 0.2
X_TEST = (-2.5, -1.0, 0.3, 1.2, 3.0)


def widths(hidden):
    return (1, hidden, 1)


def predict(params, x_test, tanh):
    """``f(x*)`` ``[draws, len(x_test)]`` from draws of ``w0 [.., 1, H]``, ``b0``, ``w1``,
    ``b1`` (numpy arrays or tensors; ``tanh`` of the same library)."""
    h = tanh(x_test[None, :, None] * params["w0"] + params["b0"][:, None, :])
    return (h * params["w1"][:, None, :, 0]).sum(-1) + params["b1"]


def numpyro_worker(data_path, hidden, warmup, samples):
    """The NumPyro side: one NUTS run per stdin line (its seed); replies with its seconds."""
    os.environ["XLA_FLAGS"] = XLA_FLAGS
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import MCMC, NUTS

    data = np.load(data_path)
    model = numpyro_bnn(widths(hidden), NOISE, activation="tanh")
    x, y, x_test = (jnp.asarray(data[k]) for k in ("x", "y", "x_test"))
    print(json.dumps({"jax": jax.__version__, "numpyro": numpyro.__version__}), flush=True)
    for line in sys.stdin:
        seed = int(line)
        begin = time.perf_counter()
        mcmc = MCMC(NUTS(model), num_warmup=warmup, num_samples=samples, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(seed), x[:, None], y, extra_fields=("num_steps",))
        draws = jax.block_until_ready(mcmc.get_samples())
        seconds = time.perf_counter() - begin
        f = np.asarray(predict(draws, x_test, jnp.tanh))
        steps = np.asarray(mcmc.get_extra_fields()["num_steps"])
        out = os.path.join(os.path.dirname(data_path), f"numpyro_{seed}.npy")
        np.save(out, f)
        print(json.dumps({"seconds": seconds, "path": out, "leapfrogs": float(steps.mean())}),
              flush=True)


def bnn(hidden):
    """The model in Pyro."""
    import torch
    import pyro
    import pyro.distributions as dist

    def model(x, y=None):
        h = x[:, None]
        for i, (a, b) in enumerate(zip(widths(hidden), widths(hidden)[1:])):
            prior = dist.Normal(torch.zeros(()), torch.ones(()))
            w = pyro.sample(f"w{i}", prior.expand([a, b]).to_event(2))
            bias = pyro.sample(f"b{i}", prior.expand([b]).to_event(1))
            h = h @ w + bias
            if i == 0:
                h = torch.tanh(h)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal(h.squeeze(-1), NOISE), obs=y)

    return model


def our_run(args, seed, x, y, x_test):
    """One PT run: ``(f(x*) of the cold chain [samples, len(x_test)], seconds, diagnostics)``."""
    import torch
    import pyro
    from pyro.infer import MCMC

    from pyro_pt import ParallelTempering

    pyro.set_rng_seed(seed)
    begin = time.perf_counter()
    kernel = ParallelTempering(bnn(args.hidden), num_replicas=args.replicas,
                               max_temperature=args.max_temperature, explorer="hmc",
                               compile=args.compile)
    mcmc = MCMC(kernel, num_samples=args.samples, warmup_steps=args.warmup,
                disable_progbar=True)
    mcmc.run(x, y)
    seconds = time.perf_counter() - begin
    draws = mcmc.get_samples()
    with torch.no_grad():
        f = predict(draws, torch.as_tensor(x_test, dtype=x.dtype), torch.tanh).numpy()
    cold = kernel.run.rungs.explorers[0].diagnostics()
    # Each leapfrog step evaluates every rung, up to the longest of the rungs' trajectories.
    calls = kernel.run.rungs.explorers[0].group.engine.num_potential_calls
    swaps = next(iter(mcmc.diagnostics()["swap_acceptance"].values()))  # {chain: per pair}
    return f, seconds, {"cold acc.": cold.get("acceptance rate"),
                        "steps": cold.get("num steps"), "swaps": swaps,
                        "calls per scan": calls / (args.warmup + args.samples),
                        "engine": kernel.explorer_info.get("potential_engine")}


def preload(compile):
    """
    Import the parts of torch the kernel loads lazily (Dynamo for the capture's fake tensors,
    Inductor and its compiler unless ``compile="torchscript"``) and let Inductor probe the CPU once (which
    vector instructions its C++ may use: it builds and runs small test programs, ~1.4 s
    here, once per process), as NumPyro's worker imports jax and numpyro and makes its first
    arrays (which starts XLA's CPU backend) before its timed runs; returns the seconds it
    took. A library's start is paid once per process on either side; its jit or capture and
    compilation stay in the timed runs.
    """
    begin = time.perf_counter()
    import torch._dynamo  # noqa: F401

    if compile != "torchscript":
        import torch._inductor  # noqa: F401
        # Inductor's compiler proper, imported lazily by its first compilation: ~1.3 s here,
        # most of it compiling the Jinja templates of its GEMM autotuner
        import torch._inductor.compile_fx  # noqa: F401
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        pick_vec_isa()
    return time.perf_counter() - begin


def summary(name, f, seconds):
    """Per-side figures from ``f`` ``[runs, draws, len(X_TEST)]`` and the runs' seconds."""
    import arviz as az

    ess = np.array([az.ess(f[..., j], method="bulk") for j in range(f.shape[-1])])
    rhat = np.array([az.rhat(f[..., j]) for j in range(f.shape[-1])])
    mcse = np.array([az.mcse(f[..., j]) for j in range(f.shape[-1])])
    total = float(sum(seconds))
    print(f"{name}: {f.shape[0]} runs x {f.shape[1]} draws, {total:.1f} s in all "
          f"(runs {', '.join(f'{s:.1f}' for s in seconds)} s)")
    print(f"  R-hat per x*: {np.array2string(rhat, precision=4)} (max {rhat.max():.4f})")
    print(f"  bulk ESS per x*: {np.array2string(ess, precision=0)}")
    print(f"  ESS/s: min {ess.min() / total:.2f}, median {np.median(ess) / total:.2f}")
    return {"mean": f.mean(axis=(0, 1)), "mcse": mcse, "rhat": rhat, "ess": ess,
            "seconds": total}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=8, help="hidden units (default 8)")
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--numpyro-chains", type=int, default=8, help="NUTS runs (default 8)")
    parser.add_argument("--chains", type=int, default=4, help="our PT runs (default 4)")
    parser.add_argument("--replicas", type=int, default=4, help="PT rungs K (default 4)")
    parser.add_argument("--max-temperature", type=float, default=4.0, help="default 4")
    parser.add_argument("--compile", default="auto",
                        help="ParallelTempering's compile: auto (default), torchscript, inductor")
    parser.add_argument("--time-imports", action="store_true",
                        help="leave torch's lazily imported Dynamo and Inductor, and "
                        "Inductor's CPU probe, in our first timed run (by default they come "
                        "before, untimed, as jax's and numpyro's start on NumPyro's side)")
    add_numpyro_arguments(parser)
    args = parser.parse_args(argv)
    if args.worker:
        return numpyro_worker(args.worker, args.hidden, args.warmup, args.samples)
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    x = torch.linspace(-2.0, 2.0, NUM_DATA)
    y = torch.sin(2 * x) + NOISE * torch.randn(NUM_DATA, generator=torch.Generator().manual_seed(0))
    x_test = np.array(X_TEST, dtype=np.float32)
    print(f"1-{args.hidden}-1 tanh BNN, {NUM_DATA} points, sigma {NOISE}, x* = {X_TEST}; "
          f"warmup {args.warmup}, samples {args.samples}; NumPyro NUTS x "
          f"{args.numpyro_chains}; PT K = {args.replicas}, T_max = {args.max_temperature}, "
          f"explorer='hmc' (adapted length), compile={args.compile!r} x {args.chains}; "
          f"load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        data_path = os.path.join(tmp, "data.npz")
        np.savez(data_path, x=x.numpy(), y=y.numpy(), x_test=x_test)
        worker, versions = start_worker(args, __file__, data_path, "--hidden", str(args.hidden),
                                        "--warmup", str(args.warmup), "--samples",
                                        str(args.samples))
        print(f"jax {versions['jax']}, numpyro {versions['numpyro']}, torch {torch.__version__}")
        if not args.time_imports:
            print(f"torch's Dynamo and Inductor imported and Inductor's CPU probe run before "
                  f"the timed runs (untimed, as jax's and numpyro's start on NumPyro's side): "
                  f"{preload(args.compile):.1f} s")
        f_np, s_np, f_ours, s_ours = [], [], [], []
        for i in range(max(args.numpyro_chains, args.chains)):  # interleaved runs
            if i < args.numpyro_chains:
                reply = ask(worker, i)
                f_np.append(np.load(reply["path"]))
                s_np.append(reply["seconds"])
                print(f"NumPyro run {i}: {reply['seconds']:.1f} s, "
                      f"{reply['leapfrogs']:.1f} leapfrogs per draw", flush=True)
            if i < args.chains:
                f, seconds, info = our_run(args, i, x, y, x_test)
                f_ours.append(f)
                s_ours.append(seconds)
                swaps = ", ".join(f"{a:.2f}" for a in info["swaps"] or [])
                print(f"PT run {i}: {seconds:.1f} s, cold acceptance {info['cold acc.']:.3f}, "
                      f"cold steps {info['steps']}, potential calls (of K rungs) per scan "
                      f"{info['calls per scan']:.1f}, swap acceptance [{swaps}], "
                      f"engine {info['engine']}", flush=True)
        worker.stdin.close()
        worker.wait()
    ref = summary("NumPyro NUTS", np.stack(f_np), s_np)
    print("  reference: " + ("yes, R-hat < 1.01 on every f(x*)" if ref["rhat"].max() < 1.01
                             else "NO: some R-hat >= 1.01"))
    ours = summary(f"PT K = {args.replicas}", np.stack(f_ours), s_ours)
    z = (ours["mean"] - ref["mean"]) / np.sqrt(ours["mcse"] ** 2 + ref["mcse"] ** 2)
    print(f"means NumPyro {np.array2string(ref['mean'], precision=3)}, PT "
          f"{np.array2string(ours['mean'], precision=3)}; difference / MC error "
          f"{np.array2string(z, precision=2)} (|z| max {abs(z).max():.2f})")
    ratio = [o / r for o, r in ((ours["ess"].min() / ours["seconds"],
                                 ref["ess"].min() / ref["seconds"]),
                                (statistics.median(ours["ess"]) / ours["seconds"],
                                 statistics.median(ref["ess"]) / ref["seconds"]))]
    print(f"ESS/s ours / NumPyro: min over x* {ratio[0]:.2f}, median {ratio[1]:.2f} "
          f"(target >= 1); load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
