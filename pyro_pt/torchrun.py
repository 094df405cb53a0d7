"""
What a rank says when it fails under ``torchrun``, so that the lost rank is named.

When one rank fails, torchrun's agent sends SIGTERM to the others within its monitor interval
(0.1 s by default), before their collective fails and :class:`~pyro_pt.comm.TorchComm` can say
which rank was lost. Under torchrun (``TORCHELASTIC_RUN_ID`` is set) every
:class:`~pyro_pt.comm.TorchComm` therefore :func:`watch` es its process:

- a rank that stops with an uncaught exception leaves its reason in the rendezvous store (the
  agent hosts it, so it outlives every rank) and in torchrun's error file, which torchrun's
  closing summary then prints as the root cause instead of "error_file: <N/A>";
- a rank that receives SIGTERM while another rank is lost prints, before it dies, a
  ``pyro_pt:`` line naming the lost ranks (those that do not sign in at the store within
  :data:`SIGN_IN_SECONDS`) and the reasons they left, then dies of the SIGTERM as before.

Nothing is installed outside torchrun, outside the main thread, or over a SIGTERM handler
or excepthook of the user's own (ours chains to the excepthook found).
"""

import json
import os
import signal
import sys
import threading
import time
import traceback

# How long a rank stopped by SIGTERM waits for the other survivors to sign in at the store
# (torchrun stops them all at once, and SIGKILLs them 30 s later).
SIGN_IN_SECONDS = 2.0

_watched = {"comm": None, "previous_hook": None}


def watch(comm):
    """Install, once per process, the SIGTERM handler and excepthook for ``comm`` (the newest
    :class:`~pyro_pt.comm.TorchComm` wins: it is the one the current run uses)."""
    _watched["comm"] = comm
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)
    if sys.excepthook is not _excepthook:
        _watched["previous_hook"] = sys.excepthook
        sys.excepthook = _excepthook


def _on_sigterm(signum, frame):
    comm = _watched["comm"]
    try:
        text = comm.lost_ranks_text(wait=SIGN_IN_SECONDS, if_any=True)
        if text is not None:  # a plain stop (every rank alive, no error) needs no word
            print(f"pyro_pt: rank {comm.rank} of {comm.world_size} was stopped by torchrun "
                  f"(SIGTERM); {text}", file=sys.stderr, flush=True)
    finally:
        # Die of the signal, as without this handler: torchrun reports the same exit code.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _excepthook(kind, value, tb):
    comm = _watched["comm"]
    if comm is not None and isinstance(value, Exception):
        comm.leave_note(value)
        _record_error_file(kind, value, tb)
    (_watched["previous_hook"] or sys.__excepthook__)(kind, value, tb)


def _record_error_file(kind, error, tb):
    """torchrun's error file, as ``@record`` writes it (the JSON that
    ``torch.distributed.elastic.multiprocessing.errors.ErrorHandler`` reads back), unless the
    script's own ``@record`` wrote it already."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return
    message = {"message": f"{kind.__name__}: {error}", "extraInfo": {
        "py_callstack": "".join(traceback.format_exception(kind, error, tb)),
        "timestamp": str(int(time.time()))}}
    try:
        with open(path, "w") as f:
            json.dump({"message": message}, f)
    except OSError:
        pass  # a courtesy: the rank's own traceback is printed all the same
