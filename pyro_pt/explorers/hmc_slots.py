"""The slots of a batched HMC: their cached potential, the caller's hooks, their reports."""

import torch

from .hmc_dynamics import evaluate_lockstep
from .hmc_trajectory import jittered_num_steps


class HMCSlots:
    """The part of :class:`~pyro_pt.explorers.hmc.BatchedHMC` (which sets the attributes read
    here) about the slots rather than the transition: the potential cached at the current
    states, recomputed where a swap or a ladder change made it stale, and the reports."""

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
