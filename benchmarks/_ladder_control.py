"""The control of ladder.py: a conjugate Gaussian whose tempered posteriors are known in closed
form, and an explorer that draws each rung exactly, as the round-trip theory assumes."""

import math

import torch

import pyro
import pyro.distributions as dist
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel


CONTROL_DIM, CONTROL_POINTS = 10, 20


def control_model(y):
    """z ~ N(0, I), y_i ~ N(z, I): the tempered posterior at beta is N(beta sum y / (1 + beta n),
    1 / (1 + beta n))."""
    z = pyro.sample("z", dist.Normal(torch.zeros(y.shape[1], dtype=y.dtype), 1.0).to_event(1))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(z, 1.0).to_event(1), obs=y)


def control_data():
    generator = torch.Generator().manual_seed(0)
    return 0.5 + torch.randn(CONTROL_POINTS, CONTROL_DIM, generator=generator, dtype=torch.float64)


class ExactControlExplorer(MCMCKernel):
    """
    Independent exact draws from one rung of ``control_model``: the local explorer the
    round-trip theory assumes. It learns its rung's beta from the public contract alone,
    the potential ``U(z) = -(lp(z) + beta ll(z))`` at ``z = 0``, where lp and ll are known in
    closed form, so it follows the ladder when adaptation moves the rung.
    """

    def __init__(self, potential_fn, y):
        self.potential_fn = potential_fn
        self.y = y
        zero = torch.zeros(y.shape[1], dtype=y.dtype)
        self._zero = {"z": zero}
        self._lp0 = float(dist.Normal(zero, 1.0).log_prob(zero).sum())
        self._ll0 = float(dist.Normal(zero, 1.0).log_prob(y).sum())
        self._initial_params = None

    @property
    def initial_params(self):
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params):
        self._initial_params = params

    def setup(self, warmup_steps, *args, **kwargs):
        pass

    def clear_cache(self):
        pass

    def sample(self, params):
        with torch.no_grad():
            beta = (-float(self.potential_fn(self._zero)) - self._lp0) / self._ll0
            precision = 1.0 + beta * self.y.shape[0]
            mean = beta * self.y.sum(0) / precision
            z = {"z": mean + torch.randn_like(mean) / math.sqrt(precision)}
            self.potential_fn(z)  # so the kernel knows ll(z) without another model trace
        return z

    def diagnostics(self):
        return {"divergences": [], "acceptance rate": 1.0}
