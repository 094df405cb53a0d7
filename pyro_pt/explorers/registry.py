"""The explorer kinds a run can name, each declaring what the rest of the kernel needs to know.

``ParallelTempering(model, explorer=name)`` looks ``name`` up here; a callable or a Pyro
kernel class is the kind ``"callable"``. A kind declares:

- ``build(rung) -> RungExplorer``: the factory, given one :class:`Rung` (its split, beta,
  random stream, options and the block's groups). A kind whose rungs move together puts them
  into one :class:`~pyro_pt.explorers.contract.ExplorerGroup` through ``rung.group(...)``;
- ``gradients``: whether its moves take gradients of the potential. ``compile="auto"``
  compiles only the gradients' graph, so a kind without gradients never switches;
- ``steps``: what a switch to Inductor compiles besides the graph (the batched HMC's fused or
  lockstep leapfrog steps), or ``""``;
- ``check(options)``: refuses ``explorer_kwargs`` the kind does not take, naming them;
- ``on_divergence``: what the review advises when its cold chain diverges (None: nothing
  about the explorer; by default, NUTS).

Set-up, checkpoint state and diagnostics are methods of the explorers themselves
(:mod:`pyro_pt.explorers.contract`). A new explorer is a module with its class and factory,
and one call of :func:`register`.
"""

from dataclasses import dataclass
from typing import Callable

from ..random import RandomStream


@dataclass(frozen=True)
class ExplorerKind:
    """One kind of explorer (see the module)."""

    name: str
    build: Callable
    gradients: bool = True
    steps: str = ""
    check: Callable = None
    on_divergence: str = "try explorer='nuts'"
    label: str = None  # explorer_info["explorer"]; the name by default


class Rung:
    """
    What a kind's factory is given for one rung: its ``split`` (the model's, or against the
    reference: ``log_likelihood``, ``sample_prior``, ``initial_point`` and, for a
    :class:`~pyro_pt.potential.FunctionalSplit`, the batched potential), ``beta``, ``seed``
    and random :attr:`stream`, the run's ``options`` (``explorer_kwargs``) and ``explorer``
    argument (a name, a callable or a kernel class), and the block's groups so far.
    """

    def __init__(self, split, beta, seed, device, options, explorer, groups):
        self.split, self.beta, self.seed = split, beta, seed
        self.stream = RandomStream(seed, device=device)
        self.options, self.explorer, self._groups = options, explorer, groups

    def group(self, cls):
        """The block's group of class ``cls`` on this rung's split, made by ``cls(split,
        options)`` the first time: the rungs of a kind on one split move together."""
        key = (cls, id(self.split))
        if key not in self._groups:
            self._groups[key] = cls(self.split, self.options)
        return self._groups[key]


KINDS = {}


def register(kind):
    """Make ``kind`` (an :class:`ExplorerKind`) nameable as ``explorer=kind.name``."""
    if not isinstance(kind, ExplorerKind):
        raise TypeError(f"register takes an ExplorerKind, got {type(kind).__name__}")
    if KINDS.get(kind.name, kind) is not kind:
        raise ValueError(f"an explorer kind named {kind.name!r} is already registered; give "
                         "yours another name")
    KINDS[kind.name] = kind
    return kind


def names():
    """The names ``explorer=`` takes, besides a callable."""
    return tuple(name for name in KINDS if name != "callable")


def kind_of(explorer):
    """The :class:`ExplorerKind` of a run's ``explorer`` argument (a name or a callable); a
    ValueError for anything else."""
    if callable(explorer):
        return KINDS["callable"]
    if not (isinstance(explorer, str) and explorer in names()):  # "callable" is not a name
        raise ValueError(f"explorer must be one of {names()} or a callable potential_fn -> "
                         f"MCMCKernel, got {explorer!r}")
    return KINDS[explorer]
