"""Local moves of one temperature rung, each with its own random stream.

An explorer pairs an MCMC kernel targeting one rung's tempered density with that rung's random
stream. Its adapted state (step size, mass matrix, proposal scale) belongs to the rung; the
states of the replicas move between rungs on swaps, and :meth:`Explorer.replace_state`
invalidates the kernel's cached potential and gradient (Pyro's HMC and NUTS ignore the
``params`` they are given while their cache is set).
"""

import math

import torch

from pyro.infer.mcmc import NUTS
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

EXPLORERS = ("nuts", "hmc", "rwmh")


class RandomWalkMetropolis(MCMCKernel):
    """
    Gaussian random-walk Metropolis on all unconstrained coordinates at once.

    The proposal scale adapts during warmup by a Robbins-Monro step on its logarithm towards
    ``target_accept_prob`` (0.234, Roberts et al. 1997; 0.44 in one dimension), and is frozen
    afterwards. A NaN or infinite potential at a proposal is a rejection.

    :param callable potential_fn: z (dict of tensors) -> potential energy (minus log density).
    :param float scale: initial proposal standard deviation.
    :param float target_accept_prob: acceptance rate the warmup aims for (default by dimension).
    """

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
        log_ratio = float(self._potential - potential_new)
        accept_prob = 0.0 if math.isnan(log_ratio) else math.exp(min(0.0, log_ratio))
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


def make_kernel(explorer, potential_fn, explorer_kwargs):
    """
    The Pyro MCMC kernel of one rung for ``explorer``: ``"nuts"``, ``"rwmh"`` or a callable
    (``"hmc"`` rungs are batched, see :mod:`pyro_pt.batched_explorer`).
    """
    kwargs = dict(explorer_kwargs or {})
    if callable(explorer):
        build = explorer
    elif explorer == "nuts":
        build = lambda fn, **kw: NUTS(potential_fn=fn, **kw)  # noqa: E731
    elif explorer == "rwmh":
        build = RandomWalkMetropolis
    else:
        raise ValueError(
            f"explorer must be one of {EXPLORERS} or a callable potential_fn -> MCMCKernel, "
            f"got {explorer!r}"
        )
    try:
        kernel = build(potential_fn, **kwargs)
    except TypeError as e:
        raise TypeError(
            f"explorer_kwargs {kwargs} were not accepted by explorer {explorer!r}: {e}"
        ) from e
    if not isinstance(kernel, MCMCKernel):
        raise TypeError(
            "explorer callable must return a pyro.infer.mcmc.mcmc_kernel.MCMCKernel built "
            f"from the potential_fn it is given, got {type(kernel).__name__}"
        )
    if not callable(getattr(kernel, "clear_cache", None)):
        raise TypeError(
            f"explorer kernel {type(kernel).__name__} has no clear_cache(): ParallelTempering "
            "must invalidate a rung's cached state when a swap replaces it; add a "
            "clear_cache() method (Pyro's HMC and NUTS have one)"
        )
    return kernel



class RandomStream:
    """
    A private torch random stream, swapped in for the global one while a rung works.

    Pyro's kernels draw momenta and acceptances from the global generators; giving each rung
    its own state keeps a seeded run reproducible whatever order or process the rungs run in.
    On a CUDA device the device's generator is swapped too (the momenta are drawn there).

    :param int seed: the rung's seed.
    :param torch.device device: where the rung's tensors live (default CPU).
    """

    def __init__(self, seed, device=None):
        self.state = torch.Generator().manual_seed(seed).get_state()
        self.device = device if device is not None and device.type == "cuda" else None
        if self.device is not None:
            self.cuda_state = torch.Generator(device=self.device).manual_seed(seed).get_state()

    def __enter__(self):
        self._outer = torch.get_rng_state()
        torch.set_rng_state(self.state)
        if self.device is not None:
            self._outer_cuda = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(self.cuda_state, self.device)
        return self

    def __exit__(self, *exc):
        self.state = torch.get_rng_state()
        torch.set_rng_state(self._outer)
        if self.device is not None:
            self.cuda_state = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(self._outer_cuda, self.device)
        return False


class Explorer:
    """
    One rung's local kernel and random stream.

    :param MCMCKernel kernel: a kernel targeting the rung's tempered density.
    :param RandomStream stream: the rung's random stream.
    """

    def __init__(self, kernel, stream, potential=None):
        self.kernel = kernel
        self.stream = stream
        self.potential = potential

    def set_beta(self, beta):
        """Move the rung to a new inverse temperature (ladder adaptation, during warmup)."""
        self.potential.beta = beta
        self.replace_state()  # the cached potential and gradient were for the old beta

    def setup(self, z, warmup_steps):
        with self.stream:
            self.kernel.initial_params = z
            self.kernel.setup(warmup_steps)

    def step(self, z):
        """One local move from ``z``: the new state and its ll if the potential saw it."""
        with self.stream:
            z = self.kernel.sample(z)
        known = getattr(getattr(self.kernel, "potential_fn", None), "known_log_likelihood", None)
        return z, known(z) if known is not None else None

    def replace_state(self):
        """Forget the cached state (and its potential and gradient) after a swap."""
        self.kernel.clear_cache()  # make_kernel checked that it exists

    def diagnostics(self):
        return self.kernel.diagnostics()

    def logging(self):
        return self.kernel.logging()


class PriorExplorer:
    """
    The prior rung (beta = 0): every step is an exact, independent draw from the prior.

    :param RandomStream stream: the rung's random stream.
    :param ModelSplit split: the model's split; its latent sites must have proper priors.
    """

    def __init__(self, stream, split):
        self.stream = stream
        self.split = split

    def setup(self, z, warmup_steps):
        pass

    def step(self, z):
        """An exact prior draw and its log-likelihood (known from the same model trace)."""
        with self.stream:
            z, ll = self.split.sample_prior()
        return z, float(ll)

    def replace_state(self):
        pass

    def set_beta(self, beta):
        if beta != 0.0:
            raise ValueError("the prior rung stays at beta = 0")

    def diagnostics(self):
        return {"divergences": [], "acceptance rate": 1.0}

    def logging(self):
        return {}
