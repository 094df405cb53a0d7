r"""The reference of a tempered run, what its hottest rung (beta = 0) samples: ``"auto"`` (the
default: the prior, joined by a mixture q's leg where warmup finds separated modes,
:mod:`~pyro_pt.reference.joining`), ``"prior"``, ``"variational"`` (a Gaussian q first matched to the prior's moments, then refitted
to the cold chain, :mod:`~pyro_pt.reference.gaussian`), ``"mixture"`` (the same start, then a
Gaussian mixture fitted to the cold chain, :mod:`~pyro_pt.reference.mixture`) or a fitted
Pyro autoguide's Gaussian
(:mod:`~pyro_pt.reference.guide`); rung beta then targets
:math:`(1-\beta)\log q + \beta(lp + ll)` (:mod:`~pyro_pt.reference.split`). What is
computed, and why: docs/design.md, "A fitted reference" (Surjanovic, Syed, Bouchard-Cote,
Campbell 2022, "Parallel tempering with a variational reference", NeurIPS).
"""

import torch

from pyro.infer.autoguide import AutoGuide

from ..potential import FlatLayout
from ..random import RandomStream
from .gaussian import GaussianReference
from .guide import from_guide
from .mixture import MixtureReference
from .split import ReferencedSplit

REFERENCES = ("auto", "prior", "variational", "mixture")
FITTED = ("variational", "mixture")  # the references whose q is every run's hot end
AUTO = "auto"  # the prior, then q's leg where the cold draws show separated modes
PRIOR_DRAWS = 200  # draws of the prior the first variational reference is matched to


def is_prior(reference):
    """Whether ``reference`` starts the run with the prior as its only hot end: ``"prior"``,
    or ``"auto"`` (a guide is compared by identity, never by ``==``)."""
    return isinstance(reference, str) and reference in ("prior", AUTO)


def is_auto(reference):
    """Whether ``reference`` is ``"auto"``: q is fitted in warmup, its leg joins on modes."""
    return isinstance(reference, str) and reference == AUTO


def is_fitted(reference):
    """Whether ``reference`` is refitted to the cold chain in warmup (``"variational"``,
    ``"mixture"``); a guide is never compared by ``==``."""
    return isinstance(reference, str) and reference in FITTED


def check_reference(reference):
    """Raise a clear error unless ``reference`` is one the kernel takes."""
    if isinstance(reference, AutoGuide):
        return
    if not isinstance(reference, str) or reference not in REFERENCES:
        raise ValueError(f"reference must be 'auto', 'prior', 'variational', 'mixture' or a "
                         "fitted Pyro autoguide (e.g. AutoMultivariateNormal after SVI), got "
                         f"{reference!r}")


def make_reference(reference, split, seed, user_transforms=None):
    """The q of ``reference`` on ``split`` (None for ``"prior"``): a fitted guide's Gaussian,
    or the first q of a fitted reference, a Gaussian matched to the prior's moments (one
    component of a :class:`MixtureReference` for ``"mixture"`` and ``"auto"``); ``seed`` seeds the prior
    draws of that first fit (the same on every rank, so every rank fits the same q)."""
    check_reference(reference)
    if isinstance(reference, AutoGuide):
        return from_guide(reference, split, user_transforms)
    if reference == "prior":
        return None
    if reference == AUTO:
        # used only once fitted to the cold draws: no draw of the model's prior, and its start
        # (init_strategy's) in its own stream, so that a run it never joins is the prior's
        with RandomStream(seed, device=split.device):
            q = _unit_gaussian(split)
    else:
        q = _first_gaussian(split, seed)
    if reference == "variational":
        return q
    tril = torch.diag(q.scale) if q.scale_tril is None else q.scale_tril
    return MixtureReference.gaussian(q.mean, tril, "the cold chain's draws" if reference == AUTO
                                     else q.origin)


def _unit_gaussian(split):
    z0 = split.initial_point()
    flat = FlatLayout.of(z0, split.latent_names).flatten(z0)
    return GaussianReference(flat, scale=torch.ones_like(flat, dtype=torch.float64),
                             origin="a unit Gaussian at the initial point")


def _first_gaussian(split, seed):
    names = split.latent_names
    try:
        split.check_proper_prior()
    except ValueError:  # an improper prior cannot be drawn from: start from a unit Gaussian
        return _unit_gaussian(split)
    draws = []
    with RandomStream(seed, device=split.device):
        for _ in range(PRIOR_DRAWS):
            z, _ = split.sample_prior()
            draws.append(FlatLayout.of(z, names).flatten(z).to(torch.float64).cpu())
    q = GaussianReference(draws[0], scale=torch.ones_like(draws[0]), origin="the prior's moments")
    q.fit(torch.stack(draws), independent=True)
    q.fits = 0
    q.origin = "the prior's moments, then the cold chain's draws"
    return q


__all__ = ["GaussianReference", "MixtureReference", "REFERENCES", "ReferencedSplit",
           "check_reference", "from_guide", "is_auto", "is_fitted", "is_prior",
           "make_reference"]
