"""The variational reference's fits during warmup, from the cold chain's draws of each round.

The cold chain's state is the same on every rank after each scan (it is broadcast from rung
0's owner), so every rank gathers the same draws and fits the same :math:`q`, bitwise: no
collective is needed for the fit itself. A fit changes every tempered rung's target, so after
it each rung forgets its cached potential (as after a swap) and the kernel's record of the
rungs' ``ll'`` is recomputed.
"""

import torch

from ..potential import FlatLayout
from .split import ReferencedSplit


class Refitting:
    """
    The draws of the current warmup round and the fit at its end.

    :param GaussianReference reference: q, refitted in place.
    :param set round_ends: the scans that end a warmup round
        (:func:`~pyro_pt.ladder.warmup_round_ends`).
    :param list names: the latent site names, sorted (the flat order).
    """

    def __init__(self, reference, round_ends, names):
        self.reference = reference
        self.round_ends = set(round_ends)
        self.names = names
        self.draws = []

    def after_scan(self, kernel, scan, cold):
        """Keep the cold draw of ``scan``; at a round's end refit q and refresh the rungs.
        Returns whether q changed."""
        if not self.round_ends or scan > max(self.round_ends):
            return False
        self.draws.append(FlatLayout.of(cold, self.names).flatten(cold).detach()
                          .to(device="cpu", dtype=torch.float64))
        if scan not in self.round_ends:
            return False
        draws, self.draws = torch.stack(self.draws), []
        if not self.reference.fit(draws):
            return False
        rungs = kernel._rungs
        for explorer in rungs.explorers:
            explorer.replace_state()  # its cached potential was against the old q
        split = ReferencedSplit(kernel._split, self.reference)
        kernel._ll = rungs.gather([split.log_likelihood(z) for z in rungs.states])
        kernel.explorer_info["reference"] = self.reference.describe()
        return True
