"""The explorer kinds a run can name: one list, :data:`KINDS`.

``ParallelTempering(model, explorer=name)`` looks ``name`` up in :data:`KINDS`, in that order
(the order :func:`names` gives and errors list); a callable or a Pyro kernel class is the kind
:data:`CALLABLE`. What a kind declares is :class:`~pyro_pt.explorers.contract.ExplorerKind`.
A new explorer is a module with its explorer and its kind, and one entry here.
"""

from .hmc_group import HMC
from .pyro_kernels import CALLABLE, NUTS, RWMH

__all__ = ["CALLABLE", "KINDS", "kind_of", "names"]

KINDS = [HMC, NUTS, RWMH]


def names():
    """The names ``explorer=`` takes, besides a callable, in :data:`KINDS`' order; a ValueError
    where two kinds share one (the second would never be found)."""
    out = tuple(kind.name for kind in KINDS)
    for name in out:
        if out.count(name) > 1 or name == CALLABLE.name:
            raise ValueError(f"two explorer kinds in pyro_pt.explorers.registry.KINDS are named "
                             f"{name!r} (or it is the name of a callable's kind); give yours "
                             "another name")
    return out


def kind_of(explorer):
    """The :class:`ExplorerKind` of a run's ``explorer`` argument (a name or a callable); a
    ValueError for anything else."""
    if callable(explorer):
        return CALLABLE
    known = names()
    if not (isinstance(explorer, str) and explorer in known):
        raise ValueError(f"explorer must be one of {known} or a callable potential_fn -> "
                         f"MCMCKernel, got {explorer!r}")
    return KINDS[known.index(explorer)]
