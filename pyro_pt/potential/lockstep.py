"""The leapfrog steps of several slots as one compiled call: slots in lockstep.

On a small model a compiled call costs far more than its arithmetic: on the 25-weight BNN of
``benchmarks/vs_numpyro_ess.py`` (one CPU thread, loaded 2-core VM) a slot's fused step costs
~60-130 us for a few thousand flops. The lockstep step is ``torch.func.vmap`` of the fused step
(:func:`~pyro_pt.potential.leapfrog.leapfrog_step`) over the slots, compiled by Inductor as one
graph; a slot past its own last step, or one that met a non-finite point, is carried unchanged
(a select, exact), so each slot runs its own number of steps and its numbers do not depend on
the others' (there: 4 slots, 64 us per step for all against 388 us one at a time). On a large
model batching gains nothing on one thread (seed BNN, 8 slots: 4.1 ms vmapped against 3.5 ms
one at a time), so it is used only below :data:`MAX_FLOPS` per evaluation, a property of the
model (the same on every rank). Its numbers are checked as the batched potential's
(:mod:`pyro_pt.potential.batched`; docs/performance.md): a lone slot runs as a batch of two,
so a slot's draws do not depend on how many slots a process holds.

Measured gain, end to end (``benchmarks/ablation.py``: whole PT runs, one thread, ranges over
interleaved rounds): without it (the fused step slot by slot) the 25-weight BNN's sampling
phase takes 5.1-6.0x as long, eight schools' 0.97-1.62x (median 1.48).
"""

import torch
from torch.utils.flop_counter import FlopCounterMode

from .batched import check_pairs, pieces, same_as_pairs
from .capture import Uncapturable, capture, forked_rng, keeping_validation
from .constants import bitwise_equal
from .fused import CompiledSteps
from .inductor import inductor_compile
from .leapfrog import leapfrog_step, unfused_step
from .native import native_loop

# Where the arithmetic of one evaluation takes about as long as a compiled call's fixed cost
# (~30-60 us at the ~30 GFLOP/s one thread of this CPU reaches); the small BNN has ~2e3, the
# seed BNN ~7e6.
MAX_FLOPS = 1e6


def graph_flops(gm, point):
    """The flops of one call of the captured graph ``gm`` at ``point``, as torch counts them
    (matrix products and convolutions; elementwise operations count nothing)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        gm(point)
    return counter.get_total_flops()


def batch_size(count, max_batch):
    """The compiled batch that steps ``count`` slots: the next power of two (at least 2, at most
    ``max_batch``), the rest of its rows copies of the first slot. Each size costs a compilation
    (5-10 s cold on a CPU) and on a small model a call costs about the same for 5 rows as for 8,
    so a ladder that grows in warmup (8 to 14 rungs) compiles sizes 2, 4 and 8 at most rather
    than one per number of rungs."""
    size = 2
    while size < count:
        size *= 2
    return max(min(size, max_batch), count, 2)


def lockstep_step(gm, num_extra=0):
    """
    One leapfrog step of a batch of slots, for capture: ``(i, n, z, p, potential, grad, ll,
    bad, scaled_eps, eps, half_eps, betas, *extra) -> (z, p, potential, grad, ll, bad)``. Slot
    r takes step ``i`` (from 1) of its ``n[r]``, the half kick at its last, while ``i <= n[r]``
    and it has not gone ``bad`` (a non-finite density or gradient); ``extra``: ``num_extra``
    inputs of ``gm`` shared by all slots.
    """
    step = torch.func.vmap(leapfrog_step(gm), in_dims=(0,) * 5 + (None,) * num_extra)

    def batch_step(i, n, z, p, potential, grad, ll, bad, scaled_eps, eps, half_eps, betas,
                   *extra):
        kick = torch.where(i == n, half_eps, eps)
        z_new, p_new, u_new, g_new, ll_new, ok = step(z, p, scaled_eps, kick, betas, *extra)
        live = (i <= n) & ~bad
        keep = live & ok
        col = keep[:, None]
        return (torch.where(col, z_new, z), torch.where(col, p_new, p),
                torch.where(keep, u_new, potential), torch.where(col, g_new, grad),
                torch.where(keep, ll_new, ll), bad | (live & ~ok))

    return batch_step


class Lockstep(CompiledSteps):
    """
    The lockstep steps of a :class:`~pyro_pt.potential.batched.BatchedEvaluator`'s model, one
    compiled graph per batch size, checked on first use. Each step's ``extra()`` gives the
    inputs its callers append to the per-slot ones (none here; a fitted reference's parameters
    in :class:`~pyro_pt.reference.graph.ReferencedLockstep`, which overrides the hooks
    :meth:`_key`, :meth:`_graph`, :meth:`_extra` and :meth:`_evaluate`).
    """

    _caches = ("_steps", "_plans")

    def __init__(self, evaluator):
        super().__init__(evaluator)
        self._plans = {}  # (num_slots, dtype, device, validate) -> plan or None

    def _key(self, dtype, device):
        """What a compiled step is specific to."""
        return self.evaluator.compiled.graph_key(dtype, device)

    def _graph(self, dtype, device):
        """The single-point graph ``z -> (lp, ll, grad lp, grad ll)`` a step is built on."""
        return self.evaluator.compiled.fx_graph(dtype, device)

    def _extra(self, dtype, device):
        """The inputs of :meth:`_graph` after the point, the same for every slot."""
        return []

    def _evaluate(self, z, betas):
        """``(potential, grad, ll)`` of the unfused evaluation the steps are checked against."""
        return self.evaluator(z, betas)

    def plan(self, num_slots, dtype, device):
        """``[(first, last, size, step)]``: slots ``first:last`` as one batch of ``size`` (2 for
        a lone slot) stepped by ``step``; None where lockstep does not apply (:attr:`reason`
        says why). Made once per number of slots."""
        key = (num_slots,) + self._key(dtype, device)
        if key not in self._plans:
            self._plans[key] = self._plan(num_slots, dtype, device)
        return self._plans[key]

    def _plan(self, num_slots, dtype, device):
        compiled = self.evaluator.compiled
        if compiled.path != "functional":
            self.reason = f"the model's potential is not a captured graph ({compiled.reason})"
            return None
        if compiled.engine_for(dtype, device) != "inductor":
            self.reason = ("the graph runs under TorchScript, and lockstep needs Inductor "
                           "(compile='inductor', or 'auto' on a long enough run)")
            return None
        point = compiled.check_points(dtype, device)[0]
        flops = graph_flops(compiled.fx_graph(dtype, device), point)
        if flops > MAX_FLOPS:
            self.reason = f"the model's {flops:.3g} flops per evaluation exceed {MAX_FLOPS:.0e}"
            return None
        if self._step(2, dtype, device) is None:
            return None
        plan, first = [], 0
        while first < num_slots:
            count = min(self.evaluator.max_batch, num_slots - first)
            size = batch_size(count, self.evaluator.max_batch)
            step = self._step(size, dtype, device)
            if step is not None:
                plan.append((first, first + count, size, step))
                first += count
                continue
            for piece in pieces(count):
                plan.append((first, first + piece, piece, self._step(piece, dtype, device)))
                first += piece
        return plan

    def _step(self, size, dtype, device):
        return self._cached((size,) + self._key(dtype, device), size, dtype, device)

    def _compile(self, size, dtype, device):
        compiled = self.evaluator.compiled
        points = compiled.check_points(dtype, device)
        extra = self._extra(dtype, device)
        example = _inputs(list(range(size)), points, extra)
        graph = self._graph(dtype, device)
        with forked_rng(device), keeping_validation():
            gm = capture(lockstep_step(graph, len(extra)), *example)
            # its one caller, leapfrog_lockstep, gathers every input by index (contiguous, the
            # example's layout), so the per-call layout checks are dropped; its many small
            # buffers come from one allocation per call
            step = inductor_compile(gm, *example, asserts=False, pooled=True)
        step.loop = _checked_loop(step, example)
        step.extra = lambda: self._extra(dtype, device)
        if size == 2:
            self._check_pairs(step, points, dtype)
        else:
            self._check_size(step, size, points, dtype, device)
        return step

    def _check_pairs(self, step, points, dtype):
        """:func:`~pyro_pt.potential.batched.check_pairs` of the step against the unfused one."""
        runs = _pairs(step, points)
        references = []
        for example, out in runs:
            if bool(out[5].any()):
                raise Uncapturable("the lockstep step met a non-finite point at a check point")
            z, p, scaled_eps, eps, betas = (example[k][:1] for k in (2, 3, 8, 9, 11))
            reference = unfused_step(self._evaluate, z, p, scaled_eps, eps, betas)
            references.append([t[0] for t in reference])
        check_pairs([out for _, out in runs], references, self.evaluator.compiled.tolerance(dtype),
                    "lockstep")

    def _check_size(self, step, size, points, dtype, device):
        """Point ``s % len(points)`` in slot s of a batch of ``size``: bitwise its numbers in
        a batch of two."""
        pairs = [out for _, out in _pairs(self._step(2, dtype, device), points)]
        with torch.no_grad():
            out = step(*_inputs(list(range(size)), points, step.extra()))
        if not same_as_pairs(out, pairs):
            raise Uncapturable(f"lockstep results depend on the batch size ({size} vs 2)")


def _checked_loop(step, example):
    """The step's C++ loop (:func:`~pyro_pt.potential.native.native_loop`) where it gives
    bitwise the Python loop's numbers over three steps from ``example``, else None. CPU only:
    on a GPU the generated entry point's stream handling has not been tried here."""
    if any(t.device.type != "cpu" for t in example):
        return None
    run, head = step.runner()
    loop = native_loop(run)
    if loop is None:
        return None
    tick, count, *rest = example
    carried, given = rest[:6], rest[6:]
    count = torch.full_like(count, 3)  # three full steps
    ticks = [tick + k for k in range(3)]
    try:
        with torch.no_grad():
            native = loop(head, ticks, count, carried, given)
            python = carried
            for t in ticks:
                python = run([*head, t, count, *python, *given])
    except Exception:
        return None
    same = all(bitwise_equal(a, b) for a, b in zip(native, python))
    return loop if same and len(native) == len(python) else None


def _inputs(slots, points, extra=()):
    """One full step (``i = 1 < n = 2``) from check point ``s % len(points)`` for each ``s`` in
    ``slots``, at an inverse temperature of 1 or 0.5 by that point (as the fused step's
    checks: momentum ``points[-1] - points[0]``, steps of 1e-3), then ``extra``."""
    n = len(points)
    z = torch.stack([points[s % n] for s in slots])
    kw = {"dtype": z.dtype, "device": z.device}
    size = len(slots)
    zeros = torch.zeros(size, **kw)
    eps = torch.full((size,), 1e-3, **kw)
    betas = torch.tensor([1.0 if (s % n) % 2 == 0 else 0.5 for s in slots], **kw)
    return (torch.tensor(1, device=z.device), torch.full((size,), 2, device=z.device), z,
            (points[-1] - points[0]).expand(size, -1).clone(), zeros, torch.zeros_like(z),
            zeros.clone(), torch.zeros(size, dtype=torch.bool, device=z.device),
            torch.full_like(z, 1e-3), eps, 0.5 * eps, betas, *extra)


def _pairs(step, points):
    """``[(inputs, outputs)]``: point i first of a pair with point i + 1 (cyclically)."""
    n = len(points)
    runs = []
    with torch.no_grad():
        for i in range(n):
            example = _inputs([i, (i + 1) % n], points, step.extra())
            runs.append((example, step(*example)))
    return runs
