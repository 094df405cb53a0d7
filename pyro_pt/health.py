r"""
The end-of-run review of a tempered run: what in its sampling phase makes it untrustworthy,
said with the numbers and what to do (each message says why; docs/layout.md, "Diagnostics").
A ladder with fewer rungs than its barrier calls for is told by :mod:`pyro_pt.shortfall`, the
rule the end of warmup warns by.

log Z is unreliable where a pair is a bottleneck (its log-mean-exp's weights are then dominated
by a few draws) or where the forward and reverse estimates differ by more than
:data:`LOG_Z_TOLERANCE` times their Monte Carlo error: each pair's term's error is the delta
method's :math:`\mathrm{sd}(w) / (\overline{w} \sqrt{n_{eff}})`, :math:`w_n = e^{\Delta \ell_n}`,
and the pairs' add in variance. Both estimators are consistent with biases of the order of the
squared error, so outside three errors they do not estimate one number.

Pure: torch, and :mod:`pyro.ops.stats` for the effective sample size (imported when first
needed, as :mod:`pyro_pt.barrier` does).

**References**

[1] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
a scalable highly parallel MCMC scheme", JRSS B.

[2] Xie, Lewis, Fan, Kuo, Chen (2011), "Improving marginal likelihood estimation for Bayesian
phylogenetic model selection", Systematic Biology (stepping-stone sampling).
"""

import math

import torch

from .legs import Legs
from .recorders import stepping_stone_terms
from .shortfall import too_few_rungs

# A pair below it is a bottleneck: the replicas on either side of it barely exchange.
LOW_SWAP_ACCEPTANCE = 0.1
# A cold explorer below it changes only through swaps: its draws are nearly all repeats.
LOW_COLD_ACCEPTANCE = 0.01
LOG_Z_TOLERANCE = 3.0
# Fewer tempered restarts than this in the sampling phase warn: a mode's share is then known
# to worse than +-0.07 (share_error: at most 0.1 off at 1.4 standard errors); the mixtures of
# benchmarks/explorers.py and tests/pt/test_multimodal.py measure the shares against it.
MIN_RESTARTS = 100
# What log_Z_meaning gains when the estimate is not to be trusted.
UNRELIABLE = " -- UNRELIABLE: "
# Keys the review adds to the kernel's diagnostics.
REVIEW_KEYS = ("warnings", "log_Z_error")


class TemperingWarning(UserWarning):
    """A tempered run whose sampling phase is untrustworthy (bottleneck, no round trip, a cold
    rung that does not move or diverges, an unreliable log Z); one per run, with what to do."""


def log_mean_exp_error(values):
    r"""Monte Carlo standard error of :math:`\log \frac1n \sum_n e^{a_n}` for autocorrelated
    draws ``values`` :math:`a_n` (delta method, effective sample size of :math:`e^{a_n}`)."""
    a = torch.as_tensor(values, dtype=torch.float64)
    if a.numel() < 2:
        return math.inf
    w = torch.exp(a - a.max())
    mean, var = float(w.mean()), float(w.var())
    if var == 0.0:
        return 0.0
    from pyro.ops.stats import effective_sample_size

    ess = float(effective_sample_size(w.unsqueeze(0), chain_dim=0, sample_dim=1))
    # Anti-correlated draws can give ess > n; the error is not claimed smaller than i.i.d.'s.
    ess = min(max(ess, 1.0), float(a.numel())) if math.isfinite(ess) else 1.0
    return math.sqrt(var / ess) / mean


def stepping_stone_errors(betas, log_likelihoods):
    """Monte Carlo errors ``(forward, reverse)`` of :func:`~pyro_pt.recorders.stepping_stone`
    on the same draws ``log_likelihoods`` ``(num_draws, K)``."""
    forward = reverse = 0.0
    for hot, cold in stepping_stone_terms(betas, log_likelihoods):
        forward += log_mean_exp_error(hot) ** 2
        reverse += log_mean_exp_error(cold) ** 2
    return math.sqrt(forward), math.sqrt(reverse)


def _temperature(t):
    return "inf" if math.isinf(t) else f"{t:.3g}"


def _rung(temps, rung, legs, reference):
    """A rung's temperature, or ``q`` for the hottest rung of the leg to a fitted q (its
    T = inf is q's density, not the prior's)."""
    if reference is not None and rung == (len(temps) - 1 if legs is None else legs.hots[0]):
        return "q"
    return _temperature(temps[rung])


def _ladder_advice(diagnostics):
    hotter = "" if math.isinf(diagnostics["temperatures"][-1]) else "raise max_temperature, "
    num, needed = len(diagnostics["temperatures"]), diagnostics["recommended_replicas"]
    # more rungs only where the rule (barrier.recommended_replicas) asks for them
    rungs = (f"add rungs (num_replicas={num} now; the barrier Lambda = "
             f"{diagnostics['barrier']:.2f} calls for about {needed}), " if needed > num else "")
    return f"{rungs}{hotter}warm up longer (warmup_steps) with adapt_temperatures=True"


def share_error(restarts):
    r"""The standard error a mode's share of the cold draws has at most when ``restarts``
    independent labels made it: :math:`\sqrt{2 w (1 - w) / R}` at :math:`w = 1/2`, the factor
    2 for sojourns of random (exponential) length; inf for none."""
    return math.sqrt(0.5 / restarts) if restarts else math.inf


def _restart_problem(diagnostics, num_rounds):
    """Too few tempered restarts in the sampling phase for the weights of separated modes."""
    restarts = diagnostics.get("restarts")
    if restarts is None or num_rounds == 0 or restarts >= MIN_RESTARTS:
        return None
    rate = restarts / num_rounds
    longer = (f"about {math.ceil(MIN_RESTARTS / rate)} swap rounds at this run's rate of "
              f"{rate:.3g}" if rate > 0 else "much longer")
    known = (f"a mode's share of the cold draws is known to about +-{share_error(restarts):.2f}"
             if restarts else "no draw from the hot end has reached the cold chain")
    rungs = (f"{_ladder_advice(diagnostics)}, or sample longer"
             if diagnostics["recommended_replicas"] > len(diagnostics["temperatures"]) else
             "the ladder has the rungs its barrier calls for: sample longer")
    return (f"only {restarts} tempered restarts (states drawn exactly at the hot end that "
            f"reached the cold rung) in the {num_rounds} swap rounds of the sampling phase, "
            f"fewer than {MIN_RESTARTS}: the cold chain's weights of modes it cannot cross "
            f"between on its own rest on them, and {known}; {rungs} ({longer})")


def _divergence_problem(diagnostics, num_scans, on_divergence):
    cold = len(diagnostics.get("divergences") or ())
    if cold == 0:
        return None
    temps = diagnostics["temperatures"]
    share = f" ({cold / num_scans:.1%} of its {num_scans} transitions)" if num_scans else ""
    per_rung = ", ".join(f"T = {_temperature(t)}: {n}" for t, n in
                         zip(temps, diagnostics.get("divergences_per_temperature", ())) if n)
    raised = [(t, p) for t, p in zip(temps, diagnostics.get("raised_target_accept_probs", ()))
              if p is not None]
    done = ("warmup raised the target acceptance of the rungs that diverged ("
            + ", ".join(f"T = {_temperature(t)}: {p:.3g}" for t, p in raised) + "); "
            if raised else "")
    advice = ["reparametrize the model (e.g. a non-centered hierarchy, "
              "pyro.infer.reparam.LocScaleReparam)"]
    if on_divergence is not None:  # the explorer kind's own advice
        advice += on_divergence([p for _, p in raised])
    what = ", ".join(advice[:-1]) + (", or " if len(advice) > 1 else "") + advice[-1]
    return (f"the cold chain diverged {cold} times{share} in the sampling phase (per "
            f"temperature: {per_rung}): its draws miss a region of high curvature and are "
            f"biased there; {done}{what}")


def _further_than_the_prior(diagnostics, reference):
    """On a stabilized ladder, where the leg to q has the higher barrier: q is further from
    the posterior than the prior is, and its rungs would serve better on the prior's path."""
    legs = diagnostics.get("legs")
    if reference is None or not legs:
        return None
    to_q, to_prior = legs["reference"]["barrier"], legs["prior"]["barrier"]
    if not to_q > to_prior:  # False for NaN
        return None
    return (f"the fitted Gaussian ({reference}) is further from this posterior than the prior "
            f"is: the leg to it has a barrier Lambda = {to_q:.3g}, the leg to the prior "
            f"{to_prior:.3g}, so its rungs add little (a posterior that is not Gaussian-shaped, "
            "such as a funnel or a multimodal network); run with reference='prior', giving all "
            "the rungs to the prior's path")


def review(diagnostics, betas, num_rounds, num_scans=None, on_divergence=None,
           reference=None, legs=None, max_replicas=None):
    """
    ``(problems, log_z_error, log_z_problem)`` of a run's sampling phase: a message per
    problem, the Monte Carlo error of log Z, why log Z is unreliable (None if it is not).

    :param dict diagnostics: the kernel's :meth:`~pyro_pt.ParallelTempering.diagnostics`,
        before review.
    :param list betas: the sampling phase's inverse temperatures, cold first.
    :param int num_rounds: swap rounds in the sampling phase.
    :param int num_scans: explorer transitions per rung (what share of them diverged).
    :param callable on_divergence: the explorer kind's advice when the cold chain diverges,
        ``on_divergence(raised targets) -> [phrase, ...]``
        (:meth:`~pyro_pt.explorers.ExplorerKind.on_divergence`); None: none.
    :param str reference: the fitted reference's description, None for the prior: a stuck run
        against it is told to compare with the prior.
    :param Legs legs: the ladder's legs; log Z is the first leg's.
    :param int max_replicas: the cap of a growing ladder (None: it does not grow).
    """
    temps, acceptance = diagnostics["temperatures"], diagnostics["swap_acceptance"]
    bottlenecks, blocked = [], set()
    for i, a in enumerate(acceptance):
        if a < LOW_SWAP_ACCEPTANCE:  # False for NaN, a pair never attempted
            ends = (_rung(temps, i, legs, reference), _rung(temps, i + 1, legs, reference))
            bottlenecks.append(f"pair {i} (T = {ends[0]} and {ends[1]}) accepted {a:.3g} of "
                               "its swaps")
            blocked.add(0 if legs is None else legs.leg_of(i))
    # Two legs: replicas still travel while one leg has no bottleneck; log Z is the first's.
    if legs is not None and len(blocked) < len(legs.spans):
        bottlenecks = []
    no_round_trip = len(temps) > 1 and num_rounds > 0 and diagnostics["round_trips"] == 0
    further = _further_than_the_prior(diagnostics, reference)
    if further is None and reference is not None and (bottlenecks or no_round_trip):
        further = (f"the hot end is a fitted Gaussian ({reference}), and a posterior that is not "
                   "Gaussian-shaped (a funnel, a multimodal network) can be further from it than "
                   "from the prior: run with reference='prior' and compare")
    cold = diagnostics["local_acceptance"][0]
    log_z_error, log_z_problem = _log_z_review(diagnostics, betas, legs, 0 in blocked)
    problems = [
        # the rule the end of warmup warned by, on the sampling phase's estimate of the barrier
        too_few_rungs(diagnostics["barrier"], legs or Legs.plain(len(temps)),
                      f"over the {num_rounds} swap rounds of the sampling phase", max_replicas)
        if num_rounds > 0 else None,
        f"bottleneck: {'; '.join(bottlenecks)} (below {LOW_SWAP_ACCEPTANCE}); "
        f"{_ladder_advice(diagnostics)}" if bottlenecks else None,
        f"no round trip (cold -> hottest -> cold) in the {num_rounds} swap rounds of the "
        "sampling phase: the cold chain has not seen what the hot rungs explore; "
        f"{_ladder_advice(diagnostics)}, or sample longer" if no_round_trip else None,
        _restart_problem(diagnostics, num_rounds),
        further,
        f"the cold rung's explorer accepted {cold:.3g} of its moves (below "
        f"{LOW_COLD_ACCEPTANCE}): its draws are nearly all repeats; warm up longer or tune the "
        "explorer (explorer_kwargs, e.g. a smaller step size or scale, or explorer='nuts')"
        if cold < LOW_COLD_ACCEPTANCE else None,
        _divergence_problem(diagnostics, num_scans, on_divergence),
        f"the stepping-stone log Z = {diagnostics['log_Z']:.4g} is unreliable: "
        f"{log_z_problem}; add rungs or sample longer before using it"
        if log_z_problem is not None else None,
    ]
    return [p for p in problems if p is not None], log_z_error, log_z_problem


def _log_z_review(diagnostics, betas, legs, first_blocked):
    """``(log_z_error, log_z_problem)``: the Monte Carlo error of the first leg's log Z and why
    it is unreliable (None if it is not)."""
    ll = diagnostics["tempering_record"]["log_likelihood"]
    if legs is not None:
        betas, ll = legs.pick(0, betas, columns=ll)
    if not (len(betas) > 1 and ll.shape[0] > 0):
        return math.nan, None
    error = math.hypot(*stepping_stone_errors(betas, ll))
    forward, reverse = diagnostics["log_Z_forward"], diagnostics["log_Z_reverse"]
    gap = abs(forward - reverse)
    problem = None
    if not math.isfinite(diagnostics["log_Z"]):
        problem = f"it is not finite (forward {forward:.4g}, reverse {reverse:.4g})"
    elif not gap <= LOG_Z_TOLERANCE * error:
        problem = (f"forward {forward:.4g} and reverse {reverse:.4g} estimates differ by "
                   f"{gap:.3g}, more than {LOG_Z_TOLERANCE:g} times their Monte Carlo error "
                   f"{error:.3g}")
    elif first_blocked:
        problem = "a pair is a bottleneck (see the swap acceptance)"
    return 0.5 * error, problem


def warning_text(problems):
    """The one warning of a run: every problem on its own line."""
    return ("ParallelTempering: the sampling phase is not to be trusted as it is:\n"
            + "\n".join(f"  - {p}" for p in problems))
