r"""
Trajectory-length adaptation of a batch of HMC slots: per-slot ChEES ascended by Adam on
:math:`\log T`, and the jittered number of leapfrog steps it implies.

ChEES (Hoffman, Radul & Sountsov 2021, "An adaptive MCMC scheme for setting trajectory lengths
in Hamiltonian Monte Carlo", AISTATS, Algorithm 1) is
:math:`\tfrac14\, \mathbb E[(\|z' - \mu\|^2 - \|z - \mu\|^2)^2]` with :math:`z \sim \pi`,
:math:`z'` the end of a trajectory of length :math:`t = hT` (:math:`h \in (0, 1]` the jitter,
:func:`shared_fraction`) and :math:`\mu = \mathbb E_\pi[z]`; its gradient in :math:`\log T` is
the expectation of

.. math:: g = \alpha\, t\, (\|z' - \mu\|^2 - \|z - \mu\|^2)\,(z' - \mu)^\top M^{-1} p'

(:math:`\alpha` the acceptance probability, which weights out divergent and rejected
proposals). A slot is one chain, not the paper's ensemble, so the expectation is taken along
the chain: :math:`\mu` is the running mean of the slot's own states (restarted when its target
moves) and the ascent pools the terms of successive iterations (at stationarity each is an
autocorrelated, unbiased draw of the gradient). One term being much noisier than an ensemble's
average, the paper's Adam (Kingma & Ba 2015; :math:`\beta_1 = 0`, :math:`\beta_2 = 0.95`, rate
0.025) gets Kesten's rule (Kesten 1958, "Accelerated stochastic approximation", Ann. Math.
Statist. 29(1)): the rate decays as :math:`0.025 / \sqrt{1 + k/50}` after k sign changes of
the update, so about the optimum, not during a climb; and the log length kept after warmup is
the average :math:`\bar x_t = t^{-\kappa} x_t + (1 - t^{-\kappa}) \bar x_{t-1}`
(:math:`\kappa = 0.75`, as in dual averaging) of the iterates since the last metric update.
Measured on 4-d Gaussians (24 slots, 1000 warmup iterations): a constant rate left 2 of 24
slots at a secondary maximum (2.5 times the optimum); Kesten's none (all within 0.57-1.17 of
the optimum after 300 or 1000 iterations, with and without the metric adapted); twice the rate
(0.05) up to 3 beyond twice the optimum. A rate decaying with every update left none there
either, but stopped the climb early where the optimum is far above the start: on the
25-weight BNN of ``benchmarks/vs_numpyro_ess.py`` the cold rung's T reached 0.27-0.82 in 500
warmup iterations over four seeds, 0.39-1.25 with Kesten's rule, which raised the worst
prediction's ESS from 125-314 to 289-365 per 1000 draws.
"""

import math

from .hmc_dynamics import row_sum


def shared_fraction(t):
    r"""
    The jitter :math:`h_t \in (0, 1]` of iteration ``t`` (from 0), the share of its trajectory
    length every slot runs: the van der Corput sequence in base 2 (1/2, 1/4, 3/4, 1/8, ...),
    uniform over iterations, as ChEES-HMC's quasi-random jitter [1]. Shared, not drawn per
    slot: a lockstep batch steps until its longest trajectory ends, on average :math:`R/(R+1)`
    of the longest length for R independent jitters (0.8 for 4 slots), 1/2 for a shared one. A
    jitter independent of the state keeps each iteration reversible, and one that depends on
    ``t`` alone keeps a slot's draws independent of its company.
    """
    t += 1
    h, scale = 0.0, 0.5
    while t:
        h += scale * (t & 1)
        t >>= 1
        scale *= 0.5
    return h


def jittered_num_steps(fraction, trajectory_length, step_size, max_num_steps):
    r"""Leapfrog steps of one slot's trajectory of length :math:`T` jittered by ``fraction``
    :math:`h`: :math:`\min(L_{max}, \max(1, \lceil h T / \epsilon \rceil))`."""
    return min(max_num_steps, max(1, math.ceil(fraction * trajectory_length / step_size)))


class TrajectoryAdaptation:
    r"""
    Per-slot ChEES ascent on :math:`x = \log T` (see the module), from each slot's initial
    ``trajectory_length``; :math:`T` is kept within :math:`[\epsilon, L_{max}\,\epsilon]` of
    the slot's current step size, :math:`L_{max}` = ``max_num_steps``.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # SLOTS: one entry per slot, saved per rung.
    STATE = ("max_num_steps", "learning_rate", "beta1", "beta2", "kappa", "decay_flips")
    SLOTS = ("log_length", "moment1", "moment2", "t", "flips", "direction", "average",
             "centre", "num_states")
    REBUILT = ()

    def __init__(self, trajectory_length, max_num_steps, learning_rate=0.025, beta1=0.0,
                 beta2=0.95, kappa=0.75, decay_flips=50.0):
        self.log_length = [math.log(x) for x in trajectory_length]
        self.max_num_steps = max_num_steps
        self.learning_rate, self.beta1, self.beta2 = learning_rate, beta1, beta2
        self.kappa, self.decay_flips = kappa, decay_flips
        num_slots = len(self.log_length)
        self.moment1 = [0.0] * num_slots
        self.moment2 = [0.0] * num_slots
        self.t = [0] * num_slots  # Adam's count since the last restart
        # the learning rate's count of sign changes of the update (Kesten), never restarted
        self.flips = [0] * num_slots
        self.direction = [0.0] * num_slots  # the last update's sign
        self.average = list(self.log_length)
        self.centre = None  # [R, D] running mean of each slot's states
        self.num_states = [0] * num_slots

    def rescale(self, old_inv_mass, new_inv_mass):
        r"""
        Carry each slot's :math:`T` over a metric update and restart its ascent there. On a
        Gaussian coordinate of scale :math:`\sigma_i` the frequency is
        :math:`\omega_i = \sqrt{m_i} / \sigma_i`; a :math:`T` kept as it was could land past
        ChEES's first, global maximum when the frequencies grow (measured: 3.8 times the
        optimum after a unit metric became the posterior variance). So :math:`T` is scaled by
        :math:`\sqrt{m_{old} / m_{new}}`, averaged over the coordinates with ChEES's weights
        :math:`\sigma_i^4`, estimated by :math:`m_{new,i}^2` (the window's draws' variance).
        """
        weight = new_inv_mass * new_inv_mass
        ratio = (old_inv_mass / new_inv_mass).sqrt()
        factors = (row_sum(weight * ratio) / row_sum(weight)).tolist()
        for r, factor in enumerate(factors):
            self.log_length[r] += math.log(factor)
            self.average[r] = self.log_length[r]
            self.moment1[r] = self.moment2[r] = 0.0
            self.t[r] = 0

    def restart_centre(self, slots):
        """Forget the running mean of ``slots`` (their target moved)."""
        for r in slots:
            self.num_states[r] = 0

    def observe(self, z):
        """Add the states ``z`` ``[R, D]`` to the slots' running means."""
        if self.centre is None:
            self.centre = z.clone()
        weight = [1.0 / (n + 1) for n in self.num_states]
        weight = z.new_tensor(weight)[:, None]
        self.centre = self.centre + weight * (z - self.centre)
        self.num_states = [n + 1 for n in self.num_states]

    def gradients(self, start, proposal, velocity, times, accept_prob):
        r"""The per-slot ChEES terms :math:`g` of one iteration (0 without a centre yet, or for
        a failed proposal)."""
        if self.centre is None:
            return [0.0] * len(self.t)
        before = start - self.centre
        after = proposal - self.centre
        change = row_sum(after * after) - row_sum(before * before)
        slope = row_sum(after * velocity)
        terms = (change * slope).tolist()
        return [a * t * g if n > 1 and a > 0.0 and math.isfinite(g) else 0.0
                for a, t, g, n in zip(accept_prob, times, terms, self.num_states)]

    def update(self, gradients, step_sizes):
        """One Adam ascent step per slot from its ChEES term; returns the new :math:`T`."""
        for r, g in enumerate(gradients):
            if g == 0.0:
                continue  # no information this iteration (no centre yet, or rejected)
            self.t[r] += 1
            t = self.t[r]
            self.moment1[r] = self.beta1 * self.moment1[r] + (1 - self.beta1) * g
            self.moment2[r] = self.beta2 * self.moment2[r] + (1 - self.beta2) * g * g
            m = self.moment1[r] / (1 - self.beta1 ** t)
            v = self.moment2[r] / (1 - self.beta2 ** t)
            if m * self.direction[r] < 0.0:
                self.flips[r] += 1
            self.direction[r] = math.copysign(1.0, m)
            rate = self.learning_rate / math.sqrt(1.0 + self.flips[r] / self.decay_flips)
            x = self.log_length[r] + rate * m / (math.sqrt(v) + 1e-12)
            low = math.log(step_sizes[r])
            x = min(max(x, low), low + math.log(self.max_num_steps))
            self.log_length[r] = x
            weight = t ** -self.kappa
            self.average[r] = weight * x + (1 - weight) * self.average[r]
        return self.lengths()

    def lengths(self):
        return [math.exp(x) for x in self.log_length]

    def final_lengths(self):
        r"""The averaged :math:`\exp \bar x` of each slot, the length to sample with."""
        return [math.exp(x) for x in self.average]
