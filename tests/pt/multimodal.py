"""Multimodal posteriors whose mode weights are known exactly, and the check of a run's shares.

Each case gives a model, its data and a function of the cold draws -> the label of the mode
each draw is in, with the exact share of every label (by symmetry, or by quadrature).
"""

import itertools
import math

import torch

import pyro
import pyro.distributions as dist


def _clusters(centers, per_cluster, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.cat([c + torch.randn(per_cluster, generator=generator, dtype=torch.float64)
                      for c in centers])


def mixture_model(y, num_components, prior_scale):
    """Equal-weight mixture of unit-variance Normals with free means; the labels are symmetric,
    so each ordering of the means has mass 1 / num_components!."""
    zero = torch.zeros(num_components, dtype=y.dtype)
    mu = pyro.sample("mu", dist.Normal(zero, prior_scale).to_event(1))
    with pyro.plate("data", y.shape[0]):
        components = dist.Normal(mu.unsqueeze(-2), 1.0).log_prob(y.unsqueeze(-1))
        pyro.factor("mixture", torch.logsumexp(components, -1) - math.log(num_components))


def ordering(samples):
    """The ordering of the means of each draw, as a tuple of indices."""
    return [tuple(o) for o in torch.argsort(samples["mu"], -1).tolist()]


def two_components():
    """mu ~ N(0, 10^2 I_2); 60 points near -3 and 60 near +3."""
    y = _clusters((-3.0, 3.0), 60, seed=1)
    exact = {p: 0.5 for p in itertools.permutations(range(2))}
    return (lambda y: mixture_model(y, 2, 10.0)), (y,), ordering, exact


def three_components():
    """mu ~ N(0, 5^2 I_3); 50 points near each of -4, 0 and 4."""
    y = _clusters((-4.0, 0.0, 4.0), 50, seed=2)
    exact = {p: 1.0 / 6.0 for p in itertools.permutations(range(3))}
    return (lambda y: mixture_model(y, 3, 5.0)), (y,), ordering, exact


# ----- one latent, two modes of unequal weight: exact weights by quadrature -----

LOPSIDED_WEIGHT, LOPSIDED_PRIOR = 0.4, 3.0


def lopsided_log_likelihood(mu, y):
    """``y_n ~ 0.4 N(mu, 1) + 0.6 N(-mu, 1)``: mu and -mu both explain the data, with the
    weights swapped, so the two modes have unequal mass."""
    near = dist.Normal(mu.unsqueeze(-1), 1.0).log_prob(y) + math.log(LOPSIDED_WEIGHT)
    far = dist.Normal(-mu.unsqueeze(-1), 1.0).log_prob(y) + math.log(1 - LOPSIDED_WEIGHT)
    return torch.logaddexp(near, far).sum(-1)


def lopsided_model(y):
    mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), LOPSIDED_PRIOR))
    pyro.factor("mixture", lopsided_log_likelihood(mu, y))


def one_dimensional_exact(log_density, lo=-15.0, hi=15.0):
    """P(theta > 0) of a 1-d density known up to a constant, by quadrature on a fine grid."""
    grid = torch.linspace(lo, hi, 300001, dtype=torch.float64)
    values = log_density(grid)
    weights = torch.exp(values - values.max())
    return float(weights[grid > 0].sum() / weights.sum())


def sign(name):
    return lambda samples: [bool(v > 0) for v in samples[name].reshape(-1).tolist()]


def lopsided():
    """Data from 0.4 N(2, 1) + 0.6 N(-2, 1), 12 points; mu ~ N(0, 3^2): P(mu > 0) = 0.327."""
    generator = torch.Generator().manual_seed(7)
    near = torch.rand(12, generator=generator, dtype=torch.float64) < LOPSIDED_WEIGHT
    y = torch.where(near, 2.0, -2.0) + torch.randn(12, generator=generator, dtype=torch.float64)
    above = one_dimensional_exact(
        lambda mu: dist.Normal(0.0, LOPSIDED_PRIOR).log_prob(mu) + lopsided_log_likelihood(mu, y))
    return lopsided_model, (y,), sign("mu"), {True: above, False: 1.0 - above}


# ----- theta^2: a 1-d model whose two modes differ through the prior's offset -----

SQUARE_PRIOR_LOC, SQUARE_PRIOR_SCALE = 0.4, 2.0


def square_model(y):
    theta = pyro.sample("theta", dist.Normal(torch.tensor(SQUARE_PRIOR_LOC, dtype=y.dtype),
                                             SQUARE_PRIOR_SCALE))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(theta**2, 1.0), obs=y)


def square():
    """y ~ N(theta^2, 1), 20 points at theta = 2; theta ~ N(0.4, 2^2): modes near +-2."""
    generator = torch.Generator().manual_seed(4)
    y = 4.0 + torch.randn(20, generator=generator, dtype=torch.float64)

    def log_density(theta):
        prior = dist.Normal(SQUARE_PRIOR_LOC, SQUARE_PRIOR_SCALE).log_prob(theta)
        return prior + dist.Normal(theta.unsqueeze(-1) ** 2, 1.0).log_prob(y).sum(-1)

    above = one_dimensional_exact(log_density, -8.0, 8.0)
    return square_model, (y,), sign("theta"), {True: above, False: 1.0 - above}


CASES = {"two_components": two_components, "three_components": three_components,
         "lopsided": lopsided, "square": square}


def shares(labels, exact):
    """Each label's share of the draws (every label of ``exact``, 0 where none fell)."""
    return {label: sum(x == label for x in labels) / len(labels) for label in exact}


def share_bound(weight, restarts, sds=3.5):
    """How far a mode's share may be from its ``weight`` after ``restarts`` tempered restarts:
    ``sds`` standard errors of a model in which each restart is an independent label and the
    sojourns are of exponential length: sqrt(2 w (1 - w) / R)."""
    return sds * math.sqrt(2.0 * weight * (1.0 - weight) / restarts)


STATED_SDS = 4.0  # how many of the run's stated errors (kernel.mcse) a share may be off


def stated_errors(kernel, labels, exact):
    """Each label's stated error: ``kernel.mcse`` of its indicator over the cold draws."""
    return {label: float(kernel.mcse(torch.tensor([float(x == label) for x in labels],
                                                  dtype=torch.float64)))
            for label in exact}


def misweighed(found, exact, restarts, stated=None):
    """The labels whose share is further from the exact weight than the restarts allow, as
    text; a run that counted no restarts (a finite hot end) or none at all fails outright.
    With ``stated`` (label -> the run's stated error of its share), a share may also be
    :data:`STATED_SDS` of those off: restarts from a fitted q's leg bring labels in q's
    weights, which the sojourns correct, so they carry less than the independent labels the
    restart bound counts (a default mix3 run: 2982 restarts, bound 0.034, a share 0.038 off
    at 2.7 stated errors)."""
    if restarts is None:
        return ["restarts not counted: the hot end is not drawn exactly"]
    if restarts == 0:
        return ["no tempered restart"]
    bounds = {label: max(share_bound(w, restarts), STATED_SDS * (stated or {}).get(label, 0.0))
              for label, w in exact.items()}
    return [f"{label}: share {found[label]:.3f}, exact {w:.3f}, bound "
            f"{bounds[label]:.3f} with {restarts} restarts"
            for label, w in exact.items() if abs(found[label] - w) > bounds[label]]
