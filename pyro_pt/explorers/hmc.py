"""
HMC for all the rungs one process holds, advanced together.

A *slot* is a rung: it owns a step size, a diagonal inverse mass matrix, an inverse
temperature and a random stream; states are rows of one ``[R, D]`` tensor. All tensor
arithmetic is elementwise (correctly rounded whatever the length) or a per-row reduction of
fixed order, and the per-slot scalars are Python floats, so a slot's draws depend only on its
seed, state and beta, not on which slots share its batch or process, provided the potential is
row-wise batch invariant.
"""

import math

import torch

from ..swap import metropolis_probability
from .hmc_dynamics import (draw, evaluate_lockstep, leapfrog, leapfrog_lockstep, leapfrog_rows,
                           not_finite, row_sum)
from .hmc_record import HMCInfo, HMCRecord, HMCState
from .hmc_trajectory import jittered_num_steps, shared_fraction
from .hmc_warmup import HMCWarmup


class BatchedHMC:
    r"""
    Hamiltonian Monte Carlo for R slots at once, slot r targeting
    :math:`\exp(lp(z) + \beta_r\, ll(z))`.

    Each iteration slot r draws a momentum :math:`p \sim N(0, M_r)`, runs :math:`L_r` leapfrog
    steps of size :math:`\epsilon_r` (all slots together: one call of ``potential_and_grad``
    per step) and accepts the end point with probability :math:`\min(1, e^{-\Delta H})`. A
    non-finite potential, gradient or energy on a slot's trajectory, or
    :math:`\Delta H >` ``max_delta_energy``, rejects that slot's proposal and counts as a
    divergence; the other slots are untouched. Warmup adapts each slot's step size, diagonal
    inverse mass matrix and trajectory length
    (:class:`~pyro_pt.explorers.hmc_warmup.HMCWarmup`). With ``num_steps=None`` iteration t
    runs :math:`L_r = \min(L_{max}, \lceil h_t T_r / \epsilon_r \rceil)` steps, :math:`T_r`
    adapted by ChEES (:mod:`~pyro_pt.explorers.hmc_trajectory`) and :math:`h_t` a jitter all
    slots share (:func:`~.hmc_trajectory.shared_fraction`). Slot r's momenta, accept uniforms
    and jitter come from its own ``torch.Generator``, on the states' device. The potential at
    the current states is cached: a step costs ``num_steps`` calls, plus one when a slot's
    state or beta changed (swaps, ladder adaptation).

    **References**

    [1] Neal (2011), "MCMC using Hamiltonian dynamics", Handbook of MCMC, ch. 5.

    [2] Hoffman, Gelman (2014), "The No-U-Turn Sampler", JMLR 15 (Algorithms 4 and 5).

    [3] Stan Reference Manual, "HMC algorithm parameters" (windowed adaptation, metric
    regularization, ``max_delta_energy`` = 1000 as Stan's and Pyro's divergence threshold).

    :param callable potential_and_grad: ``(z [R, D], betas [R]) -> (potential [R], grad [R, D],
        ll [R])`` with potential :math:`-(lp + \beta\, ll)` and its gradient in ``z``; NaN or
        infinite rows are allowed.
    :param int num_steps: a fixed number of leapfrog steps per iteration (they do not grow as
        the step size shrinks); None (default) adapts the trajectory length, of at most
        ``max_num_steps`` steps.
    :param step_size: initial step size, a float or one per slot.
    :param float num_steps_jitter: with ``num_steps`` only (an adapted trajectory is always
        jittered): if > 0, slot r takes a number of steps drawn uniformly from
        ``[ceil((1 - jitter) num_steps), num_steps]`` (breaks periodic trajectories on
        near-Gaussian targets); default 0.
    :param callable fused_step: optional ``(dtype, device) -> step or None``, a fused step of
        one slot, bitwise ``potential_and_grad``'s numbers
        (:meth:`~pyro_pt.potential.fused.FusedSteps.step`): each slot's trajectory then runs as
        one call per step (:func:`~.hmc_dynamics.leapfrog_rows`).
    :param callable lockstep: optional ``(num_slots, dtype, device) -> plan or None``
        (:meth:`~pyro_pt.potential.lockstep.Lockstep.plan`): each step of all slots is then one
        compiled call per batch (:func:`~.hmc_dynamics.leapfrog_lockstep`); it takes
        precedence over ``fused_step``.

    ``target_accept_prob``, ``adapt_step_size``, ``adapt_mass_matrix`` and Stan's warmup
    intervals (``init_buffer``, ``term_buffer``, ``base_window``:
    :func:`~pyro_pt.explorers.hmc_warmup.warmup_windows`) are the warmup's.

    Example::

        hmc = BatchedHMC(potential_and_grad)
        ll = hmc.setup(z, betas=[1.0, 0.5], seeds=[11, 12], warmup_steps=500)
        for _ in range(1500):
            state, info = hmc.step(z)
            z = state.z
        hmc.diagnostics()[0]["acceptance rate"], hmc.trajectory_lengths
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # SLOTS: one entry per slot, saved per rung. The potential cached at the states is saved
    # too, so that a resumed step does not recompute it by another path.
    STATE = ("num_potential_calls", "_warmup_steps", "_t", "_warmup", "_record")
    SLOTS = ("_betas", "_generators", "_step_size", "_inv_mass", "_momentum_scale", "_z",
             "_potential", "_grad", "_ll", "_stale", "_pending_restart", "_lengths")
    REBUILT = ("potential_and_grad", "num_steps", "_init_step_size", "target_accept_prob",
               "adapt_step_size", "adapt_mass_matrix", "max_num_steps", "_jitter",
               "max_delta_energy", "_buffers", "fused_step", "lockstep", "_device", "_dtype")

    def __init__(self, potential_and_grad, num_steps=None, step_size=1.0, target_accept_prob=0.8,
                 adapt_step_size=True, adapt_mass_matrix=True, num_steps_jitter=0.0,
                 max_delta_energy=1000.0, init_buffer=75, term_buffer=50, base_window=25,
                 max_num_steps=1024, fused_step=None, lockstep=None):
        if not callable(potential_and_grad):
            raise TypeError("potential_and_grad must be a callable (z, betas) -> "
                            f"(potential, grad, ll), got {type(potential_and_grad).__name__}")
        for name, value in (("num_steps", num_steps), ("max_num_steps", max_num_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if num_steps is None and num_steps_jitter:
            raise ValueError("num_steps_jitter applies to a fixed num_steps; an adapted "
                             "trajectory is always jittered (on (0, T]): pass "
                             "num_steps too, or leave num_steps_jitter out")
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
        self.max_num_steps = max_num_steps
        if num_steps is not None and num_steps_jitter > 0:
            self._jitter = (max(1, math.ceil((1.0 - num_steps_jitter) * num_steps)), num_steps)
        else:
            self._jitter = None
        self.max_delta_energy = max_delta_energy
        self._buffers = (init_buffer, term_buffer, base_window)
        self.num_potential_calls = 0
        for name, value in (("fused_step", fused_step), ("lockstep", lockstep)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be None or a callable that gives a compiled step "
                                f"(or None), got {type(value).__name__}")
        self.fused_step, self.lockstep = fused_step, lockstep

    # ----- set-up and the caller's hooks -----

    def setup(self, z_flat, betas, seeds, warmup_steps):
        """Start R slots from the rows of ``z_flat`` ``[R, D]`` (their device and dtype are the
        engine's), at ``betas`` (R floats), each with a random stream from its one of ``seeds``,
        for ``warmup_steps`` iterations of adaptation. Returns the initial states' ll ``[R]``."""
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
        self._stale = set()  # slots whose cached potential must be recomputed
        self._pending_restart = set()
        self._warmup.start()
        return ll.clone()

    # ----- one iteration -----

    def step(self, z_flat):
        """One HMC iteration of every slot from the states ``z_flat`` ``[R, D]``, then in warmup
        the adaptation: ``(state, info)``, an :class:`~.hmc_record.HMCState` (ll from the
        trajectory's own potential calls) and an :class:`~.hmc_record.HMCInfo`."""
        self._refresh(z_flat.detach())
        in_warmup = self._t < self._warmup_steps
        if self._pending_restart:
            if in_warmup:
                self._warmup.restart(sorted(self._pending_restart))
            self._pending_restart = set()
        start = self._z
        state, info, scalars = self._transition()
        self._t += 1
        self._record.add(self._t, *scalars)
        if in_warmup:
            self._warmup.update(start, info)
        return state, info

    def _transition(self):
        """The HMC kernel itself: one trajectory and accept test per slot, no adaptation.
        Returns the state, the info and its per-slot scalars as Python lists (energy errors,
        accept probabilities, accepted)."""
        jitter, noise, uniform = self._draw(range(self.num_slots), uniform=True)
        steps = jitter if self.num_steps is not None else self._num_steps(shared_fraction(self._t))
        z0, u0 = self._z, self._potential
        p0 = noise * self._momentum_scale
        z, p, potential, grad, ll, bad = self._leapfrog(p0, self._step_size, steps)
        delta = potential + self._kinetic(p) - (u0 + self._kinetic(p0))
        # Per-slot scalars in Python: one transfer, and exp rounded alike for any R.
        deltas = [math.nan if b else d for d, b in zip(delta.tolist(), bad.tolist())]
        accept_prob = [metropolis_probability(-d) for d in deltas]
        accepted_list = [u < a for u, a in zip(uniform.tolist(), accept_prob)]
        accepted = torch.tensor(accepted_list, device=self._device)
        keep = accepted[:, None]
        self._z = torch.where(keep, z, z0)
        self._potential = torch.where(accepted, potential, u0)
        self._grad = torch.where(keep, grad, self._grad)
        self._ll = torch.where(accepted, ll, self._ll)
        f64 = {"dtype": torch.float64, "device": self._device}
        if steps is None:
            steps = torch.full((self.num_slots,), self.num_steps, device=self._device)
        info = HMCInfo(accepted=accepted, accept_prob=torch.tensor(accept_prob, **f64),
                       divergent=torch.tensor([not d <= self.max_delta_energy for d in deltas],
                                              device=self._device),
                       energy_error=torch.tensor(deltas, **f64), num_steps=steps,
                       proposal=z, momentum=p)
        return (HMCState(self._z.clone(), self._ll.clone()), info,
                (deltas, accept_prob, accepted_list))

    def _num_steps(self, fraction):
        """Each slot's number of steps for the share ``fraction`` of its trajectory length (a
        long tensor)."""
        steps = [jittered_num_steps(fraction, length, eps, self.max_num_steps) for length, eps
                 in zip(self._lengths, self._step_size.tolist())]
        return torch.tensor(steps, device=self._device)

    def _draw(self, slots, uniform):
        """Slot r's random numbers from its own generator (:func:`~.hmc_dynamics.draw`)."""
        num_slots, dim = self._z.shape
        return draw(self._generators, slots, dim, self._jitter, uniform, self._dtype,
                    self._device)

    def _kinetic(self, p):
        return 0.5 * row_sum(self._inv_mass * p * p)

    def _leapfrog(self, p0, step_size, steps, num_steps=None):
        """The leapfrog trajectories from the cached states (:func:`~.hmc_dynamics.leapfrog`)."""
        n_max = num_steps or (self.num_steps if steps is None else int(steps.max()))
        start = (self._z, self._potential, self._grad, self._ll)
        plan = self._plan()
        if plan is not None:
            self.num_potential_calls += n_max
            return leapfrog_lockstep(plan, self._evaluate_row, start, p0, step_size,
                                     self._inv_mass, self._betas, steps, n_max)
        step = self._fused()
        if step is None:
            return leapfrog(self._evaluate, start, p0, step_size, self._inv_mass, steps, n_max)
        self.num_potential_calls += n_max
        return leapfrog_rows(step, self._evaluate_row, start, p0, step_size, self._inv_mass,
                             self._betas, steps, n_max)

    # ----- the slots: their cached potential, the caller's hooks, their reports -----

    def _per_slot(self, value, name, num_slots):
        out = torch.as_tensor(value, dtype=self._dtype, device=self._device).reshape(-1)
        if out.numel() == 1:
            out = out.expand(num_slots).clone()
        if out.numel() != num_slots:
            raise ValueError(f"{name} must have one value per slot ({num_slots}), got {value!r}")
        return out

    def set_betas(self, betas):
        """New inverse temperatures (ladder adaptation): a slot whose beta changed recomputes
        its potential at the next step and, in warmup, restarts its step size's averaging and
        its trajectory criterion's centre (its mass matrix keeps adapting in the window)."""
        betas = self._per_slot(betas, "betas", len(self._generators))
        changed = [r for r, moved in enumerate((betas != self._betas).tolist()) if moved]
        self._betas = betas
        self._stale.update(changed)
        if self.adapt_step_size and self._t < self._warmup_steps:
            self._pending_restart.update(changed)

    def replace_states(self, slots):
        """Mark the states at ``slots`` as replaced (after swaps): their potential is recomputed
        at the next step (as is any row of the next input that differs from the state returned;
        this is a safeguard for a potential whose value changed for other reasons)."""
        self._stale.update(int(r) for r in slots)

    def _evaluate(self, z):
        potential, grad, ll = self.potential_and_grad(z, self._betas)
        self.num_potential_calls += 1
        return potential.detach(), grad.detach(), ll.detach()

    def _evaluate_row(self, slot, z):
        """``_evaluate`` of slot ``slot`` alone, ``z`` ``[1, D]`` (a batch-invariant potential
        gives it bitwise its numbers in the whole batch)."""
        potential, grad, ll = self.potential_and_grad(z, self._betas[slot:slot + 1])
        return potential.detach(), grad.detach(), ll.detach()

    def _refresh(self, z):
        """Recompute the cached potential where the state or beta changed since the last step."""
        if z.shape != self._z.shape or z.dtype != self._dtype or z.device != self._device:
            raise ValueError(
                f"z_flat must be a {self._dtype} tensor of shape {list(self._z.shape)} on "
                f"{self._device} (as given to setup), got {z.dtype} {list(z.shape)} on {z.device}")
        stale = (z != self._z).any(-1)
        if self._stale:  # slots marked by set_betas or replace_states
            stale[sorted(self._stale)] = True
        if bool(stale.any()):
            # Only the stale rows: the potential is batch-invariant (docs/layout.md), so a row's
            # numbers are the same whichever rows share its call, and after a swap most
            # rows kept their state.
            rows = stale.nonzero().flatten()
            potential, grad, ll = self._stale_potential(z, rows)
            self.num_potential_calls += 1
            self._potential, self._grad, self._ll = (
                cached.index_put((rows,), new.detach()) for cached, new in
                ((self._potential, potential), (self._grad, grad), (self._ll, ll)))
        self._stale = set()
        self._z = z

    def _stale_potential(self, z, rows):
        """The potential, gradient and ll of ``z[rows]``: in lockstep, one call for all slots
        (the trajectories' numbers, at about one row's cost), a row at a non-finite point again
        by the potential itself (its NaN semantics); else the potential's call on the rows."""
        plan = self._plan()
        if plan is None:
            return self.potential_and_grad(z[rows], self._betas[rows])
        potential, grad, ll, bad = (t[rows] for t in evaluate_lockstep(plan, z, self._betas))
        for i in bad.nonzero().flatten().tolist():
            r = int(rows[i])
            potential[i:i + 1], grad[i:i + 1], ll[i:i + 1] = self._evaluate_row(r, z[r:r + 1])
        return potential, grad, ll

    # ----- reporting -----

    @property
    def num_slots(self):
        return len(self._generators)

    @property
    def betas(self):
        return self._betas.clone()

    @property
    def step_sizes(self):
        return self._step_size.clone()

    @property
    def target_accept_probs(self):
        """Each slot's target acceptance: the one given, raised in warmup where the slot
        diverged (:class:`~pyro_pt.explorers.hmc_warmup.HMCWarmup`)."""
        dual = self._warmup.dual
        if dual is None:  # no step-size adaptation: the target was never used
            return [self.target_accept_prob] * self.num_slots
        return list(dual.targets)

    @property
    def trajectory_lengths(self):
        """Every slot's trajectory length :math:`T`: adapted, or ``num_steps`` step sizes."""
        if self.num_steps is not None:
            return [self.num_steps * e for e in self._step_size.tolist()]
        return list(self._lengths)

    @property
    def inverse_mass(self):
        return self._inv_mass.clone()

    def diagnostics(self):
        r"""One dict per slot (:meth:`.HMCRecord.diagnostics`); with an adapted trajectory also
        its ``trajectory length`` and ``num steps`` (of an unjittered trajectory, capped); where
        warmup raised it, its ``target accept prob``."""
        out = self._record.diagnostics(self._t, self._step_size, self._inv_mass)
        for d, target in zip(out, self.target_accept_probs):
            if target != self.target_accept_prob:
                d["target accept prob"] = target
        if self.num_steps is None:
            for d, length, eps in zip(out, self._lengths, self._step_size.tolist()):
                d["trajectory length"] = length
                d["num steps"] = jittered_num_steps(1.0, length, eps, self.max_num_steps)
        return out

    def logging(self, slot=0):
        return self._record.logging(slot, self._step_size)

    def _fused(self):
        return None if self.fused_step is None else self.fused_step(self._dtype, self._device)

    def _plan(self):
        if self.lockstep is None:
            return None
        return self.lockstep(self._z.shape[0], self._dtype, self._device)

    @property
    def leapfrog(self):
        """``"lockstep"`` (one compiled call per step for a batch of slots), ``"fused"`` (one
        compiled call per slot and step) or ``"batched"`` (one call of the batched potential
        per step), decided after :meth:`setup`."""
        if self._plan() is not None:
            return "lockstep"
        return "batched" if self._fused() is None else "fused"
