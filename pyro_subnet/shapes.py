r"""
A model call checked against the shapes of the call the MAP was fitted with, so that data of
another shape name the site, and the argument, rather than fail inside torch.

The posterior has the MAP's coordinates, so every latent site must keep the shape it had in the
MAP phase, whatever the data. A call whose data disagree fails in one of three places, each named
here by :func:`checked_trace`:

- a latent site whose shape follows the data (a weight sized by ``x.shape[1]``, a latent inside
  the data plate) has another shape than its MAP value;
- the model's own computation fails (``x @ w`` with ``x`` of another width): the last latent site
  traced before the failure is named, with the arguments whose shapes differ from the fitted
  call's beyond their first (data) dimension, which may differ;
- an observed site's value does not fit its distribution (the log density fails).

Other failures of the model pass unchanged.
"""

import inspect

import torch
import pyro.poutine as poutine

_FAILURES = (RuntimeError, ValueError, IndexError, TypeError)


def _parameter_names(model):
    """The model's positional parameter names, to label its arguments (none where unknown)."""
    fn = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in kinds]


def call_shapes(model, args, kwargs):
    """``{argument name: shape}`` of the tensor arguments of one call of ``model``."""
    names = _parameter_names(model)
    out = {}
    for i, value in enumerate(args):
        if torch.is_tensor(value):
            out[names[i] if i < len(names) else f"argument {i}"] = tuple(value.shape)
    out.update({k: tuple(v.shape) for k, v in kwargs.items() if torch.is_tensor(v)})
    return out


def remember_call(guide, model, args, kwargs):
    """Keep on ``guide`` the shapes of the call it was set up with (for :func:`checked_trace`)."""
    guide._fitted_call_shapes = call_shapes(model, args, kwargs)


def _differing_arguments(latent, args, kwargs):
    """``"x has shape (50, 4) where the MAP's call had (50, 5)"``, for each tensor argument whose
    shape differs from the fitted call's beyond its first (data) dimension; ``""`` for none."""
    fitted = getattr(latent.guide, "_fitted_call_shapes", {})
    now = call_shapes(latent.model, args, kwargs)
    differ = [f"{name} has shape {shape} where the MAP's call had {fitted[name]}"
              for name, shape in now.items()
              if name in fitted and (len(shape) != len(fitted[name]) or shape[1:] != fitted[name][1:])]
    return "; ".join(differ)


def _shape(fn):
    return tuple(fn.batch_shape + fn.event_shape)


def _latent_problem(latent, trace):
    """The first latent site of ``trace`` whose distribution's shape is not its MAP shape."""
    prototype = latent.guide.prototype_trace.nodes
    for name in latent.latent_names:
        if name in trace.nodes and _shape(trace.nodes[name]["fn"]) != _shape(prototype[name]["fn"]):
            return (f"latent site {name!r} has shape {_shape(trace.nodes[name]['fn'])} with these "
                    f"arguments but {_shape(prototype[name]['fn'])} at the MAP: its shape follows "
                    "the data (a weight sized by the inputs' width, or a latent inside the data "
                    "plate), while the posterior has the MAP's coordinates")
    return None


def _observed_problem(trace, observed):
    """The first observed site whose log density fails on its value, with the shapes."""
    for name in observed:
        site = trace.nodes.get(name)
        if site is None or not site["is_observed"]:
            continue
        fn, value = site["fn"], site["value"]
        try:
            fn.log_prob(value)
        except _FAILURES as error:
            return (f"the log density of observed site {name!r} fails ({str(error).splitlines()[0]}):"
                    f" its {type(fn).__name__} has batch_shape {tuple(fn.batch_shape)} and "
                    f"event_shape {tuple(fn.event_shape)}, its value has shape {tuple(value.shape)}")
    return None


def _advice(method, differ):
    where = f" ({differ})" if differ else ""
    return (f"call {method} with data of the shapes the MAP was fitted with{where}, or refit the "
            "guide (its MAP phase) on data of these shapes")


def checked_trace(latent, u, args, kwargs, method):
    """
    The model traced with its latents at ``u`` (without gradients, the random streams left as
    they were), or a ``ValueError`` that names the site, and the arguments, where these data do
    not fit the MAP's shapes (see the module's docstring).

    :param LatentModel latent: the model as a function of the flat latent vector.
    :param torch.Tensor u: the flat unconstrained latent vector (the MAP).
    :param str method: the method called with the data, for the advice (``"predict"``).
    """
    values, _ = latent.values(u.detach())
    tracer = poutine.trace(poutine.condition(latent.model, data=values))
    devices = [u.device.index or 0] if u.is_cuda else []
    try:
        # a check: it must not move the random streams (an observed site without data draws)
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            trace = poutine.block(tracer.get_trace)(*args, **kwargs)
    except _FAILURES as error:
        partial = tracer.msngr.trace
        differ = _differing_arguments(latent, args, kwargs)
        problem = _latent_problem(latent, partial)
        if problem is None and differ:
            traced = [n for n in partial.nodes if n in latent.latent_names]
            after = f"after its latent site {traced[-1]!r}" if traced else "before its first latent site"
            problem = (f"the model fails on these arguments at the MAP {after} "
                       f"({type(error).__name__}: {str(error).splitlines()[0]})")
        if problem is None:
            raise
        raise ValueError(f"{problem}; {_advice(method, differ)}") from error
    problem = _latent_problem(latent, trace) or _observed_problem(trace, latent.observed)
    if problem is not None:
        raise ValueError(f"{problem}; {_advice(method, _differing_arguments(latent, args, kwargs))}")
    return trace
