"""Replica-exchange moves: the swap log-ratio and the pairings of adjacent rungs.

Pure torch: no Pyro inference machinery, no communication. Every caller (one process or many)
takes its swap decisions here, so the acceptance rule (docs/design.md, "Likelihood-only
tempering"; the schemes: "Swap schemes") is written exactly once.
"""

import math

import torch

SWAP_SCHEMES = ("deo", "seo", "sequential")


def swap_log_ratio(beta_i, beta_j, ll_i, ll_j):
    r"""
    :math:`\Delta = (\beta_i - \beta_j)\,(ll(z_j) - ll(z_i))`, the log acceptance ratio of
    exchanging the states of two rungs (the prior terms cancel); elementwise on tensors or
    floats. ``0 * inf`` (a prior rung against an impossible state) and any NaN input give NaN,
    which :func:`accept_swap` refuses.
    """
    return (beta_i - beta_j) * (ll_j - ll_i)


def swap_pairs(scheme, round_index, num_temperatures, coin=None, legs=None):
    """
    The lower indices ``i`` of the pairs ``(i, i + 1)`` attempted in swap round ``round_index``
    of a ladder of ``num_temperatures`` rungs, increasing: for ``"deo"`` the round's parity,
    for ``"seo"`` a fair ``coin`` (a uniform draw in [0, 1)), for ``"sequential"`` every pair.
    With two ``legs`` (:class:`~pyro_pt.legs.Legs`), each leg keeps its own parity and the
    bridge is tried on odd rounds.
    """
    if scheme == "deo":
        parity = round_index % 2
    elif scheme == "seo":
        if coin is None:
            raise ValueError("swap_pairs: the 'seo' scheme needs a uniform `coin` draw")
        parity = int(coin < 0.5)
    elif scheme == "sequential":
        return list(range(num_temperatures - 1))
    else:
        raise ValueError(f"swap_scheme must be one of {SWAP_SCHEMES}, got {scheme!r}")
    if legs is not None and legs.stabilized:
        return [p for p, q in enumerate(legs.parity) if q == parity]
    return list(range(parity, num_temperatures - 1, 2))


def metropolis_probability(log_ratio):
    r"""
    :math:`\min(1, e^{\log r})` for a float ``log_ratio``: the one rule every move uses, swaps
    and the explorers' local moves alike. A NaN ratio (a numerical failure) gives 0: refused,
    so it cannot corrupt the chain.
    """
    log_ratio = float(log_ratio)
    if math.isnan(log_ratio):
        return 0.0
    return 1.0 if log_ratio >= 0 else math.exp(log_ratio)


def accept_swap(log_ratio, uniform):
    """``(accepted, probability)`` of one swap: accepted when ``uniform`` (a U(0, 1) draw) is
    below :func:`metropolis_probability`."""
    prob = metropolis_probability(log_ratio)
    return uniform < prob, prob


def draw_round_uniforms(generator, num_temperatures, dtype=torch.float64):
    """
    ``(coin, uniforms)``, the random numbers of one swap round from the shared swap stream: the
    same count (a coin for SEO, then K - 1 uniforms) whatever the scheme and the pairs
    attempted, so every process that holds the same stream stays in step.
    """
    draws = torch.rand(num_temperatures, generator=generator, dtype=dtype).tolist()
    return draws[0], draws[1:]


def swap_round(scheme, round_index, betas, log_likelihoods, generator, legs=None):
    """
    One swap round over the whole ladder (``betas`` and the ll at each rung, cold first), the
    same on every process that holds the same ``generator`` state. The pairs are applied one
    after another with the current ll (disjoint for DEO and SEO; in the sequential sweep a
    state can move several rungs). The bridge of two ``legs`` (:mod:`pyro_pt.legs`) has a
    ratio of 1, and a non-finite ll still refuses it.

    :returns: ``(origin, attempts)``: after the round rung ``k`` holds the state that was at
        rung ``origin[k]``; ``attempts`` lists ``(pair, accepted, probability)`` in order.
    """
    num = len(betas)
    coin, uniforms = draw_round_uniforms(generator, num)
    origin, lls, attempts = list(range(num)), list(log_likelihoods), []
    for p in swap_pairs(scheme, round_index, num, coin, legs):
        i, j = (p, p + 1) if legs is None else legs.pairs[p]
        accepted, prob = accept_swap(swap_log_ratio(betas[i], betas[j], lls[i], lls[j]),
                                     uniforms[p])
        attempts.append((p, accepted, prob))
        if accepted:
            origin[i], origin[j] = origin[j], origin[i]
            lls[i], lls[j] = lls[j], lls[i]
    return origin, attempts
