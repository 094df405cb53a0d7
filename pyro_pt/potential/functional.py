"""The split as the explorers use it: the captured graph where it is exact, Pyro's trace elsewhere.

A composition of :class:`~pyro_pt.potential.compiled.CompiledSplit` (the checked graphs),
:class:`~pyro_pt.potential.batched.BatchedEvaluator` (many replicas),
:class:`~pyro_pt.potential.fused.FusedSteps` and :class:`~pyro_pt.potential.lockstep.Lockstep`
(the compiled leapfrog steps): what it offers of the split is written out, nothing is forwarded
implicitly.
"""

import math

import torch

from .batched import BatchedEvaluator, combine
from .compiled import CompiledSplit
from .fused import FusedSteps
from .lockstep import Lockstep
from .priors import DirectPrior


class _AttachGradients(torch.autograd.Function):
    """``(lp, ll)`` connected to the latent values through gradients computed in the graph."""

    @staticmethod
    def forward(ctx, payload, *values):
        layout, (lp, ll, grad_lp, grad_ll) = payload
        ctx.layout, ctx.grads = layout, (grad_lp, grad_ll)
        return lp.clone(), ll.clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_lp, d_ll):
        grad_lp, grad_ll = ctx.grads
        flat = grad_lp * d_lp + grad_ll * d_ll
        return (None, *ctx.layout.unflatten(flat).values())


class FunctionalSplit:
    """
    ``(lp(z), ll(z))`` of a :class:`~pyro_pt.potential.split.ModelSplit` without Pyro's
    per-call trace, for one point or a batch of tempered replicas.

    The graph (``flat -> lp, ll`` and their gradients, the flat vector in the split's
    ``latent_names`` order) is used (``path == "functional"``) only if it agrees with the traced
    path, values and gradients, at the check points; otherwise, or when the model cannot be one
    graph -- Python control flow on latent values, random numbers drawn inside the model, shapes
    that depend on latent values, sites that appear or disappear -- every call goes through
    :meth:`ModelSplit.log_densities` (``path == "traced"``) and :attr:`reason` says why. Where
    the graph's densities are not finite the traced path answers, so NaN (validation fails),
    ``-inf`` and their gradients are the traced path's. Gradients are first order only.

    The model's Python code runs at capture only: its side effects (counters, prints) do not
    happen per evaluation, and tensors it reads (data, ``pyro.param`` values) are fixed at
    capture. A change of dtype or device triggers a new, checked capture.

    Example::

        fast = FunctionalSplit(ModelSplit(model, (x, y)))
        fast.path, fast.reason                  # "functional", "" (or "traced", why)
        lp, ll = fast.log_densities(z)          # as split.log_densities(z)
        potential, grad, ll = fast.batched_potential_and_grad(z_flat, betas)  # [R], [R, D], [R]

    :param ModelSplit split: the model's prior/likelihood split.
    :param list points: check points, as :class:`~pyro_pt.potential.compiled.CompiledSplit`'s.
    :param float rtol: tolerance of the checks, as :class:`CompiledSplit`'s.
    :param str batched: how replicas are evaluated: ``"vmap"`` (one vmapped graph per call,
        used only if a replica's numbers are bitwise the same whatever its batch, else a loop),
        ``"loop"`` (one graph call per replica) or ``"auto"`` (``"loop"`` on a single CPU
        thread, where batched kernels were measured slower, else ``"vmap"``).
    :param int max_batch: most replicas evaluated in one vmapped call.
    :param str compile: what runs the graphs and steps: ``"torchscript"``, ``"inductor"``
        (TorchScript as the fallback) or ``"auto"`` (TorchScript until the run switches it,
        :mod:`pyro_pt.autocompile`).
    """

    def __init__(self, split, points=None, rtol=None, batched="auto", max_batch=8,
                 compile="auto"):
        if batched not in ("auto", "vmap", "loop"):
            raise ValueError(f"batched must be 'auto', 'vmap' or 'loop', got {batched!r}")
        self.split = split
        self.compiled = CompiledSplit(split, points, rtol, compile=compile)
        self.batched = BatchedEvaluator(self.compiled, mode=batched, max_batch=max_batch)
        # a slot's leapfrog step as one compiled call, and those of several rungs (small models)
        self.fused = FusedSteps(self.batched)
        self.lockstep = Lockstep(self.batched)
        self._prior = None  # DirectPrior, built at the first prior draw

    def recompile(self, compiler):
        """The graphs and steps under ``compiler`` from now on (``"inductor"`` or
        ``"torchscript"``): compiled and checked again, at once for the single-point graph
        and on first use for the rest."""
        self.compiled.recompile(compiler)
        for part in (self.batched, self.fused, self.lockstep):
            part.forget()

    # ----- what the split offers, as the explorers use it (the rest: ``.split``) -----

    def initial_point(self):
        return self.split.initial_point()

    @property
    def prior(self):
        """The prior rung's draws (:class:`~pyro_pt.potential.priors.DirectPrior`): its
        ``path`` says whether they are drawn site by site or by a trace of the model."""
        if self._prior is None:
            self._prior = DirectPrior(self)
        return self._prior

    def sample_prior(self):
        """An exact draw from the prior and its ll, as :meth:`ModelSplit.sample_prior`."""
        return self.prior()

    def log_likelihood(self, z):
        """``ll(z)`` as a float, from the traced path (the reference the graphs are checked
        against)."""
        return self.split.log_likelihood(z)

    # ----- the captured graph -----

    @property
    def path(self):
        """``"functional"`` (the captured graph) or ``"traced"`` (Pyro's trace per call)."""
        return self.compiled.path

    @property
    def reason(self):
        return self.compiled.reason

    @property
    def dim(self):
        """Size of the flat unconstrained latent vector."""
        return self.compiled.dim

    def flatten(self, z):
        """The flat ``[D]`` vector of ``z`` (site -> unconstrained tensor)."""
        return self.compiled.layout.flatten(z)

    def unflatten(self, flat):
        """Site -> unconstrained tensor, from a flat ``[D]`` vector (views of it)."""
        return self.compiled.layout.unflatten(flat)

    def unflatten_rows(self, flat):
        """``[unflatten(row) for row in flat]`` of ``flat`` ``[R, D]``, in one split."""
        return self.compiled.layout.unflatten_rows(flat)

    def evaluate(self, flat, grads=True):
        """As :meth:`CompiledSplit.evaluate`."""
        return self.compiled.evaluate(flat, grads)

    def _captured_point(self, z):
        """``(values in latent order, flat detached vector)`` of ``z``, or None unless it has the
        captured sites and shapes."""
        names = self.compiled.layout.names
        if len(z) != len(names):
            return None
        values = [z[name] for name in names]
        flat = torch.cat([v.detach().reshape(-1) for v in values])
        if flat.shape[0] != self.compiled.layout.dim:
            return None
        return values, flat

    def graph_log_densities(self, flat):
        """``(lp, ll)`` at a flat point from the captured graph, detached, by the faster of
        its compiled graphs (under Inductor the one with gradients: the values-only graph stays
        on TorchScript, 0.19 ms against 0.02 ms on the two-component mixture); None where the
        graph does not answer or is not finite there (the trace's semantics then decide)."""
        compiled = self.compiled
        with torch.no_grad():
            out = compiled.evaluate(flat, grads=compiled.engine == "inductor")
        if out is None or not bool(torch.isfinite(out[0]) & torch.isfinite(out[1])):
            return None
        return out[0], out[1]

    def graph_log_likelihood(self, z, flat=None):
        """``ll(z)`` as a float from :meth:`graph_log_densities` (``flat``: ``z`` flattened,
        where the caller has it), from the trace where the graph does not answer."""
        out = self.graph_log_densities(self.flatten(z) if flat is None else flat)
        return self.split.log_likelihood(z) if out is None else float(out[1])

    def log_densities(self, z):
        """``(lp(z), ll(z))`` as :meth:`ModelSplit.log_densities`, differentiable (first order)
        with respect to the values of ``z`` that require grad."""
        point = self._captured_point(z)
        if point is None:  # not the captured sites or shapes: Pyro decides
            return self.split.log_densities(z)
        values, flat = point
        needs_grad = torch.is_grad_enabled() and any(v.requires_grad for v in values)
        out = self.compiled.evaluate(flat, grads=needs_grad)
        if out is None or not bool(torch.isfinite(out[0]) & torch.isfinite(out[1])):
            return self.split.log_densities(z)
        if not needs_grad:
            return out[0], out[1]
        return _AttachGradients.apply((self.compiled.layout, out), *values)

    def potential_and_grad(self, z, beta):
        """
        ``(potential, grad [D], ll)`` of ``-(lp + beta * ll)`` at ``z`` (detached), straight
        from the graph, without autograd; None where :meth:`log_densities` would not answer from
        the graph (not the captured shapes, values that require grad, densities that are not
        finite, an error in the graph): the traced path decides there.

        Bitwise what autograd gives through :meth:`log_densities`: its backward of
        ``-(lp + beta * ll)`` is ``d lp * (-1) + d ll * (-beta)``, which equals
        ``-(d lp + beta * d ll)`` exactly because rounding to nearest commutes with negation.
        """
        point = self._captured_point(z)
        if point is None or any(v.requires_grad for v in point[0]):
            return None
        flat = point[1]
        try:
            out = self.compiled.evaluate(flat, grads=True)
        except Exception:  # e.g. a singular matrix: the traced path raises it to Pyro's handlers
            return None
        if out is None:
            return None
        lp, ll, grad_lp, grad_ll = out
        beta = torch.as_tensor(beta, dtype=lp.dtype, device=lp.device)
        potential, grad = combine(lp, ll, grad_lp, grad_ll, beta)
        # For a finite beta >= 0 the potential is finite only where lp and ll are (one check,
        # not two); a finite lp and ll whose potential overflows goes to Pyro's autograd path,
        # which answers it from the graph as before.
        if not math.isfinite(potential.item()):
            return None
        return potential, grad, ll

    def batched_potential_and_grad(self, z_flat, betas):
        """
        ``(potential [R], grad [R, D], ll [R])`` of ``-(lp + beta * ll)`` at ``z_flat`` ``[R,
        D]`` and ``betas`` ``[R]``, detached. A replica's results do not depend on which or how
        many others share the call (see ``batched.path``); a NaN in one does not touch the
        others.
        """
        return self.batched(z_flat, betas)
