r"""
Masked observations are left out of the data groups, with the original positions of the rest.

A point that ``poutine.mask`` (or ``dist.mask(...)``, or ``obs_mask=``) takes out of an observed
site is not data: the model is conditioned on the other points only. Its log density is 0 in a
trace, and exported as 0 it would be a point whose every draw has the same log-likelihood:
``az.loo`` gives it a Pareto k of infinity (and counts it in elpd as :math:`\log 1`). Marking it
NaN does not help, since ``az.loo`` does not skip NaN. So the export leaves such points out of
``log_likelihood`` and, for the groups to describe the same points, out of ``observed_data``
(whose values there are often placeholders for missing data) and ``posterior_predictive``; ArviZ's
functions that pair these groups (``loo_pit``, ``plot_ppc``) then agree. Predictions at the masked
points (imputing them) are what ``pyro.infer.Predictive`` gives.

To map the kept points back:

- an axis of the site that loses points keeps its name (``y_dim_0``, or what ``dims=`` calls it)
  and gets a coordinate with the original positions of the points it keeps, so that
  ``ds.sel(y_dim_0=7)`` is the site's point 7; a mask that is a product of one mask per axis
  (one over a plate, or one broadcast across another plate) keeps the array's shape that way;
- any other mask (a pattern over two plates: missing entries of a matrix) flattens the kept
  points to one axis ``<site>_point``, with one coordinate per original axis (``y_dim_0``,
  ``y_dim_1``) holding each kept point's position along it.

Those coordinates carry the attributes ``original_size`` (the axis' length before) and
``site_axis`` (which axis of the site they index): ``coords=``
of :func:`pyro_arviz.from_pyro` takes the labels of all the points and keeps those of the kept
ones. A site masked entirely is left out of the groups. A mask that is a scalar or broadcasts
is expanded to the site's batch shape first. The same points must be kept at every draw: the
exports refuse, naming the site, a mask that depends on the latents.
"""

import numpy as np

from .containers import dataset

# attributes of a coordinate of original positions: the axis' length and which axis of the site it is
ORIGINAL_SIZE, AXIS = "original_size", "site_axis"


class KeptPoints:
    r"""
    Which points of one observed site are data, and how arrays of the site lose the others.

    :param str name: the site.
    :param kept: boolean array of the site's batch shape (see :func:`pyro_arviz.sites.kept_points`).
    """

    def __init__(self, name, kept):
        self.name = name
        self.kept = np.asarray(kept, dtype=bool)
        rank = self.kept.ndim
        # a point is kept along axis i when any point of its slice is: if every combination of
        # kept slices is kept, the mask is a product of one mask per axis (a slice per axis)
        self.along = [self.kept.any(axis=tuple(j for j in range(rank) if j != i)) for i in range(rank)]
        product = np.ones(self.kept.shape, dtype=bool)
        for i, along in enumerate(self.along):
            product &= along.reshape([-1 if j == i else 1 for j in range(rank)])
        self.per_axis = bool((product == self.kept).all())

    @property
    def all(self):
        return bool(self.kept.all())

    @property
    def none(self):
        return not self.kept.any()

    def select(self, value, lead):
        r"""
        ``value`` (``lead`` sample axes, then the site's batch axes, then its event axes) at the
        kept points, with the names of its axes after ``lead`` and the coordinates that map the
        kept points back (module docstring).

        :returns: ``(array, dims, coords)`` for :func:`pyro_arviz.dataset`.
        """
        value = np.asarray(value)
        rank = self.kept.ndim
        names = [f"{self.name}_dim_{i}" for i in range(value.ndim - lead)]
        if self.all:
            return value, names, {}
        if self.per_axis:
            coords = {}
            for i, along in enumerate(self.along):
                if along.all():
                    continue
                positions = np.flatnonzero(along)
                value = np.take(value, positions, axis=lead + i)
                coords[names[i]] = (names[i], positions, {ORIGINAL_SIZE: along.size, AXIS: i})
            return value, names, coords
        flat = value.reshape(value.shape[:lead] + (-1,) + value.shape[lead + rank:])
        index = np.flatnonzero(self.kept)
        point = f"{self.name}_point"
        positions = np.unravel_index(index, self.kept.shape)
        coords = {names[i]: (point, positions[i], {ORIGINAL_SIZE: self.kept.shape[i], AXIS: i})
                  for i in range(rank)}
        return np.take(flat, index, axis=lead), [point] + names[rank:], coords


def data_groups(log_likelihood, posterior_predictive, observed_data, kept):
    r"""
    The datasets of ``log_likelihood``, ``posterior_predictive`` (both ``(chain, draw, ...)``)
    and ``observed_data``, each site at the points ``kept`` keeps (module docstring).

    :param dict log_likelihood: ``{site: array}``, as for the other two groups.
    :param dict kept: ``{site: KeptPoints}``; a site without an entry keeps all its points.
    :returns: ``{group name: xarray.Dataset}``.
    """
    groups = {}
    for group, values, sample_dims in (("log_likelihood", log_likelihood, ("chain", "draw")),
                                       ("posterior_predictive", posterior_predictive, ("chain", "draw")),
                                       ("observed_data", observed_data, ())):
        variables, dims, coords = {}, {}, {}
        for name, value in values.items():
            points = kept.get(name)
            if points is None:
                variables[name] = value
            elif not points.none:
                variables[name], dims[name], own = points.select(value, len(sample_dims))
                coords.update(own)
        groups[group] = dataset(variables, sample_dims=sample_dims, dims=dims, coords=coords)
    return groups


def check_some_data(kept):
    """A ``ValueError`` when every point of every observed site is masked: no data to export."""
    if kept and all(points.none for points in kept.values()):
        raise ValueError(
            f"every point of the observed sites {sorted(kept)} is masked (poutine.mask, dist.mask or "
            "obs_mask), so there is no data to compute a log-likelihood on; export with "
            "log_likelihood=False, or pass data that the mask keeps"
        )


def check_same_points(name, first, kept, where, reference="the first draw",
                      remedy="export with log_likelihood=False"):
    """A ``ValueError`` naming the site when the points it keeps at ``where`` (a boolean tensor or
    array of its batch shape) differ from those it keeps at ``reference`` (``first``); the
    message ends with ``remedy``, the export's other way out."""
    first, kept = np.asarray(first, dtype=bool), np.asarray(kept, dtype=bool)
    if not np.array_equal(first, kept):
        raise ValueError(
            f"the mask of observed site '{name}' keeps other points at {where} ({int(kept.sum())} "
            f"of {kept.size}) than at {reference} ({int(first.sum())}): it depends on the latents, "
            "and masked points are left out of log_likelihood, which needs one set of points for "
            f"every draw. Compute the mask from the data alone, or {remedy}"
        )
