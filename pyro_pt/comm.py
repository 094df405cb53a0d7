"""Communication between the processes that hold the rungs of one ladder: :class:`LocalComm`
(one process, no copies) and :class:`TorchComm` (``torch.distributed``), so one process and many
share one code path; what travels per swap round: docs/layout.md, "Communication"."""

import os
import time

import torch

# The longest reason a rank leaves for the others in the store.
NOTE_LENGTH = 2000


def rung_blocks(num_rungs, world_size):
    """Contiguous blocks of rungs per rank, ``[(start, stop), ...]``: the first
    ``num_rungs % world_size`` ranks hold one rung more."""
    if world_size > num_rungs:
        raise ValueError(
            f"ParallelTempering has {num_rungs} replicas but the process group has "
            f"{world_size} ranks; every rank needs at least one replica: raise num_replicas "
            f"to at least {world_size} or launch fewer processes"
        )
    base, extra = divmod(num_rungs, world_size)
    blocks, start = [], 0
    for rank in range(world_size):
        stop = start + base + (1 if rank < extra else 0)
        blocks.append((start, stop))
        start = stop
    return blocks


class LocalComm:
    """All rungs in this process: every operation is the identity."""

    rank = 0
    world_size = 1
    device = torch.device("cpu")

    def all_gather_floats(self, values, block_sizes):
        return list(values)

    def exchange(self, sends, receives):
        """``sends``: [(dst_rank, tensor)], ``receives``: [(src_rank, tensor to fill)]."""
        if sends or receives:
            raise RuntimeError("LocalComm cannot exchange states between processes")

    def broadcast(self, tensor, src, what=None):
        return tensor

    def all_gather_object(self, obj, what=None):
        return [obj]


class TorchComm:
    """
    Rungs spread over the ranks of ``process_group`` (None: the world group).

    Tensors travel on ``device``: the rank's CUDA device with the ``nccl`` backend, the CPU
    otherwise. Errors from the backend are re-raised naming the operation and the lost ranks,
    so a lost rank shows up as an error (after the process group's timeout at worst) rather
    than a hang; under torchrun, which stops the survivors before their collective fails, the
    process is also watched (:mod:`pyro_pt.torchrun`).
    """

    def __init__(self, process_group=None):
        import torch.distributed as dist

        self._dist = dist
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        if dist.get_backend(process_group) == "nccl":
            # torchrun's LOCAL_RANK names the GPU, whether or not the script set_device'd it.
            local = os.environ.get("LOCAL_RANK")
            index = int(local) if local is not None else torch.cuda.current_device()
            self.device = torch.device("cuda", index)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        # After a failed collective, every surviving rank signs in at the rendezvous store;
        # the ranks that never sign in are the lost ones. Nothing is written while all is well.
        try:
            self._store = dist.distributed_c10d._get_default_store()
        except (RuntimeError, AttributeError, ValueError):
            self._store = None
        ranks = "world" if process_group is None else dist.get_process_group_ranks(process_group)
        # A torchrun restart keeps the agent's store: keys of an earlier attempt must not count.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._key_prefix = f"pyro_pt/failed/{ranks}/{attempt}/"
        self._note_prefix = f"pyro_pt/note/{ranks}/{attempt}/"
        if os.environ.get("TORCHELASTIC_RUN_ID") is not None:
            from .torchrun import watch

            watch(self)  # torchrun SIGTERMs the survivors: name the lost rank before that

    def _lost_ranks(self, wait=5.0):
        """Ranks that did not sign in within ``wait`` seconds; None if the store is gone."""
        if self._store is None:
            return None
        try:
            self._store.set(self._key_prefix + str(self.rank), "1")
            deadline = time.monotonic() + wait
            while True:
                missing = [r for r in range(self.world_size)
                           if not self._store.check([self._key_prefix + str(r)])]
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
            text = f"{type(error).__name__}: {error}"
            self._store.set(self._note_prefix + str(self.rank), text[:NOTE_LENGTH])
        except (RuntimeError, ValueError):
            pass  # the store is gone; the rank's own traceback still says why

    def _notes(self):
        """``{rank: why it stopped}`` for the other ranks that left a note."""
        notes = {}
        try:
            for r in range(self.world_size):
                if r != self.rank and self._store.check([self._note_prefix + str(r)]):
                    notes[r] = self._store.get(self._note_prefix + str(r)).decode()
        except (AttributeError, RuntimeError, ValueError):
            pass  # no store, or it is gone
        return notes

    def lost_ranks_text(self, wait=5.0, if_any=False):
        """
        Which ranks are lost, and why where they said so: one text for every failure. With
        ``if_any``, None when every rank is alive and none left a note (nothing to report).
        """
        lost = self._lost_ranks(wait)
        if lost is None:  # no store to read notes from either
            return "the rendezvous store is unreachable, so its host (usually rank 0) is lost"
        notes = self._notes()
        said = "".join(f"; rank {r} stopped with {note}" for r, note in notes.items())
        if lost:
            return f"lost rank(s) {lost}: they stopped responding" + said
        if notes:
            return f"rank(s) {sorted(notes)} failed" + said
        if if_any:
            return None
        return "every rank is alive, so they have diverged (different models or calls?)"

    def _run(self, what, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError) as error:
            raise RuntimeError(
                f"pyro_pt: {what} failed on rank {self.rank} of {self.world_size}; "
                f"{self.lost_ranks_text()}. Backend error: {error}"
            ) from error

    def all_gather_floats(self, values, block_sizes):
        """Every rank's list of floats (blocks of the given sizes), concatenated in rank order."""
        width = max(block_sizes)
        mine = torch.zeros(width, dtype=torch.float64, device=self.device)
        mine[: len(values)] = torch.tensor(values, dtype=torch.float64)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        self._run("all_gather of log-likelihoods", self._dist.all_gather, gathered, mine,
                  group=self.group)
        out = []
        for rank, size in enumerate(block_sizes):
            out.extend(gathered[rank][:size].tolist())
        return out

    def exchange(self, sends, receives):
        ops = [self._dist.P2POp(self._dist.isend, t.to(self.device), group=self.group,
                                group_peer=dst) for dst, t in sends]
        buffers = [(t, torch.empty_like(t, device=self.device)) for _, t in receives]
        ops += [self._dist.P2POp(self._dist.irecv, buf, group=self.group, group_peer=src)
                for (src, _), (_, buf) in zip(receives, buffers)]
        if not ops:
            return
        works = self._run("state exchange", self._dist.batch_isend_irecv, ops)
        for work in works:
            self._run("state exchange", work.wait)
        for target, buf in buffers:
            target.copy_(buf)

    def broadcast(self, tensor, src, what="broadcast of the cold state"):
        buf = tensor.to(self.device)
        self._run(what, self._dist.broadcast, buf, group=self.group, group_src=src)
        return buf.to(tensor.device)

    def all_gather_object(self, obj, what="all_gather of diagnostics"):
        out = [None] * self.world_size
        self._run(what, self._dist.all_gather_object, out, obj,
                  group=self.group)
        return out


def make_comm(process_group=None):
    """TorchComm when a process group is given or torch.distributed is initialized."""
    import torch.distributed as dist

    if process_group is not None or (dist.is_available() and dist.is_initialized()):
        return TorchComm(process_group)
    return LocalComm()


def agree_on_setup(comm, failure, view, settings):
    """
    One all-gather in which each rank says whether its set-up failed, which latent shapes
    its model has (``view``) and which ``settings`` decide the ranks' common steps: a rank that
    failed raises its own error, the others raise one naming it; if the ranks disagree, all
    raise (different ladders or warmups would otherwise pair the wrong rungs or hang).
    """
    problem = None if failure is None else f"{type(failure).__name__}: {failure}"
    reports = comm.all_gather_object((problem, view, settings), what="set-up check")
    if failure is not None:
        raise failure
    failed = [(rank, problem) for rank, (problem, _, _) in enumerate(reports) if problem]
    if failed:
        raise RuntimeError(
            f"pyro_pt: ParallelTempering's set-up failed on rank(s) "
            f"{[rank for rank, _ in failed]}, so rank {comm.rank} stops too: "
            + "; ".join(f"rank {rank}: {problem}" for rank, problem in failed)
        )
    for rank, (_, other_view, other) in enumerate(reports):
        differ = sorted(key for key in settings if other[key] != reports[0][2][key])
        if differ:
            raise ValueError(
                f"ranks disagree on the kernel's settings {differ}: rank 0 has "
                f"{ {key: reports[0][2][key] for key in differ} }, rank {rank} has "
                f"{ {key: other[key] for key in differ} }; every rank must build "
                f"ParallelTempering and call MCMC with the same arguments"
            )
        if other_view != reports[0][1]:
            raise ValueError(
                f"ranks disagree on the model's latent sites: rank 0 has {reports[0][1]}, "
                f"rank {rank} has {other_view}; every rank must run the same model on the "
                f"same shapes"
            )
