"""What a checkpoint's header records of the run, and what resume checks against it.

:meth:`~pyro_pt.ParallelTempering.resume` rebuilds the kernel from the header, so
``ParallelTempering.resume(path, model)`` alone continues the run (which arguments may change
then: its docstring), and refuses at set-up, before any rung is built or moves, a model or
data other than the checkpoint's.

**The kernel's settings** (``"kernel"``): each argument of :data:`STORED` (they decide the
draws: given again, each must equal the checkpoint's) and :data:`SAFE_STORED` (where and how
often the resumed run writes its own checkpoints: the checkpoint's unless given) in a JSON form
that gives the value back exactly (:func:`encode`). What JSON cannot hold (a callable explorer,
a user kernel class, a Transform, a tensor in ``explorer_kwargs``) is recorded by its name
only, ``{"not_stored": name}``: the resumed kernel needs it passed again, and it is checked by
that name. :data:`SAFE` are not stored and free to change: the rungs are dealt out to any
number of processes, and the starting points ``init_strategy`` draws are replaced by the
checkpoint's states. :data:`LADDER`, given, must describe the checkpointed run's starting
ladder: the ladder, with its K and its adaptation, is the checkpoint's.

**The model and its data** (:func:`fingerprint`, from the model's structural trace): each
latent site's name, shape, dtype and transform to unconstrained space; each observed site's
name, shape, dtype and the SHA-256 of its value's bytes (None under a subsampled plate, whose
value changes from trace to trace). :func:`check_same_model` names the first site that
differs and how. It sees the data, not the model's code: a ``pyro.factor`` (whose observed
value is empty) or a likelihood written differently around the same data is not detected.
"""

import hashlib
import json
import re

import torch

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
    """A JSON form of ``value`` that :func:`decode` turns back into an equal value of the same
    types (floats by their shortest repr; ``inf``, ``nan`` as JSON's Infinity, NaN); dict
    entries are sorted, so equal values encode the same; else ``{"not_stored": <its name>}``."""
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
    """Whether ``form`` holds a value by name only (a string's quotes are escaped in JSON, so
    only a ``{"not_stored": ...}`` form writes this text)."""
    return f'{{"{NOT_STORED}":' in json.dumps(form)


def kernel_settings(options):
    """The header's ``"kernel"`` from a run's :class:`~pyro_pt.run.Options`."""
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
    """The constructor's keyword arguments (but the model) of the kernel that continues the
    checkpoint ``path``, from its ``header`` and the overrides ``kwargs`` (see the module)."""
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


# ----- the model and its data -----

def _digest(value):
    flat = value.detach().cpu().contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).numpy()).hexdigest()


def _transform(transform):
    # The repr of a composed transform spans lines: one line, without the breaks' spaces.
    text = re.sub(r"\s+", " ", repr(transform))
    return text.replace("( ", "(").replace(" )", ")")


def fingerprint(split):
    """``{"latent_sites": [[name, shape, dtype, transform], ...], "observed_sites": [[name,
    shape, dtype, sha256 or None], ...]}`` of a :class:`~pyro_pt.potential.ModelSplit`."""
    values = {n: torch.as_tensor(v) for n, v in split.values.items()}  # obs= may be a number
    return {
        "latent_sites": [[n, list(values[n].shape), str(values[n].dtype),
                          _transform(split.transforms[n])] for n in split.latent_names],
        "observed_sites": [[n, list(values[n].shape), str(values[n].dtype),
                            None if n in split.subsampled else _digest(values[n])]
                           for n in split.observed_names],
    }


# What differs, per kind of site and field: {now}, {was} are the model's and the checkpoint's.
_SAME = "; resume with the checkpointed run's "
DIFFERS = {
    ("latent", 0): "has shape {now} in this model but {was} in the checkpoint {path}" + _SAME
                   + "model and data",
    ("latent", 1): "is {now} in this model but {was} in the checkpoint {path}: the checkpoint "
                   "needs {was} latents; pass the data (and any tensor the priors are built "
                   "from) as {was}, as in the checkpointed run",
    ("latent", 2): "goes to unconstrained space by {now} in this model but by {was} in the "
                   "checkpoint {path}; pass the checkpointed run's transforms",
    ("observed", 0): "has shape {now} in this model but {was} in the checkpoint {path}" + _SAME
                     + "data",
    ("observed", 1): "is {now} in this model but {was} in the checkpoint {path}; pass its data "
                     "as {was}, as in the checkpointed run",
    ("observed", 2): "has other values than in the checkpoint {path} (the same shape {shape} "
                     "and dtype {dtype}, another SHA-256 of its bytes): resume with the "
                     "checkpointed run's data",
}


def check_same_model(path, header, split):
    """
    Raise a ValueError naming the site where the model and data of ``split`` differ from the
    checkpoint's (``header``, read from ``path``): a missing or new site, a shape, a dtype, a
    transform, an observed site's values (a site under a subsampled plate has no digest).
    """
    now = fingerprint(split)
    for kind in ("latent", "observed"):
        stored = {s[0]: s[1:] for s in header[f"{kind}_sites"]}
        mine = {s[0]: s[1:] for s in now[f"{kind}_sites"]}
        missing = [n for n in stored if n not in mine]
        extra = [n for n in mine if n not in stored]
        if missing or extra:
            what = "; ".join(
                [f"{kind} site {n!r} of the checkpoint is missing from this model" for n in missing]
                + [f"{kind} site {n!r} of this model is not in the checkpoint" for n in extra])
            raise ValueError(f"the checkpoint {path} is of another model: {what} (the "
                             f"checkpoint's {kind} sites are {list(stored)}, this model's "
                             f"{list(mine)}); resume with the checkpointed run's model and data")
        for name, fields in mine.items():
            for i, (field, was) in enumerate(zip(fields, stored[name])):
                if field != was and None not in (field, was):
                    text = DIFFERS[kind, i].format(now=field, was=was, path=path,
                                                   shape=fields[0], dtype=fields[1])
                    raise ValueError(f"{kind} site {name!r} {text}")
