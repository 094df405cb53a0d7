"""The block of rungs one process holds, its set-up, and the moves of states between processes."""

import torch

from .comm import agree_on_setup, rung_blocks
from .explorers import step_rungs
from .potential import FlatLayout
from .potential.layout import same_values
from .random import stream_seeds


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
        """
        One local move of every rung of the block (:func:`~pyro_pt.explorers.step_rungs`):
        returns the new states' log-likelihoods and whether rung 0's explorer moved (for RWMH
        and HMC: it accepted; None on ranks without rung 0).
        """
        stepped = step_rungs(self.explorers, self.states)
        cold_moved = None
        if self.start == 0:
            before, after = self.states[0], stepped[0][0]
            cold_moved = not same_values(before, after)
        self.states = [z for z, _ in stepped]
        return [ll for _, ll in stepped], cold_moved

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

    def summary(self, scan, temperatures):
        """
        The rungs' part of the kernel's diagnostics after ``scan`` scans. Gathering them is a
        collective; after the run's own call (on every rank, by MCMC) a later call on one rank
        alone, e.g. for a plot, reuses it.
        """
        if self._cache[0] != scan:
            self._cache = (scan, self.diagnostics())
        per_rung = self._cache[1]
        return {
            "divergences": list(per_rung[0]["divergences"]),
            "acceptance rate": per_rung[0]["acceptance rate"],
            "temperatures": temperatures,
            "local_acceptance": [d["acceptance rate"] for d in per_rung],
            "divergences_per_temperature": [len(d["divergences"]) for d in per_rung],
            # Where warmup raised a rung's target acceptance after divergences (batched HMC).
            "raised_target_accept_probs": [d.get("target accept prob") for d in per_rung],
        }


def set_up_rungs(comm, num_rungs, make_split, build, settings):
    """
    The model's split, this rank's block of rungs and the run's seeds, agreed on by all ranks.

    Every rank joins the set-up's collectives (the seeds' broadcast, the final check) even when
    its own part failed, so that a failure on one rank (a model that raises on its data, rungs
    that find no valid start, memory) stops every rank with the reason instead of leaving the
    others waiting for the backend's timeout.

    :param callable make_split: ``() -> ModelSplit``.
    :param callable build: ``(split, rungs, seeds) -> (explorers, states, lls, info)``.
    :param dict settings: what every rank must agree on (see
        :func:`~pyro_pt.comm.agree_on_setup`).
    :returns: ``(block, split, local log-likelihoods, info, seeds)``.
    """
    failure = split = block = None
    lls = info = None
    try:
        split = make_split()
    except Exception as error:
        failure = error
    # One base seed from the global generator (so pyro.set_rng_seed governs the run), the same
    # on every rank; the streams are spawned from it (pyro_pt.random).
    base = torch.randint(0, 2**62, (1,), dtype=torch.int64)
    base = int(comm.broadcast(base, src=0, what="broadcast of the seeds").item())
    seeds = stream_seeds(base, num_rungs)
    if failure is None:
        try:
            block = RungBlock(comm, num_rungs, split.latent_names)
            block.base_seed = base  # rungs added later spawn theirs from it (pyro_pt.growth)
            explorers, states, lls, info = build(split, block.rungs, seeds)
            for explorer, z in zip(explorers, states):
                block.add(explorer, z)
        except Exception as error:
            failure = error
    view = None
    if failure is None:
        view = [(name, tuple(block.states[0][name].shape)) for name in split.latent_names]
    agree_on_setup(comm, failure, view, settings)
    return block, split, lls, info, seeds
