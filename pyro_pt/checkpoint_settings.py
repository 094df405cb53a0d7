"""The kernel settings a checkpoint stores, and the arguments of the kernel that resumes it.

:meth:`~pyro_pt.ParallelTempering.resume` rebuilds the kernel from the checkpoint's header, so
``ParallelTempering.resume(path, model)`` alone continues the run. The header's ``"kernel"``
holds each constructor argument of :data:`STORED` and :data:`SAFE_STORED` in a JSON form that
gives the value back exactly (:func:`encode`: a tuple stays a tuple, ``3`` an int, ``inf`` a
float, a dict keeps its keys' types). What JSON cannot hold (a callable explorer, a user
kernel class, a Transform, a tensor in ``explorer_kwargs``) is recorded by its name only, as
``{"not_stored": name}``: the resumed kernel needs it passed again, and it is checked by that
name.

Which arguments may differ from the checkpointed run's:

- :data:`STORED` (explorer, its keyword arguments, the swap scheme and interval, the ladder's
  adaptation, the compiler, the transforms) decide the draws: given again, each must equal the
  checkpoint's, else a ValueError names it with both values.
- :data:`SAFE_STORED` (``checkpoint_every``, ``checkpoint_path``): where and how often the
  resumed run writes its own checkpoints; the checkpoint's unless given.
- :data:`SAFE` (``process_group``, ``init_strategy``): not stored and free to change. The
  rungs are dealt out to any number of processes, each rung's state and streams coming from
  the checkpoint; the starting points ``init_strategy`` draws are replaced by the checkpoint's
  states (Pyro's ``init_to_uniform`` unless given).
- :data:`LADDER` (``num_replicas``, ``max_temperature``, ``temperatures``, ``max_replicas``):
  the ladder, with its K and its adaptation, is the checkpoint's; given, they must describe
  the checkpointed run's starting ladder.
"""

import json
import os

from .ladder import inverse_temperatures
from .options import FALLBACK_MAX_TEMPERATURE, ladder_temperatures
from .reference.stabilized import stabilized_ladder

STORED = ("explorer", "explorer_kwargs", "swap_scheme", "swap_interval", "adapt_temperatures",
          "compile", "transforms", "reference")
SAFE_STORED = ("checkpoint_every", "checkpoint_path")
SAFE = ("process_group", "init_strategy")
LADDER = ("num_replicas", "max_temperature", "temperatures", "max_replicas")
KERNEL_FIELDS = STORED + SAFE_STORED  # the header's "kernel"
NOT_STORED = "not_stored"


def _name(value):
    return getattr(value, "__qualname__", None) or type(value).__name__


def encode(value):
    """
    A JSON form of ``value`` that :func:`decode` turns back into an equal value of the same
    types (floats exactly, by their shortest repr; ``inf`` and ``nan`` as JSON's Infinity and
    NaN); dict entries are sorted, so two equal values encode the same. A value JSON cannot
    hold becomes ``{"not_stored": <its name>}``.
    """
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [encode(v) for v in value]
    if kind is tuple:
        return {"tuple": [encode(v) for v in value]}
    if kind is dict:
        items = [[encode(k), encode(v)] for k, v in value.items()]
        return {"dict": sorted(items, key=lambda item: json.dumps(item[0]))}
    return {NOT_STORED: _name(value)}


class NotStored:
    """What :func:`decode` gives for a value the checkpoint holds by name only."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<{self.name}: not stored>"


def decode(form):
    """The value :func:`encode` made ``form`` from (:class:`NotStored` for what it could not)."""
    if isinstance(form, list):
        return [decode(v) for v in form]
    if isinstance(form, dict):
        (tag, body), = form.items()
        if tag == "tuple":
            return tuple(decode(v) for v in body)
        if tag == "dict":
            return {decode(k): decode(v) for k, v in body}
        return NotStored(body)
    return form


def _normal(name, value):
    # The kernel reads None and {} alike for these: a resume may give either.
    if name == "explorer_kwargs":
        return {} if value is None else value
    if name == "transforms":
        return value or None
    return value


def _incomplete(form):
    """Whether ``form`` holds a value by name only."""
    if isinstance(form, list):
        return any(_incomplete(v) for v in form)
    if isinstance(form, dict):
        (tag, body), = form.items()
        return tag == NOT_STORED or _incomplete(body)
    return False


def kernel_settings(options):
    """The header's ``"kernel"``: each argument of :data:`STORED` and :data:`SAFE_STORED`, from
    a run's :class:`~pyro_pt.run.Options`."""
    values = {name: getattr(options, name) for name in STORED + SAFE_STORED}
    return {name: encode(_normal(name, value)) for name, value in values.items()}


def _check_ladder(path, header, given):
    # A ladder that grows (num_replicas="auto") is the checkpoint's from here on.
    if not given or isinstance(given.get("num_replicas"), str):
        return
    betas = inverse_temperatures(ladder_temperatures(
        given.get("num_replicas"), given.get("max_temperature"), given.get("temperatures")))
    if header.get("legs") and set(given) == {"num_replicas"}:  # two legs of that many rungs
        betas = stabilized_ladder(given["num_replicas"]).initial
    if set(given) == {"num_replicas"} and header["initial_betas"][-1] > 0.0:
        # the default ladder that fell back to a finite hot end (an improper prior)
        betas = inverse_temperatures(ladder_temperatures(given["num_replicas"],
                                                         FALLBACK_MAX_TEMPERATURE, None))
    if betas != header["initial_betas"]:
        raise ValueError(
            f"the checkpoint {path} was written with the ladder {header['initial_ladder']} "
            f"(now {header['temperatures']}), but {given} give another; leave the ladder "
            "arguments out (the checkpoint's ladder is used) or give the checkpointed run's")


def resume_arguments(path, header, kwargs):
    """
    The constructor's keyword arguments (without the model) of the kernel that continues the
    checkpoint ``path`` with header ``header``, from the checkpoint and the overrides
    ``kwargs`` (see the module's docstring for which may differ).
    """
    unknown = sorted(set(kwargs) - set(STORED + SAFE_STORED + SAFE + LADDER))
    if unknown:
        raise TypeError(f"ParallelTempering.resume got unexpected keyword arguments {unknown}; "
                        f"it takes those of ParallelTempering: {list(STORED + SAFE_STORED)}, "
                        f"{list(SAFE)} and the ladder's {list(LADDER)}")
    _check_ladder(path, header, {k: v for k, v in kwargs.items() if k in LADDER[:3]})
    stored = header["kernel"]
    # a stabilized ladder (two legs) is set up from its K, then replaced by the checkpoint's
    out = ({"num_replicas": header["num_rungs"]} if header.get("legs")
           else {"temperatures": header["temperatures"]})
    if header["growth"]:  # a ladder that grows in warmup goes on growing from the one it has
        out.update(num_replicas="auto", max_replicas=header["growth"]["max_replicas"])
    out.update({name: kwargs[name] for name in SAFE if name in kwargs})
    for name in SAFE_STORED:
        out[name] = kwargs[name] if name in kwargs else decode(stored[name])
    differ, missing = [], []
    for name in STORED:
        if name in kwargs:
            given = _normal(name, kwargs[name])
            if json.dumps(encode(given)) != json.dumps(stored[name]):
                differ.append(f"{name}={given!r} given, {decode(stored[name])!r} in the "
                              "checkpoint")
            out[name] = kwargs[name]
        elif _incomplete(stored[name]):
            missing.append(f"{name} (the checkpointed run's was {decode(stored[name])!r})")
        else:
            out[name] = decode(stored[name])
    if differ:
        raise ValueError(
            f"the checkpoint {path} was written with other kernel settings: "
            f"{'; '.join(differ)}. Leave them out to use the checkpoint's: only "
            f"{', '.join(SAFE_STORED + SAFE)} may change when a run resumes")
    if missing:
        raise ValueError(
            f"the checkpoint {path} cannot store {'; '.join(missing)}, which JSON does not "
            f"hold: pass the checkpointed run's again, ParallelTempering.resume(path, model, "
            f"{', '.join(m.split(' ')[0] + '=...' for m in missing)})")
    return out


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
