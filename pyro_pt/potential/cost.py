"""What compiling a model's graphs with Inductor costs on this machine, for ``compile="auto"``.

:mod:`pyro_pt.autocompile` switches a run to Inductor when the compilation's cost is a small
part of the run's time, so it needs that cost before paying it:

- **measured**: every Inductor compilation a run makes (a switch, or a set-up with
  ``compile="inductor"``) is timed and recorded, keyed by the captured graph's code, dtype,
  device, what was compiled with it (the leapfrog steps) and torch's version, in a small JSON
  file beside Inductor's own on-disk cache. That cache makes a later compilation of the same
  graph cheap (the seed BNN: 26 s cold, 5 s warm), so the record of the latest compilation is
  what the next one will cost.
- **estimated**: a graph compiled nowhere yet costs ``COLD_SECONDS[device] + SECONDS_PER_NODE
  * nodes`` (its FX nodes). A cold switch, measured on one thread of a 2-core CPU: the seed BNN
  (284 nodes, the fused step) 10.7 s on an Intel Xeon, 26 s on an AMD EPYC with the native
  matrix products' first build; the tests' linear model (108 nodes, lockstep steps of several
  batch sizes) 16.5 s with the other core busy. On an H200 (Triton kernels, torch 2.11) the
  seed BNN's took 80 s. The size says little, the number of graphs more (fused or lockstep,
  batch sizes), so the estimate is mostly a constant per kind of device.

Without Inductor's cache directory (a private API, :mod:`pyro_pt.potential.torch_compat`)
nothing is recorded, and every compilation is estimated as a cold one.
"""

import hashlib
import json
import os
import tempfile

import torch

from . import torch_compat

# A cold switch: 10.7-26 s measured on CPUs, 80 s on a GPU (see above); more nodes, a little
# more. A device type not listed is taken as the slowest.
COLD_SECONDS = {"cpu": 15.0, "cuda": 80.0}
SECONDS_PER_NODE = 0.01
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


def estimated_cold_seconds(gm, device):
    """A cold compilation's seconds on a ``device`` (its type), from the graph's size."""
    cold = COLD_SECONDS.get(torch.device(device).type, max(COLD_SECONDS.values()))
    return cold + SECONDS_PER_NODE * len(gm.graph.nodes)


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
    return estimated_cold_seconds(gm, device), "estimated"


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
