"""Checks of ParallelTempering's arguments and of the context it runs in."""

import sys

from .explorers import EXPLORERS, check_hmc_options
from .swap import SWAP_SCHEMES


def check_options(explorer, explorer_kwargs, swap_scheme, swap_interval, adapt_temperatures):
    """Raise a clear TypeError / ValueError naming the bad argument."""
    if not (callable(explorer) or explorer in EXPLORERS):
        raise ValueError(
            f"explorer must be one of {EXPLORERS} or a callable potential_fn -> MCMCKernel, "
            f"got {explorer!r}"
        )
    if explorer_kwargs is not None and not isinstance(explorer_kwargs, dict):
        raise TypeError(f"explorer_kwargs must be a dict, got {explorer_kwargs!r}")
    if explorer == "hmc":
        check_hmc_options(explorer_kwargs or {})
    if swap_scheme not in SWAP_SCHEMES:
        raise ValueError(f"swap_scheme must be one of {SWAP_SCHEMES}, got {swap_scheme!r}")
    if isinstance(swap_interval, bool) or not isinstance(swap_interval, int):
        raise TypeError(f"swap_interval must be a positive int, got {swap_interval!r}")
    if swap_interval < 1:
        raise ValueError(f"swap_interval must be at least 1, got {swap_interval}")
    if not isinstance(adapt_temperatures, bool):
        raise TypeError(f"adapt_temperatures must be True or False, got {adapt_temperatures!r}")


def inside_multichain_mcmc():
    """Whether this setup() runs under Pyro's MCMC with num_chains > 1 (its samplers' frames)."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        name = type(owner).__name__
        if name in ("_UnarySampler", "_MultiSampler") and getattr(owner, "num_chains", 1) > 1:
            return True
        if name == "_Worker":
            return True
        frame = frame.f_back
    return False
