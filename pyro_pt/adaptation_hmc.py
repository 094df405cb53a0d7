"""
Warmup adaptation of a batch of HMC slots: step size by dual averaging, diagonal mass matrix
by windowed variance estimation. Pure torch, vectorized over the slots (rows); every update is
elementwise per row, so a slot's adapted state never depends on the other rows of the batch.
"""

import math

import torch


def warmup_windows(warmup_steps, init_buffer=75, term_buffer=50, base_window=25):
    r"""
    The slow windows of Stan's windowed warmup, as ``[(start, end), ...]`` iteration ranges
    (0-based, ``end`` exclusive). The mass matrix is re-estimated from the draws of each
    window when iteration ``end`` completes.

    Warmup is an initial fast interval (``init_buffer``, step size only), slow windows of
    doubling length starting at ``base_window`` (a window is stretched to the end of the slow
    phase when the next, doubled one would not fit), and a terminal fast interval
    (``term_buffer``) in which the step size adapts to the final metric. When the three do
    not fit, Stan uses 15% / 75% / 10% of the warmup; under 20 warmup iterations it
    estimates no metric at all.

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
        term_buffer = int(0.1 * warmup_steps)
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
    Dual-averaging step-size adaptation for a batch of slots, each with its own iteration
    counter (so one slot can restart while the others continue).

    With :math:`\alpha_t` the acceptance statistic of iteration :math:`t` and
    :math:`\delta` the target,

    .. math::

        \bar H_t = (1 - \tfrac{1}{t + t_0}) \bar H_{t-1} + \tfrac{1}{t + t_0} (\delta - \alpha_t),
        \quad x_t = \mu - \tfrac{\sqrt t}{\gamma} \bar H_t,
        \quad \bar x_t = t^{-\kappa} x_t + (1 - t^{-\kappa}) \bar x_{t-1},

    with :math:`x = \log\epsilon` the step used during warmup and :math:`\exp \bar x` the one
    kept afterwards; :math:`\mu = \log(10\,\epsilon_0)` at each restart.

    **References**

    [1] Hoffman, Gelman (2014), "The No-U-Turn Sampler", JMLR 15, Algorithm 5 (section 3.2.1).

    [2] Stan Reference Manual, step-size adaptation: :math:`\gamma = 0.05, t_0 = 10,
    \kappa = 0.75`.

    :param torch.Tensor log_step_size: initial :math:`\log\epsilon`, shape ``[R]``.
    :param float target_accept_prob: :math:`\delta`.
    """

    def __init__(self, log_step_size, target_accept_prob=0.8, gamma=0.05, t0=10.0, kappa=0.75):
        self.target = target_accept_prob
        self.gamma, self.t0, self.kappa = gamma, t0, kappa
        # float64 whatever the model's dtype: these are R numbers, and log-steps accumulate.
        self.log_step_size = log_step_size.to(torch.float64).clone()
        self.t = torch.zeros_like(self.log_step_size)
        self.h_bar = torch.zeros_like(self.log_step_size)
        self.x_bar = torch.zeros_like(self.log_step_size)
        self.mu = self.log_step_size + math.log(10.0)

    def restart(self, log_step_size, mask):
        """Restart the slots in ``mask`` from ``log_step_size`` (after a metric or beta change)."""
        log_step_size = log_step_size.to(self.log_step_size)
        self.log_step_size = torch.where(mask, log_step_size, self.log_step_size)
        self.mu = torch.where(mask, log_step_size + math.log(10.0), self.mu)
        zero = torch.zeros_like(self.t)
        self.t = torch.where(mask, zero, self.t)
        self.h_bar = torch.where(mask, zero, self.h_bar)
        self.x_bar = torch.where(mask, zero, self.x_bar)

    def update(self, accept_prob):
        """One iteration for every slot; returns the new warmup :math:`\\log\\epsilon` ``[R]``."""
        self.t = self.t + 1
        eta = 1.0 / (self.t + self.t0)
        self.h_bar = (1 - eta) * self.h_bar + eta * (self.target - accept_prob.to(self.t))
        self.log_step_size = self.mu - self.t.sqrt() / self.gamma * self.h_bar
        weight = self.t.pow(-self.kappa)
        self.x_bar = weight * self.log_step_size + (1 - weight) * self.x_bar
        return self.log_step_size

    def final_log_step_size(self):
        """:math:`\\bar x`, the log step size to sample with after warmup ``[R]``."""
        # A slot restarted at the very end of warmup has no average yet: keep its step.
        return torch.where(self.t > 0, self.x_bar, self.log_step_size)


class WelfordDiagonal:
    r"""
    Running mean and variance of every coordinate of a batch of slots (Welford's algorithm),
    regularized towards a small multiple of the identity as in Stan:

    .. math:: \hat\sigma^2 = \frac{n}{n + 5}\, s^2 + 10^{-3}\, \frac{5}{n + 5},

    with :math:`s^2` the sample variance of the :math:`n` draws.

    **References**

    [1] Welford (1962), "Note on a method for calculating corrected sums of squares and
    products", Technometrics 4(3).

    [2] Stan Reference Manual, "Euclidean metric" adaptation (the regularization above).

    :param int num_slots: R.
    :param int dim: D.
    """

    def __init__(self, num_slots, dim, dtype=torch.float64, device=None):
        self.mean = torch.zeros(num_slots, dim, dtype=dtype, device=device)
        self.m2 = torch.zeros_like(self.mean)
        self.n = 0

    def reset(self):
        self.mean.zero_()
        self.m2.zero_()
        self.n = 0

    def update(self, z):
        """Add one draw per slot, ``z`` of shape ``[R, D]``."""
        self.n += 1
        delta = z - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (z - self.mean)

    def variance(self):
        """The regularized variance ``[R, D]`` (needs at least two draws)."""
        n = self.n
        sample_var = self.m2 / (n - 1)
        return (n / (n + 5.0)) * sample_var + 1e-3 * (5.0 / (n + 5.0))
