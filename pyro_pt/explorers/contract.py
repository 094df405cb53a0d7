r"""The contract every explorer meets: what the kernel asks of a rung's local move.

An explorer moves the replica at one rung with a kernel that leaves the rung's tempered
density :math:`\exp(lp(z) + \beta\, ll(z))` invariant. Explorers come in *groups*: the rungs of
a group move together, in one call (the batched HMC moves all tempered rungs of a process in
one trajectory); any other explorer, a Pyro kernel included, is a group of one. So the kernel
steps every group once per scan, never asking which kind of explorer it holds.

- :meth:`ExplorerGroup.setup` receives the members' starting states (in member order; None
  for a rung that draws its own, the prior rung) and the warmup's length, and returns
  ``[(state, ll), ...]`` as a step does. It is called once, after every rung of the block is
  built, and is the only set-up there is.
- :meth:`ExplorerGroup.step` receives the current state of each member (a dict site ->
  unconstrained tensor, in member order) and returns ``[(state, ll), ...]``: the new state
  and its log-likelihood :math:`ll(z)` as a float.
- **The log-likelihood comes free only for the tensors that were evaluated.** An explorer may
  return the ll its own potential computed only when the state it returns is the very tensor
  (the same object, or values bitwise equal) that potential was evaluated at; a state it
  builds or copies otherwise gets its ll from the rung's split (``split.log_likelihood(z)``),
  or the swaps act on the ll of another point.
- A rung's adapted state (step size, mass matrix, proposal scale) and random stream stay with
  the rung. Two events reach a rung between its moves, each only when it happens:

  * :meth:`RungExplorer.target_changed`: what the rung's caches describe changed under it,
    its beta aside: another state came to it (a swap), another graph computes its density
    (``compile="auto"``'s switch to Inductor) or its density itself changed (a refit of the
    variational reference). The explorer forgets every cached potential and gradient; its
    adaptation goes on as it was (the target is the same distribution, or one warmup is
    still adapting to).
  * :meth:`RungExplorer.set_beta`: the rung moved to another inverse temperature (ladder
    adaptation or growth, during warmup), called only when beta changed. Besides forgetting
    its caches, an explorer may restart the adaptation that depends on beta (the batched HMC
    restarts its step size's averaging).
- :meth:`RungExplorer.diagnostics` returns at least ``"divergences"`` (a list) and
  ``"acceptance rate"`` (the share of sampling-phase proposals accepted, as the explorer counts
  them; docs/layout.md's glossary tells it from the acceptance probability and the move
  rate); :meth:`logging` the progress-bar fields.
- Checkpoints: :meth:`RungExplorer.state_dict` is the rung's adapted state and random streams
  (by default the attributes its class declares in ``STATE``, every other one in ``REBUILT``:
  :mod:`~pyro_pt.checkpoint_state`);
  :meth:`ExplorerGroup.load_state_dict` puts its members' states back, in member order, into a
  freshly set-up group (on any number of processes: a rung's state never depends on which
  others shared its group).
- A *kind* (:class:`ExplorerKind`, what ``explorer=`` names) declares everything the rest of
  the kernel asks about its explorers: how a rung's is built, its label, whether it takes
  gradients, what a compile switch compiles for it, which options it takes, what it reports,
  whether warmup raised its target after divergences and what to do when its cold chain
  diverges. The kinds are one list, :data:`pyro_pt.explorers.registry.KINDS`.

The interface has the shape of Pigeons.jl's (Surjanovic et al. 2023, "Pigeons.jl: distributed
sampling from intractable distributions").
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

from ..checkpoint_state import capture, restore
from ..random import RandomStream

# Past it a higher target acceptance only shortens the step further: no advice goes beyond it,
# and the batched HMC's warmup raises no target past it (hmc_warmup.MAX_TARGET_ACCEPT_PROB).
HIGHEST_USEFUL_TARGET = 0.99


@dataclass(frozen=True)
class ExplorerKind:
    """
    One kind of explorer, named by ``ParallelTempering(model, explorer=name)``; listed in
    :data:`pyro_pt.explorers.registry.KINDS`.

    :param str name: what ``explorer=`` takes.
    :param callable build: ``build(rung) -> RungExplorer``, the factory, given one
        :class:`Rung`. A kind whose rungs move together puts them into one
        :class:`ExplorerGroup` through ``rung.group(...)``.
    :param str label: ``explorer_info["explorer"]``; the name by default.
    :param bool gradients: whether its moves take gradients of the potential.
        ``compile="auto"`` compiles only the gradients' graph, so a kind without gradients
        never switches.
    :param str steps: what a switch to Inductor compiles besides the graph (the batched HMC's
        fused or lockstep leapfrog steps), or ``""``.
    :param callable check: ``check(explorer_kwargs)`` refuses options the kind does not take,
        naming them; None takes any (its kernel refuses them when built).
    :param tuple reports: the keys of its explorers' :meth:`RungExplorer.diagnostics` beyond
        the contract's ``"divergences"`` and ``"acceptance rate"`` (some only when they apply).
    :param callable raised_target: ``raised_target(diagnostics)``: the target acceptance warmup
        raised after divergences, from one of its rungs' diagnostics, or None (None: it never
        raises one). The kernel's ``raised_target_accept_probs``.
    :param str target_option: the ``explorer_kwargs`` entry that sets its target acceptance,
        which a diverging cold chain is told to raise (None: it has none).
    :param str instead: what else to try when its cold chain diverges (None: nothing).
    """

    name: str
    build: Callable
    label: str = None
    gradients: bool = True
    steps: str = ""
    check: Callable = None
    reports: tuple = ()
    raised_target: Callable = None
    target_option: str = "target_accept_prob"
    instead: str = "try explorer='nuts'"

    @property
    def title(self):
        """``explorer_info["explorer"]``: the label, else the name."""
        return self.label or self.name

    def on_divergence(self, raised=()):
        """
        What to try about the explorer when the cold chain diverged while sampling (the review,
        :mod:`pyro_pt.health`): a list of phrases. ``raised``: the targets warmup raised.

        :param list raised: the target acceptances warmup raised after divergences.
        """
        advice = []
        # None raised: the default 0.8 is where it was, and 0.95 the next step worth a try.
        highest = max(raised, default=0.9)
        if self.target_option and highest < HIGHEST_USEFUL_TARGET:
            advice.append(f"pass explorer_kwargs={{'{self.target_option}': "
                          f"{1 - (1 - highest) / 2:.3g}}}")
        if self.instead:
            advice.append(self.instead)
        return advice


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


class ExplorerGroup(ABC):
    """Rungs that move together."""

    @abstractmethod
    def setup(self, states, warmup_steps):
        """Start every member from ``states`` (None: it draws its own) for a warmup of
        ``warmup_steps`` scans: ``[(state, ll), ...]``."""

    @abstractmethod
    def step(self, states):
        """One local move of every member from ``states``: ``[(state, ll), ...]``."""

    @abstractmethod
    def load_state_dict(self, states, device):
        """Put back the members' :meth:`RungExplorer.state_dict`, in member order."""

    def engine_info(self):
        """What runs the group's steps, for ``explorer_info`` (a dict; nothing by default)."""
        return {}


class RungExplorer(ABC):
    """One rung's handle: its group, and the hooks the kernel calls between moves."""

    @property
    @abstractmethod
    def group(self):
        """The :class:`ExplorerGroup` this rung moves with."""

    @property
    @abstractmethod
    def beta(self):
        """The inverse temperature the rung's moves target now."""

    @abstractmethod
    def set_beta(self, beta):
        """Target inverse temperature ``beta`` (not the current one) from the next move on."""

    @abstractmethod
    def target_changed(self):
        """The state at the rung, or the graph or density its potential is computed by, changed
        (a swap, a compile switch, a reference refit): forget everything cached about them."""

    @abstractmethod
    def diagnostics(self):
        """``{"divergences": [...], "acceptance rate": float, ...}``."""

    @abstractmethod
    def logging(self):
        """Progress-bar fields (a dict of short strings)."""

    def state_dict(self):
        """The rung's adapted state and random streams, for a checkpoint: by default the
        attributes its class declares in ``STATE`` (:mod:`pyro_pt.checkpoint_state`)."""
        return capture(self)


class SingleRungExplorer(RungExplorer, ExplorerGroup):
    """An explorer that is a group of one: :meth:`move` moves its one rung."""

    @property
    def group(self):
        return self

    def setup(self, states, warmup_steps):
        (z,) = states
        return [self.start(z, warmup_steps)]

    def step(self, states):
        (z,) = states
        return [self.move(z)]

    def load_state_dict(self, states, device):
        (state,) = states
        restore(self, state, device)

    @abstractmethod
    def start(self, z, warmup_steps):
        """Start from ``z`` for a warmup of ``warmup_steps`` scans: ``(state, ll)``."""

    @abstractmethod
    def move(self, z):
        """One local move from ``z``: ``(state, ll)``."""
