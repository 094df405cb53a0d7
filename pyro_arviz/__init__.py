r"""
The one bridge from Pyro results to ArviZ, for both of its generations.

ArviZ < 1 holds results in an :class:`arviz.InferenceData`; ArviZ >= 1 (``arviz-base``) holds
them in an :class:`xarray.DataTree` and ships no Pyro converter. Both are a set of named groups
of :class:`xarray.Dataset` with ``(chain, draw, ...)`` variables, so the exports of
:mod:`pyro_pt` and :mod:`pyro_subnet` compute their groups here once, as datasets, and only the
last step (:func:`build`) depends on the ArviZ that is installed: the two generations get the
same numbers.

:func:`from_pyro` is the one call for any result (an MCMC run of any kernel, a subnetwork
Laplace posterior), in place of ArviZ's ``az.from_pyro``, which ArviZ >= 1 no longer has. Nothing
here calls ArviZ's: the pointwise log-likelihood comes from tracing the model at each draw
(:func:`pointwise_log_likelihood`), which works for any model that runs, with ``PyroModule``
networks and ``X @ w`` regressions included (ArviZ's vectorized trace does not).

Every export follows the same rules (:mod:`pyro_arviz.sites`, :mod:`pyro_arviz.masked`):
``log_likelihood`` holds the data sites only (``obs=`` sites and, for MCMC runs, ``pyro.factor``
sites), so that ``az.loo`` finds one array in a model with one observed site; the
``pyro.deterministic`` sites are in ``posterior``, at each draw; masked observations are left
out of ``log_likelihood``, ``observed_data`` and ``posterior_predictive``, with coordinates that
give the kept points' original positions.
"""

import datetime

import numpy as np
import pyro
import xarray as xr
from pyro.infer import MCMC

# public names; they call this module's functions at run time
from .convert import from_pyro  # noqa: F401
from .pointwise import Traced, pointwise_log_likelihood  # noqa: F401

GROUP_ORDER = ("posterior", "posterior_predictive", "log_likelihood", "sample_stats",
               "observed_data", "constant_data")


def arviz_generation():
    """``1`` for ArviZ >= 1 (``xarray.DataTree``), ``0`` for earlier ones (``InferenceData``)."""
    import arviz as az

    return 1 if int(az.__version__.split(".")[0]) >= 1 else 0


def dataset(variables, sample_dims=("chain", "draw"), dims=None, coords=None, attrs=None):
    r"""
    An :class:`xarray.Dataset` of numpy arrays whose leading axes are ``sample_dims``; the other
    axes of variable ``v`` are named by ``dims[v]`` or, as ArviZ names them, ``v_dim_0, ...``.

    :param dict variables: ``{name: array}``.
    :param tuple sample_dims: the leading dimensions every variable has (``()`` for data).
    :param dict dims: ``{name: [dim, ...]}`` for the non-sample axes.
    :param dict coords: coordinates of the dataset (index or ``(dim, values)`` pairs).
    :param dict attrs: the dataset's attributes.
    """
    dims = dims or {}
    data = {}
    for name, value in variables.items():
        value = np.asarray(value)
        extra = value.ndim - len(sample_dims)
        if extra < 0:
            raise ValueError(f"variable '{name}' has {value.ndim} axes, fewer than the sample "
                             f"dimensions {tuple(sample_dims)}")
        names = list(dims.get(name, [f"{name}_dim_{i}" for i in range(extra)]))
        if len(names) != extra:
            raise ValueError(f"dims of '{name}' name {len(names)} axes, it has {extra} besides "
                             f"{tuple(sample_dims)}")
        data[name] = (tuple(sample_dims) + tuple(names), value)
    ds = xr.Dataset(data)
    for dim in sample_dims:
        if dim in ds.dims and dim not in ds.coords:
            ds = ds.assign_coords({dim: np.arange(ds.sizes[dim])})
    if coords:
        ds = ds.assign_coords({k: v for k, v in coords.items() if _dims_of(k, v) <= set(ds.dims)})
    ds.attrs.update(attrs or {})
    return ds


def _dims_of(name, value):
    return {value[0]} if isinstance(value, tuple) else {name}


def build(groups, library="pyro"):
    r"""
    The ArviZ container of ``groups``: an :class:`arviz.InferenceData` under ArviZ < 1, an
    :class:`xarray.DataTree` with the same groups under ArviZ >= 1. Empty groups are dropped;
    every group gets ArviZ's provenance attributes (``created_at``, ``inference_library``...).

    :param dict groups: ``{group name: xarray.Dataset}``.
    """
    stamp = {
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "inference_library": library,
        "inference_library_version": pyro.__version__,
    }
    named = {}
    for name in sorted(groups, key=lambda g: GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER)):
        ds = groups[name]
        if ds is None or not ds.data_vars:
            continue
        named[name] = ds.assign_attrs({**stamp, **ds.attrs})
    if arviz_generation() >= 1:
        return xr.DataTree.from_dict(named)
    import arviz as az

    return az.InferenceData(**named)


def groups_of(data):
    """The group names of an ``InferenceData`` or a ``DataTree`` (for code that serves both)."""
    if isinstance(data, xr.DataTree):
        return list(data.children)
    return list(data.groups())


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
