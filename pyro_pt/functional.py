"""A fast evaluator of a model's prior/likelihood split, with Pyro's traced path as fallback.

:class:`FunctionalSplit` evaluates the same ``(lp(z), ll(z))`` as
:meth:`~pyro_pt.tempering.ModelSplit.log_densities` (DESIGN §1: ``lp`` the log prior of the
latent sites plus the log-det-Jacobian of their transforms, ``ll`` the observed sites and
factors, scaled and masked as ``Trace.compute_log_prob`` does), but through a graph of tensor
operations captured once (:mod:`pyro_pt.capture`) instead of a Pyro trace per call.
"""

import math

import torch

from .batched import BatchedEvaluator
from .capture import FlatLayout, Uncapturable, capture, compile_graph, forked_rng, mismatch
from .capture import densities, densities_and_grads


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
    ``(lp(z), ll(z))`` of a :class:`~pyro_pt.tempering.ModelSplit` without Pyro's per-call trace.

    At construction the model is captured as one straight-line graph of aten operations
    computing ``lp``, ``ll`` and their gradients with respect to the flat unconstrained latent
    vector (latent sites in sorted ``latent_names`` order, each ``.reshape(-1)``), run by the
    TorchScript interpreter. The graph is used (``path == "functional"``) only if it agrees with
    the traced path, values and gradients, at the check points (the split's initial point and
    perturbations of it); otherwise, or when the model cannot be one graph -- Python control
    flow on latent values, random numbers drawn inside the model, shapes that depend on latent
    values, sites that appear or disappear -- every call goes through
    :meth:`ModelSplit.log_densities` (``path == "traced"``) and :attr:`reason` says why.

    Wherever the graph's densities are not finite the call is answered by the traced path, so
    NaN (invalid parameters under distribution validation), ``-inf`` and their gradients are
    exactly the traced path's. Validation checks inside the graph are flags, not raises.

    Everything else (``latent_names``, ``transforms``, ``initial_point``, ``sample_prior``, ...)
    is the split's, so a ``FunctionalSplit`` can stand in for its ``ModelSplit``, e.g. in
    :class:`~pyro_pt.tempering.TemperedPotential`. Its gradients are first order only.

    The model's Python code runs at capture only: side effects in it (counters, prints) do not
    happen per evaluation, and tensors it reads (data, ``pyro.param`` values) are fixed at
    capture. A change of dtype or device triggers a new, re-checked capture.

    Example::

        split = ModelSplit(model, (x, y))
        fast = FunctionalSplit(split)
        fast.path, fast.reason                  # "functional", "" (or "traced", why)
        lp, ll = fast.log_densities(z)          # as split.log_densities(z)
        potential, grad, ll = fast.batched_potential_and_grad(z_flat, betas)  # [R], [R, D], [R]

    :param ModelSplit split: the model's prior/likelihood split.
    :param list points: optional check points (dicts of unconstrained values); default the
        split's initial point and two perturbations of it.
    :param float rtol: relative tolerance of the checks (default 1e-6 in float64, 1e-4 below).
    :param str batched: how :meth:`batched_potential_and_grad` evaluates replicas:
        ``"vmap"`` (one vmapped graph per call, used only if a replica's numbers are checked
        to be bitwise the same whatever its batch, else a loop), ``"loop"`` (one graph call
        per replica) or ``"auto"`` (``"loop"`` on a single CPU thread, where batched kernels
        were measured slower, else ``"vmap"``).
    :param int max_batch: most replicas evaluated in one vmapped call.
    """

    def __init__(self, split, points=None, rtol=None, batched="auto", max_batch=8):
        if batched not in ("auto", "vmap", "loop"):
            raise ValueError(f"batched must be 'auto', 'vmap' or 'loop', got {batched!r}")
        self.split = split
        self.rtol = rtol
        if points is None:
            with torch.random.fork_rng():  # the model's device is not known yet
                z0 = split.initial_point()
            points = [z0]
            generator = torch.Generator().manual_seed(0)
            for scale in (0.1, 0.5):
                points.append({
                    name: value + scale * torch.randn(
                        value.shape, generator=generator, dtype=value.dtype
                    ).to(value.device)
                    for name, value in z0.items()
                })
        names = split.latent_names
        for point in points:
            if not isinstance(point, dict) or set(point) != set(names):
                raise ValueError(
                    f"points must be dicts with exactly the latent sites {names} (unconstrained "
                    f"values), got {sorted(point) if isinstance(point, dict) else point!r}"
                )
        self.layout = FlatLayout(names, [points[0][name].shape for name in names])
        self._points = [self.layout.flatten({n: p[n].detach() for n in names}) for p in points]
        self._graphs = {}
        self._batched = BatchedEvaluator(self, mode=batched, max_batch=max_batch)
        self.path, self.reason, self.engine = "traced", "", None
        point = self._points[0]
        try:
            self.engine = self._graph("grads", point.dtype, point.device)[1]
            self.path = "functional"
        except Uncapturable as error:
            self.reason = str(error)

    # ----- drop-in for ModelSplit -----

    def __getattr__(self, name):
        split = self.__dict__.get("split")
        if split is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(split, name)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_graphs"] = {}  # captured graphs do not pickle; they are recaptured on demand
        return state

    @property
    def dim(self):
        """Size of the flat unconstrained latent vector."""
        return self.layout.dim

    def flatten(self, z):
        """The flat ``[D]`` vector of ``z`` (site -> unconstrained tensor)."""
        return self.layout.flatten(z)

    def unflatten(self, flat):
        """Site -> unconstrained tensor, from a flat ``[D]`` vector (views of it)."""
        return self.layout.unflatten(flat)

    def log_densities(self, z):
        """
        ``(lp(z), ll(z))`` for unconstrained values ``z``, as :meth:`ModelSplit.log_densities`,
        differentiable (first order) with respect to the values of ``z`` that require grad.
        """
        values = [z[name] for name in self.layout.names]
        needs_grad = torch.is_grad_enabled() and any(v.requires_grad for v in values)
        flat = torch.cat([v.detach().reshape(-1) for v in values])
        if flat.shape[0] != self.layout.dim:  # not the captured shapes: Pyro decides
            return self.split.log_densities(z)
        out = self.evaluate(flat, grads=needs_grad)
        if out is None or not bool(torch.isfinite(out[0]) & torch.isfinite(out[1])):
            return self.split.log_densities(z)
        if not needs_grad:
            return out[0], out[1]
        return _AttachGradients.apply((self.layout, out), *values)

    def evaluate(self, flat, grads=True):
        """
        The graph's raw ``(lp, ll)`` (and ``(d lp, d ll)`` if ``grads``) at a flat point, NaN
        where validation fails; None where the traced path must answer.
        """
        if self.path != "functional":
            return None
        try:
            graph = self._graph("grads" if grads else "values", flat.dtype, flat.device)[0]
        except Uncapturable:
            if not grads:
                return self.evaluate(flat, grads=True)
            return None
        with torch.no_grad(), torch.jit.optimized_execution(False):
            return graph(flat)

    def batched_potential_and_grad(self, z_flat, betas):
        """
        Tempered potentials ``-(lp + beta * ll)``, their gradients and ``ll`` of R replicas.

        Results for one replica do not depend on which or how many other replicas share the
        call (see :attr:`batched_path`); a NaN in one replica does not touch the others.

        :param torch.Tensor z_flat: ``[R, D]`` flat unconstrained points.
        :param torch.Tensor betas: ``[R]`` inverse temperatures.
        :returns: ``(potential [R], grad [R, D], ll [R])``, detached.
        """
        return self._batched(z_flat, betas)

    @property
    def batched_path(self):
        """``"vmap"`` or ``"loop"``: how :meth:`batched_potential_and_grad` evaluates."""
        return self._batched.path

    @property
    def batched_reason(self):
        return self._batched.reason

    # ----- capture and checks -----

    def tolerance(self, dtype):
        if self.rtol is not None:
            return self.rtol
        return 1e-6 if dtype == torch.float64 else 1e-4

    def check_points(self, dtype=None, device=None):
        """The flat check points, in ``dtype`` on ``device`` (default: as given)."""
        return [p.to(dtype=dtype or p.dtype, device=device or p.device) for p in self._points]

    def traced_reference(self, flat):
        """``(lp, ll, d lp, d ll)`` of the traced path at a flat point (gradients NaN if not
        finite)."""
        z = {k: v.clone().requires_grad_(True) for k, v in self.unflatten(flat).items()}
        with torch.enable_grad():
            lp, ll = self.split.log_densities(z)
            grads = []
            for term in (lp, ll):
                if not torch.isfinite(torch.as_tensor(term)):
                    grads.append(torch.full_like(flat, math.nan))
                elif torch.is_tensor(term) and term.requires_grad:
                    parts = torch.autograd.grad(term, list(z.values()), retain_graph=True,
                                                allow_unused=True)
                    parts = [torch.zeros_like(v) if g is None else g
                             for g, v in zip(parts, z.values())]
                    grads.append(self.flatten(dict(zip(z, parts))))
                else:  # a term that does not depend on z
                    grads.append(torch.zeros_like(flat))
        lp, ll = (torch.as_tensor(t, dtype=flat.dtype).detach() for t in (lp, ll))
        return lp, ll, grads[0], grads[1]

    @staticmethod
    def graph_key(dtype, device):
        """What a captured graph is specific to: dtype, device and whether distributions
        validate (a graph captured with validation has its checks as flags)."""
        return dtype, device, bool(torch.distributions.Distribution._validate_args)

    def _graph(self, kind, dtype, device):
        """
        ``(callable, engine)`` for ``kind`` ("grads", "values") at this dtype and device,
        captured and checked against the traced path on first use; raises Uncapturable.
        """
        key = (kind,) + self.graph_key(dtype, device)
        entry = self._graphs.get(key)
        if entry is None:
            try:
                entry = self._capture_checked(kind, dtype, device)
            except Uncapturable as error:
                entry = error
            self._graphs[key] = entry
        if isinstance(entry, Uncapturable):
            raise entry
        return entry[1], entry[2]

    def fx_graph(self, dtype, device):
        """The uncompiled ``GraphModule`` of the "grads" graph (for vmap)."""
        self._graph("grads", dtype, device)
        return self._graphs[("grads",) + self.graph_key(dtype, device)][0]

    def _capture_checked(self, kind, dtype, device):
        points = self.check_points(dtype, device)
        make = densities_and_grads if kind == "grads" else densities
        with forked_rng(device):
            gm = capture(make(self.split, self.layout), points[0])
        compiled, engine = compile_graph(gm, points[0])
        rtol = self.tolerance(dtype)
        labels = ("lp", "ll", "gradient of lp", "gradient of ll")
        for i, point in enumerate(points):
            try:
                with forked_rng(device):
                    reference = self.traced_reference(point)
                with torch.no_grad(), torch.jit.optimized_execution(False):
                    out = compiled(point)
            except Exception as error:
                raise Uncapturable(
                    f"evaluation failed at check point {i}: {type(error).__name__}: {error}"
                ) from error
            finite = bool(torch.isfinite(reference[0]) & torch.isfinite(reference[1]))
            for label, value, ref in zip(labels, out, reference if finite else reference[:2]):
                problem = mismatch(value, ref, rtol)
                if problem is not None:
                    raise Uncapturable(
                        f"the captured graph disagrees with the traced model at check point "
                        f"{i} ({label}: {problem}); the model is random or not one fixed graph"
                    )
        return gm, compiled, engine
