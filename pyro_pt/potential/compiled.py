"""A model's split captured once as graphs of tensor operations, checked against Pyro's trace.

It knows nothing of temperatures or batches: :class:`~pyro_pt.potential.batched.BatchedEvaluator`
and :class:`~pyro_pt.potential.functional.FunctionalSplit` are built on it, never the reverse.
"""

import math

import torch

from .capture import (Uncapturable, capture, compile_graph, forked_rng, keeping_validation,
                      mismatch, validation_setting)
from .densities import counted_validation, densities, densities_and_grads
from .inductor import check_compiler, choose_compiler, inductor_compile, missing_apis
from .matmul import choice
from .layout import FlatLayout


class CompiledSplit:
    """
    The captured graphs of ``flat -> (lp, ll)`` and of their gradients
    (:mod:`~pyro_pt.potential.densities`) of a :class:`~pyro_pt.potential.split.ModelSplit`,
    per dtype, device and validation setting, each checked at its first use against the traced
    path: its numbers at the check points, and a flag per validation check the traced path
    makes. The "grads" graph (the one every leapfrog step evaluates) runs under TorchScript or
    Inductor (:mod:`~pyro_pt.potential.inductor`); the "values" graph, off the leapfrog path,
    under TorchScript (a second Inductor compilation would not repay itself).

    ``path`` is ``"functional"`` if the "grads" graph was captured and checked at construction,
    else ``"traced"`` with :attr:`reason` saying why. :attr:`engine` says what runs it:
    ``"inductor"``, ``"jit"`` (TorchScript) or ``"fx"`` (the graph module in Python), and
    :attr:`engine_reason` why Inductor was not used where it was asked for.

    :param ModelSplit split: the model's prior/likelihood split.
    :param list points: optional check points (dicts of unconstrained values); default the
        split's initial point and two perturbations of it.
    :param float rtol: relative tolerance of the checks (default 1e-6 in float64, 1e-4 below).
    :param str compile: ``"auto"`` (default), ``"inductor"`` or ``"torchscript"``
        (:func:`~pyro_pt.potential.inductor.choose_compiler`; :meth:`recompile` changes it).
    """

    def __init__(self, split, points=None, rtol=None, compile="auto"):
        self.split = split
        self.rtol = rtol
        self.compile = check_compiler(compile)
        self.engine_reason = ""
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
        self.path, self.reason, self.engine = "traced", "", None
        point = self._points[0]
        try:
            self.engine = self._graph("grads", point.dtype, point.device)[1]
            self.path = "functional"
        except Uncapturable as error:
            self.reason = str(error)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_graphs"] = {}  # captured graphs do not pickle; they are recaptured on demand
        return state

    @property
    def dim(self):
        """Size of the flat unconstrained latent vector."""
        return self.layout.dim

    def evaluate(self, flat, grads=True):
        """The graph's raw ``(lp, ll)`` (and ``(d lp, d ll)`` if ``grads``) at a flat point, NaN
        where validation fails; None where the traced path must answer."""
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
        z = {k: v.clone().requires_grad_(True) for k, v in self.layout.unflatten(flat).items()}
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
                    grads.append(self.layout.flatten(dict(zip(z, parts))))
                else:  # a term that does not depend on z
                    grads.append(torch.zeros_like(flat))
        lp, ll = (torch.as_tensor(t, dtype=flat.dtype).detach() for t in (lp, ll))
        return lp, ll, grads[0], grads[1]

    @staticmethod
    def graph_key(dtype, device):
        """What a captured graph is specific to: dtype, device and whether distributions
        validate (a graph captured with validation has its checks as flags)."""
        return dtype, device, validation_setting()

    def _graph(self, kind, dtype, device):
        """``(callable, engine)`` for ``kind`` ("grads", "values") at this dtype and device,
        captured and checked on first use; raises Uncapturable."""
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

    def matmul_path(self):
        """How the "grads" graph's matrix products run: ``"native (n of m products)"`` where
        :mod:`pyro_pt.potential.matmul` runs some, else ``"aten (why)"``; ``""`` where
        Inductor does not run the graph or the graph has no product."""
        point = self._points[0]
        try:
            graph, engine = self._graph("grads", point.dtype, point.device)
        except Uncapturable:
            return ""
        native, total = getattr(graph, "matmuls", (0, 0))
        if native:
            return f"native ({native} of {total} products)"
        if engine != "inductor" or not total:
            return ""
        reason = choice()[1]
        return f"aten ({reason})" if reason else "aten (no product large enough)"

    def engine_for(self, dtype, device):
        """``"inductor"`` if Inductor runs the "grads" graph at this dtype and device, else
        ``"torchscript"`` (what the batched graphs of it use too)."""
        engine = self._graph("grads", dtype, device)[1]
        return "inductor" if engine == "inductor" else "torchscript"

    def fx_graph(self, dtype, device):
        """The uncompiled ``GraphModule`` of the "grads" graph (for vmap)."""
        self._graph("grads", dtype, device)
        return self._graphs[("grads",) + self.graph_key(dtype, device)][0]

    def recompile(self, compiler):
        """Run the "grads" graph under ``compiler`` from now on, captured, compiled and
        checked again (``compile="auto"``'s switch during a run, :mod:`pyro_pt.autocompile`)."""
        self.compile = check_compiler(compiler)
        self.engine_reason = ""
        self._graphs = {key: v for key, v in self._graphs.items() if key[0] != "grads"}
        if self.path == "functional":
            point = self._points[0]
            self.engine = self._graph("grads", point.dtype, point.device)[1]

    def _capture_checked(self, kind, dtype, device):
        points = self.check_points(dtype, device)
        make = densities_and_grads if kind == "grads" else densities
        fn = make(self.split, self.layout)
        with forked_rng(device):
            gm = capture(fn, points[0])
            self._check_validation(min(fn.flag_counts, default=0), points[0])
        inductor = kind == "grads" and choose_compiler(self.compile) == "inductor"
        missing = missing_apis() if inductor else None
        if missing:  # decided before compiling: a private API Inductor's path needs is gone
            self.engine_reason = missing
        elif inductor:
            choice()  # a bad PYRO_PT_MATMUL is the user's to fix, not a compiler failure
            try:
                with keeping_validation():
                    compiled = inductor_compile(gm, points[0])
                self._check(compiled, points, dtype, device)
                return gm, compiled, "inductor"
            except Exception as error:  # no compiler, an unsupported operation, a mismatch
                self.engine_reason = (f"Inductor failed, TorchScript runs the graph: "
                                      f"{type(error).__name__}: {error}")
        compiled, engine = compile_graph(gm, points[0])
        self._check(compiled, points, dtype, device)
        return gm, compiled, engine

    def _check_validation(self, flags, point):
        """
        Raise Uncapturable unless the graph holds a flag for each validation check the traced
        path makes at ``point``. The check points are valid points, where a graph without its
        flags still agrees; where the model is invalid it would give finite densities (the
        traced path NaN) and a chain would sample there.
        """
        counts = [0]
        with torch.no_grad(), counted_validation(counts):
            self.split.log_densities(self.layout.unflatten(point))
        if flags < counts[0]:
            raise Uncapturable(
                f"the captured graph holds {flags} of the {counts[0]} distribution validation "
                f"checks the traced model makes (validation changed while it was captured?), so "
                f"it would give finite densities where the model is invalid"
            )

    def _check(self, compiled, points, dtype, device):
        """Raise Uncapturable unless ``compiled`` gives the traced path's numbers at
        ``points``."""
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
