"""
Communication between the processes that each hold a shard of the data.

Everything of a subnetwork Laplace posterior that is a sum over data points (the GGN, the
Jacobian energies that rank the coordinates, the ``pyro.factor`` terms, the log-likelihood and
its gradient) is computed by every rank on its own shard and summed here; what is not (the
prior, its Hessian, the MAP) is computed by every rank alike and never summed. One code path
serves one process and many: :class:`LocalComm` (one process, every operation the identity) and
:class:`TorchComm` (``torch.distributed``). Sums travel in float64, whatever the model's dtype,
so that the result differs from one process's sum only by the order of the additions.

A failed collective (a rank that died, or one that stopped with an error of its own) raises a
``RuntimeError`` naming the lost ranks: after the failure every surviving rank signs in at the
process group's rendezvous store, and the ranks that never sign in are the lost ones. A rank
that stops with an error first leaves its reason there (:meth:`TorchComm.leave_note`).
"""

import itertools
import os
import time

import torch

_NOTE_LENGTH = 2000  # the longest reason a rank leaves for the others in the store
_comm_count = itertools.count()  # every rank creates its comms in the same order


class LocalComm:
    """All the data in this process: every operation is the identity."""

    rank = 0
    world_size = 1
    device = torch.device("cpu")

    def all_reduce_sum(self, tensor, what=None):
        return tensor

    def all_gather_object(self, obj, what=None):
        return [obj]

    def leave_note(self, error):
        pass


class TorchComm:
    """
    The ranks of a ``torch.distributed`` process group, each holding a shard of the data.

    Tensors travel on ``device``: the rank's CUDA device (``cuda:LOCAL_RANK``) with the
    ``nccl`` backend, the CPU otherwise. Backend errors are re-raised naming the operation and
    the lost ranks, so a dead rank shows up as an error (after the process group's timeout at
    worst) rather than a hang.

    :param process_group: the group, or ``None`` for the default (world) group.
    """

    def __init__(self, process_group=None):
        import torch.distributed as dist

        self._dist = dist
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        if dist.get_backend(process_group) == "nccl":
            local = os.environ.get("LOCAL_RANK")
            self.device = torch.device("cuda", int(local) if local is not None else torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        try:
            self._store = dist.distributed_c10d._get_default_store()
        except (RuntimeError, AttributeError, ValueError):
            self._store = None
        ranks = "world" if process_group is None else dist.get_process_group_ranks(process_group)
        # keys of an earlier comm (an earlier failure in the same group) must not count
        self._prefix = f"pyro_subnet/{ranks}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{next(_comm_count)}/"

    def _lost_ranks(self, wait):
        """Ranks that did not sign in within ``wait`` seconds; ``None`` if the store is gone."""
        if self._store is None:
            return None
        try:
            self._store.set(self._prefix + f"alive/{self.rank}", "1")
            deadline = time.monotonic() + wait
            while True:
                missing = [r for r in range(self.world_size)
                           if not self._store.check([self._prefix + f"alive/{r}"])]
                if not missing or time.monotonic() > deadline:
                    return missing
                time.sleep(0.05)
        except (RuntimeError, ValueError):
            return None  # the store itself is gone: its host died

    def leave_note(self, error):
        """Best effort: tell the other ranks, through the store, why this rank stops."""
        if self._store is None:
            return
        try:
            self._store.set(self._prefix + f"note/{self.rank}", f"{type(error).__name__}: {error}"[:_NOTE_LENGTH])
        except (RuntimeError, ValueError):
            pass  # the store is gone; the rank's own traceback still says why

    def lost_ranks_text(self, wait=5.0):
        """Which ranks are lost, and why where they said so."""
        lost = self._lost_ranks(wait)
        if lost is None:
            return "the rendezvous store is unreachable, so its host (usually rank 0) is lost"
        notes = {}
        try:
            for r in range(self.world_size):
                if r != self.rank and self._store.check([self._prefix + f"note/{r}"]):
                    notes[r] = self._store.get(self._prefix + f"note/{r}").decode()
        except (AttributeError, RuntimeError, ValueError):
            pass
        said = "".join(f"; rank {r} stopped with {note}" for r, note in notes.items())
        if lost:
            return f"lost rank(s) {lost}: they stopped responding" + said
        if notes:
            return f"rank(s) {sorted(notes)} failed" + said
        return "every rank is alive, so they have diverged (different models, data calls or settings?)"

    def _run(self, what, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError) as error:
            raise RuntimeError(
                f"pyro_subnet: {what} failed on rank {self.rank} of {self.world_size}; "
                f"{self.lost_ranks_text()}. Backend error: {error}"
            ) from error

    def all_reduce_sum(self, tensor, what="sum over the ranks' data"):
        """The sum of every rank's ``tensor`` (same shape everywhere), added in float64 and
        returned in ``tensor``'s dtype and device, identical on every rank."""
        buf = tensor.detach().to(device=self.device, dtype=torch.float64).contiguous()
        self._run(what, self._dist.all_reduce, buf, group=self.group)
        return buf.to(device=tensor.device, dtype=tensor.dtype)

    def all_gather_object(self, obj, what="all_gather of a check"):
        out = [None] * self.world_size
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # all_gather_object's nccl tensors go there
        self._run(what, self._dist.all_gather_object, out, obj, group=self.group)
        return out


def sum_all(comm, tensors, what):
    """Each of ``tensors`` summed over the ranks, all in one float64 all-reduce; each returned in
    its own shape and dtype (the identity in one process)."""
    if comm.world_size == 1:
        return list(tensors)
    flat = comm.all_reduce_sum(torch.cat([t.reshape(-1).double() for t in tensors]), what)
    parts = flat.split([t.numel() for t in tensors])
    return [p.reshape(t.shape).to(t.dtype) for p, t in zip(parts, tensors)]


def check_group(process_group):
    """``process_group`` itself, or a ``TypeError`` unless it is ``None`` or a ``torch.distributed`` group."""
    import torch.distributed as dist

    if process_group is not None and not (dist.is_available() and isinstance(process_group, dist.ProcessGroup)):
        raise TypeError("process_group must be a torch.distributed process group (e.g. from "
                        f"torch.distributed.new_group) or None for the default group, got {process_group!r}")
    return process_group


def make_comm(process_group=None):
    """A :class:`TorchComm` when a process group is given or ``torch.distributed`` is
    initialized, else a :class:`LocalComm`."""
    import torch.distributed as dist

    if process_group is not None or (dist.is_available() and dist.is_initialized()):
        return TorchComm(process_group)
    return LocalComm()


def agree(comm, failure, report, what):
    """
    One all-gather in which each rank says whether its step failed and what it found
    (``report``, a dict): a rank that failed raises its own error, the others a
    ``RuntimeError`` naming it and its reason; ranks whose reports differ all raise a
    ``ValueError`` naming the rank, the keys and both values. Every rank takes part, so that
    none waits for a rank that stopped.

    :param Exception failure: this rank's error, or ``None``.
    :param dict report: what the ranks must agree on.
    :param str what: the step, for the messages (``"laplace_approximation's set-up"``).
    """
    problem = None if failure is None else f"{type(failure).__name__}: {failure}"
    reports = comm.all_gather_object((problem, report), what=f"the agreement check of {what}")
    if failure is not None:
        raise failure
    failed = [(rank, p) for rank, (p, _) in enumerate(reports) if p]
    if failed:
        raise RuntimeError(
            f"pyro_subnet: {what} failed on rank(s) {[r for r, _ in failed]}, so rank {comm.rank} stops "
            "too: " + "; ".join(f"rank {r}: {p}" for r, p in failed)
        )
    first = reports[0][1]
    for rank, (_, other) in enumerate(reports):
        differ = sorted(k for k in first if other.get(k) != first[k])
        if differ:
            raise ValueError(
                f"pyro_subnet: the ranks disagree in {what} on {differ}: rank 0 has "
                f"{ {k: first[k] for k in differ} }, rank {rank} has { {k: other.get(k) for k in differ} }; "
                "every rank must build the same model and guide, run the same MAP phase "
                "(DataParallelELBO) and call laplace_approximation on its own shard of the data"
            )
