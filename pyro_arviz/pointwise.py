r"""
The groups that come from tracing a model at each posterior draw: the pointwise log-likelihood,
a posterior predictive draw, the observed data and the ``pyro.deterministic`` sites.
"""

import itertools
from typing import NamedTuple

import pyro.poutine as poutine
import torch
import xarray as xr
from pyro.distributions import Unit

from .containers import dataset
from .masked import KeptPoints, check_same_points, check_some_data, data_groups
from .sites import data_sites, deterministic_sites, kept_points, scored_log_prob


class Traced(NamedTuple):
    """What :func:`pointwise_log_likelihood` returns: one :class:`xarray.Dataset` per group."""

    log_likelihood: xr.Dataset
    posterior_predictive: xr.Dataset
    observed_data: xr.Dataset
    deterministic: xr.Dataset  # for the posterior group


@torch.no_grad()
def pointwise_log_likelihood(model, samples, args=(), kwargs=None, seed=0, predictive=True,
                             log_likelihood=True):
    r"""
    Traces ``model(*args, **kwargs)`` conditioned on every draw of ``samples`` and returns

    - ``log_likelihood``: :math:`\log p(y_n \mid \theta^{(c, d)})` of every data site (an
      ``obs=`` site or a ``pyro.factor`` site, with the site's scale), shape
      ``(chain, draw) + batch_shape``, masked points left out (:mod:`pyro_arviz.masked`);
    - ``posterior_predictive``: one draw of each ``obs=`` site at each :math:`\theta^{(c, d)}`
      (from a forked random stream seeded with ``seed``, so the caller's stream is left as it
      was), and ``observed_data``: its observed values, both at the same points;
    - ``deterministic``: the value of each ``pyro.deterministic`` site at each draw, for
      ``posterior``.

    ``pyro.factor`` sites are in ``log_likelihood`` because they are likelihood terms, those
    :mod:`pyro_pt` tempers (a custom likelihood is written as one; docs/design.md,
    "``pyro.factor`` terms"); they have no predictive draw and no observed value. ``pyro.deterministic`` sites are not data
    (:mod:`pyro_arviz.sites`).

    One model call per draw: slower than a vectorized trace, but it needs nothing of the model.
    With ``log_likelihood=False`` the model runs once (for ``observed_data``), or at each draw
    when it has ``pyro.deterministic`` sites.

    :param dict samples: ``{site: tensor of shape (chain, draw) + site shape}``.
    :raises ValueError: when the model has no data site, when every point is masked, and when a
        site's mask keeps other points at another draw.
    :returns: :class:`Traced`.
    """
    kwargs = kwargs or {}
    if not samples:
        raise ValueError("no posterior samples to evaluate the log-likelihood at")
    lead = tuple(next(iter(samples.values())).shape[:2])
    loglik, pred, observed, recorded, kept = {}, {}, {}, {}, {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for c, d in itertools.product(range(lead[0]), range(lead[1])):
            draw = {k: v[c, d] for k, v in samples.items()}
            trace = poutine.trace(poutine.condition(model, data=draw)).get_trace(*args, **kwargs)
            for name, site in deterministic_sites(trace):
                if name not in draw:
                    recorded.setdefault(name, []).append(torch.as_tensor(site["value"]))
            for name, site in data_sites(trace, draw):
                points = kept_points(site)
                if name in kept and log_likelihood:  # else observed_data keeps the first draw's points
                    check_same_points(name, kept[name], points, f"draw {d} of chain {c}")
                kept.setdefault(name, points)
                if log_likelihood:
                    lp = scored_log_prob(site)
                    loglik.setdefault(name, []).append(torch.as_tensor(lp).expand(site["fn"].batch_shape))
                if isinstance(site["fn"], Unit):
                    continue
                if log_likelihood and predictive:
                    pred.setdefault(name, []).append(site["fn"].sample())
                observed[name] = site["value"]
            if not (log_likelihood or recorded):
                break  # observed_data needs one call; no deterministic site needs the others
    kept = {name: KeptPoints(name, points.numpy()) for name, points in kept.items()}
    if not kept:
        raise ValueError("the model has no observed site (pyro.sample with obs=..., or pyro.factor) "
                         "in this call; pass the model's arguments including the observed data")
    if log_likelihood:
        check_some_data(kept)

    def stack(d):
        return {k: torch.stack(v).reshape(lead + v[0].shape).detach().cpu().numpy() for k, v in d.items()}

    groups = data_groups(stack(loglik), stack(pred), {k: v.detach().cpu().numpy() for k, v in observed.items()},
                         kept)
    return Traced(groups["log_likelihood"], groups["posterior_predictive"], groups["observed_data"],
                  dataset(stack(recorded)))
