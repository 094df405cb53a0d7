"""The captured potential against NumPyro on the seed BNN, side by side, one thread each.

The same network (``benchmarks/_bnn.py``: MLP 10 -> 64 -> 64 -> 1, ReLU, Normal(0, 1) priors on
all 4929 weights and biases, Gaussian likelihood sigma = 0.1), the same 500 data points and the
same latent point, in float32, timed in interleaved rounds:

- potential + gradient per call: NumPyro's ``jax.jit(jax.value_and_grad(potential_fn))``
  against our captured graph (``FunctionalSplit.evaluate``) and the tempered potential as the
  batched HMC explorer calls it (``batched_potential_and_grad`` of one replica), each run by
  TorchScript and by Inductor (``compile="torchscript"`` / ``"inductor"``);
- one HMC leapfrog step: NumPyro's ``velocity_verlet`` update, ``lax.fori_loop``-ed inside one
  jitted call (as NumPyro's HMC runs a trajectory), against our
  :func:`pyro_pt.explorers.hmc_dynamics.leapfrog` (what ``explorer="hmc"`` runs), per step.

NumPyro is a benchmark-only install with no torch: it runs in a subprocess under its own
interpreter (``--numpyro-python`` or ``$NUMPYRO_PYTHON``, default ``.venv-numpyro/bin/python``),
reading the data from a temporary ``.npz`` file and timing one round each time it is asked, so
both sides see the same load. XLA is single-threaded (``XLA_FLAGS``), torch has one thread.
Ratios are ours / NumPyro's per round; the median over rounds is printed.

Command: ``.venv/bin/python benchmarks/vs_numpyro.py [--rounds 7] [--cold-cache]``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
STEP_SIZE = 1e-4  # small enough that the leapfrog stays finite from the benchmark's point
LEAPFROGS = 10


def add_numpyro_arguments(parser):
    """``--numpyro-python`` and the hidden ``--worker DATA``, as every NumPyro benchmark has."""
    parser.add_argument("--numpyro-python", default=os.environ.get(
        "NUMPYRO_PYTHON", ".venv-numpyro/bin/python"),
        help="interpreter with jax, jaxlib and numpyro (default $NUMPYRO_PYTHON or "
             ".venv-numpyro/bin/python)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)


def start_worker(args, script, data_path, *options):
    """Start ``script``'s NumPyro side (``--worker data_path *options``) under
    ``args.numpyro_python``, single-threaded on the CPU; returns it and its first reply."""
    env = dict(os.environ, XLA_FLAGS=XLA_FLAGS, JAX_PLATFORMS="cpu")
    worker = subprocess.Popen([args.numpyro_python, os.path.abspath(script), "--worker",
                               data_path, *options], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    return worker, json.loads(worker.stdout.readline())


def ask(worker, line):
    """One request to a NumPyro side: a line in, one JSON reply out."""
    worker.stdin.write(f"{line}\n")
    worker.stdin.flush()
    return json.loads(worker.stdout.readline())


def numpyro_bnn(widths, noise, activation="relu"):
    """``_bnn.CountingModel`` written in NumPyro (sites ``w{i}``, ``b{i}``, ``y``), for the
    benchmarks' NumPyro side; ``activation`` names a ``jax.nn`` or ``jax.numpy`` function."""
    import jax
    import numpyro
    import numpyro.distributions as dist

    act = getattr(jax.nn, activation, None) or getattr(jax.numpy, activation)

    def model(x, y=None):
        h = x
        for i, (a, b) in enumerate(zip(widths, widths[1:])):
            w = numpyro.sample(f"w{i}", dist.Normal(0.0, 1.0).expand([a, b]).to_event(2))
            bias = numpyro.sample(f"b{i}", dist.Normal(0.0, 1.0).expand([b]).to_event(1))
            h = h @ w + bias
            if i < len(widths) - 2:
                h = act(h)
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Normal(h.squeeze(-1), noise), obs=y)

    return model


def numpyro_worker(data_path):
    """The NumPyro side (no torch): builds the model, then times one round per stdin line."""
    os.environ["XLA_FLAGS"] = XLA_FLAGS
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.hmc_util import IntegratorState, euclidean_kinetic_energy, velocity_verlet
    from numpyro.infer.util import initialize_model

    data = np.load(data_path)
    model = numpyro_bnn([int(w) for w in data["widths"]], float(data["noise"]))
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])
    info = initialize_model(jax.random.PRNGKey(0), model, model_args=(x, y))
    z = {name: jnp.asarray(data["z_" + name]) for name in info.param_info.z}
    flat, unravel = ravel_pytree(z)

    def potential(f):
        return info.potential_fn(unravel(f))

    value_and_grad = jax.jit(jax.value_and_grad(potential))
    _, update = velocity_verlet(potential, euclidean_kinetic_energy)
    inv_mass = jnp.ones_like(flat)

    @jax.jit
    def trajectory(state):
        return jax.lax.fori_loop(0, LEAPFROGS, lambda i, s: update(STEP_SIZE, inv_mass, s), state)

    u, g = value_and_grad(flat)
    start = IntegratorState(flat, jnp.asarray(data["momentum"]), u, g)
    begin = time.perf_counter()
    jax.block_until_ready(trajectory(start))
    print(json.dumps({"ready": True, "potential": float(u), "jit_s": time.perf_counter() - begin,
                      "jax": jax.__version__, "numpyro": numpyro.__version__}), flush=True)
    for line in sys.stdin:
        calls = int(line)
        for _ in range(3):
            jax.block_until_ready(value_and_grad(flat))
        begin = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(value_and_grad(flat))
        vg_ms = (time.perf_counter() - begin) / calls * 1e3
        jax.block_until_ready(trajectory(start))
        begin = time.perf_counter()
        for _ in range(max(1, calls // LEAPFROGS)):
            jax.block_until_ready(trajectory(start))
        leap_ms = (time.perf_counter() - begin) / (max(1, calls // LEAPFROGS) * LEAPFROGS) * 1e3
        print(json.dumps({"potential + gradient": vg_ms, "leapfrog": leap_ms}), flush=True)


def torch_side(args, data_path):
    """Our side: the data file for NumPyro, and ``{row: fn}`` to time (``fn(calls) -> ms``)."""
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import _bnn
    from pyro_pt.explorers.hmc_dynamics import leapfrog, leapfrog_rows
    from pyro_pt.potential import FunctionalSplit, ModelSplit

    x, y = _bnn.make_data()
    split = ModelSplit(_bnn.CountingModel(), (x, y))
    z = _bnn.initial_params()
    momentum = torch.randn(sum(v.numel() for v in z.values()),
                           generator=torch.Generator().manual_seed(2))
    sides, compile_s = {}, {}
    for compile in ("torchscript", "inductor"):
        begin = time.perf_counter()
        sides[compile] = FunctionalSplit(split, compile=compile, batched="loop")
        compile_s[compile] = time.perf_counter() - begin
        if sides[compile].compiled.engine_reason:
            print(f"{compile}: {sides[compile].compiled.engine_reason}")
    flat = sides["torchscript"].flatten(z)
    # NumPyro's flat layout is ravel_pytree's (sorted site names), ours is sorted latent
    # names too: the same momentum vector means the same trajectory.
    np.savez(data_path, x=x.numpy(), y=y.numpy(), widths=np.array(_bnn.WIDTHS),
             noise=np.array(_bnn.NOISE), momentum=momentum.numpy(),
             **{"z_" + k: v.numpy() for k, v in z.items()})

    def timer(fn, per=1):
        def run(calls):
            for _ in range(3):
                fn()
            begin = time.perf_counter()
            for _ in range(max(1, calls // per)):
                fn()
            return (time.perf_counter() - begin) / (max(1, calls // per) * per) * 1e3
        return run

    rows = {}
    one = torch.ones(1)
    for compile, fast in sides.items():
        name = f"{compile} ({fast.compiled.engine})"
        start = (flat[None], *fast.batched_potential_and_grad(flat[None], one)[:2])
        rows[f"graph, {name}"] = ("potential + gradient", timer(lambda f=fast: f.evaluate(flat)))
        rows[f"HMC potential, {name}"] = (
            "potential + gradient",
            timer(lambda f=fast: f.batched_potential_and_grad(flat[None], one)))

        def trajectory(f=fast, s=start):
            evaluate = lambda q: f.batched_potential_and_grad(q, one)  # noqa: E731
            return leapfrog(evaluate, (*s, torch.zeros(1)), momentum[None],
                            torch.full((1,), STEP_SIZE), torch.ones(1, flat.shape[0]), None,
                            LEAPFROGS)

        rows[f"HMC leapfrog, {name}"] = ("leapfrog", timer(trajectory, LEAPFROGS))
        step = fast.fused.step(flat.dtype, flat.device)
        if step is None:
            print(f"{name}: no fused leapfrog step ({fast.fused.reason})")
            continue

        def fused(f=fast, s=start, step=step):
            # What explorer="hmc" runs where replicas are evaluated one at a time: one
            # compiled call per step (position update, graph, tempering, momentum update).
            evaluate_row = lambda r, q: f.batched_potential_and_grad(q, one)  # noqa: E731
            return leapfrog_rows(step, evaluate_row, (*s, torch.zeros(1)), momentum[None],
                                 torch.full((1,), STEP_SIZE), torch.ones(1, flat.shape[0]),
                                 one, None, LEAPFROGS)

        rows[f"HMC leapfrog fused, {name}"] = ("leapfrog", timer(fused, LEAPFROGS))
    return rows, compile_s, float(sides["torchscript"].batched_potential_and_grad(flat[None], one)[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--cold-cache", action="store_true",
                        help="Inductor compiles into an empty cache (the cold compile time)")
    add_numpyro_arguments(parser)
    args = parser.parse_args(argv)
    if args.worker:
        return numpyro_worker(args.worker)
    with tempfile.TemporaryDirectory() as tmp:
        if args.cold_cache:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
        data_path = os.path.join(tmp, "bnn.npz")
        rows, compile_s, our_potential = torch_side(args, data_path)
        worker, ready = start_worker(args, __file__, data_path)
        print(f"set-up: TorchScript {compile_s['torchscript']:.1f} s, Inductor "
              f"{compile_s['inductor']:.1f} s ({'cold' if args.cold_cache else 'cache as found'}),"
              f" NumPyro jit {ready['jit_s']:.1f} s (jax {ready['jax']}, numpyro "
              f"{ready['numpyro']}); potential ours {our_potential:.6g}, NumPyro "
              f"{ready['potential']:.6g}")
        times = {name: [] for name in rows}
        numpyro_times = {"potential + gradient": [], "leapfrog": []}
        ratios = {name: [] for name in rows}
        for _ in range(args.rounds):
            numpyro = ask(worker, args.calls)
            for name, (kind, run) in rows.items():
                times[name].append(run(args.calls))
                ratios[name].append(times[name][-1] / numpyro[kind])
            for kind in numpyro_times:
                numpyro_times[kind].append(numpyro[kind])
        worker.stdin.close()
        worker.wait()
    print(f"{'ms per call, median of ' + str(args.rounds) + ' rounds':48s} {'ms':>8s} "
          f"{'/ NumPyro':>10s}")
    for kind, values in numpyro_times.items():
        print(f"{'NumPyro ' + kind:48s} {statistics.median(values):8.3f} {1.0:10.2f}")
    for name in rows:
        print(f"{name:48s} {statistics.median(times[name]):8.3f} "
              f"{statistics.median(ratios[name]):10.2f}")


if __name__ == "__main__":
    main()
