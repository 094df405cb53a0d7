"""Step-size adaptation of a batch of HMC slots, slot by slot: dual averaging, the initial
search."""

import math

import torch

from pyro.ops.dual_averaging import DualAveraging as PyroDualAveraging


class DualAveraging:
    r"""
    Dual-averaging step-size adaptation of a batch of slots: one
    :class:`pyro.ops.dual_averaging.DualAveraging` per slot on :math:`g_t = \delta_r - \alpha_t`
    (:math:`\alpha_t` the acceptance statistic, :math:`\delta_r` the slot's target), each with
    its own iteration count, so one slot can restart while the others go on. The iterate
    :math:`x = \log\epsilon` is the step during warmup, its average :math:`\exp \bar x` the one
    kept after; a restart centres on :math:`\mu = \log(10\,\epsilon_0)` (Pyro's
    ``prox_center``) unless told otherwise. The state is Python floats, updated slot by slot:
    torch's CPU kernels may round ``pow`` differently in long and short vectors, which would
    make a slot's step size depend on how many slots share the batch.

    **References**

    [1] Hoffman, Gelman (2014), "The No-U-Turn Sampler", JMLR 15, Algorithm 5.

    [2] Stan Reference Manual, step-size adaptation: :math:`\gamma = 0.05, t_0 = 10,
    \kappa = 0.75`.

    :param list log_step_size: initial :math:`\log\epsilon` of each slot.
    :param float target_accept_prob: :math:`\delta`, every slot's at the start; :attr:`targets`
        holds each slot's own (a slot that diverges may raise its own).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # SLOTS: one entry per slot, saved per rung.
    STATE = ("gamma", "t0", "kappa")
    SLOTS = ("log_step_size", "targets", "t", "_schemes")
    REBUILT = ()

    def __init__(self, log_step_size, target_accept_prob=0.8, gamma=0.05, t0=10.0, kappa=0.75):
        self.gamma, self.t0, self.kappa = gamma, t0, kappa
        self.log_step_size = [float(x) for x in log_step_size]
        self.targets = [float(target_accept_prob)] * len(self.log_step_size)
        self.t = [0] * len(self.log_step_size)
        self._schemes = [self._scheme(x) for x in self.log_step_size]

    def _scheme(self, log_step_size, centre_offset=math.log(10.0), gamma=None):
        return PyroDualAveraging(prox_center=log_step_size + centre_offset, t0=self.t0,
                                 kappa=self.kappa, gamma=gamma or self.gamma)

    def restart(self, log_step_size, slots, centre_offset=math.log(10.0), gamma=None):
        r"""Restart ``slots`` from ``log_step_size`` (one value per slot; after a metric or beta
        change), with :math:`\mu` that plus ``centre_offset``."""
        for r in slots:
            self.log_step_size[r] = float(log_step_size[r])
            self._schemes[r] = self._scheme(self.log_step_size[r], centre_offset, gamma)
            self.t[r] = 0

    def update(self, accept_prob):
        r"""One iteration of every slot (``accept_prob``: one float per slot); returns the new
        warmup :math:`\log\epsilon` of each slot."""
        for r, alpha in enumerate(accept_prob):
            self._schemes[r].step(self.targets[r] - alpha)
            self.t[r] += 1
            self.log_step_size[r] = self._schemes[r].get_state()[0]
        return list(self.log_step_size)

    def final_log_step_size(self):
        r""":math:`\bar x` of each slot, the log step size to sample with after warmup."""
        # A slot restarted at the very end of warmup has no average yet: keep its step.
        return [scheme.get_state()[1] if t > 0 else x
                for scheme, t, x in zip(self._schemes, self.t, self.log_step_size)]


def find_reasonable_step_sizes(step_size, mask, accepts_well, max_rounds=100):
    r"""
    Hoffman & Gelman's initial step-size heuristic (JMLR 15, Algorithm 4) for the slots in
    ``mask`` (bool ``[R]``): double (or halve) ``step_size [R]`` until the acceptance
    probability of one leapfrog step crosses 0.8, at most ``max_rounds`` times. The slots are
    searched together, one ``accepts_well(step_size [R], active [R]) -> bool [R]`` call per
    round (whether one step from a fresh momentum accepts above 0.8; only ``active`` slots need
    an answer, and only they may draw random numbers), each leaving on its own criterion.
    Returns the new step sizes (unchanged outside ``mask``).
    """
    active = mask.clone()
    increase = accepts_well(step_size, active)
    factor = torch.where(increase, 2.0, 0.5).to(step_size)
    for _ in range(max_rounds):
        step_size = torch.where(active, step_size * factor, step_size)
        # Stan raises outside (0, 1e7); here such a slot just keeps its last step size.
        active = active & (step_size < 1e7) & (step_size > 1e-12)
        if not bool(active.any()):
            break
        active = active & (accepts_well(step_size, active) == increase)
    return step_size
