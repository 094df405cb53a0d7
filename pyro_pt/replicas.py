"""The block of rungs one process holds, and the moves of states between processes."""

import torch

from .comm import rung_blocks
from .potential import FlatLayout


class RungBlock:
    """
    This rank's contiguous block of rungs: their explorers and current states.

    Rung ``k``'s explorer lives on the rank that owns ``k`` for the whole run; states move
    between rungs (and so between ranks) on accepted swaps. Every rank keeps the K
    log-likelihoods, all-gathered after each local round.

    :param comm: a :class:`~pyro_pt.comm.LocalComm` or :class:`~pyro_pt.comm.TorchComm`.
    :param int num_rungs: K.
    :param list names: latent site names, sorted (the flattening order).
    """

    def __init__(self, comm, num_rungs, names):
        self.comm = comm
        self.blocks = rung_blocks(num_rungs, comm.world_size)
        self.start, self.stop = self.blocks[comm.rank]
        self.owner = [r for r, (a, b) in enumerate(self.blocks) for _ in range(a, b)]
        self.names = names
        self.explorers, self.states = [], []

    @property
    def rungs(self):
        return range(self.start, self.stop)

    def add(self, explorer, state):
        self.explorers.append(explorer)
        self.states.append(state)

    def _flat(self, z):
        return FlatLayout.of(z, self.names).flatten(z)

    def _unflat(self, flat, like):
        return FlatLayout.of(like, self.names).unflatten(flat)

    def gather(self, local_values):
        """The K values of all rungs from each rank's values for its own rungs."""
        sizes = [b - a for a, b in self.blocks]
        return self.comm.all_gather_floats(local_values, sizes)

    def permute(self, origin):
        """
        After a swap round rung ``k`` holds the state that was at rung ``origin[k]``: move the
        states (point-to-point across ranks) and invalidate the explorers' caches.
        """
        old = list(self.states)
        like = old[0]
        sends, receives = [], []
        for k in self.rungs:
            src = origin[k]
            if src == k:
                continue
            if self.start <= src < self.stop:
                self.states[k - self.start] = old[src - self.start]
            else:
                receives.append((self.owner[src], k, torch.empty_like(self._flat(like))))
            self.explorers[k - self.start].replace_state()
        for k, src in enumerate(origin):
            if self.start <= src < self.stop and not self.start <= k < self.stop:
                sends.append((self.owner[k], self._flat(old[src - self.start])))
        # Each (src, dst) rank pair exchanges states in rung order, so messages match up.
        self.comm.exchange(sends, [(rank, buf) for rank, _, buf in receives])
        for _, k, buf in receives:
            self.states[k - self.start] = self._unflat(buf, like)

    def cold_state(self):
        """Rung 0's state on every rank (broadcast from its owner)."""
        if self.comm.world_size == 1:
            return dict(self.states[0])
        like = self.states[0]
        flat = self._flat(like) if self.start == 0 else torch.empty_like(self._flat(like))
        return self._unflat(self.comm.broadcast(flat, src=0), like)

    def diagnostics(self):
        """Every rung's explorer diagnostics, in rung order, on every rank."""
        mine = [explorer.diagnostics() for explorer in self.explorers]
        gathered = self.comm.all_gather_object(mine)
        return [d for block in gathered for d in block]
