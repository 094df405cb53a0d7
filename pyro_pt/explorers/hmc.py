"""
Fixed-step HMC for all the rungs one process holds, advanced together.

A *slot* is a rung: it owns a step size, a diagonal inverse mass matrix, an inverse
temperature and a random stream. States are rows of one ``[R, D]`` tensor and move between
slots on swaps; every leapfrog step of every slot is one batched call of the potential. All
tensor arithmetic here is basic elementwise operations (correctly rounded whatever the vector
length) or a per-row reduction whose order depends on neither the number of rows nor the thread
count, and the per-slot scalars (acceptance, step sizes) are Python floats. So a slot's draws
depend only on its seed, its state and its beta -- not on which other slots share its batch or
its process -- provided the potential itself is row-wise batch invariant.
"""

import math

import torch

from ..swap import metropolis_probability
from .hmc_record import HMCRecord
from .hmc_dynamics import draw, leapfrog, not_finite, row_sum
from .hmc_warmup import HMCWarmup

class BatchedHMC:
    r"""
    Hamiltonian Monte Carlo with a fixed number of leapfrog steps for R slots at once, each
    targeting its own tempered density :math:`\exp(lp(z) + \beta_r\, ll(z))`.

    Each iteration, slot r draws a momentum :math:`p \sim N(0, M_r)` with
    :math:`M_r^{-1} = \mathrm{diag}(m_r)`, runs ``num_steps`` leapfrog steps of size
    :math:`\epsilon_r` (all slots together: one call of ``potential_and_grad`` per step), and
    accepts the end point with probability :math:`\min(1, e^{-\Delta H})`. A non-finite
    potential, gradient or energy anywhere on a slot's trajectory rejects that slot's proposal
    and counts as a divergence, as does :math:`\Delta H >` ``max_delta_energy``; the other
    slots are untouched (a failed row is fed its starting point for the rest of the
    trajectory, so the potential never sees a NaN state).

    During warmup each slot adapts its step size by dual averaging towards
    ``target_accept_prob`` and its diagonal inverse mass matrix from the variance of its
    draws in Stan's windows (:func:`~pyro_pt.explorers.hmc_warmup.warmup_windows`); after each
    window the step size is re-initialized by the doubling/halving heuristic of Hoffman &
    Gelman (Algorithm 4) and dual averaging restarts. The momenta, accept uniforms (and
    step-count jitter) of slot r come from its own ``torch.Generator``, on the states' device.

    The potential at the current states is cached between iterations: a step costs
    ``num_steps`` calls, plus one when a slot's state or beta changed (swaps, ladder
    adaptation).

    **References**

    [1] Neal (2011), "MCMC using Hamiltonian dynamics", Handbook of MCMC, ch. 5.

    [2] Hoffman, Gelman (2014), "The No-U-Turn Sampler", JMLR 15 (Algorithms 4 and 5).

    [3] Stan Reference Manual, "HMC algorithm parameters" (windowed adaptation, metric
    regularization, ``max_delta_energy`` = 1000 as Stan's and Pyro's divergence threshold).

    :param callable potential_and_grad: ``(z [R, D], betas [R]) -> (potential [R], grad [R, D],
        ll [R])`` with potential :math:`-(lp + \beta\, ll)` and its gradient in ``z``; NaN or
        infinite rows are allowed.
    :param int num_steps: leapfrog steps per iteration (fixed: they do not grow as the step
        size shrinks).
    :param step_size: initial step size, a float or one per slot.
    :param float target_accept_prob: the acceptance rate step-size adaptation aims for.
    :param bool adapt_step_size: adapt step sizes during warmup.
    :param bool adapt_mass_matrix: adapt diagonal inverse mass matrices during warmup.
    :param float num_steps_jitter: if > 0, each iteration slot r takes a number of steps drawn
        uniformly from ``[ceil((1 - jitter) num_steps), num_steps]`` with its own generator
        (breaks periodic trajectories on near-Gaussian targets); default 0, no jitter.
    :param float max_delta_energy: energy error above which a trajectory counts as divergent.
    :param int init_buffer: Stan's initial fast warmup interval.
    :param int term_buffer: Stan's terminal fast warmup interval.
    :param int base_window: Stan's first slow window.

    Example::

        hmc = BatchedHMC(potential_and_grad, num_steps=10)
        ll = hmc.setup(z, betas=[1.0, 0.5], seeds=[11, 12], warmup_steps=500)
        for _ in range(1500):
            z, ll, accepted = hmc.step(z)
        hmc.diagnostics()[0]["acceptance rate"]
    """

    def __init__(self, potential_and_grad, num_steps=10, step_size=1.0, target_accept_prob=0.8,
                 adapt_step_size=True, adapt_mass_matrix=True, num_steps_jitter=0.0,
                 max_delta_energy=1000.0, init_buffer=75, term_buffer=50, base_window=25):
        if not callable(potential_and_grad):
            raise TypeError("potential_and_grad must be a callable (z, betas) -> "
                            f"(potential, grad, ll), got {type(potential_and_grad).__name__}")
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
        if not 0.0 < target_accept_prob < 1.0:
            raise ValueError(f"target_accept_prob must be in (0, 1), got {target_accept_prob!r}")
        if not 0.0 <= num_steps_jitter < 1.0:
            raise ValueError(f"num_steps_jitter must be in [0, 1), got {num_steps_jitter!r}")
        self.potential_and_grad = potential_and_grad
        self.num_steps = num_steps
        self._init_step_size = step_size
        self.target_accept_prob = target_accept_prob
        self.adapt_step_size = adapt_step_size
        self.adapt_mass_matrix = adapt_mass_matrix
        self.num_steps_jitter = num_steps_jitter
        self.min_num_steps = max(1, math.ceil((1.0 - num_steps_jitter) * num_steps))
        self.max_delta_energy = max_delta_energy
        self._buffers = (init_buffer, term_buffer, base_window)
        self.num_potential_calls = 0

    # ----- set-up and the caller's hooks -----

    def setup(self, z_flat, betas, seeds, warmup_steps):
        """
        Start R slots from the rows of ``z_flat``.

        :param torch.Tensor z_flat: initial states ``[R, D]`` (their device and dtype are the
            engine's).
        :param betas: R inverse temperatures.
        :param seeds: R ints, one random stream per slot.
        :param int warmup_steps: iterations of adaptation; later ones sample.
        :returns: the log-likelihoods ``[R]`` of the initial states.
        """
        if not (torch.is_tensor(z_flat) and z_flat.dim() == 2 and z_flat.is_floating_point()):
            raise ValueError("z_flat must be a floating-point tensor of shape [R, D], got "
                             f"{getattr(z_flat, 'shape', type(z_flat).__name__)}")
        num_slots, dim = z_flat.shape
        self._device, self._dtype = z_flat.device, z_flat.dtype
        self._betas = self._per_slot(betas, "betas", num_slots)
        if len(seeds) != num_slots:
            raise ValueError(f"seeds must have one entry per slot ({num_slots}), got {len(seeds)}")
        self._generators = [torch.Generator(device=self._device).manual_seed(int(s))
                            for s in seeds]
        step_size = self._per_slot(self._init_step_size, "step_size", num_slots)
        if not bool((step_size > 0).all()):
            raise ValueError(f"step_size must be positive, got {self._init_step_size!r}")
        self._step_size = step_size
        self._inv_mass = torch.ones(num_slots, dim, dtype=self._dtype, device=self._device)
        self._momentum_scale = 1.0 / self._inv_mass.sqrt()
        self._warmup_steps = int(warmup_steps)
        self._t = 0
        self._warmup = HMCWarmup(self, self._buffers)
        self._record = HMCRecord(num_slots, self._warmup_steps, self.max_delta_energy)

        z = z_flat.detach().clone()
        potential, grad, ll = self._evaluate(z)
        if potential.shape != (num_slots,) or grad.shape != z.shape or ll.shape != (num_slots,):
            raise ValueError(
                f"potential_and_grad must return shapes [R], [R, D], [R] = [{num_slots}], "
                f"{list(z.shape)}, [{num_slots}]; got {list(potential.shape)}, "
                f"{list(grad.shape)}, {list(ll.shape)}")
        bad = not_finite(potential, grad)
        if bool(bad.any()):
            raise ValueError(
                f"the potential or its gradient is not finite at the initial state of slot(s) "
                f"{bad.nonzero().flatten().tolist()}; start those replicas where the model's "
                "density is positive and finite")
        self._z, self._potential, self._grad, self._ll = z, potential, grad, ll
        self._stale = torch.zeros(num_slots, dtype=torch.bool, device=self._device)
        self._pending_restart = set()
        self._warmup.start()
        return ll.clone()

    def _per_slot(self, value, name, num_slots):
        out = torch.as_tensor(value, dtype=self._dtype, device=self._device).reshape(-1)
        if out.numel() == 1:
            out = out.expand(num_slots).clone()
        if out.numel() != num_slots:
            raise ValueError(f"{name} must have one value per slot ({num_slots}), got {value!r}")
        return out

    def set_betas(self, betas):
        """
        Give the slots new inverse temperatures (ladder adaptation). Slots whose beta changed
        recompute their potential at the next step and, during warmup, re-initialize their
        step size and restart dual averaging (their target moved); their mass matrix keeps
        adapting in the current window.
        """
        betas = self._per_slot(betas, "betas", len(self._generators))
        changed = betas != self._betas
        self._betas = betas
        self._stale |= changed
        if self.adapt_step_size and self._t < self._warmup_steps:
            self._pending_restart.update(changed.nonzero().flatten().tolist())

    def replace_states(self, slots):
        """
        Mark the states at ``slots`` as replaced (after swaps): their cached potential and
        gradient are recomputed at the next step. :meth:`step` also recomputes any row of
        its input that differs from the state it returned, so this is a safeguard for a
        potential whose value changed for other reasons.
        """
        self._stale[torch.as_tensor(list(slots), dtype=torch.long, device=self._device)] = True

    # ----- one iteration -----

    def step(self, z_flat):
        """
        One HMC iteration of every slot from the states ``z_flat`` ``[R, D]``.

        :returns: ``(z [R, D], ll [R], accepted [R] bool)``: the new states, their
            log-likelihoods (from the trajectory's own potential calls) and which slots moved.
        """
        self._refresh(z_flat.detach())
        in_warmup = self._t < self._warmup_steps
        if self._pending_restart:
            if in_warmup:
                self._warmup.restart(sorted(self._pending_restart))
            self._pending_restart = set()

        steps, noise, uniform = self._draw(range(self.num_slots), uniform=True)
        z0, u0 = self._z, self._potential
        p0 = noise * self._momentum_scale
        z, p, potential, grad, ll, bad = self._leapfrog(p0, self._step_size, steps)
        delta = potential + self._kinetic(p) - (u0 + self._kinetic(p0))
        delta = torch.where(bad, torch.full_like(delta, math.nan), delta)
        # Per-slot scalars in Python: one transfer, and exp rounded alike for any R.
        deltas = delta.tolist()
        accept_prob = [metropolis_probability(-d) for d in deltas]
        accepted_list = [u < a for u, a in zip(uniform.tolist(), accept_prob)]
        accepted = torch.tensor(accepted_list, device=self._device)
        keep = accepted[:, None]
        self._z = torch.where(keep, z, z0)
        self._potential = torch.where(accepted, potential, u0)
        self._grad = torch.where(keep, grad, self._grad)
        self._ll = torch.where(accepted, ll, self._ll)

        self._t += 1
        self._record.add(self._t, deltas, accept_prob, accepted_list)
        if in_warmup:
            self._warmup.update(accept_prob)
        return self._z.clone(), self._ll.clone(), accepted

    def _evaluate(self, z):
        potential, grad, ll = self.potential_and_grad(z, self._betas)
        self.num_potential_calls += 1
        return potential.detach(), grad.detach(), ll.detach()

    def _refresh(self, z):
        """Recompute the cached potential where the state or beta changed since the last step."""
        if z.shape != self._z.shape or z.dtype != self._dtype or z.device != self._device:
            raise ValueError(
                f"z_flat must be a {self._dtype} tensor of shape {list(self._z.shape)} on "
                f"{self._device} (as given to setup), got {z.dtype} {list(z.shape)} on {z.device}")
        stale = self._stale | (z != self._z).any(-1)
        if bool(stale.any()):
            potential, grad, ll = self._evaluate(z)
            self._potential = torch.where(stale, potential, self._potential)
            self._grad = torch.where(stale[:, None], grad, self._grad)
            self._ll = torch.where(stale, ll, self._ll)
            self._stale = torch.zeros_like(self._stale)
        self._z = z

    def _draw(self, slots, uniform):
        """Slot r's random numbers from its own generator (:func:`~.hmc_dynamics.draw`)."""
        num_slots, dim = self._z.shape
        return draw(self._generators, slots, dim, self.num_steps, self.min_num_steps,
                    self.num_steps_jitter > 0, uniform, self._dtype, self._device)

    def _kinetic(self, p):
        return 0.5 * row_sum(self._inv_mass * p * p)

    def _leapfrog(self, p0, step_size, steps, num_steps=None):
        """The leapfrog trajectories from the cached states (:func:`~.hmc_dynamics.leapfrog`)."""
        n_max = num_steps or (self.num_steps if steps is None else int(steps.max()))
        start = (self._z, self._potential, self._grad, self._ll)
        return leapfrog(self._evaluate, start, p0, step_size, self._inv_mass, steps, n_max)

    # ----- reporting -----

    @property
    def num_slots(self):
        return len(self._generators)

    @property
    def betas(self):
        return self._betas.clone()

    @property
    def step_sizes(self):
        """The current step size of every slot ``[R]``."""
        return self._step_size.clone()

    @property
    def inverse_mass(self):
        """The diagonal inverse mass matrix of every slot ``[R, D]``."""
        return self._inv_mass.clone()

    def diagnostics(self):
        """One dict per slot (:meth:`~pyro_pt.explorers.hmc_record.HMCRecord.diagnostics`)."""
        return self._record.diagnostics(self._t, self._step_size, self._inv_mass)

    def logging(self, slot=0):
        """Progress-bar fields of one slot: its step size and mean acceptance probability."""
        return self._record.logging(slot, self._step_size)
