"""Replica-exchange moves: the swap log-ratio and the pairings of adjacent temperatures.

Pure torch: no Pyro inference machinery, no communication. Every caller (one process or many)
takes its swap decisions through :func:`swap_log_ratio`, :func:`swap_pairs` and
:func:`accept_swaps`, so the acceptance rule of docs/design.md is written exactly once.
"""

import math

import torch

SWAP_SCHEMES = ("deo", "seo", "sequential")


def swap_log_ratio(beta_i, beta_j, ll_i, ll_j):
    r"""
    Log acceptance ratio of exchanging the states of two likelihood-tempered replicas.

    With replica targets :math:`\log\pi_\beta(z) = lp(z) + \beta\, ll(z)` the prior terms cancel
    and the ratio of the swapped to the current joint density is

    .. math:: \Delta = (\beta_i - \beta_j)\,(ll(z_j) - ll(z_i)).

    Works elementwise on tensors or on Python floats. ``0 * inf`` (a prior rung against an
    impossible state) and any NaN input give NaN, which :func:`accept_swaps` refuses.

    :param beta_i: inverse temperature of the first replica.
    :param beta_j: inverse temperature of the second replica.
    :param ll_i: log-likelihood of the first replica's current state.
    :param ll_j: log-likelihood of the second replica's current state.
    :returns: :math:`\Delta`, the log acceptance ratio (accept with probability
        :math:`\min(1, e^\Delta)`).
    """
    return (beta_i - beta_j) * (ll_j - ll_i)


def swap_pairs(scheme, round_index, num_temperatures, coin=None, legs=None):
    """
    The lower indices ``i`` of the adjacent pairs ``(i, i + 1)`` attempted in one swap round
    (with ``legs``, a :class:`~pyro_pt.legs.Legs`: its pair indices, each leg with its own
    parity and the bridge on odd rounds).

    - ``"deo"``: deterministic even-odd (non-reversible, Syed et al. 2021): even pairs on even
      rounds, odd pairs on odd rounds.
    - ``"seo"``: stochastic even-odd (reversible): even or odd pairs by a fair ``coin``.
    - ``"sequential"``: every pair, cold to hot; the caller applies them one after another.

    :param str scheme: one of :data:`SWAP_SCHEMES`.
    :param int round_index: how many swap rounds came before this one.
    :param int num_temperatures: K, the number of rungs of the ladder.
    :param float coin: a uniform draw in [0, 1), required by ``"seo"``.
    :returns: list of pair indices, increasing.
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
    The Metropolis acceptance probability :math:`\min(1, e^{\log r})` of a move with log
    acceptance ratio ``log_ratio`` (a float): the one rule every move uses, swaps and the
    explorers' local moves alike. A NaN ratio (a numerical failure) gives 0: refused, never
    accepted, so it cannot corrupt the chain.

    :param float log_ratio: :math:`\log r`, e.g. :math:`\Delta` from :func:`swap_log_ratio`
        or minus an HMC trajectory's energy error.
    :returns: the probability, a float in [0, 1].
    """
    log_ratio = float(log_ratio)
    if math.isnan(log_ratio):
        return 0.0
    return 1.0 if log_ratio >= 0 else math.exp(log_ratio)


def accept_swap(log_ratio, uniform):
    r"""
    Metropolis decision for one swap: accept when ``uniform < min(1, exp(log_ratio))``.

    :param float log_ratio: :math:`\Delta` from :func:`swap_log_ratio`.
    :param float uniform: a draw from U(0, 1).
    :returns: ``(accepted, acceptance probability)``; the probability is 0 for NaN.
    """
    prob = metropolis_probability(log_ratio)
    return uniform < prob, prob


def draw_round_uniforms(generator, num_temperatures, dtype=torch.float64):
    """
    The random numbers of one swap round, from the shared swap stream.

    Always the same count (a coin for SEO, then one uniform per pair) whatever the scheme and
    whichever pairs are attempted, so every process that holds the same stream stays in step.

    :returns: ``(coin, uniforms)`` with ``uniforms`` a list of K - 1 floats.
    """
    draws = torch.rand(num_temperatures, generator=generator, dtype=dtype).tolist()
    return draws[0], draws[1:]


def swap_round(scheme, round_index, betas, log_likelihoods, generator, legs=None):
    """
    One swap round over the whole ladder, the same on every process that holds the same
    ``generator`` state and log-likelihoods. With the two ``legs`` of a stabilized ladder
    (:mod:`pyro_pt.legs`) the pairs are the legs' and the bridge, whose two rungs both target
    the posterior: its ratio is 1 (``(1 - 1) * ...``), and a non-finite log-likelihood still
    refuses it.

    Pairs are applied one after another (they are disjoint for DEO and SEO; for the sequential
    sweep a state can move several rungs), each with the current log-likelihoods.

    :param str scheme: one of :data:`SWAP_SCHEMES`.
    :param int round_index: how many swap rounds came before this one.
    :param list betas: inverse temperatures, cold first.
    :param list log_likelihoods: ll of the state at each rung.
    :param torch.Generator generator: the shared swap stream.
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
