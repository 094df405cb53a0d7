r"""
:func:`from_pyro`: one call that exports any result of this project's plugins, or of Pyro's own
MCMC, to the ArviZ that is installed (what ``az.from_pyro`` did before ArviZ 1 dropped it).

This package imports neither plugin (each imports it): a plugin teaches :func:`from_pyro` its
classes with :func:`register` when it is imported, which it must be before one of its objects
exists. An MCMC run of an unregistered kernel gets :func:`~pyro_arviz.mcmc_groups`' groups.
"""

import numpy as np
import xarray as xr
from pyro.infer import MCMC

from .containers import build
from .masked import AXIS, ORIGINAL_SIZE
from .mcmc import mcmc_groups

ACCEPTED = ("a pyro.infer.MCMC after mcmc.run(...) (any kernel: NUTS, HMC, ParallelTempering) or "
            "the SubnetworkLaplacePosterior that guide.laplace_approximation(...) returns")

# class -> export, for results passed as they are and for the kernels of MCMC runs; class ->
# what to pass instead, for objects that are not results
_EXPORTS, _KERNEL_EXPORTS, _HINTS = {}, {}, {}


def register(cls, export=None, *, kernel=False, hint=None):
    r"""
    Teaches :func:`from_pyro` the instances of ``cls`` (and of its subclasses). A plugin calls
    it when it is imported, so that this package needs no import of the plugin.

    Example (what :mod:`pyro_pt.arviz` does)::

        pyro_arviz.register(ParallelTempering, to_inference_data, kernel=True,
                            hint="pass the MCMC object that ran the kernel")

    :param type cls: the class of a result, or of an MCMC kernel (``kernel=True``).
    :param callable export: ``export(obj, *args, log_likelihood=..., **kwargs)`` for a result,
        ``export(mcmc, log_likelihood=...)`` for a kernel, giving what :func:`build` gives; where
        ``log_likelihood`` is False, :func:`from_pyro` drops the ``log_likelihood`` and
        ``posterior_predictive`` groups an export made all the same.
    :param bool kernel: whether ``cls`` is an MCMC kernel, whose runs ``export`` exports.
    :param str hint: for an instance passed itself (a kernel, a guide before its posterior):
        what to pass instead, for the error message.
    """
    if export is not None:
        (_KERNEL_EXPORTS if kernel else _EXPORTS)[cls] = export
    if hint is not None:
        _HINTS[cls] = hint


def _registered(table, obj):
    """What ``table`` holds for the nearest class of ``obj`` in its MRO (as ``isinstance``), else None."""
    return next((table[c] for c in type(obj).__mro__ if c in table), None)


def _mcmc_export(mcmc, log_likelihood=True):
    return build(mcmc_groups(mcmc, log_likelihood=log_likelihood))


def from_pyro(obj=None, *args, log_likelihood=True, dims=None, coords=None, **kwargs):
    r"""
    The ArviZ export of a Pyro result: an ``arviz.InferenceData`` under ArviZ < 1, an
    ``xarray.DataTree`` with the same groups and numbers under ArviZ >= 1.

    - A :class:`~pyro.infer.MCMC` run of :class:`~pyro_pt.ParallelTempering` gives
      :func:`pyro_pt.to_inference_data`'s export (the tempering record in ``sample_stats``).
    - A run of any other kernel (NUTS, HMC, ...) gives :func:`mcmc_groups`' groups.
    - A :class:`~pyro_subnet.SubnetworkLaplacePosterior` gives
      :func:`pyro_subnet.to_inference_data`'s export; ``*args`` and ``**kwargs`` go there: the
      model's arguments with the observed data, ``num_samples``, ``predictive``... Its
      pointwise log-likelihood is in ``conditional_log_likelihood``, not ``log_likelihood``: its
      draws are no posterior draws, and ``az.loo`` refuses it; ``pyro_subnet.loo`` gives its
      leave-one-out, for ``az.compare``.

    The plugins' results are known through :func:`register`.
    An MCMC run is evaluated with the arguments of its ``mcmc.run(...)``, so it takes none here.
    With ``log_likelihood`` (the default) the export holds the pointwise log-likelihood of every
    data site, which ``az.loo`` and ``az.compare`` need, and a posterior predictive draw per
    posterior draw. ``log_likelihood=False`` leaves both groups out; for an MCMC run it also
    skips their cost, one model call per draw (unless the model has ``pyro.deterministic``
    sites, which ``posterior`` holds at each draw). Masked observations are not data: they are
    left out, with coordinates of the kept points' original positions (:mod:`pyro_arviz.masked`).

    ``dims`` names the axes after ``(chain, draw)`` of a variable wherever it appears (an
    observed site's ``log_likelihood`` takes the leading names, its batch axes); ``coords``
    gives a dimension its values, for all of a masked site's points (the kept ones keep theirs).
    Axes left unnamed are ``<variable>_dim_<i>``, as in ArviZ.

    Example::

        az.compare({"pt": from_pyro(pt_mcmc), "nuts": from_pyro(nuts_mcmc),
                    "subnet": pyro_subnet.loo(posterior, x, y, num_samples=2000)})

    :param obj: an MCMC that has run, or a subnetwork Laplace posterior (also accepted as
        ``posterior=``, ArviZ's keyword).
    :param bool log_likelihood: whether to compute ``log_likelihood`` and ``posterior_predictive``.
    :param dict dims: ``{variable: [dim, ...]}``.
    :param dict coords: ``{dim: values}``.
    :returns: ``arviz.InferenceData`` or ``xarray.DataTree``.
    """
    if obj is None and "posterior" in kwargs:  # az.from_pyro(posterior=mcmc), as ArviZ < 1 spelled it
        obj = kwargs.pop("posterior")
    if not isinstance(log_likelihood, bool):
        raise TypeError(f"log_likelihood must be True or False, got {log_likelihood!r}")
    export = _registered(_EXPORTS, obj)
    if export is not None:
        data = export(obj, *args, log_likelihood=log_likelihood, **kwargs)
    elif isinstance(obj, MCMC):
        if args or kwargs:
            raise TypeError(
                "from_pyro(mcmc) takes only log_likelihood=, dims= and coords=: it evaluates the model "
                f"with the arguments of mcmc.run(...); got {len(args)} positional and keyword arguments "
                f"{sorted(kwargs)}"
            )
        export = _registered(_KERNEL_EXPORTS, obj.kernel) or _mcmc_export
        data = export(obj, log_likelihood=log_likelihood)
    else:
        hint = _registered(_HINTS, obj)
        hint = f"; {hint}" if hint else ""
        raise TypeError(f"from_pyro expects {ACCEPTED}; got {type(obj).__name__}{hint}")
    if log_likelihood and not (dims or coords):
        return data
    groups = datasets(data)
    # an export may compute these all the same (the subnet posterior's lp sums the first)
    dropped = [groups.pop(g) for g in ("log_likelihood", "posterior_predictive")
               if not log_likelihood and g in groups]
    if not (dims or coords or dropped):
        return data
    # the groups keep the provenance attributes build gave them (inference_library among them)
    return build(label(groups, dims, coords))


def datasets(data):
    """``{group: xarray.Dataset}`` of an ``InferenceData`` or a ``DataTree`` (what :func:`build` takes)."""
    if isinstance(data, xr.DataTree):
        return {name: data[name].to_dataset() for name in data.children}
    return {name: data[name] for name in data.groups()}


def label(groups, dims=None, coords=None):
    r"""
    ``groups`` with the axes of each variable in ``dims`` renamed and the dimensions in
    ``coords`` given their values (see :func:`from_pyro`). An axis that lost masked points
    (:mod:`pyro_arviz.masked`) takes the values of all the site's points and keeps those of the
    points it kept.

    :param dict groups: ``{group name: xarray.Dataset}``.
    :raises ValueError: for a variable or dimension that no group has, a variable given more
        names than it has axes, or coordinates of the wrong length.
    """
    dims, coords = dict(dims or {}), dict(coords or {})
    for arg, value in (("dims", dims), ("coords", coords)):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{arg} must map names (str) to lists, got keys {list(value)}")
    names = {v for ds in groups.values() for v in ds.data_vars}
    unknown = sorted(set(dims) - names)
    if unknown:
        raise ValueError(f"dims names {unknown}, which are no variables of the export; its variables "
                         f"are {sorted(names)}")
    out = {group: _label(group, ds, dims) for group, ds in groups.items()}
    used = {d for ds in out.values() for d in list(ds.dims) + list(_positions(ds))}
    unknown = sorted(set(coords) - used)
    if unknown:
        raise ValueError(f"coords names dimensions {unknown} that no variable has; name them in dims, "
                         f"e.g. dims={{'obs': ['{unknown[0]}']}}")
    for group, ds in out.items():
        positions = _positions(ds)
        for dim, values in coords.items():
            if dim in positions:
                coord = ds.coords[dim]
                size = int(coord.attrs[ORIGINAL_SIZE])
                if len(values) != size:
                    raise ValueError(f"coords['{dim}'] has {len(values)} values, but dimension '{dim}' "
                                     f"has size {size} (in group '{group}', which keeps {coord.size} "
                                     "of them: the others are masked)")
                ds = ds.assign_coords({dim: (coord.dims, np.asarray(values)[coord.values])})
            elif dim in ds.dims:
                if len(values) != ds.sizes[dim]:
                    raise ValueError(f"coords['{dim}'] has {len(values)} values, but dimension '{dim}' "
                                     f"has size {ds.sizes[dim]} (in group '{group}')")
                ds = ds.assign_coords({dim: list(values)})
        out[group] = ds
    return out


def _positions(ds):
    """The coordinates of ``ds`` that hold the original positions of kept points, by name."""
    return {k: c for k, c in ds.coords.items() if ORIGINAL_SIZE in c.attrs}


def _label(group, ds, dims):
    variables, renamed = {}, {}
    for name, var in ds.data_vars.items():
        variable = var.variable
        if name in dims:
            new = list(dims[name])
            lead = [d for d in variable.dims if d in ("chain", "draw")]
            own = list(variable.dims[len(lead):])
            # a site whose kept points were flattened to one axis: its original axes are the
            # position coordinates along that axis, which take the names
            flat = own and sorted((k for k, c in _positions(ds).items() if c.dims == (own[0],) and k != own[0]),
                                  key=lambda k: int(ds.coords[k].attrs[AXIS]))
            axes = flat + own[1:] if flat else own
            if len(new) > len(axes):
                # a log-likelihood (ArviZ's group, or a plugin's such as pyro_subnet's conditional one)
                # drops an observed site's event axes
                if not group.endswith("log_likelihood"):
                    raise ValueError(f"dims['{name}'] names {len(new)} axes, but '{name}' has {len(axes)} "
                                     f"besides {tuple(lead)} (in group '{group}')")
                new = new[:len(axes)]
            renamed.update(zip(axes, new))
            new_dims = tuple(lead) + tuple(renamed.get(d, d) for d in own)
            variable = xr.Variable(new_dims, variable.data, variable.attrs)
        variables[name] = variable
    out = xr.Dataset(variables, attrs=ds.attrs)
    # coordinates whose dimensions survived the renaming (the sample indices, the ladder's), and
    # the kept points' positions under their axes' new names
    kept = {}
    for k, c in ds.coords.items():
        coord_dims = tuple(d if d in out.dims else renamed.get(d, d) for d in c.dims)
        if set(coord_dims) <= set(out.dims):
            kept[renamed.get(k, k) if ORIGINAL_SIZE in c.attrs else k] = xr.Variable(coord_dims, c.values, c.attrs)
    return out.assign_coords(kept)
