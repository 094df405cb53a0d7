"""The one seeding scheme: every random stream of a run derived from Pyro's seed.

One base seed is drawn from torch's global generator (so ``pyro.set_rng_seed`` governs the
run) and broadcast from rank 0; :func:`stream_seeds` spawns from it, with
:class:`numpy.random.SeedSequence`, one seed per rung and one for the swaps, so the streams are
independent and a rung's stream does not depend on the process that holds it. A rung's seed
drives its :class:`RandomStream` (its initial point; Pyro's kernels' momenta and accept draws);
the batched HMC takes its momenta from a stream of its own, :func:`engine_seed`, spawned from
the rung's seed by the same :class:`~numpy.random.SeedSequence`. Pure: torch and numpy only.
"""

import numpy as np
import torch


def stream_seeds(base, num_rungs):
    """
    ``num_rungs + 1`` independent 63-bit seeds spawned from ``base``: one per rung, in rung
    order, then the swaps' (shared by all ranks).

    :param int base: the run's base seed (the same on every rank).
    :param int num_rungs: K.
    """
    children = np.random.SeedSequence(base).generate_state(num_rungs + 1, np.uint64)
    return [int(s) >> 1 for s in children]


def grown_seed(base, birth):
    """
    The seed of a rung added to the ladder during warmup (:mod:`pyro_pt.growth`): the
    ``birth``-th rung of the run (the starting ladder's rungs are births 0 .. K-1, seeded by
    :func:`stream_seeds`), spawned from ``base`` with ``birth`` as its spawn key, so it depends
    neither on K nor on when the rung was added, and is independent of every
    :func:`stream_seeds` stream (those come from ``base``'s own pool).
    """
    state = np.random.SeedSequence(base, spawn_key=(birth,)).generate_state(1, np.uint64)
    return int(state[0]) >> 1


def reference_seed(seed):
    """The seed of a variational reference's first prior draws, from the swaps' ``seed``: its
    second child (:func:`engine_seed` takes a rung's first), independent of every stream."""
    child = np.random.SeedSequence(seed).spawn(2)[1]
    return int(child.generate_state(1, np.uint64)[0]) >> 1


def engine_seed(seed):
    """The seed of the batched HMC's momenta for a rung with ``seed``: the rung's seed already
    seeds its initial point, so the momenta get the first child of its
    :class:`~numpy.random.SeedSequence`, a stream independent of it."""
    child = np.random.SeedSequence(seed).spawn(1)[0]
    return int(child.generate_state(1, np.uint64)[0]) >> 1


class RandomStream:
    """
    A private torch random stream, swapped in for the global one while a rung works.

    Pyro's kernels draw momenta and acceptances from the global generators; giving each rung
    its own state keeps a seeded run reproducible whatever order or process the rungs run in.
    On a CUDA device the device's generator is swapped too (the momenta are drawn there).

    :param int seed: the rung's seed.
    :param torch.device device: where the rung's tensors live (default CPU).
    """

    def __init__(self, seed, device=None):
        self.device = device if device is not None and device.type == "cuda" else None
        cuda = None
        if self.device is not None:
            cuda = torch.Generator(device=self.device).manual_seed(seed).get_state()
        self.states = (torch.Generator().manual_seed(seed).get_state(), cuda)

    def _exchange(self, states):
        """Install ``(cpu, cuda)`` generator states; return the ones they replace."""
        cpu, cuda = states
        replaced = (torch.get_rng_state(), None if self.device is None else torch.cuda.get_rng_state(self.device))
        torch.set_rng_state(cpu)
        if self.device is not None:
            torch.cuda.set_rng_state(cuda, self.device)
        return replaced

    def __enter__(self):
        self._outer = self._exchange(self.states)
        return self

    def __exit__(self, *exc):
        self.states = self._exchange(self._outer)
        return False
