"""What compiling a model's graphs with Inductor costs on this machine, for ``compile="auto"``.

:mod:`pyro_pt.autocompile` switches a run to Inductor when the compilation's cost is a small
part of the run's time, so it needs that cost before paying it:

- **measured**: every Inductor compilation a run makes (a switch, or a set-up with
  ``compile="inductor"``) is timed and recorded, keyed by the captured graph's code, dtype,
  device, what was compiled with it (the leapfrog steps) and torch's version, in a small JSON
  file beside Inductor's own on-disk cache. That cache makes a later compilation of the same
  graph cheap (the seed BNN: 26 s cold, 5 s warm), so the record of the latest compilation is
  what the next one will cost.
- **estimated**: a graph compiled nowhere yet costs ``COLD_SECONDS + SECONDS_PER_NODE * nodes``
  (its FX nodes), a line through the cold compilations measured on the seed BNN and a small
  model (:data:`COLD_SECONDS`).

Without Inductor's cache directory (a private API, :mod:`pyro_pt.potential.torch_compat`)
nothing is recorded, and every compilation is estimated as a cold one.
"""

import hashlib
import json
import os
import tempfile

import torch

from . import torch_compat

# Cold set-ups (capture, checks, Inductor's graph and fused step, their C++ builds), one
# thread, benchmarks/compile_cost.py: the seed BNN (~830 nodes) and a 25-weight BNN.
COLD_SECONDS = 8.0
SECONDS_PER_NODE = 0.022
RECORDS = "pyro_pt_compile_seconds.json"


def _key(gm, dtype, device, what):
    text = "\n".join((gm.code, str(dtype), torch.device(device).type, what, torch.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _records_path():
    cache_dir, _ = torch_compat.lookup("cache_dir")
    return None if cache_dir is None else os.path.join(cache_dir(), RECORDS)


def _read(path):
    try:
        with open(path) as handle:
            records = json.load(handle)
        return records if isinstance(records, dict) else {}
    except (OSError, ValueError):
        return {}


def estimated_cold_seconds(gm):
    """A cold compilation's seconds, from the graph's size."""
    return COLD_SECONDS + SECONDS_PER_NODE * len(gm.graph.nodes)


def expected_seconds(gm, dtype, device, what):
    """
    ``(seconds, how)``: what compiling ``gm`` (and ``what`` with it, e.g. ``"fused"``) with
    Inductor is expected to cost here; ``how`` is ``"measured"`` (the latest compilation
    recorded on this machine) or ``"estimated"`` (a cold one, from the graph's size).
    """
    path = _records_path()
    seconds = path and _read(path).get(_key(gm, dtype, device, what))
    if isinstance(seconds, (int, float)) and seconds >= 0:
        return float(seconds), "measured"
    return estimated_cold_seconds(gm), "estimated"


def record(gm, dtype, device, what, seconds):
    """Keep ``seconds`` as the latest cost of compiling ``gm`` (and ``what``) here. Written
    atomically; a failure to write (a read-only cache) only loses the record."""
    path = _records_path()
    if path is None:
        return
    records = _read(path)
    records[_key(gm, dtype, device, what)] = round(float(seconds), 3)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(records, out)
        os.replace(tmp, path)
    except OSError:
        pass
