"""The adapted state of the explorers, captured per rung and restored into fresh explorers.

A checkpoint must not depend on how many processes wrote it, so every explorer's state is
captured per rung, generically from the objects' attributes, so that a new adaptation field of
an explorer is saved without code here. *State objects* (:func:`_is_state_object`: Pyro
kernels, the classes of :data:`STATE_MODULES`: explorers, random streams, the rung's tempered
potential, ``pyro.infer.mcmc``'s and ``pyro.ops``' adapters and Welford) are walked attribute
by attribute; a ``torch.Generator`` is saved as its state and restored into the fresh one (which
keeps its device); functions, methods, devices and any other object (the model's split, its
compiled graph) are not state: the fresh explorer keeps its own; other values are copied.

The batched HMC keeps the rungs of a process as the *slots* of one engine, split by one rule: a
tensor whose first dimension, a list whose length, is the number of slots holds one entry per
slot (a set holds slot indices); a list in :data:`SHARED_LISTS` and everything else is shared.
Restoring joins the slots of the rungs the new process holds, in slot order.
"""

import copy

import torch

from pyro.infer.mcmc.mcmc_kernel import MCMCKernel

STATE_MODULES = ("pyro_pt.explorers", "pyro_pt.random", "pyro_pt.potential.tempered",
                 "pyro.infer.mcmc", "pyro.ops")
# Caches that are not state: TemperedPotential's weak references to points it evaluated; a
# kernel's transforms (the split's, rebuilt from the model).
NOT_STATE = {"_seen", "transforms", "_prototype_trace"}
# Lists of a batched engine that have nothing to do with its slots, whatever their length.
SHARED_LISTS = {"windows"}
# A torch.device is not state either: it is where the resuming process runs (kept fresh).
PLAIN = (str, bytes, int, float, bool, type(None), torch.Tensor, torch.dtype, tuple, list,
         dict, set, frozenset)


def _is_state_object(value):
    module = type(value).__module__
    return isinstance(value, MCMCKernel) or module.startswith(STATE_MODULES)


def _skipped(name, value):
    # Kernels and potentials are callable objects, but state; functions and methods are not.
    return name in NOT_STATE or callable(value) and not (
        torch.is_tensor(value) or _is_state_object(value))


def _per_slot(name, value, num_slots):
    if torch.is_tensor(value):
        return value.dim() >= 1 and value.shape[0] == num_slots
    return isinstance(value, list) and name not in SHARED_LISTS and len(value) == num_slots


def _encode(value, where):
    if isinstance(value, torch.Generator):
        return ("gen", value.get_state())
    try:
        return ("val", copy.deepcopy(value))
    except Exception as error:  # a new attribute that cannot be copied must not vanish silently
        raise TypeError(f"cannot checkpoint the explorer attribute {where}: {error}") from error


def capture(obj, slot=None, visited=None):
    """
    The state of ``obj`` as ``{attribute: (kind, value)}``; with ``slot = (r, R)`` only slot
    ``r`` of an engine of ``R`` slots.
    """
    visited = set() if visited is None else visited
    visited.add(id(obj))
    out = {}
    for name, value in vars(obj).items():
        where = f"{type(obj).__name__}.{name}"
        if id(value) in visited or _skipped(name, value):
            continue
        if _is_state_object(value):
            out[name] = ("obj", capture(value, slot, visited))
        elif slot is not None and isinstance(value, set):
            out[name] = ("member", slot[0] in value)
        elif slot is not None and _per_slot(name, value, slot[1]):
            r = slot[0]
            out[name] = (("row", value[r].detach().clone()) if torch.is_tensor(value)
                         else ("item", _encode(value[r], where)))
        elif isinstance(value, (torch.Generator,) + PLAIN):
            out[name] = _encode(value, where)
        # Any other object (the model's split, its compiled graph) is not state.
    return out


def to_device(value, device):
    """``value`` with its floating and integer tensors on ``device`` (random-number states, byte
    tensors, stay on the CPU where torch wants them), through containers and objects."""
    if torch.is_tensor(value):
        return value if value.dtype == torch.uint8 else value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_device(v, device) for v in value)
    if hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(to_device(v, device) for v in value))
    if hasattr(value, "__dict__") and not isinstance(value, type):
        for k, v in vars(value).items():
            setattr(value, k, to_device(v, device))
    return value


def _set_generators(fresh, states, where):
    if not isinstance(fresh, list) or len(fresh) != len(states):
        raise RuntimeError(f"checkpoint: {where} holds {len(states)} generators, the fresh "
                           f"explorer {len(fresh) if isinstance(fresh, list) else 'none'}")
    for generator, state in zip(fresh, states):
        generator.set_state(state)


def restore(obj, pieces, device):
    """
    Restore ``obj`` from the states :func:`capture` returned: one state for a whole object, or
    the states of the slots ``obj`` holds now, in slot order.
    """
    pieces = pieces if isinstance(pieces, list) else [pieces]
    for name, (kind, value) in pieces[0].items():
        where = f"{type(obj).__name__}.{name}"
        values = [p[name][1] for p in pieces]
        fresh = getattr(obj, name, None)
        if kind == "obj":
            if fresh is None or not _is_state_object(fresh):
                raise RuntimeError(f"checkpoint: {where} is not in the fresh explorer; was the "
                                   "checkpoint written by another version of pyro_pt?")
            restore(fresh, values, device)
        elif kind == "gen":
            fresh.set_state(value)
        elif kind == "member":
            setattr(obj, name, {r for r, member in enumerate(values) if member})
        elif kind == "row":
            setattr(obj, name, torch.stack(values).to(device))
        elif kind == "item":
            if value[0] == "gen":
                _set_generators(fresh, [v for _, v in values], where)
            else:
                setattr(obj, name, [to_device(copy.deepcopy(v), device) for _, v in values])
        else:
            setattr(obj, name, to_device(copy.deepcopy(value), device))

