"""Hamiltonian dynamics of R slots at once: momenta, the leapfrog trajectories.

Every operation is elementwise or a per-row reduction of fixed order (:func:`row_sum`), so a
slot's trajectory does not depend on which other slots share its batch. For the same reason
:func:`leapfrog_rows` (each step of a slot one compiled call) and :func:`leapfrog_lockstep`
(each step of a batch of slots one compiled call) give bitwise the numbers of
:func:`leapfrog`, the reference (Neal 2011, "MCMC using Hamiltonian dynamics", ch. 5).
"""

import torch

from ..potential.leapfrog import unfused_step

# torch's CPU sum splits a single long row over threads (a "two-pass" reduction once the
# tensor has 32768 elements) but reduces each row of a multi-row tensor serially, so a plain
# ``x.sum(-1)`` can differ in its last bits between R = 1 and R > 1. Summing blocks shorter
# than that threshold first keeps every row's reduction order fixed.
_ROW_BLOCK = 8192


def row_sum(x):
    """Per-row sum of ``x`` ``[R, D]``, bitwise independent of R and of the thread count."""
    num_rows, dim = x.shape
    if dim <= _ROW_BLOCK:
        return x.sum(-1)
    pad = (-dim) % _ROW_BLOCK
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    return x.reshape(num_rows, -1, _ROW_BLOCK).sum(-1).sum(-1)


def not_finite(potential, grad):
    """Rows whose potential or any gradient entry is NaN or infinite (no sum: the answer
    must not depend on a reduction order, which a compiled step may choose differently)."""
    return ~(torch.isfinite(potential) & torch.isfinite(grad).all(-1))


def draw(generators, slots, dim, jitter, uniform, dtype, device):
    """
    Slot r's random numbers from its own generator, in a fixed order: a number of steps uniform
    on ``jitter = (low, high)`` unless it is None, the momentum noise, and an accept uniform if
    ``uniform``; rows not in ``slots`` get zeros and draw nothing. Returns ``(steps [R] (long)
    or None, noise [R, D], uniforms [R])``.
    """
    num_slots = len(generators)
    kw = {"dtype": dtype, "device": device}
    noise = torch.zeros(num_slots, dim, **kw)  # each drawn row filled in place
    uniforms = torch.zeros(num_slots, **kw)
    steps = None if jitter is None else [jitter[1]] * num_slots
    for r in slots:
        gen = generators[r]
        if steps is not None:
            steps[r] = int(torch.randint(jitter[0], jitter[1] + 1, (1,),
                                         generator=gen, device=device))
        torch.randn(dim, generator=gen, out=noise[r], **kw)
        if uniform:
            torch.rand(1, generator=gen, out=uniforms[r:r + 1], **kw)
    if steps is not None:
        steps = torch.tensor(steps, device=device)
    return steps, noise, uniforms


def leapfrog(evaluate, start, p0, step_size, inv_mass, steps, n_max):
    """
    Leapfrog from ``start = (z, potential, grad, ll)`` with momenta ``p0``: ``n_max`` steps, or
    ``steps[r]`` for slot r (later rows stay put while the longest finishes), each step
    :func:`~pyro_pt.potential.leapfrog.unfused_step`.

    :param callable evaluate: ``z [R, D] -> (potential [R], grad [R, D], ll [R])``.
    :returns: ``(z, p, potential, grad, ll, bad)`` at the end points, ``bad`` the slots whose
        trajectory met a non-finite potential or gradient.
    """
    z0, potential, grad, ll = start
    z = z0
    eps = step_size[:, None]
    half_eps = 0.5 * eps
    scaled_eps = eps * inv_mass
    scratch = grad * half_eps
    p = p0 - scratch  # our own tensor from here on: updated in place
    bad = torch.zeros(z0.shape[0], dtype=torch.bool, device=z0.device)
    bad_col = None
    at = lambda q, _: evaluate(q)  # noqa: E731 (the betas are evaluate's own)
    for i in range(1, n_max + 1):
        z_in, p_in = z, p
        if bad_col is not None:
            # A failed row steps from its (finite) initial point at rest, so the batched
            # potential never sees NaN states; its results are discarded at the end.
            z_in, p_in = torch.where(bad_col, z0, z), torch.where(bad_col, 0.0, p)
        if steps is None:
            kick = half_eps if i == n_max else eps
            z, p, potential, grad, ll = unfused_step(at, z_in, p_in, scaled_eps, kick, None,
                                                     scratch)
            bad = bad | not_finite(potential, grad)
        else:
            live = i <= steps
            live_col = live[:, None]
            kick = torch.where((i == steps)[:, None], half_eps, eps)
            z_new, p_new, u_new, g_new, ll_new = unfused_step(at, z_in, p_in, scaled_eps, kick,
                                                              None)
            bad = bad | (live & not_finite(u_new, g_new))
            z = torch.where(live_col, z_new, z)
            p = torch.where(live_col, p_new, p)
            potential = torch.where(live, u_new, potential)
            grad = torch.where(live_col, g_new, grad)
            ll = torch.where(live, ll_new, ll)
        bad_col = bad[:, None] if bool(bad.any()) else None
    return z, p, potential, grad, ll, bad


def leapfrog_rows(step, evaluate_row, start, p0, step_size, inv_mass, betas, steps, n_max):
    """
    :func:`leapfrog`, one slot's trajectory at a time, each step one call of a fused ``step``
    (:func:`~pyro_pt.potential.leapfrog.leapfrog_step`'s contract, one point); the same
    numbers, bitwise. A slot where ``step`` reports a non-finite density is run again alone
    (:func:`_rerun_alone`); ``betas`` ``[R]`` are the slots'.
    """
    z0, potential0, grad0, ll0 = start
    eps = step_size[:, None]
    half_eps = 0.5 * eps
    scaled_eps = eps * inv_mass
    counts = [n_max] * z0.shape[0] if steps is None else steps.tolist()
    rows, failed = [], []
    for r, n in enumerate(counts):
        z, potential, grad, ll = z0[r], potential0[r], grad0[r], ll0[r]
        p = p0[r] - grad * half_eps[r]
        # the slot's scalars once, not per step
        row_eps, row_half_eps, row_scaled_eps, beta = (eps[r, 0], half_eps[r, 0], scaled_eps[r],
                                                       betas[r])
        for i in range(1, n + 1):
            kick = row_half_eps if i == n else row_eps
            z, p, potential, grad, ll, ok = step(z, p, row_scaled_eps, kick, beta)
            if not ok:
                failed.append(r)
                break
        rows.append((z, p, potential, grad, ll, torch.zeros((), dtype=torch.bool,
                                                            device=z.device)))
    out = tuple(torch.stack(column) for column in zip(*rows))
    return _rerun_alone(out, failed, counts, evaluate_row, start, p0, step_size, inv_mass)


def _rerun_alone(out, failed, counts, evaluate_row, start, p0, step_size, inv_mass):
    """``out`` with the rows of the ``failed`` slots (a fast trajectory met a non-finite point)
    replaced by :func:`leapfrog`'s for that slot alone, ``counts[r]`` steps, through
    ``evaluate_row(r, z [1, D])``: the potential's own non-finite semantics."""
    for r in failed:
        one = tuple(t[r:r + 1] for t in start)
        row = leapfrog(lambda q: evaluate_row(r, q), one, p0[r:r + 1], step_size[r:r + 1],
                       inv_mass[r:r + 1], None, counts[r])
        for column, value in zip(out, row):
            column[r] = value[0]
    return out


def leapfrog_lockstep(plan, evaluate_row, start, p0, step_size, inv_mass, betas, steps, n_max):
    """
    :func:`leapfrog` with the slots in lockstep: each step of a batch of slots one call of a
    compiled step, every slot its own number of steps; a slot that met a non-finite point is
    run again alone (:func:`_rerun_alone`). ``plan``: ``[(first, last, size, step)]``
    (:meth:`~pyro_pt.potential.lockstep.Lockstep.plan`), slots ``first:last`` padded to
    ``size`` rows with copies of the first.
    """
    z0, potential0, grad0, ll0 = start
    device = z0.device
    eps = step_size
    half_eps = 0.5 * eps
    scaled_eps = eps[:, None] * inv_mass
    n = torch.full_like(betas, n_max, dtype=torch.long) if steps is None else steps.to(device)
    p_half = p0 - grad0 * half_eps[:, None]
    out = _in_lockstep(plan, (z0, p_half, potential0, grad0, ll0),
                       (scaled_eps, eps, half_eps, betas), n)
    failed = [r for r, bad in enumerate(out[-1].tolist()) if bad]
    return _rerun_alone(out, failed, n.tolist(), evaluate_row, start, p0, step_size, inv_mass)


def evaluate_lockstep(plan, z, betas):
    """
    ``(potential, grad, ll, bad)`` at the states ``z`` ``[R, D]``: one lockstep step per batch
    with zero momentum and step (``z + 0 * 0``, the same point), the numbers the lockstep
    trajectories compute; ``bad`` marks a non-finite point (its other outputs are zeros).
    """
    zeros = torch.zeros_like(z)
    values = torch.zeros_like(betas)
    n = torch.full(betas.shape, 2, dtype=torch.long, device=z.device)  # one full kick
    _, _, potential, grad, ll, bad = _in_lockstep(
        plan, (z, zeros, values, zeros, values), (zeros, values, values, betas), n, steps=1)
    return potential, grad, ll, bad


def _in_lockstep(plan, state, fixed, n, steps=None):
    """The lockstep steps of ``plan`` from the carried ``state`` (``z, p, potential, grad,
    ll``) with the ``fixed`` per-slot inputs (``scaled_eps, eps, half_eps, betas``): slot r
    takes ``n[r]`` steps (``steps`` at most); returns ``state`` and ``bad``."""
    device = state[0].device
    num_slots = state[0].shape[0]
    counts = n.tolist()
    most = max(counts) if steps is None else steps
    ticks = _ticks(device, most)
    pieces = []
    for first, last, size, step in plan:
        # Every input contiguous, the layout the step was compiled for (it does not check
        # its inputs' layout, lockstep.Lockstep._compile): the whole batch as it is, a part
        # sliced (no copy where its rows are contiguous), a padded batch gathered by index.
        if size == last - first == num_slots:
            take = torch.Tensor.contiguous  # itself where already contiguous
        elif size == last - first:
            take = lambda t: t[first:last].contiguous()  # noqa: E731
        else:
            index = torch.tensor(list(range(first, last)) + [first] * (size - (last - first)),
                                 device=device)
            take = lambda t: t[index]  # noqa: E731
        carried = [take(t) for t in state] + [torch.zeros(size, dtype=torch.bool,
                                                          device=device)]
        given = [take(t) for t in fixed] + step.extra()  # then what all slots share
        count = take(n)
        # the compiled call without per-step Python layers (one call per leapfrog step), in
        # a C++ loop where the step has one
        run, head = step.runner()
        batch_ticks = ticks[: min(most, max(counts[first:last]))]
        loop = getattr(step, "loop", None)
        if loop is not None and len(batch_ticks) > 1:
            carried = loop(head, batch_ticks, count, carried, given)
        else:
            for tick in batch_ticks:
                carried = run([*head, tick, count, *carried, *given])
        if size != last - first:
            carried = [t[: last - first] for t in carried]
        pieces.append(carried)
    if len(pieces) == 1:
        return tuple(pieces[0])
    return tuple(torch.cat(column) for column in zip(*pieces))


_TICK_CACHE = {}  # device -> [tensor(1), tensor(2), ...]: the lockstep steps' step numbers


def _ticks(device, count):
    """The step numbers ``1..count`` as 0-d long tensors on ``device``, made once."""
    ticks = _TICK_CACHE.setdefault(device, [])
    while len(ticks) < count:
        ticks.append(torch.tensor(len(ticks) + 1, device=device))
    return ticks[:count]
