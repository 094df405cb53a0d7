r"""
The end-of-run review of a tempered run: what in its sampling phase makes it untrustworthy,
said with the numbers and what to do (each message says why; docs/layout.md, "Diagnostics").
A ladder with fewer rungs than its barrier calls for is told by :mod:`pyro_pt.shortfall`, the
rule the end of warmup warns by.

log Z's stated error is its Monte Carlo error and the gap between the forward and reverse
stepping-stone estimates together. The Monte Carlo error is the delta method's on the whole
estimate at once (:func:`stepping_stone_error`): each term :math:`\log \overline{w}` moves by
about :math:`(\overline{w} - \mathbb E w) / \mathbb E w`, so the reported log Z moves as the
mean of one per-draw series, :math:`u_n = \tfrac12 \sum_i (w^f_{n,i} / \overline{w^f_i} -
w^r_{n,i} / \overline{w^r_i})`, whose error is :math:`\mathrm{sd}(u) / \sqrt{n_{eff}(u)}`.
The terms are not independent: a rung's draws enter a forward term and a reverse one, both
rising with its ll, and the swaps carry a state's ll from rung to rung; adding the terms'
errors in variance, as if they were, stated about two thirds of log Z's spread over seeds on a
12-coefficient regression (benchmarks/coverage.py). The forward estimate is biased low and
the reverse high (Jensen's inequality on a log-mean-exp), by terms of the order of the pairs'
squared errors, which a pair of distant rungs makes large; the reported log Z is their mean,
with error
:math:`\sqrt{\sigma_{MC}^2 + (|\mathrm{forward} - \mathrm{reverse}| / 2)^2}`, which spans
both. log Z is unreliable where that error is above :data:`LOG_Z_USABLE` nats, or where a pair
is a bottleneck (its log-mean-exp's weights are then dominated by a few draws). The cold
chain's means are reviewed by their regenerative Monte Carlo error
(:mod:`pyro_pt.regeneration`) against their posterior sd (:data:`MCSE_TOLERANCE`).

Pure: torch, and :mod:`pyro.ops.stats` for the effective sample size (imported when first
needed, as :mod:`pyro_pt.barrier` does).

**References**

[1] Syed, Bouchard-Côté, Deligiannidis, Doucet (2021), "Non-reversible parallel tempering:
a scalable highly parallel MCMC scheme", JRSS B.

[2] Xie, Lewis, Fan, Kuo, Chen (2011), "Improving marginal likelihood estimation for Bayesian
phylogenetic model selection", Systematic Biology (stepping-stone sampling).

[3] Kass, Raftery (1995), "Bayes factors", JASA 90.
"""

import math

import torch

from .barrier import autocorrelation_time
from .legs import Legs
from .recorders import stepping_stone_terms
from .regeneration import MIN_TOURS
from .shortfall import too_few_rungs

# A pair below it is a bottleneck: the replicas on either side of it barely exchange.
LOW_SWAP_ACCEPTANCE = 0.1
# A cold explorer below it changes only through swaps: its draws are nearly all repeats.
LOW_COLD_ACCEPTANCE = 0.01
# log Z's stated error above it (nats) is too large to use: two errors then span more than
# the ln B = 1 below which a Bayes factor is "not worth more than a bare mention" [3].
LOG_Z_USABLE = 0.5
# A cold-chain mean whose Monte Carlo error is above this share of its posterior sd warns:
# the same error on a mixture's mean is a mode share in doubt by about half of it
# (benchmarks/coverage.py measures it); a unimodal run's 1 / sqrt(ESS) is far below.
MCSE_TOLERANCE = 0.1
# What log_Z_meaning gains when the estimate is not to be trusted.
UNRELIABLE = " -- UNRELIABLE: "
# Keys the review adds to the kernel's diagnostics.
REVIEW_KEYS = ("warnings", "log_Z_error")


class TemperingWarning(UserWarning):
    """A tempered run whose sampling phase is untrustworthy (bottleneck, no round trip, a cold
    rung that does not move or diverges, a mean or log Z whose error is too large to use); one
    per run, with what to do."""


def mean_error(series):
    r"""Monte Carlo standard error of the mean of one autocorrelated chain ``series``:
    :math:`\mathrm{sd} \sqrt{\tau / n}`, :math:`\tau` its integrated autocorrelation time
    (:func:`~pyro_pt.barrier.autocorrelation_time`, at least 1: anti-correlated draws are not
    claimed better than independent ones)."""
    x = torch.as_tensor(series, dtype=torch.float64).reshape(-1)
    return math.sqrt(float(x.var()) * autocorrelation_time(x) / x.numel())


def log_mean_exp_error(values):
    r"""Monte Carlo standard error of :math:`\log \frac1n \sum_n e^{a_n}` for autocorrelated
    draws ``values`` :math:`a_n` (delta method, effective sample size of :math:`e^{a_n}`)."""
    a = torch.as_tensor(values, dtype=torch.float64)
    if a.numel() < 2:
        return math.inf
    w = torch.exp(a - a.max())
    if float(w.var()) == 0.0:
        return 0.0
    return mean_error(w) / float(w.mean())


def stepping_stone_errors(betas, log_likelihoods):
    """Monte Carlo errors ``(forward, reverse)`` of :func:`~pyro_pt.recorders.stepping_stone`
    on the same draws ``log_likelihoods`` ``(num_draws, K)``."""
    forward = reverse = 0.0
    for hot, cold in stepping_stone_terms(betas, log_likelihoods):
        forward += log_mean_exp_error(hot) ** 2
        reverse += log_mean_exp_error(cold) ** 2
    return math.sqrt(forward), math.sqrt(reverse)


def stepping_stone_error(betas, log_likelihoods):
    r"""Monte Carlo error of the stepping-stone estimate :math:`(\mathrm{forward} +
    \mathrm{reverse}) / 2` (:func:`~pyro_pt.recorders.stepping_stone`) from its ll record
    ``(num_draws, K)``: the delta method on the per-draw series :math:`u_n` of the module, which
    keeps the covariances between the terms (shared rungs, swaps) and over time (its effective
    sample size). ``inf`` with fewer than two draws."""
    ll = torch.as_tensor(log_likelihoods, dtype=torch.float64)
    if ll.shape[0] < 2:
        return math.inf
    u = torch.zeros(ll.shape[0], dtype=torch.float64)
    for hot, cold in stepping_stone_terms(betas, ll):
        for a, sign in ((hot, 0.5), (cold, -0.5)):
            w = torch.exp(a - a.max())
            u += sign * w / w.mean()
    var = float(u.var())
    if not var > 0.0:
        return 0.0 if var == 0.0 else math.inf
    return mean_error(u)


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


def _coordinate(name, shape, flat_index):
    """``name`` or ``name[i, j]``: the coordinate ``flat_index`` of a site of ``shape``."""
    if not shape:
        return name
    index = []
    for size in reversed(shape):
        index.append(flat_index % size)
        flat_index //= size
    return f"{name}[{', '.join(str(i) for i in reversed(index))}]"


def worst_mean(diagnostics):
    """``(ratio, coordinate, error, sd)`` of the latent coordinate whose mean's Monte Carlo
    error is largest against its posterior sd (None where no error is stated, or every
    coordinate is constant)."""
    errors, sds = diagnostics.get("mcse"), diagnostics.get("posterior_sd")
    worst = None
    for name, error in (errors or {}).items():
        error, sd = error.reshape(-1), sds[name].reshape(-1)
        # a constant coordinate (or one seen once) has no error to weigh
        ratio = torch.where(sd > 0.0, error / sd, torch.full_like(error, -math.inf))
        if not ratio.numel():
            continue
        i = int(ratio.argmax())
        if ratio[i] > -math.inf and (worst is None or float(ratio[i]) > worst[0]):
            worst = (float(ratio[i]), _coordinate(name, tuple(sds[name].shape), i),
                     float(error[i]), float(sd[i]))
    return worst


def _mcse_problem(diagnostics, num_draws):
    """The cold chain's mean of some coordinate known to worse than :data:`MCSE_TOLERANCE` of
    its posterior sd, by its regenerative Monte Carlo error (:mod:`pyro_pt.regeneration`)."""
    worst = worst_mean(diagnostics)
    if worst is None or not num_draws or not worst[0] > MCSE_TOLERANCE:
        return None
    ratio, where, error, sd = worst
    tours = diagnostics.get("mcse_tours") or 0
    rungs = (f"; or {_ladder_advice(diagnostics)} (more rungs bring more tours per draw)"
             if diagnostics["recommended_replicas"] > len(diagnostics["temperatures"]) else "")
    if math.isinf(ratio):
        longer = (f"about {math.ceil(num_draws * MIN_TOURS / tours)} draws (num_samples)"
                  if tours > 1 else "many more draws (num_samples)")
        return (f"the cold chain's {num_draws} draws of the sampling phase come from only "
                f"{tours} tour{'s' if tours != 1 else ''} of its lineages (from one visit to "
                f"the hot end to the next), fewer than {MIN_TOURS}: no Monte Carlo error can be "
                "stated for its means, and the weights of modes it cannot cross between on its "
                f"own are in doubt; {longer} would give {MIN_TOURS}{rungs}")
    needed = math.ceil(num_draws * (ratio / MCSE_TOLERANCE) ** 2)
    return (f"the cold chain's mean of {where} has a Monte Carlo error of {error:.3g}, "
            f"{ratio:.2f} of its posterior sd {sd:.3g} (above {MCSE_TOLERANCE:g}), over the "
            f"{tours} tours of its lineages its {num_draws} draws come from "
            "(diagnostics()['mcse']; kernel.mcse(fn) for a function of the draws, e.g. a "
            "mode's indicator): it, and the weights of any modes the cold chain cannot cross "
            "between on its own, are in doubt; errors shrink as 1/sqrt(length): about "
            f"{needed} draws (num_samples) would bring it to {MCSE_TOLERANCE:g} sd{rungs}")


def _divergence_problem(diagnostics, num_scans, on_divergence):
    cold = len(diagnostics.get("divergences") or ())
    if cold == 0:
        return None
    temps = diagnostics["temperatures"]
    rate = cold / num_scans if num_scans else 0.0
    # a rare divergence over many ladders' transitions shows as its own share, not as "0.0%"
    percent = f"{rate:.1%}" if rate >= 0.001 else f"{100 * rate:.2g}%"
    share = f" ({percent} of its {num_scans} transitions)" if num_scans else ""
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
           reference=None, legs=None, max_replicas=None, num_draws=None):
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
    :param int num_draws: the cold chain's draws MCMC holds, where not ``num_scans`` (several
        ladders, :mod:`pyro_pt.ensemble`): the draws a longer run would need are counted in them.
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
        _mcse_problem(diagnostics, num_scans if num_draws is None else num_draws),
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
    """``(log_z_error, log_z_problem)``: the stated error of the first leg's log Z (the
    module's: Monte Carlo and the forward/reverse gap) and why it is unreliable (None if it is
    not)."""
    ll = diagnostics["tempering_record"]["log_likelihood"]
    if legs is not None:
        betas, ll = legs.pick(0, betas, columns=ll)
    if not (len(betas) > 1 and ll.shape[0] > 0):
        return math.nan, None
    # over every scan the estimate read, where the record is of MCMC's draws only (an ensemble)
    monte_carlo = diagnostics.get("log_Z_monte_carlo")
    if monte_carlo is None:
        monte_carlo = stepping_stone_error(betas, ll)
    forward, reverse = diagnostics["log_Z_forward"], diagnostics["log_Z_reverse"]
    gap = abs(forward - reverse)
    error = math.hypot(monte_carlo, 0.5 * gap)
    problem = None
    if not math.isfinite(diagnostics["log_Z"]):
        problem = f"it is not finite (forward {forward:.4g}, reverse {reverse:.4g})"
    elif not error <= LOG_Z_USABLE:
        problem = (f"its error {error:.3g} is above {LOG_Z_USABLE:g} nat, too large to weigh "
                   f"models by (forward {forward:.4g} and reverse {reverse:.4g} estimates "
                   f"differ by {gap:.3g}; Monte Carlo error {monte_carlo:.3g})")
    elif first_blocked:
        problem = "a pair is a bottleneck (see the swap acceptance)"
    return error, problem


def warning_text(problems):
    """The one warning of a run: every problem on its own line."""
    return ("ParallelTempering: the sampling phase is not to be trusted as it is:\n"
            + "\n".join(f"  - {p}" for p in problems))
