"""What an iteration of the batched HMC returns, and what it records per slot.

:meth:`~pyro_pt.explorers.hmc.BatchedHMC.step` has BlackJAX's shape (Cabezas et al. 2024,
"BlackJAX: composable Bayesian inference in JAX"), ``step -> (state, info)``: the state is what
the next step starts from, the info everything else about the transition (what adaptation and
diagnostics read).
"""

import math
from collections import namedtuple

HMCState = namedtuple("HMCState", ["z", "ll"])
HMCState.__doc__ = """The slots' states ``z`` ``[R, D]`` and their log-likelihoods ``ll``."""

HMCInfo = namedtuple("HMCInfo", ["accepted", "accept_prob", "divergent", "energy_error",
                                 "num_steps", "proposal", "momentum"])
HMCInfo.__doc__ = """
One iteration of R slots, one row per slot: ``accepted`` (bool), the Metropolis
``accept_prob`` (float64), ``divergent`` (bool: a non-finite trajectory or an energy error
above ``max_delta_energy``), ``energy_error`` (float64, NaN for a failed trajectory),
``num_steps`` (long, the leapfrog steps taken), and the trajectory's end point ``proposal``
``[R, D]`` with its ``momentum`` (before the accept test).
"""


class HMCRecord:
    """
    Per-slot counts of a :class:`~pyro_pt.explorers.hmc.BatchedHMC`: accepted proposals and
    divergences in the sampling phase (indices, as Pyro's HMC reports them), divergences in
    warmup (a count), and the mean acceptance probability shown on the progress bar (over the
    sampling phase once it has begun).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # SLOTS: one entry per slot, saved per rung.
    STATE = ("warmup_steps", "max_delta_energy", "accept_prob_n")
    SLOTS = ("accepted_count", "accept_prob_sum", "divergences", "warmup_divergences")
    REBUILT = ()

    def __init__(self, num_slots, warmup_steps, max_delta_energy):
        self.warmup_steps = warmup_steps
        self.max_delta_energy = max_delta_energy
        self.accepted_count = [0] * num_slots
        self.accept_prob_sum = [0.0] * num_slots
        self.accept_prob_n = 0
        self.divergences = [[] for _ in range(num_slots)]
        self.warmup_divergences = [0] * num_slots

    def add(self, t, deltas, accept_prob, accepted):
        """Iteration ``t`` (counted from 1): each slot's energy error, acceptance probability
        and whether it moved."""
        in_warmup = t <= self.warmup_steps
        self.accept_prob_n += 1
        for r, (d, a) in enumerate(zip(deltas, accept_prob)):
            self.accept_prob_sum[r] += a
            divergent = not d <= self.max_delta_energy  # NaN (a failed trajectory) included
            if in_warmup:
                self.warmup_divergences[r] += divergent
            else:
                self.accepted_count[r] += accepted[r]
                if divergent:
                    self.divergences[r].append(t - self.warmup_steps - 1)
        if t == self.warmup_steps:
            # Progress-bar acceptance covers the sampling phase only.
            self.accept_prob_sum = [0.0] * len(self.accept_prob_sum)
            self.accept_prob_n = 0

    def diagnostics(self, t, step_size, inv_mass):
        """One dict per slot after ``t`` iterations: ``divergences``, ``warmup divergences``,
        ``acceptance rate`` (sampling phase), ``step size`` and ``mean inverse mass``."""
        n = t - self.warmup_steps
        step_size = step_size.tolist()
        mean_inv_mass = inv_mass.mean(-1).tolist()
        return [
            {
                "divergences": list(self.divergences[r]),
                "warmup divergences": self.warmup_divergences[r],
                "acceptance rate": self.accepted_count[r] / n if n > 0 else math.nan,
                "step size": step_size[r],
                "mean inverse mass": mean_inv_mass[r],
            }
            for r in range(len(self.divergences))
        ]

    def logging(self, slot, step_size):
        """Progress-bar fields of one slot: its step size and mean acceptance probability."""
        n = self.accept_prob_n
        prob = self.accept_prob_sum[slot] / n if n else math.nan
        return {"step size": f"{float(step_size[slot]):.2e}", "acc. prob": f"{prob:.3f}"}
