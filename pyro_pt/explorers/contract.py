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
  the rung; the states move on swaps, after which the kernel calls
  :meth:`RungExplorer.replace_state` so that no cached potential or gradient of the old state
  survives. :meth:`RungExplorer.set_beta` moves the rung to a new inverse temperature (ladder
  adaptation, during warmup).
- :meth:`RungExplorer.diagnostics` returns at least ``"divergences"`` (a list) and
  ``"acceptance rate"`` (the share of sampling-phase moves accepted); :meth:`logging` the
  progress-bar fields.
- Checkpoints: :meth:`RungExplorer.state_dict` is the rung's adapted state and random streams
  (by default every attribute that is state, :func:`~pyro_pt.checkpoint_state.capture`);
  :meth:`ExplorerGroup.load_state_dict` puts its members' states back, in member order, into a
  freshly set-up group (on any number of processes: a rung's state never depends on which
  others shared its group).
- What kind of explorer a rung runs is known to :mod:`pyro_pt.explorers.registry` alone.

The interface has the shape of Pigeons.jl's (Surjanovic et al. 2023, "Pigeons.jl: distributed
sampling from intractable distributions").
"""

from abc import ABC, abstractmethod

from ..checkpoint_state import capture, restore


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
        """Target inverse temperature ``beta`` from the next move on."""

    @abstractmethod
    def replace_state(self):
        """A swap put another state here: forget everything cached about the old one."""

    @abstractmethod
    def diagnostics(self):
        """``{"divergences": [...], "acceptance rate": float, ...}``."""

    @abstractmethod
    def logging(self):
        """Progress-bar fields (a dict of short strings)."""

    def state_dict(self):
        """The rung's adapted state and random streams, for a checkpoint."""
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
