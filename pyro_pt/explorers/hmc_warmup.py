"""
Warmup adaptation of a batch of HMC slots: step size by dual averaging
(:mod:`~pyro_pt.explorers.hmc_step_size`), diagonal mass matrix in Stan's windows, trajectory
length by ChEES (:mod:`~pyro_pt.explorers.hmc_trajectory`); every update is per row, so a
slot's adapted state never depends on the other rows. :class:`HMCWarmup` runs it from outside
the :class:`~pyro_pt.explorers.hmc.BatchedHMC` iteration (as BlackJAX keeps adaptation outside
the kernel).
"""

import math

import torch

from pyro.ops.welford import WelfordCovariance

from .contract import HIGHEST_USEFUL_TARGET
from .hmc_step_size import DualAveraging, find_reasonable_step_sizes
from .hmc_trajectory import TrajectoryAdaptation

__all__ = ["DualAveraging", "HMCWarmup", "find_reasonable_step_sizes", "warmup_windows"]


# Steps of the first trajectory when the length adapts. ChEES on a Gaussian has local maxima
# beyond the global one (the first); ascent from a short T meets the first first (measured:
# from 10 initial step sizes, 3 of 20 slots stopped at the second one, 2-3 times too long).
INITIAL_NUM_STEPS = 3
# Fewest iterations of step-size adaptation after the last metric window.
MIN_TERM_BUFFER = 10
# Dual averaging's gamma (shrinkage towards the prox centre) after a warm restart (HMCWarmup):
# on a 10-d Gaussian (mean of 4 runs, 300 warmup iterations), 0.05 ended warmup accepting
# 0.91-0.93 (target 0.8), 0.2-0.5 0.80-0.83, 1.0 0.87-0.89.
WARM_RESTART_GAMMA = 0.3
# A slot that diverged raises its target acceptance, halving the distance to 1 (0.8 -> 0.9 ->
# 0.95 ...) up to this, and restarts from a step this much smaller (HMCWarmup).
MAX_TARGET_ACCEPT_PROB = HIGHEST_USEFUL_TARGET
DIVERGENT_STEP_FACTOR = 1.0 / math.sqrt(2.0)
# Iterations between two such checks inside a slow window (and at its end): a 500-iteration
# warmup's last window gets six, so a rung that keeps diverging can climb 0.8 -> 0.99, where
# one check per window raised it once (to 0.9: 44 divergences in 3000 draws of the centered
# eight schools, tau's mean 4.4 against 3.6).
DIVERGENCE_CHECK = 50


def warmup_windows(warmup_steps, init_buffer=75, term_buffer=50, base_window=25):
    """
    The slow windows of Stan's windowed warmup (Stan Reference Manual, "HMC algorithm
    parameters"), ``[(start, end), ...]`` (0-based, ``end`` exclusive): the mass matrix is
    re-estimated from a window's draws when iteration ``end`` completes. An initial fast
    interval (``init_buffer``, step size only), windows doubling from ``base_window`` (one is
    stretched to the end of the slow phase when the next would not fit), a terminal fast
    interval (``term_buffer``). When they do not fit, Stan uses 15% / 75% / 10% of the warmup;
    here the terminal interval keeps at least ``MIN_TERM_BUFFER`` iterations (Stan's 10% of a
    20-iteration warmup, 2 iterations, leaves a step size that accepts nothing). Under 20
    warmup iterations no metric is estimated.

    Example::

        >>> warmup_windows(1000)
        [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    """
    if warmup_steps < 20:
        return []
    if init_buffer + base_window + term_buffer > warmup_steps:
        init_buffer = int(0.15 * warmup_steps)
        term_buffer = max(int(0.1 * warmup_steps), MIN_TERM_BUFFER)
        base_window = warmup_steps - (init_buffer + term_buffer)
    slow_end = warmup_steps - term_buffer
    windows, start, size = [], init_buffer, base_window
    while start < slow_end:
        end = start + size
        if end + 2 * size >= slow_end:
            end = slow_end
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


class HMCWarmup:
    r"""
    The warmup of one :class:`~pyro_pt.explorers.hmc.BatchedHMC`, whose step sizes, metric and
    trajectory lengths it sets: after each iteration, dual averaging of the step sizes (and,
    without a fixed ``num_steps``, a ChEES step of the lengths); at a window's end
    (:func:`warmup_windows`), the draws' regularized variance as the next inverse mass matrix
    (the lengths carried over to it, :meth:`~.hmc_trajectory.TrajectoryAdaptation.rescale`);
    at the end, the averaged step sizes and lengths.

    The first step sizes come from Hoffman & Gelman's search, with Stan's dual averaging (prox
    centre ten times that, :math:`\gamma = 0.05`). After a metric update or a beta change Stan
    searches again and restarts the same way; here dual averaging restarts *warm*, from the
    averaged step size :math:`\exp \bar x` as prox centre too, with :math:`\gamma` =
    ``WARM_RESTART_GAMMA``. Why: :math:`\exp \bar x` is kept for sampling, and the acceptance
    rate is concave in :math:`\log\epsilon` where it is high, so the more the iterates swing
    around :math:`\bar x`, the more :math:`\alpha(\bar x)` exceeds their mean acceptance, the
    target (Jensen). A cold restart in the terminal buffer left iterates swinging over a
    factor 25-95 and sampling acceptances of 0.87-0.94 for a target of 0.8; the warm restart,
    0.76-0.88 (single runs, 10-d Gaussian; ``tests/pt/test_trajectory.py`` checks +-0.07).

    Divergences are acted on before sampling, rung by rung: a divergence is a step too long
    for the curvature met (a funnel's neck), which a mean acceptance of 0.8 can hide. A slot
    that diverges in a slow window after the first (before a metric is estimated, divergences
    say more about the unit metric than about the model) raises its own target at the next
    check (every ``DIVERGENCE_CHECK`` iterations and at the window's end, up to
    ``MAX_TARGET_ACCEPT_PROB``) and restarts from a shorter step. On the centered eight
    schools the default 0.8 left the cold chain at tau's mean 4.0-4.5 against 3.6 with 34-98
    sampling divergences; the hot rungs, which see more of the neck, raise theirs first
    (``benchmarks/funnel.py``). A slot that never diverges keeps its target, bitwise.

    :param tuple buffers: Stan's ``(init_buffer, term_buffer, base_window)``.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # SLOTS: one entry per slot, saved per rung.
    STATE = ("windows", "welford", "dual", "trajectory")
    SLOTS = ("divergent",)
    REBUILT = ("engine",)

    def __init__(self, engine, buffers):
        self.engine = engine
        windows = warmup_windows(engine._warmup_steps, *buffers)
        self.windows = windows if engine.adapt_mass_matrix else []
        # Stan's regularized diagonal estimate, one row per slot.
        self.welford = WelfordCovariance(diagonal=True)
        self.dual = None
        self.trajectory = None
        # Divergent transitions of each slot since the last check (_check_divergences).
        self.divergent = [0] * engine.num_slots

    def start(self):
        """The initial step sizes (searched) and trajectory lengths, once the engine holds its
        first states."""
        engine = self.engine
        if engine.adapt_step_size and engine._warmup_steps > 0:
            self.find_step_sizes(range(engine.num_slots))
            self.dual = DualAveraging([math.log(e) for e in engine._step_size.tolist()],
                                      engine.target_accept_prob)
        engine._lengths = [INITIAL_NUM_STEPS * e for e in engine._step_size.tolist()]
        if engine.num_steps is None and engine._warmup_steps > 0:
            self.trajectory = TrajectoryAdaptation(engine._lengths, engine.max_num_steps)

    def restart(self, slots):
        """``slots`` got a new target (their beta moved): average their steps anew."""
        if self.dual is not None:
            self.warm_restart(slots)
        if self.trajectory is not None:
            self.trajectory.restart_centre(slots)

    def warm_restart(self, slots, shorter=()):
        """Restart dual averaging of ``slots`` warm (see the class), those in ``shorter`` from
        ``DIVERGENT_STEP_FACTOR`` times their step."""
        log_step_size = self.dual.final_log_step_size()
        for r in shorter:
            log_step_size[r] += math.log(DIVERGENT_STEP_FACTOR)
        self.dual.restart(log_step_size, slots, centre_offset=0.0, gamma=WARM_RESTART_GAMMA)
        self._set_step_sizes(self.dual.log_step_size)

    def _check_divergences(self, t, divergent):
        """Count this iteration's divergences; at a check, raise the target of every slot that
        diverged since the last one (see the class). Returns those slots."""
        self.divergent = [n + d for n, d in zip(self.divergent, divergent)]
        raised = []
        for i, (start, end) in enumerate(self.windows):
            if not (start < t <= end and (t == end or (t - start) % DIVERGENCE_CHECK == 0)):
                continue
            if i > 0 and self.engine.adapt_step_size:
                targets = self.dual.targets
                for r, n in enumerate(self.divergent):
                    if n > 0 and targets[r] < MAX_TARGET_ACCEPT_PROB:
                        targets[r] = min(MAX_TARGET_ACCEPT_PROB, 1.0 - 0.5 * (1.0 - targets[r]))
                        raised.append(r)
            self.divergent = [0] * len(divergent)
        return raised

    def update(self, start, info):
        """Adapt after the warmup iteration just completed from ``start`` (the states it began
        from) with ``info`` (its :class:`~.hmc_record.HMCInfo`)."""
        engine = self.engine
        accept_prob = info.accept_prob.tolist()
        if self.trajectory is not None:
            self._adapt_trajectory(start, info, accept_prob)
        if engine.adapt_step_size:
            self._set_step_sizes(self.dual.update(accept_prob))
        t = engine._t  # iterations completed; the one just done had index t - 1
        raised = self._check_divergences(t, info.divergent.tolist())
        for start, end in self.windows:
            if start <= t - 1 < end:
                self.welford.update(engine._z)
            if t == end:
                inv_mass = self.welford.get_covariance(regularize=True)
                if self.trajectory is not None:
                    self.trajectory.rescale(engine._inv_mass, inv_mass)
                    engine._lengths = self.trajectory.lengths()
                engine._inv_mass = inv_mass
                engine._momentum_scale = 1.0 / engine._inv_mass.sqrt()
                self.welford.reset()
                if engine.adapt_step_size:
                    self.warm_restart(range(engine.num_slots), shorter=raised)
                raised = []
        if raised:  # a check inside a window: only the slots that diverged restart
            self.warm_restart(raised, shorter=raised)
        if t == engine._warmup_steps and engine.adapt_step_size:
            self._set_step_sizes(self.dual.final_log_step_size())
        if t == engine._warmup_steps and self.trajectory is not None:
            engine._lengths = self.trajectory.final_lengths()

    def _adapt_trajectory(self, start, info, accept_prob):
        """One ChEES step of every slot's trajectory length, from the iteration's proposal."""
        engine, trajectory = self.engine, self.trajectory
        step_sizes = engine._step_size.tolist()
        times = [n * e for n, e in zip(info.num_steps.tolist(), step_sizes)]
        velocity = engine._inv_mass * info.momentum
        gradients = trajectory.gradients(start, info.proposal, velocity, times, accept_prob)
        trajectory.observe(engine._z)
        engine._lengths = trajectory.update(gradients, step_sizes)

    def _set_step_sizes(self, log_step_sizes):
        engine = self.engine
        engine._step_size = torch.tensor([math.exp(x) for x in log_step_sizes],
                                         dtype=engine._dtype, device=engine._device)

    def find_step_sizes(self, slots):
        """Re-initialize the step sizes of ``slots`` from the cached states (Algorithm 4)."""
        engine = self.engine
        log_target = math.log(0.8)

        def accepts_well(step_size, active):
            _, noise, _ = engine._draw(active.nonzero().flatten().tolist(), uniform=False)
            p0 = noise * engine._momentum_scale
            _, p, potential, _, _, bad = engine._leapfrog(p0, step_size, None, num_steps=1)
            log_ratio = (engine._potential + engine._kinetic(p0)
                         - (potential + engine._kinetic(p)))
            return ~bad & (log_ratio > log_target)

        mask = torch.zeros(engine.num_slots, dtype=torch.bool, device=engine._device)
        mask[list(slots)] = True
        engine._step_size = find_reasonable_step_sizes(engine._step_size, mask, accepts_well)
