"""
Warmup adaptation of a batch of HMC slots: step size by dual averaging, diagonal mass matrix
by windowed variance estimation. Pure torch, vectorized over the slots (rows); every update is
elementwise per row, so a slot's adapted state never depends on the other rows of the batch.
:class:`HMCWarmup` runs the schedule for a :class:`~pyro_pt.explorers.hmc.BatchedHMC`, from
outside its iteration (as BlackJAX keeps adaptation outside the kernel).
"""

import math

import torch

from pyro.ops.dual_averaging import DualAveraging as PyroDualAveraging
from pyro.ops.welford import WelfordCovariance

from .hmc_trajectory import TrajectoryAdaptation


# Fewest iterations of step-size adaptation after the last metric window.
MIN_TERM_BUFFER = 10


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


class DualAveraging:
    r"""
    Dual-averaging step-size adaptation for a batch of slots: one
    :class:`pyro.ops.dual_averaging.DualAveraging` per slot, each with its own iteration
    counter (so one slot can restart while the others continue).

    With :math:`\alpha_t` the acceptance statistic of iteration :math:`t` and
    :math:`\delta` the target, Pyro's scheme runs on :math:`g_t = \delta - \alpha_t`:

    .. math::

        \bar H_t = (1 - \tfrac{1}{t + t_0}) \bar H_{t-1} + \tfrac{1}{t + t_0}\, g_t,
        \quad x_t = \mu - \tfrac{\sqrt t}{\gamma} \bar H_t,
        \quad \bar x_t = t^{-\kappa} x_t + (1 - t^{-\kappa}) \bar x_{t-1},

    with :math:`x = \log\epsilon` the step used during warmup and :math:`\exp \bar x` the one
    kept afterwards; :math:`\mu = \log(10\,\epsilon_0)` (Pyro's ``prox_center``) at each
    restart.

    The state is Python floats, updated slot by slot: torch's CPU kernels may round ``pow``
    differently in long and short vectors, which would make a slot's step size depend on how
    many slots share the batch.

    **References**

    [1] Hoffman, Gelman (2014), "The No-U-Turn Sampler", JMLR 15, Algorithm 5 (section 3.2.1).

    [2] Stan Reference Manual, step-size adaptation: :math:`\gamma = 0.05, t_0 = 10,
    \kappa = 0.75`.

    :param list log_step_size: initial :math:`\log\epsilon` of each slot.
    :param float target_accept_prob: :math:`\delta`.
    """

    def __init__(self, log_step_size, target_accept_prob=0.8, gamma=0.05, t0=10.0, kappa=0.75):
        self.target = target_accept_prob
        self.gamma, self.t0, self.kappa = gamma, t0, kappa
        self.log_step_size = [float(x) for x in log_step_size]
        self.t = [0] * len(self.log_step_size)
        self._schemes = [self._scheme(x) for x in self.log_step_size]

    def _scheme(self, log_step_size):
        return PyroDualAveraging(prox_center=log_step_size + math.log(10.0), t0=self.t0,
                                 kappa=self.kappa, gamma=self.gamma)

    def restart(self, log_step_size, slots):
        """Restart ``slots`` from ``log_step_size`` (one value per slot; after a metric or beta
        change)."""
        for r in slots:
            self.log_step_size[r] = float(log_step_size[r])
            self._schemes[r] = self._scheme(self.log_step_size[r])
            self.t[r] = 0

    def update(self, accept_prob):
        r"""One iteration of every slot (``accept_prob``: one float per slot); returns the new
        warmup :math:`\log\epsilon` of each slot."""
        for r, alpha in enumerate(accept_prob):
            self._schemes[r].step(self.target - alpha)
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
    The initial step-size heuristic of Hoffman & Gelman (Algorithm 4), as Stan and Pyro run it
    at the start of warmup and after each metric update, for the slots in ``mask``: double (or
    halve) the step size until the acceptance probability of one leapfrog step crosses 0.8.
    The slots are searched together, one ``accepts_well`` call per round, and each leaves the
    search on its own criterion, so its result does not depend on the other slots.

    **References**

    [1] Hoffman, Gelman (2014), "The No-U-Turn Sampler", JMLR 15, Algorithm 4.

    :param torch.Tensor step_size: current step sizes ``[R]``.
    :param torch.Tensor mask: bool ``[R]``, the slots to search.
    :param callable accepts_well: ``(step_size [R], active [R] bool) -> bool [R]``: whether one
        leapfrog step from a fresh momentum has acceptance probability above 0.8 (only
        ``active`` slots need an answer, and only they may draw random numbers).
    :param int max_rounds: most doublings or halvings.
    :returns: the new step sizes ``[R]`` (unchanged outside ``mask``).
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


class HMCWarmup:
    """
    The warmup schedule of one :class:`~pyro_pt.explorers.hmc.BatchedHMC`: after each
    iteration, dual averaging of the step sizes; in Stan's windows
    (:func:`warmup_windows`), the draws' variance as the next diagonal inverse mass matrix,
    followed by a fresh step-size search (:func:`find_reasonable_step_sizes`) and a restart of
    dual averaging; at the end, the averaged step sizes.

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
        """``slots`` got a new target (their beta moved): search and average their steps anew."""
        if self.dual is not None:
            self.find_step_sizes(slots)
            self.dual.restart(self._log_step_sizes(), slots)
        if self.trajectory is not None:
            self.trajectory.restart_centre(slots)

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
        for start, end in self.windows:
            if start <= t - 1 < end:
                self.welford.update(engine._z)
            if t == end:
                engine._inv_mass = self.welford.get_covariance(regularize=True)
                engine._momentum_scale = 1.0 / engine._inv_mass.sqrt()
                self.welford.reset()
                if engine.adapt_step_size:
                    every = range(engine.num_slots)
                    self.find_step_sizes(every)
                    self.dual.restart(self._log_step_sizes(), every)
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
