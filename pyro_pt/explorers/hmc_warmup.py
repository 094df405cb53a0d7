"""
Warmup adaptation of a batch of HMC slots: step size by dual averaging
(:mod:`~pyro_pt.explorers.hmc_step_size`), diagonal mass matrix by windowed variance
estimation, trajectory length by ChEES (:mod:`~pyro_pt.explorers.hmc_trajectory`). Pure
torch, vectorized over the slots (rows); every update is elementwise per row, so a slot's
adapted state never depends on the other rows of the batch.
:class:`HMCWarmup` runs the schedule for a :class:`~pyro_pt.explorers.hmc.BatchedHMC`, from
outside its iteration (as BlackJAX keeps adaptation outside the kernel).
"""

import math

import torch

from pyro.ops.welford import WelfordCovariance

from .hmc_step_size import DualAveraging, find_reasonable_step_sizes
from .hmc_trajectory import TrajectoryAdaptation

__all__ = ["DualAveraging", "HMCWarmup", "find_reasonable_step_sizes", "warmup_windows"]


# Fewest iterations of step-size adaptation after the last metric window.
MIN_TERM_BUFFER = 10
# Dual averaging's gamma (shrinkage towards the prox centre) after a warm restart, where the
# centre is the step size just averaged rather than Stan's guess of ten times a one-step
# heuristic: on a 10-d Gaussian (mean of 4 runs, 300 warmup iterations), 0.05 ended warmup
# accepting 0.91-0.93 (target 0.8), 0.2-0.5 0.80-0.83, 1.0 0.87-0.89 (see HMCWarmup).
WARM_RESTART_GAMMA = 0.3
# A slot that diverges after its first metric window raises its own target acceptance at the
# next check, halving the distance to 1 (0.8 -> 0.9 -> 0.95 ...) up to this, and restarts
# from a step size this much smaller: a divergence is a step too long for the curvature met
# (a funnel's neck), which a mean acceptance of 0.8 can hide (see HMCWarmup).
MAX_TARGET_ACCEPT_PROB = 0.99
DIVERGENT_STEP_FACTOR = 1.0 / math.sqrt(2.0)
# Iterations between two such checks inside a slow window (and at its end): a 500-iteration
# warmup's last window (300 iterations) gets six, so a rung can climb 0.8 -> 0.99 if it keeps
# diverging, where one check per window raised it once (to 0.9: 44 divergences in 3000 draws
# of the centered eight schools, tau's mean 4.4 against 3.6).
DIVERGENCE_CHECK = 50


def warmup_windows(warmup_steps, init_buffer=75, term_buffer=50, base_window=25):
    r"""
    The slow windows of Stan's windowed warmup, as ``[(start, end), ...]`` iteration ranges
    (0-based, ``end`` exclusive). The mass matrix is re-estimated from the draws of each
    window when iteration ``end`` completes.

    Warmup is an initial fast interval (``init_buffer``, step size only), slow windows of
    doubling length starting at ``base_window`` (a window is stretched to the end of the slow
    phase when the next, doubled one would not fit), and a terminal fast interval
    (``term_buffer``) in which the step size adapts to the final metric. When the three do
    not fit, Stan uses 15% / 75% / 10% of the warmup; here the terminal interval keeps at
    least ``MIN_TERM_BUFFER`` = 10 iterations (Stan's 10% of a 20-iteration warmup, 2
    iterations, leaves a step size that accepts nothing). Under 20 warmup iterations no metric
    is estimated at all.

    **References**

    [1] Stan Reference Manual, "HMC algorithm parameters: automatic parameter tuning"
    (sections on adaptation windows; defaults 75 / 25 / 50).

    :param int warmup_steps: number of warmup iterations.
    :param int init_buffer: initial fast interval.
    :param int term_buffer: terminal fast interval.
    :param int base_window: length of the first slow window.
    :returns: list of ``(start, end)`` pairs.

    Example::

        >>> warmup_windows(1000)
        [(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
    """
    if warmup_steps < 20:
        return []
    if init_buffer + base_window + term_buffer > warmup_steps:
        init_buffer = int(0.15 * warmup_steps)
        # Stan's 10% leaves 2-4 iterations at 20-40 warmup steps: too few for dual averaging
        # to settle on the final metric (measured: chains that then accept nothing).
        term_buffer = max(int(0.1 * warmup_steps), MIN_TERM_BUFFER)
        base_window = warmup_steps - (init_buffer + term_buffer)
    slow_end = warmup_steps - term_buffer
    windows, start, size = [], init_buffer, base_window
    while start < slow_end:
        end = start + size
        # The next window would be twice as long; if it cannot fit, this one takes the rest.
        if end + 2 * size >= slow_end:
            end = slow_end
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


class HMCWarmup:
    r"""
    The warmup schedule of one :class:`~pyro_pt.explorers.hmc.BatchedHMC`: after each
    iteration, dual averaging of the step sizes (and, without a fixed ``num_steps``, a ChEES
    step of the trajectory lengths, :mod:`~pyro_pt.explorers.hmc_trajectory`); in Stan's
    windows (:func:`warmup_windows`), the draws' variance as the next diagonal inverse mass
    matrix (carrying the trajectory lengths over to it:
    :meth:`~.hmc_trajectory.TrajectoryAdaptation.rescale`); at the end, the averaged step
    sizes and trajectory lengths.

    The first step sizes come from Hoffman & Gelman's search (:func:`find_reasonable_step_sizes`)
    with Stan's dual averaging (prox centre ten times that, :math:`\gamma = 0.05`). After a
    metric update or a beta change, Stan searches again and restarts the same way; here dual
    averaging restarts *warm* instead: from the averaged step size :math:`\exp \bar x`, which
    is also the prox centre, with :math:`\gamma = 0.3`. Why: :math:`\exp \bar x` is kept for
    sampling, and the acceptance rate is concave in :math:`\log\epsilon` where it is high, so
    the more the iterates :math:`x_t` swing around :math:`\bar x`, the more
    :math:`\alpha(\bar x)` exceeds their mean acceptance, the target (Jensen). A cold restart
    in the terminal buffer (50 iterations) left iterates swinging over a factor 25-95 and
    sampling acceptances of 0.87-0.94 for a target of 0.8; the warm restart, 0.76-0.88 (single
    runs, 10-d Gaussian; ``tests/pt/test_trajectory.py`` checks +-0.07 through the kernel).

    Divergences are acted on before sampling, rung by rung: a slot with a divergent
    transition in a slow window after the first (once a metric has been estimated; before it,
    divergences say more about the unit metric than about the model) raises its own target
    acceptance at the next check (every ``DIVERGENCE_CHECK`` iterations and at the window's
    end, up to ``MAX_TARGET_ACCEPT_PROB``) and restarts from a shorter step. On the centered
    eight schools (a funnel) the default 0.8 left the cold chain at tau's mean 4.0-4.5 against
    3.6 with 34-98 sampling divergences; the hot rungs, which see more of the neck, raise
    theirs first (``benchmarks/funnel.py``). A slot that never diverges keeps the target it was
    given, bitwise (:attr:`~.hmc_step_size.DualAveraging.targets`).

    It reads and sets the engine's step sizes and metric (the engine's own state, which it
    exists to adapt) and runs one-step trajectories through the engine's integrator.

    :param BatchedHMC engine: the engine being set up.
    :param tuple buffers: Stan's ``(init_buffer, term_buffer, base_window)``.
    """

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
        """The initial step-size search, once the engine holds its first states."""
        engine = self.engine
        if engine.adapt_step_size and engine._warmup_steps > 0:
            self.find_step_sizes(range(engine.num_slots))
            self.dual = DualAveraging(self._log_step_sizes(), engine.target_accept_prob)

    def start_trajectory(self):
        """Trajectory-length adaptation, when the engine has no fixed ``num_steps``."""
        engine = self.engine
        if engine.num_steps is None and engine._warmup_steps > 0:
            self.trajectory = TrajectoryAdaptation(engine._lengths, engine.max_num_steps)

    def restart(self, slots):
        """``slots`` got a new target (their beta moved): average their steps anew."""
        if self.dual is not None:
            self.warm_restart(slots)
        if self.trajectory is not None:
            self.trajectory.restart_centre(slots)

    def warm_restart(self, slots, shorter=()):
        """Restart dual averaging of ``slots`` from their averaged step size, as the prox centre
        too, with the stronger shrinkage ``WARM_RESTART_GAMMA`` (see the class docstring); the
        slots in ``shorter`` from ``DIVERGENT_STEP_FACTOR`` times it."""
        log_step_size = self.dual.final_log_step_size()
        for r in shorter:
            log_step_size[r] += math.log(DIVERGENT_STEP_FACTOR)
        self.dual.restart(log_step_size, slots, centre_offset=0.0, gamma=WARM_RESTART_GAMMA)
        self._set_step_sizes(self.dual.log_step_size)

    def _check_divergences(self, t, divergent):
        """Count this iteration's divergences; at a check (every ``DIVERGENCE_CHECK``
        iterations of a slow window after the first, and at its end) raise the target
        acceptance of every slot that diverged since the last one. Returns those slots."""
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
        from) with ``info`` (its :class:`~pyro_pt.explorers.hmc_state.HMCInfo`)."""
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

    def _log_step_sizes(self):
        return [math.log(e) for e in self.engine._step_size.tolist()]

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
