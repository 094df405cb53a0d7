r"""The contract every explorer meets: what the kernel asks of a rung's local move.

An explorer moves the replica at one rung with a kernel that leaves the rung's tempered
density :math:`\exp(lp(z) + \beta\, ll(z))` invariant. Explorers come in *groups*: the rungs of
a group move together, in one call (the batched HMC moves all tempered rungs of a process in
one trajectory); any other explorer, a Pyro kernel included, is a group of one. So the kernel
steps every group once per scan, never asking which kind of explorer it holds.

- :meth:`ExplorerGroup.step` receives the current state of each member (a dict site ->
  unconstrained tensor, in member order) and returns ``[(state, ll), ...]``: the new state
  and its log-likelihood :math:`ll(z)` as a float, computed by the explorer (from its own
  potential calls where it can, else by the model's traced split).
- A rung's adapted state (step size, mass matrix, proposal scale) and random stream stay with
  the rung; the states move on swaps, after which the kernel calls
  :meth:`RungExplorer.replace_state` so that no cached potential or gradient of the old state
  survives. :meth:`RungExplorer.set_beta` moves the rung to a new inverse temperature (ladder
  adaptation, during warmup).
- :meth:`RungExplorer.diagnostics` returns at least ``"divergences"`` (a list) and
  ``"acceptance rate"`` (the share of sampling-phase moves accepted); :meth:`logging` the
  progress-bar fields.

**References**

[1] Surjanovic et al. (2023), "Pigeons.jl: distributed sampling from intractable
distributions" (an explorer interface of the same shape).
"""

from abc import ABC, abstractmethod


class ExplorerGroup(ABC):
    """Rungs that move together."""

    @abstractmethod
    def step(self, states):
        """One local move of every member from ``states``: ``[(state, ll), ...]``."""


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


class SingleRungExplorer(RungExplorer, ExplorerGroup):
    """An explorer that is a group of one: :meth:`move` moves its one rung."""

    @property
    def group(self):
        return self

    def step(self, states):
        (z,) = states
        return [self.move(z)]

    @abstractmethod
    def move(self, z):
        """One local move from ``z``: ``(state, ll)``."""
