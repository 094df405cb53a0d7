r"""
The ArviZ exports of the ranks' shards, gathered into one, for :func:`pyro_subnet.loo` on all
the data.

Across processes every rank holds the same posterior (:mod:`pyro_subnet.comm`) and exports its
own shard: ``to_inference_data(posterior, x_shard, y_shard)``. With the same seed set on every
rank before the export, the ranks' draws are the same, so their pointwise log-likelihoods are
columns of one matrix (draws x all data points): :func:`gather_log_likelihood` concatenates them
(the export's ``conditional_log_likelihood``, :mod:`pyro_subnet.arviz`)
in rank order along each observed site's data dimension (its first after ``chain`` and
``draw``), after checking that the draws agree.
"""

import hashlib

import numpy as np

import pyro_arviz
from pyro_arviz.convert import datasets

from .arviz import CONDITIONAL
from .comm import agree, make_comm


def _digest(ds):
    h = hashlib.sha256()
    for name in sorted(ds.data_vars):
        h.update(name.encode() + np.ascontiguousarray(ds[name].values).tobytes())
    return h.hexdigest()[:16]


def _concat(parts):
    """One dataset from the ranks' ``parts``: each variable along its data dimension, renumbered."""
    import xarray as xr

    out = {}
    for name in parts[0].data_vars:
        dim = [d for d in parts[0][name].dims if d not in ("chain", "draw")][0]
        joined = xr.concat([p[name].drop_vars(dim, errors="ignore") for p in parts], dim=dim)
        out[name] = joined.assign_coords({dim: np.arange(joined.sizes[dim])})
    return xr.Dataset(out, attrs=parts[0].attrs)


def gather_log_likelihood(idata, process_group=None):
    r"""
    The ``posterior`` of the ranks' exports (the same on every rank) with their
    ``conditional_log_likelihood`` and ``observed_data`` concatenated in rank order, on every
    rank: an ``arviz.InferenceData`` (an ``xarray.DataTree`` under ArviZ >= 1) for
    :func:`pyro_subnet.loo` over all the data. In one process it is ``idata``'s three groups.
    Without the model, that leave-one-out neither moves the MAP nor corrects for the Laplace
    Gaussian (the shards' ``lp`` are not gathered), and it warns so.

    Example (on every rank)::

        pyro.set_rng_seed(1)                   # the same draws on every rank
        idata = to_inference_data(posterior, x_shard, y_shard, num_samples=1000)
        pyro_subnet.loo(gather_log_likelihood(idata))

    Data points keep no coordinates of their own: point ``i`` of the result is the ``i``-th
    in rank order. The all-gather carries draws x points floats per rank.

    :param idata: this rank's :func:`~pyro_subnet.to_inference_data` of its shard.
    :param process_group: as for :class:`~pyro_subnet.SubnetworkLaplace`.
    :raises ValueError: on every rank, naming the rank, where the ranks' draws or sites differ
        (a different seed, or another posterior).
    """
    groups = datasets(idata)
    missing = [g for g in ("posterior", CONDITIONAL) if g not in groups]
    if missing:
        raise ValueError(f"idata has no {missing} group(s): pass the export of to_inference_data(posterior, x, y)")
    comm = make_comm(process_group)
    report = {"posterior draws (sha256)": _digest(groups["posterior"]),
              "observed sites": sorted(groups[CONDITIONAL].data_vars)}
    agree(comm, None, report, "gather_log_likelihood (set the same seed on every rank before the export)")
    mine = {g: groups[g] for g in (CONDITIONAL, "observed_data") if g in groups}
    parts = comm.all_gather_object(mine, what="all_gather of the pointwise log-likelihoods")
    out = {"posterior": groups["posterior"]}
    for group in mine:
        out[group] = _concat([p[group] for p in parts])
    return pyro_arviz.build(out, library="pyro_subnet")
