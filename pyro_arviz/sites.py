r"""
Which sites of a traced model an export reads, and which points of an observed site are data.

- Data sites (:func:`data_sites`): the sample sites with ``obs=`` and ``pyro.factor`` sites
  (likelihood terms; docs/design.md, "``pyro.factor`` terms").
  Not ``pyro.deterministic`` sites: Pyro writes them as observed sites of a masked
  :class:`~pyro.distributions.Delta` whose log density is 0, so they carry no data; they are
  functions of the latents and belong to ``posterior`` (:func:`deterministic_sites`). Not the
  latents that ``poutine.condition`` fixes (it marks them observed), nor plate subsample sites.
- Kept points (:func:`kept_points`): an observed site's points that ``poutine.mask`` or a
  distribution's ``.mask(...)`` (``obs_mask=`` is the former) leave in the likelihood.
"""

import torch
from pyro.distributions.torch_distribution import ExpandedDistribution, MaskedDistribution
from pyro.distributions.util import scale_and_mask
from pyro.poutine.util import site_is_subsample
from torch.distributions import Independent


def scored_log_prob(site):
    """A sample site's log density as the model scores it, elementwise: ``poutine.scale`` and
    masks applied, as ``Trace.compute_log_prob`` does (a message of a running model works too).
    The one form of a site's term in pyro_pt's ``lp`` and ``ll``, pyro_subnet's objective,
    curvature and evidence, and the exports' ``log_likelihood``."""
    log_p = site["fn"].log_prob(site["value"], *site["args"], **site["kwargs"])
    return scale_and_mask(log_p, site["scale"], site["mask"])


def is_deterministic(site):
    """Whether a trace node is a ``pyro.deterministic`` record (observed in form, not data)."""
    return site["type"] == "sample" and bool((site.get("infer") or {}).get("_deterministic"))


def data_sites(trace, conditioned=()):
    """``(name, site)`` of the observed sites of ``trace`` that hold data (module docstring);
    ``conditioned`` names the latents that ``poutine.condition`` fixed."""
    for name, site in trace.nodes.items():
        if (site["type"] == "sample" and site["is_observed"] and name not in conditioned
                and not site_is_subsample(site) and not is_deterministic(site)):
            yield name, site


def deterministic_sites(trace):
    """``(name, site)`` of the ``pyro.deterministic`` sites of ``trace``."""
    for name, site in trace.nodes.items():
        if is_deterministic(site):
            yield name, site


def _as_mask(mask, shape, name, where):
    mask = torch.as_tensor(mask).to(device="cpu", dtype=torch.bool)
    try:
        return torch.broadcast_to(mask, shape)
    except RuntimeError:
        raise ValueError(
            f"the mask of observed site '{name}' ({where}) has shape {tuple(mask.shape)}, which does "
            f"not broadcast to the site's batch shape {tuple(shape)}; give a mask of that shape"
        ) from None


def kept_points(site):
    r"""
    A boolean tensor of the site's batch shape (on the CPU): ``True`` at the points that count in
    its log-likelihood, ``False`` at those that ``poutine.mask`` or ``dist.mask(...)`` leave out.
    A scalar mask and one that broadcasts are expanded. A mask inside an event
    (``dist.Normal(...).mask(m).to_event(1)``) keeps a point while any of its elements counts.
    """
    fn, name = site["fn"], site["name"]
    shape = fn.batch_shape
    kept = torch.ones(shape, dtype=torch.bool)
    if site["mask"] is not None:
        kept = kept & _as_mask(site["mask"], shape, name, "poutine.mask")
    # Independent turns batch dims of the distribution it wraps into event dims: a mask below it
    # spans the site's batch dims and the first `inner` of its event dims
    inner, outer = 0, fn
    while isinstance(fn, (Independent, ExpandedDistribution, MaskedDistribution)):
        if isinstance(fn, Independent):
            inner += fn.reinterpreted_batch_ndims
        elif isinstance(fn, MaskedDistribution):
            mask = _as_mask(fn._mask, shape + outer.event_shape[:inner], name, "dist.mask")
            if inner:
                mask = mask.reshape(shape + (-1,)).any(-1)
            kept = kept & mask
        fn = fn.base_dist
    return kept
