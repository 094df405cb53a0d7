"""The leapfrog step, written once, and the one unfused form every faster form is checked by.

A leapfrog step of a point under momentum ``p`` drifts and kicks:

.. math:: z' = z + \\epsilon M^{-1} p, \\qquad p' = p - k\\, \\nabla U_\\beta(z'),

with :math:`k = \\epsilon` inside a trajectory and :math:`\\epsilon / 2` at its last step
(the first half kick is taken before the loop). :func:`leapfrog_step` is that step of one
point over a captured graph of the model, for compilation: the fused step
(:mod:`~pyro_pt.potential.fused`) compiles it; the lockstep step
(:mod:`~pyro_pt.potential.lockstep`) compiles its ``vmap`` over the slots; against a fitted
reference the same step runs over the graph with q's density appended
(:mod:`pyro_pt.reference.graph`). :func:`unfused_step` is the same step of rows from the
evaluator's own calls, each iteration of the batched trajectory
(:func:`~pyro_pt.explorers.hmc_dynamics.leapfrog`): every compiled form is used only where it
agrees with it at the graph's check points (:func:`agrees`, bitwise; the lockstep form within
the graph's tolerance).
"""

import torch

from . import batched


def leapfrog_step(gm):
    """
    One leapfrog step of one point as one function of tensors, for capture:
    ``(z, p, scaled_eps, kick, beta, *extra) -> (z', p', potential, grad, ll, ok)`` with
    ``z' = z + scaled_eps p``, the tempered potential at ``z'`` as
    :func:`~pyro_pt.potential.batched.combine` makes it, ``p' = p - kick grad`` and ``ok``
    whether the densities and the gradient are finite; ``extra``: more inputs of ``gm`` after
    the point (a fitted reference's parameters, :mod:`pyro_pt.reference.graph`).
    """

    def step(z, p, scaled_eps, kick, beta, *extra):
        z_new = z + scaled_eps * p
        lp, ll, grad_lp, grad_ll = gm(z_new, *extra)
        potential, grad = batched.combine(lp, ll, grad_lp, grad_ll, beta)
        ok = (torch.isfinite(lp) & torch.isfinite(ll) & torch.isfinite(potential)
              & torch.isfinite(grad).all())
        return z_new, p - grad * kick, potential, grad, ll, ok

    return step


def unfused_step(evaluate, z, p, scaled_eps, kick, betas, scratch=None):
    """
    The step of rows ``z [R, D]``: ``(z', p', potential, grad, ll)`` from
    ``evaluate(z' [R, D], betas [R]) -> (potential [R], grad [R, D], ll [R])``; ``kick`` is
    ``[R, 1]`` (a scalar, or ``[1]``, where R = 1). With ``scratch`` (a tensor like ``p``, the
    trajectory's own) the products are written there and ``p`` is updated in place: the same
    numbers, no allocation.
    """
    z_new = z + torch.mul(scaled_eps, p, out=scratch)
    potential, grad, ll = evaluate(z_new, betas)
    kicked = torch.mul(grad, kick, out=scratch)
    return z_new, p - kicked if scratch is None else p.sub_(kicked), potential, grad, ll


def check_examples(points):
    """The steps a fused step is checked at: from each check point, momentum
    ``points[-1] - points[0]``, steps of 1e-3, at beta 1 and 0.5."""
    kw = {"dtype": points[0].dtype, "device": points[0].device}
    p = points[-1] - points[0]
    return [(z, p, torch.full_like(z, 1e-3), torch.tensor(1e-3, **kw), torch.tensor(beta, **kw))
            for z in points for beta in (1.0, 0.5)]


def agrees(step, evaluate, examples):
    """Whether the one-point ``step`` gives bitwise :func:`unfused_step`'s numbers, and finite
    ones, at every example ``(z, p, scaled_eps, kick, beta)``."""
    for z, p, scaled_eps, kick, beta in examples:
        with torch.no_grad():
            out = step(z, p, scaled_eps, kick, beta)
        expected = unfused_step(evaluate, z[None], p[None], scaled_eps[None], kick, beta[None])
        if not bool(out[-1]) or not all(torch.equal(a, b[0]) for a, b in zip(out, expected)):
            return False
    return True
