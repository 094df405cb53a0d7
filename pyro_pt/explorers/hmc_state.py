"""What one iteration of the batched HMC returns: the slots' state and what the step saw.

:meth:`~pyro_pt.explorers.hmc.BatchedHMC.step` has BlackJAX's shape, ``step -> (state, info)``:
the state is what the next step starts from, the info is everything else about the
transition (what adaptation and diagnostics read).

**References**

[1] Cabezas et al. (2024), "BlackJAX: composable Bayesian inference in JAX"
(``HMCState``/``HMCInfo``).
"""

from collections import namedtuple

HMCState = namedtuple("HMCState", ["z", "ll"])
HMCState.__doc__ = """The slots' states ``z`` ``[R, D]`` and their log-likelihoods ``ll`` ``[R]``."""

HMCInfo = namedtuple("HMCInfo", ["accepted", "accept_prob", "divergent", "energy_error",
                                 "num_steps", "proposal", "momentum"])
HMCInfo.__doc__ = """
One iteration of R slots, all tensors with one row per slot: ``accepted`` (bool), the
Metropolis ``accept_prob`` (float64), ``divergent`` (bool: a non-finite trajectory or an
energy error above ``max_delta_energy``), ``energy_error`` (float64, NaN for a failed
trajectory), ``num_steps`` (long, the leapfrog steps taken), and the trajectory's end point
``proposal`` ``[R, D]`` with its ``momentum`` ``[R, D]`` (before the accept test).
"""
