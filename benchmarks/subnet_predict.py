"""
Linearized predictive of a subnetwork Laplace posterior: time and memory against the number of inputs.

The 784 -> 512 -> 512 -> 10 ReLU MLP of ``subnet_curvature.py`` (669,706 weights, Categorical
likelihood, Normal(0, 1) priors), fitted on its 256 synthetic training points with S random
subnetwork coordinates, then ``posterior.predict(x_test)`` on n synthetic test inputs, every n
in one subprocess after a warm-up call: the smallest n, the largest, the smallest again. Peak
memory is the resident high-water mark ``VmHWM`` reset just before each ``predict`` (the "+"
figure is its growth over the resident size then). The ratio of the time at the largest n to
the mean time at the smallest is printed next to the ratio of the n (linear cost: the two
agree). On a shared machine the wall time waits on other jobs, so the CPU time of the process
(one torch thread) is printed beside it.

    python benchmarks/subnet_predict.py                          # n = 1000 and 10000, S = 2000
    python benchmarks/subnet_predict.py --unsplit 250 500        # also one unsplit call (the old O(n^2) path)
    python benchmarks/subnet_predict.py --chunks 8 32 128 --sizes 1000   # chunk sizes side by side

Nothing here asserts a time.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]  # this checkout's pyro_subnet, then subnet_curvature
from subnet_curvature import WIDTHS, network, pyro_model, reset_peak, rss_mib, run_subprocess  # noqa: E402


def worker(sizes, S, chunk, seed, out):
    """Fits once, then times predict on each n of ``sizes`` in turn, in this one process."""
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
    from pyro_subnet import SubnetworkLaplace

    net, x, y = network(seed)
    D = sum(p.numel() for p in net.parameters())
    idx = torch.randperm(D, generator=torch.Generator().manual_seed(seed + 2))[:S].sort().values
    guide = SubnetworkLaplace(pyro_model, selection=idx)
    guide(x, y)
    with torch.no_grad():
        guide.loc.copy_(torch.nn.utils.parameters_to_vector(net.parameters()))
    post = guide.laplace_approximation(x, y)
    x_test = torch.randn(max(sizes), WIDTHS[0], generator=torch.Generator().manual_seed(seed + 3))
    post.predict(x_test[:100], chunk_size=chunk)  # warm-up: the first call's one-off costs (~1 s) are not per input
    results = []
    for n in sizes:
        base = rss_mib("VmRSS")
        reset_peak()
        t, c = time.perf_counter(), time.process_time()
        probs = post.predict(x_test[:n], chunk_size=chunk)["obs"].probs
        seconds, cpu = time.perf_counter() - t, time.process_time() - c
        results.append({"n": n, "seconds": seconds, "cpu": cpu, "peak_mib": rss_mib("VmHWM"), "base_mib": base})
    torch.save(probs[:100].clone(), out + ".pt")
    with open(out, "w") as f:
        json.dump({"runs": results}, f)


def run(sizes, S, chunk, seed, timeout):
    out = tempfile.mktemp(prefix="subnet_predict_")
    cmd = [sys.executable, __file__, "--worker", *map(str, sizes), "--S", str(S), "--seed", str(seed), "--out", out]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    return run_subprocess(cmd, out, timeout, "probs")


def line(label, res):
    return (f"{label}: {res['seconds']:.2f} s ({res['cpu']:.2f} s CPU), peak RSS {res['peak_mib']:.0f} MiB "
            f"(+{max(0.0, res['peak_mib'] - res['base_mib']):.0f} MiB over the resident size before it)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="numbers of test inputs")
    p.add_argument("--S", type=int, default=2000, help="subnetwork size")
    p.add_argument("--chunks", type=int, nargs="+", default=[None],
                   help="inputs per chunk of predict (default: pyro_subnet's)")
    p.add_argument("--unsplit", type=int, nargs="*", default=[],
                   help="also predict these n as one unsplit call (chunk_size = n: the quadratic path)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads in every run")
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--worker", type=int, nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--chunk", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    os.environ["BENCH_THREADS"] = str(a.threads)
    torch.set_num_threads(a.threads)
    if a.worker:
        return worker(a.worker, a.S, a.chunk, a.seed, a.out)

    from pyro_subnet.predictive import CHUNK_SIZE

    D = sum(w.numel() for w in network(a.seed)[0].parameters())
    print(f"MLP {'-'.join(map(str, WIDTHS))} (D={D}), S={a.S}, Categorical (probit predictive), "
          f"{a.threads} torch thread(s)")
    for chunk in a.chunks:
        # one process, smallest n again after the largest: a neighbour's load shows as a change
        order = sorted(a.sizes) + ([min(a.sizes)] if len(a.sizes) > 1 else [])
        res, err = run(order, a.S, chunk, a.seed, a.timeout)
        if err:
            print(f"chunk_size={chunk or CHUNK_SIZE}: failed: {err}")
            continue
        for r in res["runs"]:
            print(line(f"n={r['n']:>6}, chunk_size={chunk or CHUNK_SIZE}", r), flush=True)
        if len(a.sizes) > 1:
            lo = [r for r in res["runs"] if r["n"] == min(a.sizes)]
            hi = next(r for r in res["runs"] if r["n"] == max(a.sizes))
            wall, cpu = (sum(r[k] for r in lo) / len(lo) for k in ("seconds", "cpu"))
            print(f"  time ratio n={hi['n']} / n={lo[0]['n']} (mean of its two runs): {hi['seconds'] / wall:.2f} wall, "
                  f"{hi['cpu'] / cpu:.2f} CPU (inputs ratio {hi['n'] / lo[0]['n']:.0f})")
    for n in a.unsplit:
        res, err = run([n], a.S, n, a.seed, a.timeout)
        label = f"n={n:>6}, one unsplit call"
        print(f"{label}: failed: {err}" if err else line(label, res["runs"][0]), flush=True)
        if res:
            ref, err = run([n], a.S, None, a.seed, a.timeout)
            if ref:
                ref, res = dict(ref["runs"][0], probs=ref["probs"]), dict(res["runs"][0], probs=res["probs"])
                diff = float((ref["probs"] - res["probs"]).abs().max())
                print(f"  chunked {ref['seconds']:.2f} s: unsplit / chunked time {res['seconds'] / ref['seconds']:.1f}; "
                      f"max |p difference| {diff:.1e} (float32)")


if __name__ == "__main__":
    main()
