"""What a checkpoint records of its model and data, and the check that a resumed run has the same.

A checkpoint continues one target: the same latent sites and the same likelihood. Its header
holds, from the structural trace of the model (:class:`~pyro_pt.potential.ModelSplit`):

- each latent site's name, shape, dtype and transform to unconstrained space;
- each observed site's name, shape, dtype and the SHA-256 of its value's bytes (None for a
  site under a subsampled plate, whose value changes from trace to trace).

:func:`check_same_model` compares them with the resumed run's model at set-up, before any rung
is built or moves, and names the first site that differs and how. It sees the data, not the
model's code: a ``pyro.factor`` (whose observed value is empty) or a likelihood written
differently around the same data is not detected.
"""

import hashlib
import re

import torch


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


def _check_names(path, kind, stored, now):
    missing = [n for n in stored if n not in now]
    extra = [n for n in now if n not in stored]
    if missing or extra:
        what = "; ".join(
            [f"{kind} site {n!r} of the checkpoint is missing from this model" for n in missing]
            + [f"{kind} site {n!r} of this model is not in the checkpoint" for n in extra])
        raise ValueError(f"the checkpoint {path} is of another model: {what} (the checkpoint's "
                         f"{kind} sites are {list(stored)}, this model's {list(now)}); resume "
                         "with the checkpointed run's model and data")


def check_same_model(path, header, split):
    """
    Raise a ValueError naming the site where the model and data of ``split`` differ from the
    checkpoint's (``header``, read from ``path``): a missing or new site, a shape, a dtype, a
    transform, an observed site's values.
    """
    now = fingerprint(split)
    latent = {s[0]: s[1:] for s in header["latent_sites"]}
    mine = {s[0]: s[1:] for s in now["latent_sites"]}
    _check_names(path, "latent", latent, mine)
    for name, (shape, dtype, transform) in mine.items():
        was_shape, was_dtype, was_transform = latent[name]
        if shape != was_shape:
            raise ValueError(f"latent site {name!r} has shape {shape} in this model but "
                             f"{was_shape} in the checkpoint {path}; resume with the "
                             "checkpointed run's model and data")
        if dtype != was_dtype:
            raise ValueError(
                f"latent site {name!r} is {dtype} in this model but {was_dtype} in the "
                f"checkpoint {path}: the checkpoint needs {was_dtype} latents; pass the data "
                f"(and any tensor the priors are built from) as {was_dtype}, as in the "
                "checkpointed run")
        if transform != was_transform:
            raise ValueError(
                f"latent site {name!r} goes to unconstrained space by {transform} in this "
                f"model but by {was_transform} in the checkpoint {path}; pass the checkpointed "
                "run's transforms")
    observed = {s[0]: s[1:] for s in header["observed_sites"]}
    mine = {s[0]: s[1:] for s in now["observed_sites"]}
    _check_names(path, "observed", observed, mine)
    for name, (shape, dtype, digest) in mine.items():
        was_shape, was_dtype, was_digest = observed[name]
        if shape != was_shape:
            raise ValueError(f"observed site {name!r} has shape {shape} in this model but "
                             f"{was_shape} in the checkpoint {path}; resume with the "
                             "checkpointed run's data")
        if dtype != was_dtype:
            raise ValueError(f"observed site {name!r} is {dtype} in this model but {was_dtype} "
                             f"in the checkpoint {path}; pass its data as {was_dtype}, as in "
                             "the checkpointed run")
        if None not in (digest, was_digest) and digest != was_digest:
            raise ValueError(
                f"observed site {name!r} has other values than in the checkpoint {path} (the "
                f"same shape {shape} and dtype {dtype}, another SHA-256 of its bytes): resume "
                "with the checkpointed run's data")
