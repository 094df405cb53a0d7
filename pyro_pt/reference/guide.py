"""A fitted Pyro autoguide as a tempering reference: its Gaussian in the split's flat space.

Pyro's autoguides work in the unconstrained space of ``biject_to(site.support)``, the space of
:class:`~pyro_pt.potential.ModelSplit` unless ``transforms`` replaces a site's transform.
Taken: :class:`~pyro.infer.autoguide.AutoNormal` (per-site ``locs`` and ``scales``) and the
:class:`~pyro.infer.autoguide.AutoContinuous` guides whose ``get_posterior()`` is a Gaussian
(``AutoDiagonalNormal``, ``AutoMultivariateNormal``, ``AutoLowRankMultivariateNormal``,
``AutoLaplaceApproximation`` through its ``laplace_approximation()``), their flat vector
reordered into the split's sorted site order.
"""

import itertools
import operator

import torch

from pyro.infer.autoguide import AutoContinuous, AutoGuide, AutoNormal

from .gaussian import GaussianReference


def _check_sites(guide, split, sizes):
    names = split.latent_names
    if sorted(sizes) != names:
        raise ValueError(
            f"reference={type(guide).__name__} was fitted on the latent sites {sorted(sizes)}, "
            f"but the model given to ParallelTempering has {names}: fit the guide on this "
            "model and data")
    for name in names:
        expected = split.transforms[name](split.values[name]).numel()
        if sizes[name] != expected:
            raise ValueError(
                f"reference={type(guide).__name__}: latent site {name!r} has {sizes[name]} "
                f"unconstrained values in the guide but {expected} in the model: fit the "
                "guide on this model and data")


def _guide_sites(guide):
    return [name for name, site in guide.prototype_trace.iter_stochastic_nodes()
            if not site["is_observed"]]


def _auto_normal(guide, split):
    means = {name: operator.attrgetter(name)(guide.locs).detach().reshape(-1)
             for name in _guide_sites(guide)}
    _check_sites(guide, split, {name: value.numel() for name, value in means.items()})
    names = split.latent_names
    scales = [operator.attrgetter(name)(guide.scales).detach().reshape(-1) for name in names]
    return GaussianReference(torch.cat([means[n] for n in names]), scale=torch.cat(scales),
                             origin=type(guide).__name__)


def _continuous(guide, split):
    if hasattr(guide, "laplace_approximation"):  # its own posterior is the MAP's Delta
        guide = guide.laplace_approximation(*split.model_args, **split.model_kwargs)
    order = _guide_sites(guide)
    sizes = {name: split.transforms[name](split.values[name]).numel() for name in order
             if name in split.values}
    _check_sites(guide, split, {name: sizes.get(name, 0) for name in order})
    posterior = guide.get_posterior()
    mean = posterior.mean.detach().reshape(-1)
    if mean.numel() != sum(sizes.values()):
        raise ValueError(f"reference={type(guide).__name__} has {mean.numel()} unconstrained "
                         f"values, the model {sum(sizes.values())}: fit the guide on this model")
    try:
        covariance = posterior.covariance_matrix.detach()
    except (AttributeError, NotImplementedError):
        covariance = torch.diag(posterior.variance.detach().reshape(-1))
    starts = dict(zip(order, itertools.accumulate([sizes[n] for n in order], initial=0)))
    index = torch.cat([torch.arange(starts[n], starts[n] + sizes[n]) for n in split.latent_names])
    mean, covariance = mean[index], covariance[index][:, index].to(torch.float64)
    tril, info = torch.linalg.cholesky_ex(covariance)
    if int(info) != 0:
        raise ValueError(f"reference={type(guide).__name__}: its covariance is not positive "
                         "definite, so it is not a distribution to draw from")
    return GaussianReference(mean, scale_tril=tril, origin=type(guide).__name__)


def from_guide(guide, split, user_transforms=None):
    """The :class:`GaussianReference` of a fitted autoguide on ``split``'s flat space
    (``user_transforms``: the kernel's ``transforms``, which a guide's space does not know)."""
    if not isinstance(guide, AutoGuide):
        raise TypeError(f"reference must be 'prior', 'variational' or a fitted Pyro autoguide, "
                        f"got {type(guide).__name__}")
    changed = sorted(set(split.latent_names) & set(user_transforms or {}))
    if changed:
        raise ValueError(f"reference={type(guide).__name__} lives in biject_to's unconstrained "
                         f"space, but transforms= replaces the transform of {changed}: leave "
                         "transforms out, or use reference='variational'")
    if getattr(guide, "prototype_trace", None) is None:
        raise ValueError(
            f"reference={type(guide).__name__} has not been run on the model yet: fit it "
            "first (e.g. pyro.infer.SVI with Trace_ELBO), then pass it as reference")
    if isinstance(guide, AutoNormal):
        return _auto_normal(guide, split)
    if isinstance(guide, AutoContinuous):
        return _continuous(guide, split)
    raise TypeError(f"reference={type(guide).__name__}: only AutoNormal and the Gaussian "
                    "AutoContinuous guides (AutoDiagonalNormal, AutoMultivariateNormal, "
                    "AutoLowRankMultivariateNormal, AutoLaplaceApproximation) can be a "
                    "reference; fit one of those, or use reference='variational'")
