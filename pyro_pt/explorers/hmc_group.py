"""The rungs of one process advanced together: ``explorer="hmc"``.

A :class:`HMCGroup` holds the process's tempered rungs (the prior rung stays apart) as the
slots of one :class:`~pyro_pt.explorers.hmc.BatchedHMC` over the model's batched potential
(:class:`~pyro_pt.potential.FunctionalSplit`); each rung gets a :class:`HMCRung` handle.
"""

import inspect

import torch
from pyro.infer import NUTS

from ..checkpoint_state import capture, restore
from ..random import engine_seed
from .contract import ExplorerGroup, ExplorerKind, RungExplorer
from .hmc import BatchedHMC

BATCHED_HMC_OPTIONS = ("num_steps", "step_size", "target_accept_prob", "adapt_step_size",
                       "adapt_mass_matrix", "num_steps_jitter", "max_delta_energy",
                       "init_buffer", "term_buffer", "base_window", "max_num_steps")
# A fixed trajectory length can be periodic on near-Gaussian targets (states come back to the
# same radius, and ll hardly mixes); a random number of steps breaks that (Neal 2011, 5.4.2.2).
# An explicit num_steps gets this jitter; an adapted length is always jittered on (0, T].
DEFAULT_NUM_STEPS_JITTER = 0.5


def check_hmc_options(kwargs):
    """Refuse explorer_kwargs the batched HMC does not take, naming them and the way out."""
    unknown = sorted(set(kwargs) - set(BATCHED_HMC_OPTIONS))
    if unknown:
        # explorer="hmc" became the default after "nuts": NUTS's options point the way back
        nuts = [k for k in unknown if k in inspect.signature(NUTS).parameters]
        raise TypeError(
            f"explorer_kwargs {unknown} are not options of explorer='hmc' (the default, an HMC "
            f"that batches the rungs of a process; it takes {list(BATCHED_HMC_OPTIONS)}). "
            + (f"{nuts} are options of Pyro's NUTS: pass explorer='nuts' for NUTS on every "
               "rung. " if nuts else "")
            + "For Pyro's own HMC on every rung pass explorer=lambda fn, **kw: "
            "pyro.infer.HMC(potential_fn=fn, **kw)"
        )


class HMCGroup(ExplorerGroup):
    """The tempered rungs of one process as the slots of one batched HMC over ``fast`` (the
    model's fast split), ``options`` the :class:`~pyro_pt.explorers.hmc.BatchedHMC`
    keyword arguments."""

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # SLOTS: one entry per slot, saved per rung.
    STATE = ("engine", "_ready")
    SLOTS = ("_betas", "_seeds")
    REBUILT = ("fast",)

    def __init__(self, fast, options):
        check_hmc_options(options)
        options = dict(options)
        if options.get("num_steps") is not None:
            options.setdefault("num_steps_jitter", DEFAULT_NUM_STEPS_JITTER)
        self.fast = fast
        self.engine = BatchedHMC(fast.batched_potential_and_grad, fused_step=fast.fused.step,
                                 lockstep=fast.lockstep.plan, **options)
        self._betas, self._seeds = [], []
        self._ready = False

    def add(self, beta, seed):
        """A new slot for a rung at ``beta``; returns its handle."""
        self._betas.append(float(beta))
        self._seeds.append(engine_seed(seed))
        return HMCRung(self, len(self._betas) - 1)

    def setup(self, states, warmup_steps):
        """Start the engine from ``states`` (slot order): ``[(z, ll), ...]``."""
        z = torch.stack([self.fast.flatten(s) for s in states])
        ll = self.engine.setup(z, self._betas, self._seeds, warmup_steps)
        self._ready = True
        return list(zip(states, (float(v) for v in ll.tolist())))

    def step(self, states):
        """One iteration of every slot from ``states`` (slot order): ``[(z, ll), ...]``."""
        z = torch.stack([self.fast.flatten(s) for s in states])
        state, _ = self.engine.step(z)
        return list(zip(self.fast.unflatten_rows(state.z), state.ll.tolist()))

    @property
    def betas(self):
        """The slots' inverse temperatures (Python floats), slot order."""
        return list(self._betas)

    def set_beta(self, slot, beta):
        self._betas[slot] = float(beta)
        if self._ready:
            self.engine.set_betas(self._betas)

    def target_changed(self, slot):
        if self._ready:
            self.engine.replace_states([slot])

    def engine_info(self):
        """Which leapfrog step runs the slots, and why not a faster one; compiles the fused or
        lockstep step now, in the set-up or at a compile switch, not at the first leapfrog."""
        split = self.fast  # the fast split, or a reference's split over it
        leapfrog = self.engine.leapfrog
        return dict(batched=split.batched.path, batched_reason=split.batched.reason,
                    leapfrog=leapfrog, leapfrog_reason="" if leapfrog == "lockstep" else (
                        f"not lockstep: {split.lockstep.reason}" if leapfrog == "fused" else (
                            split.fused.reason or f"potential {split.path!r}, replicas "
                            f"evaluated by {split.batched.path!r}")))

    def load_state_dict(self, states, device):
        """The slots' states, in slot order (those of the rungs this process holds now)."""
        restore(self, states, device)


class HMCRung(RungExplorer):
    """One rung's handle on its :class:`HMCGroup` group."""

    def __init__(self, group, slot):
        self._group = group
        self.slot = slot

    @property
    def group(self):
        return self._group

    @property
    def beta(self):
        return self.group.betas[self.slot]

    def set_beta(self, beta):
        """Move the rung to a new inverse temperature (ladder adaptation, during warmup)."""
        self.group.set_beta(self.slot, beta)

    def target_changed(self):
        """A swap, compile switch or refit: recompute its potential at the next step."""
        self.group.target_changed(self.slot)

    @property
    def step_size(self):
        return float(self.group.engine.step_sizes[self.slot])

    @property
    def num_steps(self):
        """The fixed ``num_steps``, or the steps of the rung's adapted (unjittered) length."""
        engine = self.group.engine
        if engine.num_steps is not None:
            return engine.num_steps
        return self.diagnostics()["num steps"]

    def diagnostics(self):
        return self.group.engine.diagnostics()[self.slot]

    def logging(self):
        return self.group.engine.logging(self.slot)

    def state_dict(self):
        """The rung's slot of the process's batched engine."""
        return capture(self.group, slot=(self.slot, self.group.engine.num_slots))


def _hmc_rung(rung):
    return rung.group(HMCGroup).add(rung.beta, rung.seed)


def _raised_target(diagnostics):
    return diagnostics.get("target accept prob")


HMC = ExplorerKind("hmc", _hmc_rung, label="hmc (batched)", steps="leapfrog steps",
                   check=check_hmc_options,
                   reports=("warmup divergences", "step size", "mean inverse mass",
                            "trajectory length", "num steps", "target accept prob"),
                   raised_target=_raised_target)
