"""The block of rungs one process holds, and the moves of states between processes."""

import torch

from .comm import rung_blocks
from .explorers import PriorExplorer, step_rungs
from .potential import FlatLayout
from .potential.layout import same_values


def explore(blocks):
    """One local move of every rung of ``blocks`` (the ladders of an ensemble,
    :mod:`pyro_pt.ensemble`, or one), each explorer group in one call across them: per block,
    ``(lls, cold_moved)`` as :meth:`RungBlock.explore`."""
    stepped = step_rungs([e for b in blocks for e in b.explorers],
                         [z for b in blocks for z in b.states])
    out, at = [], 0
    for block in blocks:
        size = len(block.explorers)
        out.append(block._moved(stepped[at:at + size]))
        at += size
    return out


class RungBlock:
    """
    This rank's contiguous block of the ``num_rungs`` rungs: their explorers and current
    states. Rung ``k``'s explorer lives on the rank that owns ``k`` for the whole run; states
    move between rungs (and so between ranks) on accepted swaps.

    :param list names: latent site names, sorted (the flattening order).
    :param kind: the :class:`~pyro_pt.explorers.ExplorerKind` of the tempered rungs' explorers.
    """

    def __init__(self, comm, num_rungs, names, kind):
        self.comm, self.kind = comm, kind
        self.blocks = rung_blocks(num_rungs, comm.world_size)
        self.start, self.stop = self.blocks[comm.rank]
        self.owner = [r for r, (a, b) in enumerate(self.blocks) for _ in range(a, b)]
        self.names = names
        self.explorers, self.states = [], []
        self._cache = (None, None)

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

    def explore(self):
        """One local move of every rung of the block: returns the new states' log-likelihoods
        and whether rung 0's state moved (None on ranks without rung 0)."""
        return explore([self])[0]

    def _moved(self, stepped):
        """Take the block's ``stepped`` ``[(z, ll), ...]``; returns its lls and whether rung 0's
        state moved."""
        cold_moved = None
        if self.start == 0:
            cold_moved = not same_values(self.states[0], stepped[0][0])
        self.states = [z for z, _ in stepped]
        return [ll for _, ll in stepped], cold_moved

    def gather(self, local_values):
        """The K values of all rungs from each rank's values for its own rungs."""
        sizes = [b - a for a, b in self.blocks]
        return self.comm.all_gather_floats(local_values, sizes)

    def permute(self, origin):
        """After a swap round rung ``k`` holds the state that was at rung ``origin[k]``: move
        the states (point-to-point across ranks) and invalidate the explorers' caches."""
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
            self.explorers[k - self.start].target_changed()
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

    def summary(self, scan, temperatures):
        """The rungs' part of the kernel's diagnostics after ``scan`` scans: a collective, whose
        result a later call on one rank alone (e.g. for a plot) reuses."""
        if self._cache[0] != scan:  # every rung's explorer diagnostics, in rung order
            gathered = self.comm.all_gather_object([self._diagnostics(e) for e in self.explorers])
            self._cache = (scan, [d for block in gathered for d in block])
        per_rung, raised = [d for d, _ in self._cache[1]], [r for _, r in self._cache[1]]
        return {
            "divergences": list(per_rung[0]["divergences"]),
            "acceptance rate": per_rung[0]["acceptance rate"],
            "temperatures": temperatures,
            "local_acceptance": [d["acceptance rate"] for d in per_rung],
            "divergences_per_temperature": [len(d["divergences"]) for d in per_rung],
            "raised_target_accept_probs": raised,
        }

    def _diagnostics(self, explorer):
        """A rung's explorer diagnostics, and the target acceptance its warmup raised after
        divergences (as its kind reads it; None for the prior rung, which is no kind's)."""
        d = explorer.diagnostics()
        read = self.kind.raised_target
        return d, (None if read is None or isinstance(explorer, PriorExplorer) else read(d))
