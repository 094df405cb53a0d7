r"""
The communication barrier, from the swaps' rejection rates and from each rung's own ll draws.

A pair's rejection rate :math:`r_i \le 1` tracks its barrier only while it is small (Syed et
al. 2021, Thm. 2), so a pair that never swaps looks no harder than one that rejects half of its
swaps. :math:`\lambda(\beta) = \tfrac12\, \mathbb E\, |\ell(X) - \ell(X')|` (Sec. 3) needs
no swap: estimated per rung (:func:`local_barrier`) and integrated between rungs
(:func:`integrated_barrier`); docs/design.md, "The barrier".

Pure: torch, and :mod:`pyro.ops.stats` for the effective sample size (imported when first
needed: importing any ``pyro`` module runs ``pyro/__init__``, which loads the inference code).

**References**

[1] S. Syed, A. Bouchard-Côté, G. Deligiannidis, A. Doucet, "Non-reversible parallel tempering:
    a scalable highly parallel MCMC scheme", JRSS B 2021.
"""

import math

import torch

# Above this rejection rate a pair's rate no longer tracks its barrier (it saturates at 1).
SATURATED = 0.5


def autocorrelation_time(values):
    """Integrated autocorrelation time ``n / ESS`` of one chain (1 for fewer than 4 draws):
    the effective sample size of :func:`pyro.ops.stats.effective_sample_size` for one chain
    (Geyer's initial monotone sequence over the autocovariance of
    :func:`pyro.ops.stats.autocovariance`), its running minimum taken by :func:`torch.cummin`:
    Pyro's own builds an ``n x n`` matrix for it, which took 1.9 s (and ``8 n^2`` bytes) of
    the review of a run with 4000 draws per rung."""
    x = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    n = x.numel()
    if n < 4 or not torch.isfinite(x).all() or float(x.std()) == 0.0:
        return 1.0
    from pyro.ops.stats import autocovariance

    rho = autocovariance(x, dim=0) / ((n - 1) / n * x.var())  # one chain: Pyro's rho_k
    rho[0] = 1.0
    pairs = rho[: n - n % 2].reshape(-1, 2).sum(-1)  # Geyer's initial positive sequence
    tau = -1 + 2 * pairs[0]
    if pairs.numel() > 1:
        tau = tau + 2 * torch.cummin(pairs[1:].clamp(min=0), 0).values.sum()
    ess = float(n / tau)
    return max(1.0, n / ess) if math.isfinite(ess) and ess > 0 else float(n)


def local_barrier(log_likelihoods):
    r"""
    :math:`\hat\lambda(\beta) = \tfrac12\,\overline{|\ell_s - \ell_t|}` over the pairs of draws
    ``(s, t)`` of one rung's chain (``(num_draws,)``, in draw order) at least
    :math:`\lceil\tau\rceil` apart, :math:`\tau` its integrated autocorrelation time (closer
    pairs are not independent and would bias it down). :math:`O(n \log n + n\tau)`: the sum over
    all pairs from the sorted draws, minus the pairs closer than :math:`\tau`. NaN with fewer
    than two draws or a non-finite one.
    """
    x = torch.as_tensor(log_likelihoods, dtype=torch.float64).reshape(-1)
    n = x.numel()
    if n < 2 or not torch.isfinite(x).all():
        return math.nan
    lag = min(math.ceil(autocorrelation_time(x)), n // 2) if n >= 4 else 1
    ranks = torch.arange(n, dtype=torch.float64)
    total = float(((2 * ranks - n + 1) * x.sort().values).sum())  # sum over s < t of |x_s - x_t|
    count = n * (n - 1) / 2
    for k in range(1, lag):  # take out the pairs too close in time to be independent
        total -= float((x[k:] - x[:-k]).abs().sum())
        count -= n - k
    return 0.5 * total / count if count > 0 else math.nan


def integrated_barrier(beta_hot, beta_cold, lambda_hot, lambda_cold):
    r"""
    :math:`\int_{\beta_{hot}}^{\beta_{cold}} \lambda(\beta)\, d\beta` from the values at the two
    ends, interpolated by :math:`\lambda(\beta) = c / (b + \beta)` where it decreases: the form of
    a Gaussian posterior whose precision grows linearly in :math:`\beta` (prior precision plus
    :math:`\beta` times the data's), exact for it and for :math:`1/\beta`, and finite at
    :math:`\beta = 0`, where a power law is not. Where it does not decrease, the trapezoid rule.
    """
    width = beta_cold - beta_hot
    if not (math.isfinite(lambda_hot) and math.isfinite(lambda_cold)):
        return math.nan
    if not lambda_hot > lambda_cold > 0.0:
        return 0.5 * width * (lambda_hot + lambda_cold)
    # c / (b + beta) through both ends: b + beta_hot = lambda_cold * width / (lambda_hot - lambda_cold) > 0
    near = lambda_cold * width / (lambda_hot - lambda_cold)
    return lambda_hot * near * math.log1p(width / near)


def pair_barriers(betas, rejection_rates, rung_lambdas):
    r"""
    The barrier :math:`\Lambda(\beta_i) - \Lambda(\beta_{i+1})` of each adjacent pair (K - 1
    floats, not capped at 1): its rejection rate :math:`r_i` while :math:`r_i \le` ``SATURATED``;
    above, the larger of :math:`r_i` and the integral of the rungs' :func:`local_barrier`
    (``rung_lambdas``). A pair never attempted (NaN rate) takes the integral alone; with
    neither, NaN.
    """
    out = []
    for i, r in enumerate(rejection_rates):
        from_draws = integrated_barrier(betas[i + 1], betas[i], rung_lambdas[i + 1], rung_lambdas[i])
        if math.isnan(r):
            out.append(from_draws)
        elif r <= SATURATED or math.isnan(from_draws):
            out.append(float(r))
        else:
            out.append(max(float(r), from_draws))
    return out


def global_barrier(pair_barriers):
    r"""The global barrier :math:`\Lambda = \sum_i \Lambda_i` over the pairs whose barrier is
    known (a NaN, a pair never tried and without ll draws, is left out)."""
    return sum(b for b in pair_barriers if not math.isnan(b))


def recommended_replicas(barrier, stabilized=False):
    r"""The rungs a barrier calls for, the one rule of the package: :math:`\lceil 2\Lambda
    \rceil`, at least 2, which keep every pair's rejection rate near 1/2 or below (Syed et al.
    2021, Sec. 5.3). ``stabilized``: ``barrier`` is the leg to q of a two-leg ladder, which gets
    ``ceil(K / 2)`` of the K rungs (:mod:`pyro_pt.legs`), so K is twice its rungs less one; at
    least 4. Every user takes it as it is (:mod:`pyro_pt.shortfall`); a growing ladder
    (:mod:`pyro_pt.growth`) caps it by ``max_replicas``."""
    rungs = max(2, math.ceil(2 * barrier)) if math.isfinite(barrier) else 2
    return max(4, 2 * rungs - 1) if stabilized else rungs


def round_trip_rate(barrier, rungs):
    r"""Round trips per swap round of ``rungs`` rungs spread evenly over a global ``barrier``:
    Syed et al. (2021)'s finite-ladder rate :math:`1 / (2 + 2 \sum_i r_i / (1 - r_i))` with each
    of the ``rungs - 1`` pairs rejecting :math:`r = \Lambda / (K - 1)` of its swaps; 0 where a
    pair would reject them all (:math:`K - 1 \le \Lambda`)."""
    gaps = rungs - 1
    if gaps < 1 or gaps <= barrier:
        return 0.0
    r = barrier / gaps
    return 1.0 / (2.0 + 2.0 * gaps * r / (1.0 - r))


def cumulative_barrier(pair_barriers):
    r"""The cumulative barrier :math:`\Lambda(\beta_k) = \sum_{i<k} \Lambda_i` at each of the K
    rungs, cold first (so it starts at 0 and ends at :math:`\Lambda`); the pairs' barriers
    (:func:`pair_barriers`) are not capped at 1: a pair that never swaps can hold many units."""
    out = [0.0]
    for b in pair_barriers:
        out.append(out[-1] + max(float(b), 0.0))
    return out


def rung_barriers(log_likelihoods, num_rungs):
    """:func:`local_barrier` of each rung's column of an ll record ``(num_draws, K)`` (NaN for
    all without draws)."""
    ll = torch.as_tensor(log_likelihoods, dtype=torch.float64).reshape(-1, num_rungs)
    return [local_barrier(ll[:, k]) for k in range(num_rungs)]


def leg_pair_barriers(legs, betas, rejection_rates, rung_lambdas):
    """:func:`pair_barriers` of each of the ``legs``, joined (the bridge's barrier is 0: its two
    rungs target the same distribution)."""
    return legs.join([pair_barriers(*legs.pick(leg, betas, rejection_rates, rung_lambdas))
                      for leg in range(len(legs.spans))])
