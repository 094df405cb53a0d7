"""The native float32 matrix product (pyro_pt.potential.matmul) against ATen's, side by side.

The products of the seed BNN's potential and gradient (benchmarks/_bnn.py: 500 points,
10 -> 64 -> 64 -> 1), in the layouts the captured graph hands them over (a transposed
operand is a strided view), and the vmapped batch of 8 replicas; one thread, best of
``--rounds`` blocks of ``--calls`` calls, the two alternated per block. Prints microseconds
per product and ours / ATen.

Command: ``.venv/bin/python benchmarks/matmul.py [--rounds 5] [--calls 2000]``.
"""

import argparse
import platform
import time

import torch

from pyro_pt.potential import matmul

# (label, A's shape, A transposed, B's shape, B transposed, batch)
CASES = [
    ("forward, layer 1: 500 x 10 @ 10 x 64", (500, 10), False, (10, 64), False, 0),
    ("forward, layer 2: 500 x 64 @ 64 x 64", (500, 64), False, (64, 64), False, 0),
    ("gradient of W2: (500 x 64)^T @ 500 x 64", (64, 500), True, (500, 64), False, 0),
    ("back through W2: 500 x 64 @ (64 x 64)^T", (500, 64), False, (64, 64), True, 0),
    ("gradient of W1: (500 x 10)^T @ 500 x 64", (10, 500), True, (500, 64), False, 0),
    ("8 replicas, layer 2: 8 x 500 x 64 @ 8 x 64 x 64", (500, 64), False, (64, 64), False, 8),
]


def operand(shape, transposed, batch, generator):
    if transposed:
        shape = shape[::-1]
    t = torch.randn(((batch,) if batch else ()) + shape, generator=generator)
    return t.transpose(-1, -2) if transposed else t


def best(fn, rounds, calls):
    times = []
    for _ in range(rounds):
        fn()
        begin = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - begin) / calls * 1e6)
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    native, reason = matmul.choice()
    ops = matmul.operator()
    print(f"{platform.processor() or platform.machine()}, ATen capability "
          f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}; the machine rule "
          f"{'picks the native product' if native else 'keeps ATen: ' + reason}")
    if ops is None:
        print("the native product could not be built here")
        return
    generator = torch.Generator().manual_seed(0)
    print(f"{'us per product, best of ' + str(args.rounds):<52} {'ATen':>8} {'native':>8} "
          f"{'/ ATen':>7}")
    for label, a_shape, a_t, b_shape, b_t, batch in CASES:
        a = operand(a_shape, a_t, batch, generator)
        b = operand(b_shape, b_t, batch, generator)
        aten, ours = (torch.bmm, ops.native_bmm) if batch else (torch.mm, ops.native_mm)
        error = float((ours(a, b).double() - aten(a.double(), b.double())).abs().max()
                      / aten(a.double(), b.double()).abs().max())
        times = {"aten": [], "ours": []}
        for _ in range(args.rounds):  # alternated, so both see the same load
            times["aten"].append(best(lambda: aten(a, b), 1, args.calls))
            times["ours"].append(best(lambda: ours(a, b), 1, args.calls))
        t_aten, t_ours = min(times["aten"]), min(times["ours"])
        per = max(batch, 1)
        print(f"{label:<52} {t_aten / per:8.1f} {t_ours / per:8.1f} {t_ours / t_aten:7.2f}"
              f"   (relative error {error:.1e})")


if __name__ == "__main__":
    main()
