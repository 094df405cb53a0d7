"""The variational reference's fits during warmup, from the cold chain's draws.

At each warmup round's end q is moment-matched to the cold chain's draws since its last fit
(:meth:`~pyro_pt.reference.gaussian.GaussianReference.fit`); a round's end with fewer than
:data:`~pyro_pt.reference.gaussian.MIN_FIT_DRAWS` of them keeps q and the draws.

The cold chain's state is the same on every rank after each scan (it is broadcast from rung
0's owner), so every rank gathers the same draws and fits the same :math:`q`, bitwise: no
collective is needed for the fit itself. A fit changes every tempered rung's target, so after
it each rung forgets its cached potential (as after a swap) and the kernel's record of the
rungs' ``ll`` is recomputed.
"""

import torch

from ..checkpoint_state import check_declared
from ..potential import FlatLayout
from .gaussian import MIN_FIT_DRAWS
from .stabilized import refresh

# Apart in the lineage numbers of the draws kept, for each ladder of an ensemble: more than
# any ladder's replicas.
LINEAGES_PER_LADDER = 1 << 20


class Refitting:
    """The cold draws since the last fit, and the fit of q (``reference``, in place) at each
    of the warmup's ``round_ends``; ``names``: the latent sites, sorted (the flat order)."""

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("draws", "lineages", "skipped")
    REBUILT = ("reference", "round_ends", "names")

    def __init__(self, reference, round_ends, names):
        self.reference = reference
        self.round_ends = set(round_ends)
        self.names = names
        self.draws = []
        self.lineages = []  # the replica lineage of each draw (pyro_pt.recorders.IndexProcess)
        self.skipped = []  # round ends with too few draws

    def keep(self, run, cold, ladder=0):
        """Keep the cold draw of the scan just recorded, until the last warmup round's end; of
        an ensemble (:mod:`pyro_pt.ensemble`) every ladder's (``ladder``: its index), so that
        q is fitted to all their draws, each lineage's ESS its own."""
        if not self.round_ends or run.scans > max(self.round_ends):
            return
        self.draws.append(FlatLayout.of(cold, self.names).flatten(cold).detach()
                          .to(device="cpu", dtype=torch.float64))
        # the lineages of different ladders are different chains
        self.lineages.append(ladder * LINEAGES_PER_LADDER + run.recorder.index.lineage[0])

    def end_round(self, run, end):
        """At a warmup round's end: refit q to the draws kept and refresh the rungs (a round
        end step, :mod:`pyro_pt.rounds`). Returns whether q changed."""
        if end.kind != "warmup round":
            return False
        if not self.reference.fit(torch.stack(self.draws),
                                  lineages=torch.tensor(self.lineages, dtype=torch.long)):
            self.skipped.append(end.scan)
            return False
        self.draws, self.lineages = [], []
        if run.reference is None:  # reference="auto" before q's leg joined: no rung uses q
            return True
        for ladder in run.together:  # q is every ladder's
            for explorer in ladder.rungs.explorers:
                explorer.target_changed()  # its cached potential was against the old q
            refresh(ladder)
        run.explorer_info["reference"] = self.reference.describe()
        return True

    def problem(self):
        """What the review says when q was never fitted (None otherwise)."""
        if self.reference.fits or not self.skipped:
            return None
        return (f"the variational reference was never fitted: the warmup rounds (ending at "
                f"scans {self.skipped}) held fewer than {MIN_FIT_DRAWS} cold draws, so q stayed "
                f"the Gaussian of {self.reference.origin.split(',')[0]}; warm up longer "
                "(warmup_steps), or pass a fitted Pyro autoguide as reference")


class ReferenceState:
    """A fitted reference's checkpoint part (:mod:`pyro_pt.checkpoint`): q as fitted so far,
    and the draws kept for its next fit."""

    def __init__(self, run):
        self.refitting = run.refitting
        self.reference = run.refitting.reference if run.refitting else run.reference

    def state_dict(self):
        if self.refitting:
            check_declared(self.refitting)
        kept = {name: getattr(self.refitting, name, []) for name in Refitting.STATE}
        return {"q": self.reference.state(), **kept}

    def load_state_dict(self, state, run):
        self.reference.load(state["q"])
        if run.reference is not None:  # else "auto" before q's leg joined: the prior's run
            run.explorer_info["reference"] = self.reference.describe()
        if self.refitting:
            for name in Refitting.STATE:
                setattr(self.refitting, name, list(state[name]))
