"""One batched HMC scan of K = 8 rungs against NumPyro's vectorized 8-chain HMC, seed BNN.

The seed BNN of ``benchmarks/_bnn.py`` (10 -> 64 -> 64 -> 1 ReLU, 4929 weights, 500 points,
sigma = 0.1) in float32, one thread each, the same number of leapfrog steps per transition:

- ours: one scan's local moves of ``ParallelTempering(num_replicas=8, max_temperature=50,
  explorer="hmc", explorer_kwargs={"num_steps": N, "num_steps_jitter": 0, ...})``, i.e. the
  8 rungs' batched HMC step (``kernel.timings["explorers"]`` per ``kernel.sample`` call; the
  whole scan, with the swap round, is printed too), for ``compile="torchscript"`` and
  ``"inductor"`` as the kernel sets them up (``batched='auto'``: the replica loop on one CPU
  thread), and for Inductor with the 8 replicas in one vmapped graph (``"inductor, vmap"``:
  the kernel's batched evaluator replaced after set-up, what ``batched='vmap'`` would run);
- NumPyro: ``HMC(model, num_steps=N)`` initialized with 8 PRNG keys, which is what
  ``MCMC(num_chains=8, chain_method="vectorized")`` runs per iteration: the ``vmap``-ed
  ``sample_kernel``, jitted; one call = one transition of all 8 chains.

Both sides start every chain at the same point (``_bnn.initial_params``) with a fixed step
size and an identity metric (no adaptation: the work per transition is what is compared).
Rounds alternate the sides, so both see the same load; ratios ours / NumPyro per round, the
median over rounds. ``--profile`` splits our scan into the captured graph's calls, the rest of
the batched potential (stacking, tempering, finiteness checks) and the rest (leapfrog
arithmetic, momenta, accept test, the group's flatten / unflatten).

Command: ``.venv/bin/python benchmarks/vs_numpyro_scan.py --numpyro-python /tmp/vjax/bin/python
[--rounds 5] [--scans 5] [--num-steps 10] [--profile]``.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_numpyro import XLA_FLAGS, add_numpyro_arguments, ask, numpyro_bnn, start_worker  # noqa

NUM_CHAINS = 8
STEP_SIZE = 1e-4  # finite trajectories from the benchmark's start, as in vs_numpyro.py


def numpyro_worker(data_path, num_steps):
    """The NumPyro side: times ``calls`` vectorized transitions per stdin line."""
    os.environ["XLA_FLAGS"] = XLA_FLAGS
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    from numpyro.infer import HMC

    data = np.load(data_path)
    model = numpyro_bnn([int(w) for w in data["widths"]], float(data["noise"]))
    args = (jnp.asarray(data["x"]), jnp.asarray(data["y"]))
    init = {k[2:]: jnp.broadcast_to(jnp.asarray(data[k]), (NUM_CHAINS,) + data[k].shape)
            for k in data.files if k.startswith("z_")}
    # trajectory_length=None: with its default (2 pi) HMC would set step_size = 2 pi / num_steps.
    kernel = HMC(model, step_size=STEP_SIZE, num_steps=num_steps, trajectory_length=None,
                 adapt_step_size=False, adapt_mass_matrix=False)
    # A batch of keys makes HMC.init vmap the chains and its sample function, as
    # MCMC(chain_method="vectorized") does.
    state = kernel.init(jax.random.split(jax.random.PRNGKey(0), NUM_CHAINS), 0, init, args, {})
    step = jax.jit(lambda s: kernel.sample(s, args, {}))
    begin = time.perf_counter()
    state = jax.block_until_ready(step(state))
    print(json.dumps({"ready": True, "jit_s": time.perf_counter() - begin,
                      "potential": float(state.potential_energy[0]), "jax": jax.__version__,
                      "numpyro": numpyro.__version__}), flush=True)
    for line in sys.stdin:
        calls = int(line)
        state = jax.block_until_ready(step(state))
        begin = time.perf_counter()
        for _ in range(calls):
            state = jax.block_until_ready(step(state))
        ms = (time.perf_counter() - begin) / calls * 1e3
        print(json.dumps({"ms": ms, "accept": float(state.mean_accept_prob.mean())}), flush=True)


def make_kernels(args, data_path):
    """Our kernels, set up on the seed BNN (one per compile path), and NumPyro's data file."""
    import numpy as np
    import torch
    from pyro.infer.autoguide import init_to_value

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import _bnn
    from pyro_pt import ParallelTempering
    from pyro_pt.potential.batched import BatchedEvaluator

    torch.set_num_threads(args.threads)
    x, y = _bnn.make_data()
    z = _bnn.initial_params()
    np.savez(data_path, x=x.numpy(), y=y.numpy(), widths=np.array(_bnn.WIDTHS),
             noise=np.array(_bnn.NOISE), **{"z_" + k: v.numpy() for k, v in z.items()})
    options = {"num_steps": args.num_steps, "num_steps_jitter": 0.0, "step_size": STEP_SIZE,
               "adapt_step_size": False, "adapt_mass_matrix": False}
    kernels = {}
    for name in ("torchscript", "inductor", "inductor, vmap"):
        begin = time.perf_counter()
        compile = name.split(",")[0]
        kernel = ParallelTempering(_bnn.CountingModel(), num_replicas=NUM_CHAINS,
                                   max_temperature=50.0, explorer="hmc", explorer_kwargs=options,
                                   init_strategy=init_to_value(values=z), compile=compile)
        kernel.setup(0, x, y)
        if name.endswith("vmap"):
            # Not what batched='auto' takes on one CPU thread (the replica loop): the 8
            # replicas in one vmapped Inductor graph, still checked bitwise on first use.
            fast = kernel.run.rungs.explorers[0].group.fast
            group = kernel.run.rungs.explorers[0].group
            fast.batched = BatchedEvaluator(fast.compiled, mode="vmap", max_batch=NUM_CHAINS)
            group.engine.fused_step = None  # vmapped replicas: one batched call a step
            kernel.explorer_info.update(batched=fast.batched.path,
                                        batched_reason=fast.batched.reason,
                                        leapfrog=group.engine.leapfrog)
        info = kernel.explorer_info
        print(f"{name}: set-up {time.perf_counter() - begin:.1f} s, engine "
              f"{info['potential_engine']}, batched {info['batched']} "
              f"({info['batched_reason'] or 'checked'}), leapfrog {info['leapfrog']}")
        kernels[name] = kernel
    return kernels


def time_scans(kernel, scans):
    """ms per scan: ``(local moves, whole scan)``, after one untimed scan."""
    params = kernel.sample(None)
    before = dict(kernel.timings)
    for _ in range(scans):
        params = kernel.sample(params)
    return tuple((kernel.timings[k] - before[k]) / scans * 1e3 for k in ("explorers", "total"))


def profile(kernel, scans):
    """Seconds per scan in the graph's calls, the rest of the batched potential, the rest."""
    group = kernel.run.rungs.explorers[0].group
    engine = group.fast.batched
    # The graph's calls: one per replica in the loop, one per chunk of replicas vmapped.
    compiled = engine if engine.path == "vmap" else group.fast.compiled
    graph_name = "_vmapped" if engine.path == "vmap" else "evaluate"
    engine = group.engine
    spent = {"graph": 0.0, "potential": 0.0}

    def timed(fn, key):
        def wrapper(*a, **k):
            begin = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - begin
        return wrapper

    evaluate, potential = getattr(compiled, graph_name), engine.potential_and_grad
    fused = engine.leapfrog == "fused"
    if fused:
        # One compiled call per rung and leapfrog step: graph, tempering and updates in one.
        fused_step = engine.fused_step
        step = timed(fused_step(engine._dtype, engine._device), "graph")
        engine.fused_step = lambda dtype, device: step
    setattr(compiled, graph_name, timed(evaluate, "graph"))
    engine.potential_and_grad = timed(potential, "potential")
    calls, before = engine.num_potential_calls, kernel.timings["explorers"]
    try:
        time_scans(kernel, scans)
        local = (kernel.timings["explorers"] - before) / (scans + 1) * 1e3  # untimed one too
    finally:
        setattr(compiled, graph_name, evaluate)
        engine.potential_and_grad = potential
        if fused:
            engine.fused_step = fused_step
    graph = spent["graph"] / (scans + 1) * 1e3
    batched = spent["potential"] / (scans + 1) * 1e3
    calls = (engine.num_potential_calls - calls) / (scans + 1)
    if fused:
        return {"scan": local, "fused step calls": graph, "rest of the scan": local - graph,
                "leapfrog steps per scan": calls}
    return {"scan": local, "graph calls": graph, "rest of the potential": batched - graph,
            "rest of the scan": local - batched, "potential calls per scan": calls}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--scans", type=int, default=5, help="timed scans per round (default 5)")
    parser.add_argument("--num-steps", type=int, default=10, help="leapfrog steps (default 10)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--profile", action="store_true", help="where our scan's time goes")
    add_numpyro_arguments(parser)
    args = parser.parse_args(argv)
    if args.worker:
        return numpyro_worker(args.worker, args.num_steps)
    print(f"K = {NUM_CHAINS}, {args.num_steps} leapfrog steps, step size {STEP_SIZE}, "
          f"{args.rounds} rounds x {args.scans} scans; load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        data_path = os.path.join(tmp, "bnn.npz")
        kernels = make_kernels(args, data_path)
        worker, ready = start_worker(args, __file__, data_path, "--num-steps",
                                     str(args.num_steps))
        print(f"NumPyro jit {ready['jit_s']:.1f} s (jax {ready['jax']}, numpyro "
              f"{ready['numpyro']}), potential of chain 0 after one transition "
              f"{ready['potential']:.6g}")
        rows = {"NumPyro, 8 chains vectorized": []}
        for name in kernels:
            rows[f"ours, {name}: local moves"] = []
            rows[f"ours, {name}: whole scan"] = []
        ratios = {name: [] for name in rows}
        for _ in range(args.rounds):
            reply = ask(worker, args.scans)
            rows["NumPyro, 8 chains vectorized"].append(reply["ms"])
            for name, kernel in kernels.items():
                local, whole = time_scans(kernel, args.scans)
                rows[f"ours, {name}: local moves"].append(local)
                rows[f"ours, {name}: whole scan"].append(whole)
            for name in rows:
                ratios[name].append(rows[name][-1] / reply["ms"])
        worker.stdin.close()
        worker.wait()
    print(f"NumPyro mean acceptance {reply['accept']:.3f}; ours (cold rung) "
          f"{kernels['torchscript'].run.rungs.explorers[0].diagnostics()['acceptance rate']:.3f}")
    print(f"{'ms per transition of 8 chains, median of ' + str(args.rounds):44s} {'ms':>9s} "
          f"{'/ NumPyro':>10s}")
    for name in rows:
        print(f"{name:44s} {statistics.median(rows[name]):9.2f} "
              f"{statistics.median(ratios[name]):10.2f}")
    print(f"load average after: {os.getloadavg()}")
    if args.profile:
        for name, kernel in kernels.items():
            parts = profile(kernel, args.scans)
            print(f"profile, {name}: " + ", ".join(
                f"{k} {v:.1f}" + ("" if k.endswith(" per scan") else " ms")
                for k, v in parts.items()))


if __name__ == "__main__":
    main()
