"""What pyro_pt relies on in Pyro beyond its public API, in one place.

Pyro's :class:`~pyro.infer.MCMC` tells a kernel neither how many chains run it (a kernel whose
rungs are spread over processes must refuse ``num_chains > 1``: the chains would share, and
deadlock, the ranks) nor how many draws it takes (a checkpoint records them): both are read
from the samplers' frames, private names of ``pyro.infer.mcmc.api`` that
``tests/pt/test_compat.py`` pins to the Pyro version they were read from.
:class:`KernelParams` holds the two parts of the ``MCMCKernel`` protocol whose meaning comes
from how :class:`~pyro.infer.MCMC` uses them rather than from its documentation.
:data:`PYRO_STATE` declares what a checkpoint saves of Pyro's kernels and their adapters
(:mod:`pyro_pt.checkpoint_state`), pinned by the same test.
"""

import sys

# The private names of pyro.infer.mcmc.api this module reads, and the Pyro they are from.
SAMPLERS = ("_UnarySampler", "_MultiSampler")
WORKER = "_Worker"
CHECKED_WITH_PYRO = "1.9.2"

# The checkpointed state of Pyro's classes a rung's kernel holds, as ``{"module.Class": (state,
# slots, rebuilt)}`` (pyro_pt.checkpoint_state): every attribute but links, callables and the
# model's trace, since what Pyro changes at set-up and while sampling is its own business.
_HMC_REBUILT = ("model", "potential_fn", "transforms", "_init_strategy", "_prototype_trace")
_HMC_STATE = ("_accept_cnt", "_adapter", "_direction_threshold", "_divergences",
              "_ignore_jit_warnings", "_initial_params", "_jit_compile", "_jit_options",
              "_max_plate_nesting", "_max_sliced_energy", "_max_stepsize", "_mean_accept_prob",
              "_min_stepsize", "_potential_energy_last", "_t", "_warmup_steps", "_z_grads_last",
              "_z_last", "trajectory_length")
PYRO_STATE = {
    "pyro.infer.mcmc.hmc.HMC": (_HMC_STATE, (), _HMC_REBUILT),
    "pyro.infer.mcmc.nuts.NUTS": (_HMC_STATE + ("_max_tree_depth", "use_multinomial_sampling"),
                                  (), _HMC_REBUILT),
    "pyro.infer.mcmc.adaptation.WarmupAdapter": (
        ("_adapt_end_buffer", "_adapt_initial_window", "_adapt_start_buffer",
         "_adaptation_disabled", "_adaptation_schedule", "_current_window", "_init_step_size",
         "_mass_matrix_adapter", "_step_size_adapt_scheme", "_warmup_steps",
         "adapt_mass_matrix", "adapt_step_size", "dense_mass", "step_size",
         "target_accept_prob"), (), ("_find_reasonable_step_size",)),
    "pyro.infer.mcmc.adaptation.BlockMassMatrix": (
        ("_adapt_scheme", "_init_scale", "_inverse_mass_matrix", "_mass_matrix_size",
         "_mass_matrix_sqrt", "_mass_matrix_sqrt_inverse"), (), ()),
    "pyro.ops.dual_averaging.DualAveraging": (
        ("_g_avg", "_t", "_x_avg", "_x_t", "gamma", "kappa", "prox_center", "t0"), (), ()),
    # per slot in the batched HMC's warmup: one row of the mean and of the squares per slot
    "pyro.ops.welford.WelfordCovariance": (("diagonal", "n_samples"), ("_mean", "_m2"), ()),
}


def _owners(depth):
    """The objects whose methods are on the stack, from ``depth`` frames above the caller."""
    frame = sys._getframe(depth + 1)
    while frame is not None:
        yield frame.f_locals.get("self")
        frame = frame.f_back


def inside_multichain_mcmc(depth=1):
    """Whether the caller (``depth`` frames up) runs under Pyro's MCMC with num_chains > 1
    (its samplers' frames)."""
    for owner in _owners(depth):
        name = type(owner).__name__
        if name in SAMPLERS and getattr(owner, "num_chains", 1) > 1:
            return True
        if name == WORKER:
            return True
    return False


def mcmc_num_samples():
    """``num_samples`` of the Pyro MCMC the caller runs under (its sampler's), else None."""
    for owner in _owners(1):
        if type(owner).__name__ in SAMPLERS:
            return getattr(owner, "num_samples", None)
    return None


def refuse_no_draws():
    """Raise if the Pyro MCMC the kernel runs under asks for no draws: Pyro would run the whole
    warmup and then fail on an empty stack of samples."""
    asked = mcmc_num_samples()
    if asked is not None and asked < 1:
        raise ValueError(
            f"MCMC(num_samples={asked}) asks a ParallelTempering kernel for no draws: Pyro would "
            "run the whole warmup and then fail on an empty list of samples. Pass "
            "num_samples >= 1; to adapt a ladder only, keep its draws and ignore them, or save "
            "a checkpoint (checkpoint_every=) and resume it later"
        )


def refuse_multichain_mcmc(comm):
    """Raise if rungs spread over processes (``comm``) would run under ``num_chains > 1``."""
    if comm.world_size > 1 and inside_multichain_mcmc(depth=2):
        raise ValueError(
            "MCMC(num_chains > 1) cannot run a ParallelTempering kernel spread over a "
            "process group: the chains would share (and deadlock) the ranks. Use "
            "num_chains=1; for independent ensembles launch separate torchrun jobs with "
            "different seeds, or split the world with torch.distributed.new_group and pass "
            "each part as process_group="
        )


class KernelParams:
    """
    ``initial_params`` and ``save_params`` of a kernel whose :attr:`run` is built by ``setup``
    (:mod:`pyro_pt.run`), kept in its ``options``: before set-up, ``initial_params`` is what
    the user gave; after, the cold rung's state (what MCMC records as the start). MCMC
    concatenates draws in ``save_params`` order but unpacks them in sorted order, so the names
    are kept sorted.
    """

    @property
    def initial_params(self):
        return self.run.initial_state if self.run else self.options.initial_params

    @initial_params.setter
    def initial_params(self, params):
        self.options.initial_params = params

    @property
    def save_params(self):
        if self.options.save_params is not None:
            return self.options.save_params
        return list(self.run.split.latent_names) if self.run else []

    @save_params.setter
    def save_params(self, names):
        self.options.save_params = sorted(names)
