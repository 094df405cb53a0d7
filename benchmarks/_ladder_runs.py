"""One ParallelTempering run of ladder.py and the statistics of its record: the barrier from the
spread of ll, autocorrelation times, and rough intervals for round-trip counts and their ratio."""

import math
import time

import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering


def local_barrier_from_ll(ll):
    """lambda = E|X - X'| / 2 over pairs of distinct draws, from the sorted draws (O(n log n))."""
    x, _ = torch.sort(ll.double())
    n = x.numel()
    if n < 2:
        return math.nan
    weights = 2.0 * torch.arange(1, n + 1, dtype=torch.float64) - n - 1
    return float((weights * x).sum() / (n * (n - 1)))


def ll_barrier(betas, record):
    """Trapezoid integral of the local barrier over beta, from each rung's recorded ll."""
    lam = [local_barrier_from_ll(record[:, k]) for k in range(record.shape[1])]
    pairs = zip(betas, betas[1:], lam, lam[1:])
    return sum(0.5 * (b0 - b1) * (l0 + l1) for b0, b1, l0, l1 in pairs)


def autocorrelation_time(x, c=5.0):
    """Integrated autocorrelation time of a series, with Sokal's adaptive window (M >= c tau)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    x = x - x.mean()
    n = x.numel()
    if n < 4 or float(x.var()) == 0.0:
        return math.nan
    spectrum = torch.fft.rfft(x, 2 * n)
    acf = torch.fft.irfft(spectrum * spectrum.conj(), 2 * n)[:n]
    acf = acf / acf[0]
    tau = 2.0 * torch.cumsum(acf, 0) - 1.0
    window = torch.arange(n, dtype=torch.float64) >= c * tau
    m = int(torch.argmax(window.int())) if bool(window.any()) else n - 1
    return float(tau[m])


def poisson_interval(count, z=1.96):
    """Approximate 95% interval of a Poisson mean from one count (Wilson-Hilferty)."""
    def bound(n, sign):
        return n * (1.0 - 1.0 / (9.0 * n) + sign * z / (3.0 * math.sqrt(n))) ** 3

    return (0.0 if count == 0 else bound(count, -1.0), bound(count + 1, 1.0))


def rate_ratio_interval(a, b, z=1.96):
    """
    Approximate 95% interval of the ratio of two Poisson rates with equal exposure: given
    a + b events, a is binomial with p = R / (1 + R); Wilson's interval for p, mapped to R.
    """
    n = a + b
    if n == 0:
        return (0.0, math.inf)
    p = a / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = centre - half, centre + half
    return (lo / (1 - lo), hi / (1 - hi) if hi < 1 else math.inf)


def run_ladder(model, data, init, args, seed, adapt, explorer, kwargs):
    pyro.set_rng_seed(seed)
    kernel = ParallelTempering(model, num_replicas=args.replicas,
                               max_temperature=args.max_temperature, explorer=explorer,
                               explorer_kwargs=kwargs,
                               swap_interval=args.swap_interval, adapt_temperatures=adapt)
    mcmc = MCMC(kernel, num_samples=args.scans, warmup_steps=args.warmup, initial_params=init,
                disable_progbar=True)
    start = time.perf_counter()
    mcmc.run(*data)
    seconds = time.perf_counter() - start
    d = kernel.diagnostics()
    acc = d["swap_acceptance"]
    # Swap rounds of the sampling phase: scans t in (warmup, warmup + scans], t % interval == 0.
    swap_rounds = ((args.warmup + args.scans) // args.swap_interval
                   - args.warmup // args.swap_interval)
    record = d["tempering_record"]["log_likelihood"]
    return {
        "seconds": seconds,
        "acceptance": acc,
        "min_over_mean": min(acc) / (sum(acc) / len(acc)),
        "round_trips": d["round_trips"],
        "per_1000": 1000.0 * d["round_trips"] / args.scans,
        "swap_rounds": swap_rounds,
        "observed": d["round_trip_rate"],
        "theory": d["theoretical_round_trip_rate"],
        "barrier": d["barrier"],
        "ll_barrier": ll_barrier(kernel.betas, record),
        "recommended": d["recommended_replicas"],
        "temperatures": d["temperatures"],
        "local_acceptance": d["local_acceptance"],
        # Per rung (whichever state sits there): how many scans ll takes to decorrelate.
        "ll_tau": [autocorrelation_time(record[:, k]) for k in range(record.shape[1])],
        "history": list(getattr(kernel, "adaptation_history", [])),
        # Which explorer and potential path actually ran (batched HMC, captured graph, ...).
        "explorer_info": dict(getattr(kernel, "explorer_info", None) or {}),
    }
