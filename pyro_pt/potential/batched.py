"""Tempered potentials and gradients of many replicas in one call.

The batched graph is ``torch.func.vmap`` of the single-point graph, captured once per batch
size. A run gives the same samples whatever the number of processes (docs/design.md), so a
replica's numbers may not depend on its company: the vmapped graphs are used only if a point
gives bitwise the same numbers at any position, in any company and in each batch size used
(checked on first use of every size); otherwise replicas are evaluated one at a time.
"""

import math

import torch

from .capture import Uncapturable, compile_vmapped, mismatch

# A batch of one can take other kernels than a batch of two (a matrix product instead of a
# batched one), so one replica is evaluated as two copies of itself.
_MIN_BATCH = 2


def combine(lp, ll, grad_lp, grad_ll, betas):
    """``-(lp + beta ll)`` and ``-(d lp + beta d ll)``, elementwise, without fused multiply-adds
    (whose use can depend on the vector length)."""
    potential = -(lp + betas * ll)
    grad = -(grad_lp + betas.unsqueeze(-1) * grad_ll)
    return potential, grad


def pieces(n):
    """``n`` slots as pieces of the checked sizes 2 and 3 (for a size that failed its check)."""
    return [3] * (n % 2) + [2] * ((n - 3 * (n % 2)) // 2)


def check_pairs(pairs, references, rtol, what):
    """
    Raise Uncapturable unless each check point's outputs first in a batch of two with the next
    point (``pairs[i]``, cyclically) agree with its ``references[i]`` within ``rtol`` and are
    bitwise its outputs second in the batch before (``pairs[i - 1]``).
    """
    for i, out in enumerate(pairs):
        for value, ref in zip(out, references[i]):
            problem = mismatch(value[0], ref, rtol)
            if problem is not None:
                raise Uncapturable(f"{what} disagrees with single evaluations: {problem}")
        if not all(torch.equal(a[0], b[1]) for a, b in zip(out, pairs[i - 1])):
            raise Uncapturable(f"{what} results depend on the batch position")


def same_as_pairs(out, pairs):
    """Whether slot s of a batch's outputs ``out`` is bitwise point ``s % len(pairs)``'s outputs
    first in its batch of two."""
    return all(torch.equal(a[slot], b[0]) for slot in range(len(out[0]))
               for a, b in zip(out, pairs[slot % len(pairs)]))


class Interpreted:
    """A graph run without autograd and, under TorchScript, without the profiling executor
    (whose fusions could change the numbers)."""

    def __init__(self, graph):
        self.graph = graph

    def __call__(self, *inputs):
        with torch.no_grad(), torch.jit.optimized_execution(False):
            return self.graph(*inputs)


def _run(graph, batch):
    return Interpreted(graph)(batch.contiguous())


class BatchedEvaluator:
    """``(potential [R], grad [R, D], ll [R])`` of ``R`` flat points at inverse temperatures
    ``betas``, from a :class:`~pyro_pt.potential.compiled.CompiledSplit`'s graphs; ``mode`` and
    ``max_batch`` as :class:`~pyro_pt.potential.functional.FunctionalSplit`'s ``batched`` and
    ``max_batch``."""

    def __init__(self, compiled, mode="auto", max_batch=8):
        if int(max_batch) < _MIN_BATCH:
            raise ValueError(f"max_batch must be at least {_MIN_BATCH}, got {max_batch!r}")
        self.compiled = compiled
        self.mode = mode
        self.max_batch = int(max_batch)
        self._path = "loop" if mode == "loop" else None
        self.reason = "batched='loop'" if mode == "loop" else ""
        self._graphs = {}  # (size, dtype, device, validate) -> (graph, size passed its check)
        self._pairs_made = {}

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_graphs"], state["_pairs_made"] = {}, {}
        return state

    def forget(self):
        """Drop the batched graphs and the vmap-or-loop decision (the single-point graph was
        recompiled): made and checked again on first use."""
        self._graphs.clear()
        self._pairs_made.clear()
        if self.mode != "loop":
            self._path, self.reason = None, ""

    @property
    def path(self):
        """``"vmap"`` or ``"loop"`` (decided on first use)."""
        if self._path is None:
            point = self.compiled.check_points()[0]
            self._decide(point.dtype, point.device)
        return self._path

    def __call__(self, z_flat, betas):
        z_flat = z_flat.detach()
        if z_flat.dim() != 2 or z_flat.shape[1] != self.compiled.dim:
            raise ValueError(
                f"z_flat must have shape [R, {self.compiled.dim}] (R replicas, the flat "
                f"latent), got {tuple(z_flat.shape)}"
            )
        betas = torch.as_tensor(betas, dtype=z_flat.dtype, device=z_flat.device).detach()
        if betas.shape != z_flat.shape[:1]:
            raise ValueError(f"betas must have shape [{z_flat.shape[0]}], got {tuple(betas.shape)}")
        if self._path is None:
            self._decide(z_flat.dtype, z_flat.device)
        out = None
        if self._path == "vmap":
            try:
                out = self._vmapped(z_flat)
            except Exception as error:  # a new dtype or validation setting that fails its check
                self._path, self.reason = "loop", f"{type(error).__name__}: {error}"
        if out is None:
            out = self._looped(z_flat)
        lp, ll, grad_lp, grad_ll = out
        potential, grad = combine(lp, ll, grad_lp, grad_ll, betas)
        finite = torch.isfinite(lp) & torch.isfinite(ll)
        if bool(finite.all()):  # one read of one flag where all is well, as it mostly is
            return potential, grad, ll
        for r in (~finite).nonzero().flatten().tolist():
            # the traced path's NaN / -inf semantics, replica by replica
            lp_r, ll[r], grad_lp_r, grad_ll_r = self.compiled.traced_reference(z_flat[r])
            potential[r], grad[r] = combine(lp_r, ll[r], grad_lp_r, grad_ll_r, betas[r])
        return potential, grad, ll

    # ----- evaluation -----

    def _looped(self, z_flat):
        rows = []
        for point in z_flat:
            out = self.compiled.evaluate(point, grads=True)
            if out is None:  # traced path: answered row by row in __call__
                nan = torch.full_like(point, math.nan)
                out = (nan[0], nan[0], nan, nan)
            rows.append(out)
        if len(rows) == 1:  # a view, not a copy
            return tuple(t.unsqueeze(0) for t in rows[0])
        return tuple(torch.stack(column) for column in zip(*rows))

    def _vmapped(self, z_flat):
        outs = []
        for start in range(0, z_flat.shape[0], self.max_batch):
            chunk = z_flat[start:start + self.max_batch]
            if chunk.shape[0] < _MIN_BATCH:
                chunk = chunk.expand(_MIN_BATCH, -1)
            graph, passed = self._graph(chunk.shape[0], chunk.dtype, chunk.device)
            if passed:
                outs.append(_run(graph, chunk))
                continue
            for piece in chunk.split(pieces(chunk.shape[0])):
                outs.append(_run(self._graph(piece.shape[0], piece.dtype, piece.device)[0], piece))
        return tuple(torch.cat(column)[: z_flat.shape[0]] for column in zip(*outs))

    # ----- capture and checks -----

    def _graph(self, size, dtype, device):
        """``(graph, passed)`` for batches of ``size``, checked against the batches of two."""
        key = (size,) + self.compiled.graph_key(dtype, device)
        if key not in self._graphs:
            points = self.compiled.check_points(dtype, device)
            example = torch.stack(points[:1] * size)
            graph = compile_vmapped(self.compiled.fx_graph(dtype, device), example,
                                    self.compiled.engine_for(dtype, device))
            self._graphs[key] = (graph, True)
            if size != _MIN_BATCH:
                passed = self._check_size(graph, size, dtype, device)
                self._graphs[key] = (graph, passed)
        return self._graphs[key]

    def _pairs(self, dtype, device):
        """Each check point's outputs first in a batch of two with the next point (cyclically),
        checked by :func:`check_pairs` against single evaluations."""
        key = self.compiled.graph_key(dtype, device)
        if key not in self._pairs_made:
            points = self.compiled.check_points(dtype, device)
            graph = self._graph(_MIN_BATCH, dtype, device)[0]
            n = len(points)
            pairs = [_run(graph, torch.stack([points[i], points[(i + 1) % n]])) for i in range(n)]
            singles = [self.compiled.evaluate(point, grads=True) for point in points]
            check_pairs(pairs, singles, self.compiled.tolerance(dtype), "vmap")
            self._pairs_made[key] = pairs
        return self._pairs_made[key]

    def _check_size(self, graph, size, dtype, device):
        """Whether each point, in a batch of ``size`` filled with the others, gives bitwise its
        numbers in a batch of two."""
        points = self.compiled.check_points(dtype, device)
        out = _run(graph, torch.stack([points[i % len(points)] for i in range(size)]))
        return same_as_pairs(out, self._pairs(dtype, device))

    def _decide(self, dtype, device):
        """vmap if its batches of two agree with single evaluations, are batch-invariant, and
        batches of three match them; else a loop of single evaluations."""
        self._path = "loop"
        if self.compiled.path != "functional":
            self.reason = f"the single-point path is traced ({self.compiled.reason})"
            return
        if self.mode == "auto" and torch.device(device).type == "cpu" and (
            torch.get_num_threads() == 1
        ):
            # Measured on the seed BNN: one CPU thread gains nothing from batched kernels
            # (8 replicas: loop 4.6 ms, vmap 5.7 ms) and a lone replica costs double, padded.
            # Under Inductor, a leapfrog of 8 replicas (loaded 2-core CPU): vmapped 8.1-8.5 ms,
            # the loop's fused steps 7.7-8.6 ms, and vmap costs three more compilations.
            self.reason = "batched='auto' on one CPU thread"
            return
        try:
            self._pairs(dtype, device)
            if not self._graph(3, dtype, device)[1]:
                raise Uncapturable("vmapped results depend on the batch size (3 vs 2)")
        except Uncapturable as error:
            self.reason = str(error)
        except Exception as error:  # e.g. an operation without a batching rule
            self.reason = f"vmap failed: {type(error).__name__}: {error}"
        else:
            self._path = "vmap"
            return
        self._graphs.clear()
        self._pairs_made.clear()
