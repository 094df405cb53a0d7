"""The ArviZ containers: groups as :class:`xarray.Dataset` objects (:func:`dataset`), and the
one step that depends on the installed ArviZ generation (:func:`build`)."""

import datetime

import numpy as np
import pyro
import xarray as xr

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
