"""Exact global barriers Lambda of the two-component mixture of ``vs_tempering.py`` (mix2:
mu ~ N(0, 10^2 I_2), 60 points near -3 and 60 near 3) from several references q, on a grid.

The path from q to the posterior is ``pi_beta ~ q^(1 - beta) pi^beta`` and its barrier is
``Lambda = int_0^1 lambda(beta) d beta`` with ``lambda(beta) = E|V - V'| / 2`` for ``V = log pi -
log q`` at two independent draws of ``pi_beta`` (Syed et al. 2022), here computed from the
grid's weights (the sorted ``V``'s cumulative distribution F: ``sum F (1 - F) dV``). Printed:
Lambda from the prior, from the moment-matched Gaussian and from mixtures of the posterior's
two modes (each mode's own moments), with their covariances widened and their weights skewed,
the figures ``pyro_pt/reference/mixture.py`` quotes. About 5 minutes on one core.

    PYTHONPATH=$PWD python benchmarks/reference_barrier.py [--points 2400]
"""

import argparse
import math

import numpy as np
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=2400, help="grid points per axis")
    opts = parser.parse_args()
    g = torch.Generator().manual_seed(1)
    y = torch.cat([c + torch.randn(60, generator=g) for c in (-3.0, 3.0)]).numpy()
    x = np.linspace(-24.0, 24.0, opts.points)
    a, b = np.meshgrid(x, x, indexing="ij")
    ll = np.zeros_like(a)
    for yi in y:  # each point: 0.5 N(yi; a, 1) + 0.5 N(yi; b, 1)
        ll += np.logaddexp(-0.5 * (yi - a) ** 2, -0.5 * (yi - b) ** 2) + math.log(0.5) \
            - 0.5 * math.log(2 * math.pi)
    lp = -0.5 * (a ** 2 + b ** 2) / 100.0 - math.log(2 * math.pi * 100.0)
    post = lp + ll
    w = np.exp(post - post.max())
    w /= w.sum()

    def moments(mask):
        p = w * mask / (w * mask).sum()
        m = np.array([(p * a).sum(), (p * b).sum()])
        da, db = a - m[0], b - m[1]
        return m, np.array([[(p * da * da).sum(), (p * da * db).sum()],
                            [(p * da * db).sum(), (p * db * db).sum()]])

    def gaussian(m, c):
        inv = np.linalg.inv(c)
        da, db = a - m[0], b - m[1]
        return (-0.5 * (inv[0, 0] * da * da + 2 * inv[0, 1] * da * db + inv[1, 1] * db * db)
                - 0.5 * math.log(np.linalg.det(c)) - math.log(2 * math.pi))

    first, second = moments(a < b), moments(a >= b)

    def mixture(weight, widen=1.0):
        return np.logaddexp(math.log(weight) + gaussian(first[0], widen * first[1]),
                            math.log(1 - weight) + gaussian(second[0], widen * second[1]))

    def barrier(log_q, v, betas=np.linspace(0.0, 1.0, 201)):
        order = np.argsort(v, axis=None)
        sorted_v = v.ravel()[order]
        lam = []
        for beta in betas:
            lw = log_q + beta * v
            p = np.exp(lw - lw.max()).ravel()[order]
            f = np.cumsum(p / p.sum())
            lam.append(np.sum(f[:-1] * (1 - f[:-1]) * np.diff(sorted_v)))
        return float(np.trapezoid(lam, betas))

    print(f"grid {opts.points}^2 on [-24, 24]^2; each mode's sd "
          f"{np.sqrt(np.diag(first[1])).round(3).tolist()}")
    print(f"| q | Lambda |\n|---|---|\n| the prior | {barrier(lp, ll):.2f} |")
    rows = [("moment-matched Gaussian", gaussian(*moments(np.ones_like(a)))),
            ("mixture of the two modes", mixture(0.5)),
            ("the same, covariances x2", mixture(0.5, 2.0)),
            ("the same, covariances x4", mixture(0.5, 4.0)),
            ("weights 0.7 / 0.3", mixture(0.7)), ("weights 0.9 / 0.1", mixture(0.9))]
    for name, log_q in rows:
        print(f"| {name} | {barrier(log_q, post - log_q):.4g} |", flush=True)


if __name__ == "__main__":
    main()
