"""Checkpoint and resume a :class:`~pyro_pt.ParallelTempering` run, on any number of processes.

A checkpoint holds, per rung (so that it resumes on any number of processes): the state, its
log-likelihood, the explorer's adapted state and random streams; for the run: the ladder, the
swap generator, the timings and the :func:`parts` with state; for an ensemble
(``num_ladders=C``, :mod:`pyro_pt.ensemble`) every ladder's rungs, swap generator and parts,
and the cold draws held for MCMC's later calls. What is saved of each part is
what its class declares (:mod:`pyro_pt.checkpoint_state`, the protocol the parts themselves
import), nothing found by looking.

**The file** is ``MAGIC``, an 8-byte header length, a JSON header (:data:`HEADER_FIELDS`) and
the payload, written by :func:`torch.save`. Reading checks the magic, the header's fields and
the payload's checksum before it unpickles anything (``weights_only=False``: the payload holds
the explorers' adaptation objects), so a foreign, truncated or corrupt file is refused with a
clear error. Writing is atomic (a temporary file, ``fsync``, ``os.replace``): a process killed
while writing leaves the previous checkpoint intact.

**What resume checks.** :meth:`~pyro_pt.ParallelTempering.resume` rebuilds the kernel from the
header, so ``ParallelTempering.resume(path, model)`` alone continues the run (which arguments
may change then: its docstring), and refuses at set-up, before any rung is built or moves, a
model or data other than the checkpoint's.

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
import io
import json
import os
import re
import tempfile

import torch

from . import checkpoint_state
from .compat import mcmc_num_samples
from .explorers import by_group
from .ladder import inverse_temperatures, temperatures_of
from .options import FALLBACK_MAX_TEMPERATURE, ladder_temperatures
from .reference.refit import ReferenceState
from .reference.stabilized import stabilized_ladder

# ----- the file -----

MAGIC = b"PYRO_PT_CHECKPOINT\n"
# 4: every part's state as it declares it (pyro_pt.checkpoint_state), the run's parts too;
# 5: the report's state is its rows and what each of its columns keeps over the round;
# 6: the prior rung's pool of draws made at once; 7: an ensemble's ladders (num_ladders, calls)
FORMAT_VERSION = 7
# What the header of every checkpoint of this format holds (``kernel``: :data:`KERNEL_FIELDS`).
HEADER_FIELDS = ("format_version", "latent_sites", "observed_sites", "num_rungs", "scans",
                 "calls", "warmup_steps", "world_size", "num_samples", "num_ladders",
                 "temperatures", "initial_ladder", "initial_betas", "kernel", "growth",
                 "payload_bytes", "payload_sha256")


def _version():
    try:
        from importlib.metadata import version
        return version("pyro-pt-subnet")
    except Exception:  # not installed, run from a checkout
        return "unknown"


def _write(handle, data):
    """Write ``data`` to an open file (a function of its own so a test can make it slow)."""
    handle.write(data)


def write_checkpoint(path, header, payload):
    """Write ``header`` (JSON) and ``payload`` (torch.save) to ``path`` atomically."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    header = dict(header, payload_bytes=len(body), payload_sha256=hashlib.sha256(body).hexdigest())
    head = json.dumps(header).encode()
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            _write(handle, MAGIC + len(head).to_bytes(8, "little") + head + body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)  # the rename itself survives a power cut
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_checkpoint(path, payload=True):
    """``(header, payload)`` of a checkpoint (payload None unless asked for); a ValueError
    for a file that is not a complete checkpoint of this format."""
    with open(path, "rb") as handle:
        data = handle.read() if payload else handle.read(len(MAGIC) + 8 + (1 << 20))
    if not data.startswith(MAGIC):
        raise ValueError(f"{path} is not a pyro_pt checkpoint (it does not start with "
                         f"{MAGIC!r}); give a file written by ParallelTempering.checkpoint")
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    try:
        header = json.loads(data[start:start + size])
    except ValueError:
        raise ValueError(f"the checkpoint {path} is truncated or corrupt (its header does not "
                         "parse); resume from an earlier checkpoint") from None
    _check_header(path, header)
    if not payload:
        return header, None
    body = data[start + size:]
    if len(body) != header["payload_bytes"] or (
            hashlib.sha256(body).hexdigest() != header["payload_sha256"]):
        raise ValueError(f"the checkpoint {path} is truncated or corrupt ({len(body)} of "
                         f"{header['payload_bytes']} payload bytes, checksum "
                         f"{'wrong' if len(body) == header['payload_bytes'] else 'not checked'}"
                         "); resume from an earlier checkpoint")
    return header, torch.load(io.BytesIO(body), map_location="cpu", weights_only=False)


def _check_header(path, header):
    """A ValueError naming the field for a header that parses but is not one of this format."""
    if not isinstance(header, dict) or "format_version" not in header:
        raise ValueError(f"{path} is not a pyro_pt checkpoint, or its header is corrupt: the "
                         "header has no field 'format_version'; give a file written by "
                         "ParallelTempering.checkpoint, or resume from an earlier checkpoint")
    if header["format_version"] != FORMAT_VERSION:
        raise ValueError(f"the checkpoint {path} has format version "
                         f"{header['format_version']!r}; this pyro_pt reads version "
                         f"{FORMAT_VERSION}")
    missing = [f for f in HEADER_FIELDS if f not in header]
    if not missing:
        kernel = header["kernel"] if isinstance(header["kernel"], dict) else {}
        missing = [f"kernel.{f}" for f in KERNEL_FIELDS if f not in kernel]
    if missing:
        raise ValueError(f"the checkpoint {path} is corrupt: its header has no field "
                         f"{', '.join(repr(f) for f in missing)}; resume from an earlier "
                         "checkpoint")


# ----- the header: the kernel's settings, and the arguments of a resumed kernel -----

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


# ----- the run's state -----

def _header(run, ensemble):
    if run.fingerprint is None:  # once per set-up: it hashes the data
        run.fingerprint = fingerprint(run.split)
    asked = mcmc_num_samples()  # the whole run's draws: those before a resume and this MCMC's
    return {
        "format_version": FORMAT_VERSION, "pyro_pt_version": _version(), **run.fingerprint,
        "num_rungs": run.num_replicas, "scans": run.scans,
        # MCMC's calls: a scan each, but an ensemble's first sampling calls make C scans each
        "calls": run.scans if ensemble is None else ensemble.calls,
        "num_ladders": run.num_ladders,
        "warmup_steps": run.warmup_steps, "world_size": run.comm.world_size,
        "kernel": kernel_settings(run.options),
        "num_samples": None if asked is None else run.draws_before + asked,
        "temperatures": run.ladder.temperatures,
        "initial_ladder": temperatures_of(run.ladder.initial),
        "initial_betas": list(run.ladder.initial),  # exact: the ladder stores betas
        "legs": run.ladder.legs and run.ladder.legs.sizes,
        # whether the user gave the ladder (a resumed kernel is given the checkpoint's):
        # reference="auto"'s leg joins a default ladder only (pyro_pt.reference.joining)
        "ladder_given": run.options.ladder_given,
        # a ladder that still grows (pyro_pt.growth; not once q's leg joined): how far, and
        # whether by default
        "growth": run.growth and run.ladder.legs is None and {
            "max_replicas": run.growth.max_replicas,
            "by_default": run.options.grows_by_default} or None,
    }


class Declared:
    """The checkpoint part of a run's object whose class declares its state and has no
    checkpoint code of its own (the ladder, the recorder: :mod:`pyro_pt.checkpoint_state`)."""

    def __init__(self, part):
        self.part = part

    def state_dict(self):
        return checkpoint_state.capture(self.part)

    def load_state_dict(self, state, run=None):
        checkpoint_state.restore(self.part, state, torch.device("cpu"))


def parts(run, shared=True):
    """
    ``{payload key: part}``: the parts of ``run`` with state beyond its rungs (None for one
    this run lacks), each with ``state_dict()`` and ``load_state_dict(state, run)``: the
    recorder, the report, and, ``shared`` by an ensemble's ladders (the first ladder's only), a
    fitted reference (:mod:`pyro_pt.reference.refit`), a growing ladder's next birth
    (:mod:`pyro_pt.growth`) and whether ``compile="auto"`` switched (last: the switch compiles
    against the restored q).
    """
    own = {"recorder": Declared(run.recorder), "report": run.report}
    if not shared:
        return own
    fitted = run.reference is not None or run.refitting
    return {**own, "reference": fitted and ReferenceState(run) or None,
            "growth": run.growth, "joining": run.joining, "compile": run.autocompile}


def _gathered_rungs(run):
    """Every rung's state and explorer state of ``run`` on rank 0, in rung order (None on the
    other ranks; a collective)."""
    rungs = run.rungs
    mine = {k: {"state": {n: v.detach().cpu() for n, v in z.items()},
                "explorer": explorer.state_dict()}
            for k, explorer, z in zip(rungs.rungs, rungs.explorers, rungs.states)}
    buffer = io.BytesIO()
    torch.save(mine, buffer)  # bytes, so CUDA tensors and generators travel to rank 0 as data
    gathered = rungs.comm.all_gather_object(buffer.getvalue(), what="gather of the checkpoint")
    if rungs.comm.rank != 0:
        return None
    per_rung = {}
    for blob in gathered:
        per_rung.update(torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False))
    return [per_rung[k] for k in range(run.num_replicas)]


def _ladder_payload(run, rungs, shared):
    """What one ladder's run holds: its rungs, lls, swap stream and :func:`parts` (the
    ``shared`` ones too for the first)."""
    out = {"rungs": rungs, "ll": list(run.ll), "swap_generator": run.swap_generator.get_state()}
    out.update({key: part and part.state_dict() for key, part in parts(run, shared).items()})
    return out


def save(run, path, ensemble=None):
    """Gather every rung's state on rank 0 and write the checkpoint there (a collective). An
    ensemble's (:mod:`pyro_pt.ensemble`): every ladder's run (the others' under
    ``"ladders"``) and the draws MCMC is still to be handed (``"ensemble"``)."""
    gathered = [_gathered_rungs(r) for r in run.together]
    if run.comm.rank != 0:
        return
    first, *others = [_ladder_payload(r, g, c == 0)
                      for c, (r, g) in enumerate(zip(run.together, gathered))]
    payload = {**first, "ladder": Declared(run.ladder).state_dict(),
               "timings": dict(run.timings), "ladders": others,
               "ensemble": ensemble and ensemble.state_dict()}
    write_checkpoint(path, _header(run, ensemble), payload)


def resume_warmup(run, path, header, warmup_steps):
    """A resumed ``run``'s whole warmup from MCMC's remaining ``warmup_steps`` (refused unless
    they are what is left; an ensemble checkpointed in its sampling phase also refuses any
    ``num_samples`` but the draws left: its draws' blocks are laid out over the whole run);
    reads the payload and restores the ladder."""
    total, calls = header["warmup_steps"], header["calls"]
    left, run.draws_before = max(total - calls, 0), max(calls - total, 0)
    wanted = header.get("num_samples")
    if warmup_steps != left:
        draws = ("<the draws still wanted>" if wanted is None
                 else f"{wanted - run.draws_before} to finish the run")
        raise ValueError(
            f"the checkpoint {path} is at scan {header['scans']} of a run with "
            f"warmup_steps={total}, so {left} warmup scans are left: run MCMC(kernel, "
            f"warmup_steps={left}, num_samples={draws}), not warmup_steps={warmup_steps}")
    asked = mcmc_num_samples()
    if header["num_ladders"] > 1 and run.draws_before and wanted is not None and asked is not None:
        if wanted == run.draws_before:
            raise ValueError(
                f"the checkpoint {path} is of a finished run of {header['num_ladders']} ladders "
                f"({wanted} draws, held in one block per ladder laid out over the whole run), "
                "which cannot be extended: resume from a checkpoint written before its end, or "
                "start a new run (num_ladders=1 runs resume for more draws)")
        if asked != wanted - run.draws_before:
            raise ValueError(
                f"the checkpoint {path} is in the sampling phase of a run of "
                f"{header['num_ladders']} ladders ({run.draws_before} of its {wanted} draws "
                "made), whose draws are held in one block per ladder laid out over the whole "
                f"run: run MCMC(kernel, warmup_steps=0, num_samples="
                f"{wanted - run.draws_before}), not num_samples={asked}")
    run.resume_from = (path, header)
    _, run.resume_payload = read_checkpoint(path)
    Declared(run.ladder).load_state_dict(run.resume_payload["ladder"])
    run.warmup_steps = total


def restore(run):
    """Put the checkpoint's state into the freshly set-up rungs and :func:`parts` of ``run``'s
    ladders (an ensemble's all: ``run.together``); returns the ensemble's state, if any."""
    payload, device = run.resume_payload, run.split.device
    ladders = [payload] + payload["ladders"]
    explorers, saved = [], []
    for r, part in zip(run.together, ladders):
        mine = [part["rungs"][k] for k in r.rungs.rungs]
        r.rungs.states = [{n: v.to(device) for n, v in s["state"].items()} for s in mine]
        explorers += r.rungs.explorers
        saved += mine
    # each group's members' states in slot order (an ensemble's group holds every ladder's
    # tempered rungs of this process)
    for group, members in by_group(explorers):
        members.sort(key=lambda i: getattr(explorers[i], "slot", i))
        group.load_state_dict([saved[i]["explorer"] for i in members], device)
    timings = run.timings  # shared by the ladders' runs: refilled, not replaced
    timings.clear()
    timings.update(payload["timings"])
    for c, (r, part) in enumerate(zip(run.together, ladders)):
        r.ll = list(part["ll"])
        r.swap_generator.set_state(part["swap_generator"])
        for key, piece in parts(r, c == 0).items():
            if piece and part.get(key) is not None:
                piece.load_state_dict(part[key], r)
    for r in run.together:
        r.resume_payload = None
    return payload["ensemble"]


class Checkpointing:
    """The checkpoints of :class:`~pyro_pt.ParallelTempering`: :meth:`checkpoint` and
    :meth:`resume` (the periodic one of ``checkpoint_every`` is the kernel's ``sample``)."""

    def checkpoint(self, path):
        """
        Write the run's state to ``path`` at a scan boundary (after ``MCMC.run``, or from its
        ``hook_fn``). Every rank must call it (it gathers the rungs); rank 0 writes the file.

        :param str path: the file; replaced atomically.
        """
        if self.run is None:
            raise RuntimeError("checkpoint() needs a kernel that MCMC.run has set up")
        save(self.run, path, self.ensemble)

    @classmethod
    def resume(cls, path, model, **kwargs):
        """
        A kernel that continues the run checkpointed at ``path``, with the checkpointed run's
        settings, ladder (with its K) and state; run it with ``MCMC(kernel,
        warmup_steps=<warmup left>, num_samples=<draws wanted>)`` (a wrong warmup is refused
        with the numbers to pass). The model and data must be the checkpointed run's: at
        set-up, before any rung is built, a model whose sites or observed data differ from the
        checkpoint's fingerprint is refused, naming the site (:mod:`pyro_pt.checkpoint`).

        Keyword arguments may change only how the run is carried out, not what it samples:
        ``checkpoint_every`` and ``checkpoint_path`` (by default the checkpointed run's),
        ``process_group`` (the rungs are dealt out to any number of processes) and
        ``init_strategy`` (its starting points are replaced by the checkpoint's states);
        ``num_ladders`` is the checkpoint's (given, it must be the same). Any
        other constructor argument, given, must equal the checkpoint's, else a ValueError names
        it with both values. What the checkpoint cannot store (a callable ``explorer``,
        ``transforms``, an ``explorer_kwargs`` value that is not a number, string, bool, None,
        list, tuple or dict of them) must be passed again; the error names it
        (:mod:`pyro_pt.checkpoint`). A growing ladder (``num_replicas="auto"``)
        goes on growing as the uninterrupted run would.

        :param str path: a file written by :meth:`checkpoint`.
        :param callable model: the model of the checkpointed run.
        :param kwargs: overrides, as above.

        Example::

            kernel = ParallelTempering.resume("run.pt", model)
            MCMC(kernel, num_samples=700, warmup_steps=0).run(x, y)
        """
        ladders = kwargs.pop("num_ladders", None)
        header, _ = read_checkpoint(path, payload=False)
        if ladders is not None and ladders != header["num_ladders"]:
            raise ValueError(f"the checkpoint {path} is of a run of {header['num_ladders']} "
                             f"ladders, but num_ladders={ladders!r} was given; leave it out "
                             "(the checkpoint's is used) or give the checkpointed run's")
        kernel = cls(model, num_ladders=header["num_ladders"],
                     **resume_arguments(path, header, kwargs))
        kernel.options.resume_from = (path, header)  # read by set-up (resume_warmup, restore)
        kernel.options.grows_by_default = bool((header["growth"] or {}).get("by_default"))
        kernel.options.ladder_given = header.get("ladder_given", kernel.options.ladder_given)
        return kernel
