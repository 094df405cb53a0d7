"""
Subnetwork GGN: pyro_subnet against laplace-torch's SubnetLaplace, side by side in one run.

A 784 -> 512 -> 512 -> 10 ReLU MLP (669,706 weights), 256 synthetic inputs with random labels,
a Categorical likelihood, Normal(0, 1) priors (prior precision 1). Both sides get the same
weights and the same S subnetwork indices; each fit runs in its own subprocess so that its peak
resident memory (VmHWM, reset before the fit) is its own.

    python benchmarks/subnet_curvature.py                 # S = 2000 vs laplace-torch, then S = 10000
    python benchmarks/subnet_curvature.py --sizes 2000    # only the comparison

laplace-torch is a benchmark-only install (never torchvision, never a second torch):

    .venv/bin/pip install --no-deps laplace-torch backpack-for-pytorch curvlinops-for-pytorch
    .venv/bin/pip install asdfghjkl==0.1a4 einops unfoldNd einconv linear_operator torchmetrics opt-einsum

Without it the comparison is skipped with a message and only pyro_subnet is timed. Nothing here
asserts a time; the ratios are printed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

WIDTHS = (784, 512, 512, 10)
NUM_DATA = 256


def network(seed=0):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(WIDTHS) - 2:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(NUM_DATA, WIDTHS[0], generator=g)
    y = torch.randint(0, WIDTHS[-1], (NUM_DATA,), generator=g)
    return net, x, y


def pyro_model(x, y=None):
    """The same MLP as a Pyro model; its flat latent vector is parameters_to_vector(net)."""
    import pyro
    import pyro.distributions as dist

    h = x
    for i, (a, b) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        W = pyro.sample(f"W{i}", dist.Normal(0.0, 1.0).expand([b, a]).to_event(2))
        c = pyro.sample(f"b{i}", dist.Normal(0.0, 1.0).expand([b]).to_event(1))
        h = h @ W.T + c
        if i < len(WIDTHS) - 2:
            h = torch.relu(h)
    with pyro.plate("data", x.shape[0]):
        pyro.sample("obs", dist.Categorical(logits=h), obs=y)


def rss_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def worker(kind, S, out, seed, chunk):
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    net, x, y = network(seed)
    idx = torch.randperm(sum(p.numel() for p in net.parameters()), generator=torch.Generator().manual_seed(seed + 2))[:S]
    idx = idx.sort().values
    flat = torch.nn.utils.parameters_to_vector(net.parameters()).detach()
    if kind == "pyro_subnet":
        from pyro_subnet import SubnetworkLaplace

        guide = SubnetworkLaplace(pyro_model, selection=idx, chunk_size=chunk)
        guide(x, y)
        with torch.no_grad():
            guide.loc.copy_(flat)
        base = rss_mib("VmRSS")
        reset_peak()
        t = time.perf_counter()
        post = guide.laplace_approximation(x, y)
        seconds = time.perf_counter() - t
        peak = rss_mib("VmHWM")
        ggn = post.precision - torch.eye(S)
    else:
        from laplace.subnetlaplace import FullSubnetLaplace
        from laplace.curvature import AsdlGGN, BackPackGGN, CurvlinopsGGN

        backend = {"backpack": BackPackGGN, "asdl": AsdlGGN, "curvlinops": CurvlinopsGGN}[kind]
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=chunk)
        la = FullSubnetLaplace(net, "classification", subnetwork_indices=idx, prior_precision=1.0, backend=backend)
        base = rss_mib("VmRSS")
        reset_peak()
        t = time.perf_counter()
        la.fit(loader, progress_bar=False) if "progress_bar" in la.fit.__code__.co_varnames else la.fit(loader)
        seconds = time.perf_counter() - t
        peak = rss_mib("VmHWM")
        ggn = la.H
    torch.save(ggn.detach(), out + ".pt")
    with open(out, "w") as f:
        json.dump({"seconds": seconds, "peak_mib": peak, "base_mib": base}, f)


def run_subprocess(cmd, out, timeout, tensor_key):
    """
    Runs ``cmd`` (a worker that writes a JSON file ``out`` and a tensor ``out + ".pt"``) with this
    checkout first on the path; returns ``(results with the tensor under tensor_key, None)`` or
    ``(None, error)``.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                        os.environ.get("PYTHONPATH", "")]))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["failed"])[-1]
    with open(out) as f:
        res = json.load(f)
    res[tensor_key] = torch.load(out + ".pt")
    os.remove(out)
    os.remove(out + ".pt")
    return res, None


def run_worker(kind, S, seed, chunk, timeout):
    out = tempfile.mktemp(prefix=f"subnet_{kind}_")
    cmd = [sys.executable, __file__, "--worker", kind, "--sizes", str(S), "--seed", str(seed), "--out", out,
           "--chunk", str(chunk)]
    return run_subprocess(cmd, out, timeout, "ggn")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000])
    p.add_argument("--backends", nargs="+", default=["backpack", "asdl", "curvlinops"])
    p.add_argument("--chunk", type=int, default=4, help="pyro_subnet chunk_size (data points per pass)")
    p.add_argument("--loader-batch", type=int, default=32, help="laplace-torch DataLoader batch size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads in every fit (default: torch's)")
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.threads:
        os.environ["BENCH_THREADS"] = str(a.threads)
        torch.set_num_threads(a.threads)
    if a.worker:
        return worker(a.worker, a.sizes[0], a.out, a.seed, a.chunk)

    try:
        import laplace  # noqa: F401

        have_laplace = True
    except ImportError:
        have_laplace = False
        print("laplace-torch is not installed: skipping the comparison (see this file's docstring)")
    D = sum(w.numel() for w in network(a.seed)[0].parameters())
    print(f"MLP {'-'.join(map(str, WIDTHS))} (D={D}), {NUM_DATA} inputs, Categorical likelihood, "
          f"{torch.get_num_threads()} threads")
    for i, S in enumerate(a.sizes):
        ours, err = run_worker("pyro_subnet", S, a.seed, a.chunk, a.timeout)
        if err:
            print(f"S={S}: pyro_subnet failed: {err}")
            continue
        print(f"S={S}: pyro_subnet fit {ours['seconds']:.2f} s, peak RSS {ours['peak_mib']:.0f} MiB "
              f"(+{ours['peak_mib'] - ours['base_mib']:.0f} MiB over the set-up model)")
        if not have_laplace or i > 0:
            continue
        ref = ours["ggn"]
        for kind in a.backends:
            res, err = run_worker(kind, S, a.seed, a.loader_batch, a.timeout)
            if err:
                print(f"  laplace-torch {kind}: failed: {err}")
                continue
            rel = float((res["ggn"] - ref).norm() / res["ggn"].norm())
            print(f"  laplace-torch {kind:<10} fit {res['seconds']:.2f} s, peak RSS {res['peak_mib']:.0f} MiB "
                  f"(+{res['peak_mib'] - res['base_mib']:.0f}); GGN relative difference {rel:.1e}; "
                  f"time ratio ours/theirs {ours['seconds'] / res['seconds']:.2f}")


if __name__ == "__main__":
    main()
