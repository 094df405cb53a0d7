"""
Data as a re-iterable of ``(args, kwargs)`` calls, and the splitting of one call into chunks.

Per-element Jacobians are cheapest when each batched backward pass runs over few data points,
so one model call ``model(x, y)`` is split along its data plate: every top-level tensor
argument whose leading dimension equals the size of the observed sites' data plate is sliced.
The split is checked (:func:`split_is_exact`): the chunks must give every observed element the
log density the whole call gives it, at the MAP and at a perturbed point. A model that does not
follow this pattern (data captured in a closure, a plate of fixed size, a subsampling plate,
data points that interact: inputs standardized inside the model, batch statistics) is used
unsplit.
"""

import torch


def as_batches(batches, name="batches"):
    """Checks that ``batches`` is a non-empty re-iterable of ``(args, kwargs)`` pairs."""
    if iter(batches) is batches:
        raise TypeError(
            f"{name} must be re-iterable (a list or a DataLoader) of (args, kwargs) pairs, not an "
            "iterator or generator: it is read once per pass over the data"
        )
    batches = list(batches)
    if not batches:
        raise ValueError(f"{name} is empty; pass at least one (args, kwargs) pair")
    for b in batches:
        if not (isinstance(b, (tuple, list)) and len(b) == 2 and isinstance(b[1], dict)):
            raise TypeError(
                f"each element of {name} must be a pair (args tuple, kwargs dict), got {type(b).__name__}"
            )
    return [(tuple(a), dict(k)) for a, k in batches]


def data_plate_sizes(trace, observed):
    """
    Sizes of the plates that the observed sites sit in; none at all when one of those plates
    subsamples (its scale ``full_size / size`` would change with the chunk size).
    """
    sizes = []
    for name in observed:
        for frame in trace.nodes[name]["cond_indep_stack"]:
            if frame.full_size not in (None, frame.size):
                return []
            if frame.vectorized:
                sizes.append(frame.size)
    return sizes


def split_call(args, kwargs, size, chunk):
    """Slices every top-level tensor with leading dimension ``size`` into chunks of ``chunk``."""

    def cut(v, a, b):
        return v[a:b] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == size else v

    out = []
    for a in range(0, size, chunk):
        b = min(size, a + chunk)
        out.append((tuple(cut(v, a, b) for v in args), {k: cut(v, a, b) for k, v in kwargs.items()}))
    return out


def splittable_size(args, kwargs, plate_sizes):
    """The data size to split along, or ``None`` when no argument matches a data plate."""
    leading = {v.shape[0] for v in list(args) + list(kwargs.values()) if torch.is_tensor(v) and v.dim() > 0}
    for s in plate_sizes:
        if s in leading and s > 1:
            return s
    return None


def _data_dim(trace, name, size):
    """The batch dim of observed site ``name`` that its data plate of ``size`` occupies."""
    for frame in trace.nodes[name]["cond_indep_stack"]:
        if frame.vectorized and frame.size == size:
            return frame.dim
    return None


def split_is_exact(trace_fn, observed, call, parts, size, points):
    """
    Whether the chunks ``parts`` of ``call`` give each element of every observed site the log
    density that the whole call gives it, at each latent vector of ``points`` (to 1e-5 of the
    largest). Used so that models whose data points interact are never split, nor models with a
    ``pyro.factor`` outside the data plate (each chunk would add it once more).

    :param callable trace_fn: ``(u, args, kwargs) -> trace`` of the model with latents at ``u``.
    :param list observed: observed and factor site names.
    :param call: the whole ``(args, kwargs)``; ``parts``: its chunks along the data plate of ``size``.
    """
    for u in points:
        try:
            full = trace_fn(u, *call)
            traces = [trace_fn(u, *p) for p in parts]
        except (RuntimeError, ValueError, IndexError):
            return False  # the model cannot run on a slice of its arguments
        for name in observed:
            dim = _data_dim(full, name, size)
            if dim is None or any(name not in t.nodes for t in traces):
                return False
            whole = full.nodes[name]["fn"].log_prob(full.nodes[name]["value"]).detach()
            pieces = [t.nodes[name]["fn"].log_prob(t.nodes[name]["value"]).detach() for t in traces]
            try:
                joined = torch.cat([p.expand(whole.shape[:dim] + p.shape[dim:]) for p in pieces], dim)
            except RuntimeError:
                return False
            tol = 1e-5 * float(whole.abs().max()) + 1e-12
            if joined.shape != whole.shape or not torch.allclose(joined, whole, rtol=0, atol=tol, equal_nan=True):
                return False
    return True
