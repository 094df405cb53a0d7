"""Checks of ParallelTempering's arguments, and the settings every rank must share."""

import math
import os

from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

from .explorers import check_explorer
from .ladder import geometric_ladder, validate_temperatures
from .reference import is_prior
from .swap import SWAP_SCHEMES

DEFAULT_NUM_REPLICAS = 8
# The default hottest rung is the prior, drawn exactly; where it cannot be, a finite one.
DEFAULT_MAX_TEMPERATURE, FALLBACK_MAX_TEMPERATURE = math.inf, 50.0


def _refuse_text(name, value):
    # float("10") would take a string; a ladder typed as text is a mistake to point at.
    if isinstance(value, (str, bytes, bool)):
        raise TypeError(f"{name} must be a number (e.g. 10.0, or float('inf') for a prior "
                        f"rung), got {value!r} ({type(value).__name__})")


def ladder_temperatures(num_replicas, max_temperature, temperatures):
    """
    The starting ladder from the constructor's arguments: ``temperatures`` as given, or the
    geometric ladder of ``num_replicas`` (default 8) up to ``max_temperature`` (default inf: the
    prior rung).
    Given together, they must agree (else a ValueError: conflicting ladder arguments).
    """
    if max_temperature is not None:
        _refuse_text("max_temperature", max_temperature)
    if temperatures is None:
        return geometric_ladder(DEFAULT_NUM_REPLICAS if num_replicas is None else num_replicas,
                                DEFAULT_MAX_TEMPERATURE if max_temperature is None
                                else max_temperature)
    if isinstance(temperatures, (str, bytes)):
        raise TypeError(f"temperatures must be a sequence of numbers, got {temperatures!r}")
    for t in temperatures:
        _refuse_text("each of temperatures", t)
    temps = validate_temperatures(temperatures)
    if num_replicas is not None and num_replicas != len(temps):
        raise ValueError(
            f"conflicting ladder arguments: temperatures has {len(temps)} rungs but "
            f"num_replicas={num_replicas!r}; give temperatures alone, or num_replicas and "
            "max_temperature for a geometric ladder"
        )
    if max_temperature is not None and not math.isclose(float(max_temperature), temps[-1]):
        raise ValueError(
            f"conflicting ladder arguments: temperatures ends at {temps[-1]} but "
            f"max_temperature={max_temperature!r}; give temperatures alone, or num_replicas "
            "and max_temperature for a geometric ladder"
        )
    return temps


def check_options(explorer, explorer_kwargs, swap_scheme, swap_interval, adapt_temperatures):
    """Raise a clear TypeError / ValueError naming the bad argument."""
    if isinstance(explorer, MCMCKernel):
        raise TypeError(
            f"explorer is a {type(explorer).__name__} instance, but every rung needs its own "
            f"kernel on its own tempered potential: pass the class (explorer="
            f"{type(explorer).__name__}) or a factory, e.g. explorer=lambda potential_fn, **kw: "
            f"{type(explorer).__name__}(potential_fn=potential_fn, **kw)"
        )
    if explorer_kwargs is not None and not isinstance(explorer_kwargs, dict):
        raise TypeError(f"explorer_kwargs must be a dict, got {explorer_kwargs!r}")
    check_explorer(explorer, explorer_kwargs)
    if swap_scheme not in SWAP_SCHEMES:
        raise ValueError(f"swap_scheme must be one of {SWAP_SCHEMES}, got {swap_scheme!r}")
    if isinstance(swap_interval, bool) or not isinstance(swap_interval, int):
        raise TypeError(f"swap_interval must be a positive int, got {swap_interval!r}")
    if swap_interval < 1:
        raise ValueError(f"swap_interval must be at least 1, got {swap_interval}")
    if not isinstance(adapt_temperatures, bool):
        raise TypeError(f"adapt_temperatures must be True or False, got {adapt_temperatures!r}")


def check_checkpointing(every, path):
    """Validate ``checkpoint_every`` / ``checkpoint_path`` (given together, or neither)."""
    if every is None and path is None:
        return None, None
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"checkpoint_every must be a positive int (scans between checkpoints) "
                         f"when checkpoint_path is given, got {every!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"checkpoint_path must be a file path when checkpoint_every is given, "
                        f"got {path!r}")
    return every, os.fspath(path)


def check_split(split, betas, save_params, reference="prior"):
    """The checks that need the model's split: a proper prior for a prior rung (beta = 0; a
    fitted reference is always proper), and ``save_params`` naming latent sites."""
    if betas[-1] == 0.0 and is_prior(reference):
        split.check_proper_prior()
    if save_params is not None:
        unknown = set(save_params) - set(split.latent_names)
        if unknown:
            raise ValueError(
                f"save_params names {sorted(unknown)} are not latent sites of the model; "
                f"its latent sites are {split.latent_names}"
            )


def shared_settings(run):
    """The settings that decide the ranks' common steps (checked equal on every rank)."""
    options = run.options
    return {"temperatures": [float(t) for t in run.ladder.temperatures],
            "warmup_steps": run.warmup_steps, "swap_scheme": options.swap_scheme,
            "swap_interval": options.swap_interval,
            "adapt_temperatures": options.adapt_temperatures,
            "explorer": options.explorer if isinstance(options.explorer, str) else "callable",
            "reference": options.reference if isinstance(options.reference, str) else "guide"}
