"""
Which ranking of the coordinates tracks the linearized predictive? A dense float64 comparison
on the toy of examples/subnet_regression.py (1-50-50-1 ReLU, weights with prior precision 3,
biases at the MAP, noise by maximum likelihood), independent of pyro_subnet: plain torch MAP,
torch.func Jacobians, exact subnetwork posteriors. For each rule and size (1 %, 3 %, 50 %),
mean over 3 seeds of the predictive std between / outside the clusters and the log-likelihood
per held-out point. Scores (E = GGN diagonal on the training data, the Jacobian energy;
coordinates with E = 0 get -inf in every rule but the Wasserstein ones):

    wass_exact / wass_diag   exact / diagonal-Laplace marginal variance (the paper's rule)
    ggn                      E, i.e. diagonal-Laplace variance x E (= E / (E + prior))
    exvar_x_ggn              exact variance x E
    dl_x_probe, ex_x_probe   variance x Jacobian energy on probe inputs (mixup of training
                             inputs, t in [-0.5, 1.5]: between and a little beyond them)
    dl_seen, ex_seen         the Wasserstein rules restricted to E > 0
    random                   mean of 3 draws

    python benchmarks/subnet_selection.py [subnet|one]   # prior_scale S/D (paper) or 1; ~1 min
"""
import math
import sys
import time

import torch

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
from torch.func import jacrev

LAM = 3.0
H = 50

def toy(seed, n=100):
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.rand(n // 2, generator=g) * 1.0 - 2.0, torch.rand(n - n // 2, generator=g) * 1.0 + 1.0])
    y = torch.cos(2 * x) + 0.1 * torch.randn(n, generator=g)
    return x[:, None], y[:, None]

def split(w):
    W0 = w[:H].reshape(H, 1); W1 = w[H:H + H * H].reshape(H, H); W2 = w[H + H * H:].reshape(1, H)
    return W0, W1, W2

def f(w, b, x):
    W0, W1, W2 = split(w)
    h = torch.relu(x @ W0.T + b[:H]); h = torch.relu(h @ W1.T + b[H:2 * H]); return (h @ W2.T + b[2 * H:])[:, 0]

def fit(seed, x, y, steps=3000):
    g = torch.Generator().manual_seed(100 + seed)
    D = H + H * H + H
    w = (torch.randn(D, generator=g) / math.sqrt(LAM)).requires_grad_()
    b = (torch.randn(2 * H + 1, generator=g) / math.sqrt(LAM)).requires_grad_()
    ls = torch.tensor(0.0).requires_grad_()
    opt = torch.optim.Adam([w, b, ls], lr=1e-2)
    for t in range(steps):
        opt.zero_grad()
        r = y[:, 0] - f(w, b, x)
        nll = 0.5 * (r / ls.exp()).pow(2).sum() + len(r) * ls
        loss = nll + 0.5 * LAM * (w.pow(2).sum() + b.pow(2).sum())
        loss.backward(); opt.step()
    return w.detach(), b.detach(), float(ls.detach().exp())

def J(w, b, x):
    return jacrev(lambda w: f(w, b, x))(w)

def metrics(idx, w, b, sig, Jtr, c, tests):
    """Posterior over w[idx] with prior precision c*LAM; returns predictive std/ll per test set."""
    G = Jtr[:, idx].T @ Jtr[:, idx] / sig**2
    P = G + c * LAM * torch.eye(len(idx))
    L = torch.linalg.cholesky(P)
    out = {}
    for k, (xt, yt, Jt) in tests.items():
        B = torch.linalg.solve_triangular(L, Jt[:, idx].T, upper=False)
        var = B.pow(2).sum(0) + sig**2
        mu = f(w, b, xt)
        ll = torch.distributions.Normal(mu, var.sqrt()).log_prob(yt[:, 0]).mean()
        out[k] = (float(var.sqrt().mean()), float(ll))
    return out

def diag_metrics(var_diag, w, b, sig, tests):
    out = {}
    for k, (xt, yt, Jt) in tests.items():
        var = (Jt.pow(2) * var_diag).sum(1) + sig**2
        mu = f(w, b, xt)
        out[k] = (float(var.sqrt().mean()), float(torch.distributions.Normal(mu, var.sqrt()).log_prob(yt[:, 0]).mean()))
    return out

def main(seeds=(0, 1, 2), fracs=(0.01, 0.03, 0.5), prior_mode="subnet"):
    rows = {}
    for seed in seeds:
        t0 = time.time()
        x, y = toy(seed)
        w, b, sig = fit(seed, x, y)
        D = w.numel()
        Jtr = J(w, b, x)
        G = Jtr.T @ Jtr / sig**2
        Gd = G.diagonal()
        Sigma = torch.linalg.inv(G + LAM * torch.eye(D))
        ex = Sigma.diagonal()
        dl = 1 / (Gd + LAM)
        gt = torch.Generator().manual_seed(1000 + seed)
        xg = torch.linspace(-0.8, 0.8, 40)[:, None]
        xo = torch.cat([torch.linspace(-3.5, -2.2, 20), torch.linspace(2.2, 3.5, 20)])[:, None]
        xi = torch.cat([torch.rand(50, generator=gt) - 2, torch.rand(50, generator=gt) + 1])[:, None]
        def tst(xt):
            return (xt, torch.cos(2 * xt) + 0.1 * torch.randn(xt.shape, generator=gt), J(w, b, xt))
        tests = {"gap": tst(xg), "out": tst(xo), "in": tst(xi)}
        # probes: mixup of training inputs with t in [-0.5, 1.5]
        gp = torch.Generator().manual_seed(7)
        i = torch.randint(0, len(x), (200,), generator=gp); j = torch.randint(0, len(x), (200,), generator=gp)
        t = torch.rand(200, 1, generator=gp) * 2 - 0.5
        xp = t * x[i] + (1 - t) * x[j]
        Jp = J(w, b, xp)
        Ep = Jp.pow(2).sum(0) / sig**2
        seen = Gd > 1e-12 * Gd.max()
        dead = int((~seen).sum())
        rows.setdefault("MAP", []).append({k: (sig, float(torch.distributions.Normal(f(w, b, v[0]), sig).log_prob(v[1][:, 0]).mean())) for k, v in tests.items()})
        rows.setdefault("full", []).append(metrics(torch.arange(D), w, b, sig, Jtr, 1.0, tests))
        rows.setdefault("diag", []).append(diag_metrics(dl, w, b, sig, tests))
        neg = torch.tensor(-float("inf"))
        scores = {
            "wass_exact": ex,
            "wass_diag": dl,
            "ggn": torch.where(seen, Gd, neg),
            "exvar_x_ggn": torch.where(seen, ex * Gd, neg),
            "dl_x_probe": torch.where(seen, dl * Ep, neg),
            "ex_x_probe": torch.where(seen, ex * Ep, neg),
            "dl_seen": torch.where(seen, dl, neg),
            "ex_seen": torch.where(seen, ex, neg),
        }
        for frac in fracs:
            S = max(1, round(frac * D))
            c = S / D if prior_mode == "subnet" else 1.0
            for name, s in scores.items():
                idx = torch.topk(s, S).indices.sort().values
                rows.setdefault(f"{name} {frac:.0%}", []).append(metrics(idx, w, b, sig, Jtr, c, tests))
            gr = torch.Generator().manual_seed(seed)
            rs = []
            for r in range(3):
                idx = torch.randperm(D, generator=gr)[:S].sort().values
                rs.append(metrics(idx, w, b, sig, Jtr, c, tests))
            rows.setdefault(f"random {frac:.0%}", []).append({k: tuple(sum(m[k][q] for m in rs) / 3 for q in (0, 1)) for k in tests})
        print(f"seed {seed}: sigma={sig:.3f} dead={dead}/{D} {time.time()-t0:.1f}s", flush=True)
    print(f"{'method':<18}{'gap std':>9}{'out std':>9}{'gap ll':>9}{'in ll':>9}{'out ll':>9}")
    for name, rs in rows.items():
        m = lambda k, q: sum(r[k][q] for r in rs) / len(rs)
        print(f"{name:<18}{m('gap',0):9.3f}{m('out',0):9.3f}{m('gap',1):9.2f}{m('in',1):9.3f}{m('out',1):9.2f}")

if __name__ == "__main__":
    main(prior_mode=sys.argv[1] if len(sys.argv) > 1 else "subnet")
