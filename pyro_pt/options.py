"""Checks of ParallelTempering's arguments, and the settings every rank must share."""

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


def check_split(split, betas, save_params):
    """The checks that need the model's split: a proper prior for a prior rung (beta = 0), and
    ``save_params`` naming latent sites."""
    if betas[-1] == 0.0:
        split.check_proper_prior()
    if save_params is not None:
        unknown = set(save_params) - set(split.latent_names)
        if unknown:
            raise ValueError(
                f"save_params names {sorted(unknown)} are not latent sites of the model; "
                f"its latent sites are {split.latent_names}"
            )


def shared_settings(kernel, warmup_steps):
    """The settings that decide the ranks' common steps (checked equal on every rank)."""
    return {
        "temperatures": [float(t) for t in kernel.temperatures],
        "warmup_steps": warmup_steps,
        "swap_scheme": kernel.swap_scheme,
        "swap_interval": kernel.swap_interval,
        "adapt_temperatures": kernel.adapt_temperatures,
        "explorer": kernel.explorer if isinstance(kernel.explorer, str) else "callable",
    }
