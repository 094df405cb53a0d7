"""The one seeding scheme: every random stream of a run derived from Pyro's seed.

One base seed is drawn from torch's global generator (so ``pyro.set_rng_seed`` governs the
run) and broadcast from rank 0; every stream is spawned from it with
:class:`numpy.random.SeedSequence`, so the streams are independent and a rung's does not depend
on the process that holds it. A rung's seed drives its :class:`RandomStream` (its initial
point; Pyro's kernels' momenta and accept draws). Pure: torch and numpy only.
"""

import numpy as np
import torch


def stream_seeds(base, num_rungs):
    """``num_rungs + 1`` independent 63-bit seeds spawned from the run's ``base`` seed: one per
    rung, in rung order, then the swaps' (shared by all ranks)."""
    children = np.random.SeedSequence(base).generate_state(num_rungs + 1, np.uint64)
    return [int(s) >> 1 for s in children]


def child_seed(seed, key):
    """The seed of the child stream ``key`` of ``seed`` (its
    :class:`~numpy.random.SeedSequence` spawn key), independent of ``seed``'s own stream."""
    state = np.random.SeedSequence(seed, spawn_key=(key,)).generate_state(1, np.uint64)
    return int(state[0]) >> 1


def grown_seed(base, birth):
    """The seed of the ``birth``-th rung of a run that grows (:mod:`pyro_pt.growth`; the
    starting ladder's are births 0 .. K-1): it depends neither on K nor on when the rung was
    added, and is independent of every :func:`stream_seeds` stream (``base``'s own pool)."""
    return child_seed(base, birth)


def ladder_seed(base, ladder):
    """The base seed of an ensemble's ladder ``ladder`` (:mod:`pyro_pt.ensemble`), from the
    run's ``base`` (ladder 0's own): independent of every stream and child of ``base`` (a
    spawn key of two entries), and the same whatever the number of ladders."""
    if ladder == 0:
        return base
    state = np.random.SeedSequence(base, spawn_key=(0, ladder)).generate_state(1, np.uint64)
    return int(state[0]) >> 1


def engine_seed(seed):
    """The seed of the batched HMC's momenta for a rung with ``seed`` (which seeds its initial
    point): the first child."""
    return child_seed(seed, 0)


def reference_seed(seed):
    """The seed of a variational reference's first prior draws, from the swaps' ``seed``: the
    second child."""
    return child_seed(seed, 1)


class RandomStream:
    """
    A rung's private torch random stream, swapped in for the global one while the rung works:
    Pyro's kernels draw momenta and acceptances from the global generators, so a seeded run is
    reproducible whatever order or process the rungs run in. On a CUDA ``device`` the device's
    generator is swapped too (the momenta are drawn there).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("states",)
    REBUILT = ("device", "_outer")  # the resuming process's device; the global state meanwhile

    def __init__(self, seed, device=None):
        self.device = device if device is not None and device.type == "cuda" else None
        cuda = None
        if self.device is not None:
            cuda = torch.Generator(device=self.device).manual_seed(seed).get_state()
        self.states = (torch.Generator().manual_seed(seed).get_state(), cuda)

    def _exchange(self, states):
        """Install ``(cpu, cuda)`` generator states; return the ones they replace."""
        cpu, cuda = states
        replaced = (torch.get_rng_state(),
                    None if self.device is None else torch.cuda.get_rng_state(self.device))
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
