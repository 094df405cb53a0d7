"""The groups of a :class:`~pyro.infer.MCMC` run of any kernel."""

import numpy as np
from pyro.infer import MCMC

from .containers import dataset
from .pointwise import pointwise_log_likelihood


def check_has_run(mcmc, caller):
    """A ``TypeError`` unless ``mcmc`` is a :class:`~pyro.infer.MCMC`, a ``ValueError`` unless it has run."""
    if not isinstance(mcmc, MCMC):
        raise TypeError(f"{caller} expects a pyro.infer.MCMC after mcmc.run(...), got {type(mcmc).__name__}")
    if getattr(mcmc, "_samples", None) is None:
        raise ValueError(f"{caller} needs the MCMC's samples, but it has not run: call mcmc.run(*data) first")


def mcmc_groups(mcmc, log_likelihood=True):
    r"""
    The groups ArviZ keeps for a :class:`~pyro.infer.MCMC` run, computed from its samples and
    model: ``posterior`` (constrained, grouped by chain, with the ``pyro.deterministic`` sites
    at each draw), ``log_likelihood`` (data sites only, masked points left out),
    ``posterior_predictive``, ``observed_data`` and, in ``sample_stats``, ``diverging`` where
    the kernel reports divergences (see :func:`pointwise_log_likelihood`).

    :param bool log_likelihood: compute ``log_likelihood`` and ``posterior_predictive`` (one model
        call per draw); without, the model runs once, for ``observed_data``, or once per draw
        when it has ``pyro.deterministic`` sites.
    :returns: ``{group name: xarray.Dataset}`` for :func:`build`.
    """
    check_has_run(mcmc, "mcmc_groups")
    samples = mcmc.get_samples(group_by_chain=True)
    model = mcmc.kernel.model
    args, kwargs = getattr(mcmc, "_args", ()), getattr(mcmc, "_kwargs", {})
    traced = pointwise_log_likelihood(model, samples, args, kwargs, log_likelihood=log_likelihood)
    num_chains, num_draws = next(iter(samples.values())).shape[:2]
    stats = {}
    divergences = mcmc.diagnostics().get("divergences")
    if divergences:
        diverging = np.zeros((num_chains, num_draws), dtype=bool)
        for c, chain in enumerate(sorted(divergences, key=lambda k: int(k.split()[-1]))):
            diverging[c, list(divergences[chain])] = True
        stats["diverging"] = diverging
    posterior = dataset({k: v.detach().cpu().numpy() for k, v in samples.items()})
    return {
        "posterior": posterior.merge(traced.deterministic),
        "log_likelihood": traced.log_likelihood,
        "posterior_predictive": traced.posterior_predictive,
        "sample_stats": dataset(stats),
        "observed_data": traced.observed_data,
    }
