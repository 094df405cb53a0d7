r"""
The linearized outputs of a subnetwork Laplace posterior on a model call of any size.

With :math:`\hat\eta(x)` the natural parameters of the observed sites at the MAP and
:math:`J_S(x)` their Jacobian w.r.t. the S subnetwork coordinates, the linearized model is

.. math::

    \eta(x, u_S) = \hat\eta(x) + J_S(x)\,(u_S - \hat u_S), \qquad
    \operatorname{Cov}[\eta(x)] = J_S(x)\, \Sigma_S\, J_S(x)^\top .

A Jacobian row is a vector-Jacobian product through the model call (:func:`pyro_subnet.curvature.vjp_rows`),
whose cost grows with the size of the call: over one call of n inputs the n k rows would cost
:math:`O(n^2)`. The call is therefore split along its data plate into chunks of ``chunk_size``
inputs, as for the curvature (:mod:`pyro_subnet.batching`), which makes the cost linear in n;
each chunk's Jacobian is reduced at once (to its :math:`J\Sigma J^\top` blocks, or to the
linearized outputs at given draws), so that the ``n x k x S`` Jacobian is never held. The split
is checked: the chunks must give every element the natural parameters that the whole call gives
it, at the MAP and at a perturbed point; otherwise the call is used whole.

The traces run with the global random state saved and restored (an observed site without data
draws a value), so that the only random numbers a prediction takes are its Monte Carlo draws.

**References**

[1] A. Immer, M. Korzepa, M. Bauer, "Improving predictions of Bayesian neural nets via local
    linearization", AISTATS 2021.
"""

import torch

from . import batching
from .curvature import output_jacobians
from .likelihoods import OutputSpec, unwrap

# Inputs per chunk: each Jacobian row costs a backward pass over its whole chunk, each chunk a
# model trace; 8 was the fastest of 1-16 on the 670K-weight MLP (benchmarks/subnet_predict.py).
CHUNK_SIZE = 8


def spec_all(latent, fn, name):
    """The :class:`OutputSpec` of every natural parameter of a site (what the split must keep)."""
    return OutputSpec(fn, OutputSpec.natural_names(unwrap(fn)[0]), name=name, **latent.spec_options).set_map(fn)


def _trace(latent, u, call):
    with torch.no_grad():
        return latent.trace(u, *call)[0]


def _join(blocks, shapes, axis):
    """Blocks ``[elements of a chunk, ...]`` joined along the data plate ``axis`` of the elements."""
    rest = blocks[0].shape[1:]
    parts = [b.reshape(tuple(s) + rest) for b, s in zip(blocks, shapes)]
    return torch.cat(parts, axis).reshape((-1,) + rest)


def _split_is_exact(latent, points, call, parts, axes, whole_map):
    """Whether ``parts`` give each element of each observed site the whole call's natural parameters."""
    for u in points:
        try:
            whole = whole_map if u is points[0] else _trace(latent, u, call)
            pieces = {name: [] for name in latent.observed}
            for p in parts:  # keep each chunk's parameters, not its trace
                tr = _trace(latent, u, p)
                for name in latent.observed:
                    spec = spec_all(latent, tr.nodes[name]["fn"], name)
                    pieces[name].append((spec.natural(tr.nodes[name]["fn"]), spec.element_shape))
            for name in latent.observed:
                joined = _join(*zip(*pieces[name]), axes[name])
                full = spec_all(latent, whole.nodes[name]["fn"], name).natural(whole.nodes[name]["fn"])
                tol = 1e-5 * float(full.abs().max()) + 1e-12
                if joined.shape != full.shape or not torch.allclose(joined, full, rtol=0, atol=tol, equal_nan=True):
                    return False
        except (RuntimeError, ValueError, IndexError, KeyError):
            return False  # the model cannot run on a slice of its arguments
    return True


def prediction_calls(latent, u_hat, args, kwargs, chunk_size):
    """
    The trace of the whole call at the MAP, the calls to linearize (chunks along the data plate,
    or the call itself) and, for chunks, the data plate's axis among each site's elements.
    """
    whole = _trace(latent, u_hat, (args, kwargs))
    missing = [n for n in latent.observed if n not in whole.nodes]
    if missing:
        raise ValueError(f"the model did not run its observed sites {missing} with these arguments; "
                         "call predict with the arguments of the model (data may be None)")
    n = batching.splittable_size(args, kwargs, batching.data_plate_sizes(whole, latent.observed))
    if n is None or n <= chunk_size:
        return whole, [(args, kwargs)], None
    axes = {}
    for name in latent.observed:
        dim = batching._data_dim(whole, name, n)
        if dim is None:
            return whole, [(args, kwargs)], None
        axes[name] = len(whole.nodes[name]["fn"].batch_shape) + dim
    parts = batching.split_call(args, kwargs, n, chunk_size)
    g = torch.Generator().manual_seed(0)
    points = [u_hat, u_hat + 1e-2 * torch.randn(u_hat.shape, generator=g, dtype=u_hat.dtype).to(u_hat.device)]
    if not _split_is_exact(latent, points, (args, kwargs), parts, axes, whole):
        return whole, [(args, kwargs)], None
    return whole, parts, axes


def linearize(posterior, args, kwargs, reduce, chunk_size=None, idx=None):
    r"""
    The linearized model of ``posterior`` on one call ``(args, kwargs)``, reduced chunk by chunk,
    in the S subnetwork coordinates or in the coordinates ``idx``.

    :param callable reduce: ``(spec, J) -> tensor`` whose leading dim is the elements of the
        chunk (``J`` is ``[elements, dim, S]``); the results are joined over the chunks.
    :param int chunk_size: inputs per chunk (default :data:`CHUNK_SIZE`).
    :returns: ``{site: (spec, fn, eta, reduced)}`` for the whole call, ``eta`` the MAP natural
        parameters ``[num_elements, dim]``; ``eta`` and ``reduced`` are ``None`` for a site that
        does not depend on the subnetwork.
    """
    chunk_size = CHUNK_SIZE if chunk_size is None else chunk_size
    if not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    latent, u_hat = posterior._latent, posterior.loc.detach()
    idx = posterior.subnetwork_indices if idx is None else idx
    devices = [u_hat.device.index or 0] if u_hat.is_cuda else []
    # Jacobians need autograd even when the caller (an export, a no_grad block) turned it off
    with torch.random.fork_rng(devices=devices), torch.enable_grad():
        whole, calls, axes = prediction_calls(latent, u_hat, args, kwargs, chunk_size)
        active, blocks, shapes = None, {}, {}
        for call in calls:
            outputs = output_jacobians(latent, u_hat, idx, *call, active)
            active = active or {n: o[0].active for n, o in outputs.items()}
            for name, (spec, fn, eta, J) in outputs.items():
                if J is not None:
                    with torch.no_grad():
                        blocks.setdefault(name, []).append((eta, reduce(spec, J)))
                    shapes.setdefault(name, []).append(spec.element_shape)
    if axes is None:  # one call: its own trace
        return {n: (s, fn, *(blocks[n][0] if n in blocks else (None, None))) for n, (s, fn, _, _) in outputs.items()}
    out = {}
    for name in latent.observed:
        fn = whole.nodes[name]["fn"]
        spec = OutputSpec(fn, active[name], name=name, **latent.spec_options).set_map(fn)
        if name not in blocks:
            out[name] = (spec, fn, None, None)
            continue
        etas, reduced = zip(*blocks[name])
        out[name] = (spec, fn, _join(etas, shapes[name], axes[name]), _join(reduced, shapes[name], axes[name]))
    return out


def linearized_outputs(posterior, args, kwargs, dz, chunk_size=None):
    r"""
    ``{site: (spec, fn, etas)}``: the linearized natural parameters :math:`\hat\eta + J_S\,dz_m`
    at each draw ``dz`` (``[M, S]``), ``etas`` ``[M, num_elements, dim]`` (``None`` for a site
    that does not depend on the subnetwork).
    """
    out = linearize(posterior, args, kwargs, lambda spec, J: torch.einsum("nks,ms->nmk", J, dz), chunk_size)
    return {n: (spec, fn, None if eta is None else eta + d.movedim(1, 0)) for n, (spec, fn, eta, d) in out.items()}


def linearized_predictive(posterior, args, kwargs, num_samples, chunk_size=None):
    r"""
    ``{site: distribution}``: :math:`J\Sigma_S J^\top` per element turned into the family's
    closed form where it has one, else a ``num_samples``-component mixture of the linearized
    model; a site that does not depend on the subnetwork keeps its MAP distribution.
    """
    dz = posterior._offset_draws(num_samples)

    def reduce(spec, J):
        if not spec.has_closed_predictive:
            return torch.einsum("nks,ms->nmk", J, dz)
        n, k, S = J.shape
        B = posterior._whiten(J.reshape(n * k, S)).reshape(n, k, S)
        return B @ B.mT

    out = {}
    for name, (spec, fn, eta, r) in linearize(posterior, args, kwargs, reduce, chunk_size).items():
        if eta is None:
            out[name] = fn
        elif spec.has_closed_predictive:
            out[name] = spec.wrap(spec.linearized_predictive(eta, r))
        else:
            out[name] = spec.mixture(eta + r.movedim(1, 0))
    return out
