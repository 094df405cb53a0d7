"""Random-walk Metropolis: a Pyro MCMC kernel on all unconstrained coordinates at once."""

import math

import torch

from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from ..swap import metropolis_probability


class RandomWalkMetropolis(MCMCKernel):
    """
    Gaussian random-walk Metropolis on all unconstrained coordinates at once. The proposal
    scale adapts during warmup by a Robbins-Monro step on its logarithm towards
    ``target_accept_prob`` (by default 0.234, Roberts et al. 1997; 0.44 in one dimension), and
    is frozen afterwards. A NaN or infinite potential at a proposal is a rejection.

    :param callable potential_fn: z (dict of tensors) -> potential energy (minus log density).
    :param float scale: initial proposal standard deviation.
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    STATE = ("_initial_params", "_warmup_steps", "_t", "_accept_cnt", "_log_scale",
             "target_accept_prob", "_z", "_potential")
    REBUILT = ("potential_fn", "_init_scale", "_target", "transforms")

    def __init__(self, potential_fn, scale=0.1, target_accept_prob=None):
        if not scale > 0:
            raise ValueError(f"rwmh scale must be positive, got {scale!r}")
        self.potential_fn = potential_fn
        self._init_scale = float(scale)
        self._target = target_accept_prob
        self._initial_params = None
        self.transforms = None

    @property
    def initial_params(self):
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params):
        self._initial_params = params

    def setup(self, warmup_steps, *args, **kwargs):
        self._warmup_steps = warmup_steps
        self._t = 0
        self._accept_cnt = 0
        self._log_scale = math.log(self._init_scale)
        dim = sum(v.numel() for v in self._initial_params.values())
        self.target_accept_prob = self._target or (0.44 if dim == 1 else 0.234)
        self._z = None
        self._potential = None

    @property
    def scale(self):
        return math.exp(self._log_scale)

    def clear_cache(self):
        self._z = None

    def sample(self, params):
        if self._z is None:
            with torch.no_grad():
                self._potential = self.potential_fn(params)
            self._z = params
        z = self._z
        with torch.no_grad():
            proposal = {k: v + self.scale * torch.randn_like(v) for k, v in z.items()}
            potential_new = self.potential_fn(proposal)
        accept_prob = metropolis_probability(float(self._potential - potential_new))
        accepted = float(torch.rand(())) < accept_prob
        if accepted:
            self._z, self._potential = proposal, potential_new
        self._t += 1
        if self._t <= self._warmup_steps:
            self._log_scale += (accept_prob - self.target_accept_prob) / math.sqrt(self._t)
        elif accepted:
            self._accept_cnt += 1
        return dict(self._z)

    def logging(self):
        return {"scale": f"{self.scale:.2e}"}

    def diagnostics(self):
        n = self._t - self._warmup_steps
        return {"divergences": [], "acceptance rate": self._accept_cnt / n if n > 0 else math.nan}
