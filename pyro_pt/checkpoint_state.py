"""The state a checkpoint saves, as each part declares it, captured and restored.

Every class whose objects a checkpoint saves declares its attributes in class attributes:

- ``STATE``: saved and restored;
- ``SLOTS`` (the batched HMC's classes): saved per slot, each holding one entry per slot (the
  rows of a tensor, the items of a list, the slot indices of a set);
- ``REBUILT``: not saved: settings the set-up gives again, links to other parts (the model's
  split, the engine a warmup adapts), callables and caches.

An attribute that is none of them is refused (:func:`check_declared`, a TypeError naming it),
so a new attribute is neither saved nor dropped silently. Pyro's classes, which pyro_pt does
not own, are declared in :data:`pyro_pt.compat.PYRO_STATE`; a user's kernel declares its own
(a kernel that declares nothing cannot be checkpointed, and says so).

A saved attribute whose value is itself a declared object is captured the same way
(``("obj", state)``) and restored into the fresh object's; a ``torch.Generator`` is saved as
its state and restored into the fresh generator (which keeps its device); plain values
(numbers, strings, tensors) and containers, whatever they hold, are copied whole
(``copy.deepcopy``: Pyro's Welford estimators inside a mass-matrix adapter's dict, the per-slot
list of Pyro's dual averaging schemes), as are objects of an immutable class that says so
(``COPIED_WHOLE = True``: a ladder's legs). Any other object is refused. A rung's state never depends on how many processes wrote it: the batched HMC keeps the
rungs of a process as the slots of one engine, and restoring joins the slots of the rungs the
new process holds, in slot order.
"""

import copy

import torch

from .compat import PYRO_STATE

_ABSENT = object()
# Values a checkpoint copies whole (containers whatever they hold); any other object held by a
# saved attribute must declare its state, or be an immutable value (``COPIED_WHOLE = True``).
PLAIN = (str, bytes, int, float, bool, type(None), torch.Tensor, torch.dtype, torch.Generator,
         tuple, list, dict, set, frozenset)


def declaration(obj):
    """``(state, slots, rebuilt)`` as ``obj``'s class declares them (its own class attributes,
    else :data:`~pyro_pt.compat.PYRO_STATE` for Pyro's classes), or None for an undeclared
    class."""
    cls = type(obj)
    state = getattr(cls, "STATE", None)
    if state is not None:
        return tuple(state), tuple(getattr(cls, "SLOTS", ())), tuple(getattr(cls, "REBUILT", ()))
    for base in cls.__mro__:
        declared = PYRO_STATE.get(f"{base.__module__}.{base.__qualname__}")
        if declared is not None:
            return declared
    return None


def check_declared(obj):
    """``obj``'s declaration; a TypeError naming the attributes of ``obj`` declared neither as
    state nor as rebuilt (a new one must be one or the other)."""
    declared = declaration(obj)
    if declared is None:
        raise TypeError(
            f"cannot checkpoint a {type(obj).__name__}: its class does not declare its state; "
            "give it class attributes STATE (the attributes a checkpoint saves) and REBUILT "
            "(those set-up gives again, and caches)")
    undeclared = sorted(set(vars(obj)) - set().union(*declared))
    if undeclared:
        raise TypeError(
            f"cannot checkpoint a {type(obj).__name__}: its attribute(s) {undeclared} are "
            f"declared neither in {type(obj).__name__}.STATE (saved) nor in REBUILT (set-up "
            "rebuilds them, or they are caches); add each to one of them")
    return declared


def _encode(value, where):
    if isinstance(value, torch.Generator):
        return ("gen", value.get_state())
    try:
        return ("val", copy.deepcopy(value))
    except Exception as error:  # a value that cannot be copied must not vanish silently
        raise TypeError(f"cannot checkpoint {where}: {error}") from error


def capture(obj, slot=None):
    """
    The declared state of ``obj`` as ``{attribute: (kind, value)}``; with ``slot = (r, R)``
    only slot ``r`` of an engine of ``R`` slots (its ``SLOTS`` attributes' entry ``r``).
    """
    state, slots, _ = check_declared(obj)
    out = {}
    for name in state + slots:
        value = getattr(obj, name, _ABSENT)
        if value is _ABSENT:  # set later in the object's life (at its set-up)
            continue
        where = f"{type(obj).__name__}.{name}"
        if declaration(value) is not None:
            out[name] = ("obj", capture(value, slot))
        elif slot is not None and name in slots:
            r = slot[0]
            if isinstance(value, set):
                out[name] = ("member", r in value)
            elif torch.is_tensor(value):
                out[name] = ("row", value[r].detach().clone())
            elif isinstance(value, list):
                out[name] = ("item", _encode(value[r], where))
            else:  # before its first update (a Welford mean is 0.0): the same for every slot
                out[name] = _encode(value, where)
        elif isinstance(value, PLAIN) or getattr(type(value), "COPIED_WHOLE", False):
            out[name] = _encode(value, where)
        else:
            raise TypeError(
                f"cannot checkpoint {where}: it holds a {type(value).__name__}, whose class "
                "declares no state; give that class STATE and REBUILT (or COPIED_WHOLE = True "
                f"for an immutable value), or move {name} to REBUILT")
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
    state, slots, _ = check_declared(obj)
    for name, (kind, value) in pieces[0].items():
        where = f"{type(obj).__name__}.{name}"
        if name not in state + slots:
            raise RuntimeError(f"checkpoint: {where} is not state of the fresh object; was the "
                               "checkpoint written by another version of pyro_pt?")
        values = [p[name][1] for p in pieces]
        fresh = getattr(obj, name, None)
        if kind == "obj":
            if fresh is None or declaration(fresh) is None:
                raise RuntimeError(f"checkpoint: {where} is not in the fresh object; was the "
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
