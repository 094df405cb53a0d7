"""``compile="auto"``: TorchScript first, Inductor from the warmup round's end at which it pays.

The rule and its measurements: docs/performance.md, section 3. Inductor runs the model's
graph faster than TorchScript (the seed BNN's potential and gradient, and a fused leapfrog
step: about a third of TorchScript's time on an Intel Xeon, ``benchmarks/vs_numpyro.py``; on a
small model all of a process's rungs step in one compiled call, :mod:`pyro_pt.potential.lockstep`)
but costs a compilation first. So every ``"auto"`` run starts on TorchScript, and at each warmup
round's end from the second (the first round's scans pay one-off costs) rank 0 projects the
explorers' time left (the round's seconds per scan times the warmup scans left and
``num_samples``) and switches when the compilation's expected cost (:func:`expected_seconds`)
is at most what Inductor is expected to save of it, :data:`SAVED` of the projection: about half
the smallest share of a whole run's explorer time Inductor saved in our measurements
(``benchmarks/auto_compile.py``, default runs of 1000 + 1000 scans: 0.63 on the logistic
regression, 0.68 on the seed BNN, 0.86-0.92 on eight schools and the battery's mixtures). So a
switch is not expected to lengthen a run even where Inductor saves half that, and where it
saves what it did on the mixtures a run draws 7-9 times the scans in the same explorer time.
With several ladders (:mod:`pyro_pt.ensemble`) the share is :data:`SAVED_LADDERS`: TorchScript
steps each of their many slots on its own where Inductor's lockstep batches them, and 8
ladders' explorer time per scan fell by 0.87-0.94 (mixture 34.0 ms to 1.9-2.3 ms, logistic
regression 47.9 ms to 5.4-6.3 ms, 200 + 200 scans, a warm cache, one thread).
The decision is broadcast, so every rank switches at the same scan; the sampling phase keeps
one engine. The engine, and with it the last bits of the draws, can then depend on the machine
and its load: pass ``compile="torchscript"`` or ``"inductor"`` for draws that must repeat
bitwise. ``explorer_info["compile"]`` says what was decided, when and why.

The expected cost is **measured** where this graph (its code, dtype, device, the steps compiled
with it, torch's version) was switched here before, or set up under ``compile="inductor"``
(:func:`record_setup`) (:func:`record`, a JSON file beside
Inductor's on-disk cache, or ``$PYRO_PT_COMPILE_RECORDS``; empty: no records): after the first
switch :data:`WARM_FRACTION` of it, as the cache then holds the graph (the seed BNN's switch
took 10.7 s cold and 1.9 s warm on an Intel Xeon, the tests' linear model's 16.5 s and 2.1 s),
after later ones what the latest took. Else it is **estimated** as a cold one,
``COLD_SECONDS[device] + SECONDS_PER_NODE * nodes`` (cold switches took 10.7-26 s on CPUs,
80 s on an H200: the number of graphs says more than their size). Without Inductor's cache
directory (a private API, :mod:`pyro_pt.potential.torch_compat`) nothing is recorded and every
compilation costs a cold one.
"""

import hashlib
import json
import os
import tempfile
import time

import torch

from .checkpoint_state import check_declared
from .compat import mcmc_num_samples
from .explorers import by_group, engine_info, kind_of
from .potential import torch_compat
from .potential.inductor import missing_apis

# The share of the explorers' projected time a switch to Inductor is expected to save at least
# (half the smallest measured; see the module's docstring): the most a compilation may cost.
SAVED = 0.3
# The same with several ladders: half the smallest measured, 0.87 (see the module's docstring).
SAVED_LADDERS = 0.4


def _seconds(value):
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


class AutoCompile:
    """
    The switch of one ``compile="auto"`` run's graphs from TorchScript to Inductor. Every rank
    holds one and joins each round end's broadcast, a rank whose rungs need no graph (``fast``
    None: only the prior rung) too; rank 0, which holds the cold rung, decides.

    :param fast: this rank's :class:`~pyro_pt.potential.functional.FunctionalSplit`, or None.
    :param int num_samples: sampling scans (0 if unknown).
    """

    # What a checkpoint saves (STATE) and not (REBUILT): pyro_pt.checkpoint_state.
    # A resumed run switches again where it had switched, which sets the rest anew.
    STATE = ("switched_at", "_since")
    REBUILT = ("fast", "comm", "warmup_steps", "num_samples", "compile_seconds", "engine",
               "decision", "_why")

    def __init__(self, fast, comm, warmup_steps, num_samples):
        self.fast, self.comm = fast, comm
        self.warmup_steps, self.num_samples = warmup_steps, num_samples
        self.switched_at = None  # the scan after which Inductor runs the graphs
        self.compile_seconds = None
        self.engine = "TorchScript"  # what runs the graph, in words, for the progress bar
        self.decision = "TorchScript until a warmup round's end shows Inductor pays"
        self._since = (0, 0.0)  # (scan, explorer seconds) at the last round's end
        self._why = ""  # rank 0's case for a switch, for decision

    @classmethod
    def for_run(cls, run):
        """The switch of ``run`` (:mod:`pyro_pt.run`); None unless ``compile="auto"``."""
        if run.options.compile != "auto":
            return None
        # the sampling scans: an ensemble's ladders each run about num_samples
        # (pyro_pt.ensemble)
        scans = -(-(mcmc_num_samples() or 0) // run.num_ladders) * run.num_ladders
        switch = cls(run.fast, run.comm, run.warmup_steps, scans)
        run.explorer_info["compile"] = switch.decision
        return switch

    def _pays(self, run, t, scans, seconds):
        """Rank 0's decision at scan ``t``, with its reason in :attr:`decision`."""
        if self.fast is None or self.fast.path != "functional":
            self.decision = "TorchScript: Pyro's trace evaluates the model, no graph to compile"
            return False
        kind = kind_of(run.options.explorer)
        if not kind.gradients:  # it evaluates the values-only graph, never compiled
            self.decision = (f"TorchScript: explorer {kind.name!r} takes no gradients, and only "
                             "the gradients' graph is compiled")
            return False
        missing = missing_apis()
        if missing:
            self.decision = f"TorchScript: {missing}"
            return False
        gm, point = _graph(self.fast)
        expected, how = expected_seconds(gm, point.dtype, point.device, _what(run))
        projected = ((self.warmup_steps - t) + self.num_samples) * seconds / max(scans, 1)
        saved = SAVED if len(run.together) == 1 else SAVED_LADDERS
        pays = expected <= saved * projected
        self.decision = (f"TorchScript: Inductor's {how} {_seconds(expected)} compilation is "
                         f"over the {saved:.0%} it is expected to save of the "
                         f"{_seconds(projected)} the explorers are expected to take after scan {t}")
        self._why = (f"its {how} {_seconds(expected)} compilation (took {{took}}) under the "
                     f"{saved:.0%} it was expected to save of the {_seconds(projected)} the "
                     f"explorers were expected to take")
        return pays

    def end_round(self, run, end):
        """At a warmup round's end: switch to Inductor if it pays (a collective; a round-end
        step, :mod:`pyro_pt.rounds`)."""
        t = end.scan
        if self.switched_at is not None or end.kind != "warmup round" or t >= self.warmup_steps:
            return
        scans, seconds = t - self._since[0], run.timings["explorers"] - self._since[1]
        first = self._since[0] == 0
        self._since = (t, run.timings["explorers"])
        if first:
            # The first round's few scans pay one-off costs (the batched graphs' first use and
            # checks): a generalized linear model's 4 took 1.2 s a scan against 0.02 s later,
            # which projected a 40 s run as 2400 s. Every rank skips it alike.
            return
        pays = self.comm.rank == 0 and self._pays(run, t, scans, seconds)
        pays = bool(self.comm.broadcast(torch.tensor([int(pays)]), src=0,
                                        what="broadcast of compile='auto''s choice").item())
        if self.comm.rank != 0:
            self.decision = f"{'Inductor' if pays else 'TorchScript'} (rank 0's choice at scan {t})"
            self._why = "rank 0's choice (took {took})"
        if pays:
            self.switch(run, t, self._why)
        run.explorer_info["compile"] = self.decision

    def switch(self, run, t, why):
        """Recompile the graphs under Inductor and re-evaluate every rung's state with them;
        ``why`` (``{took}``: the compilation's seconds) goes into :attr:`decision`."""
        began = time.perf_counter()
        self.switched_at = t
        if self.fast is not None:
            with torch_compat.recording() as missing:
                self.fast.recompile("inductor")
                for explorer in (e for r in run.together for e in r.rungs.explorers):
                    explorer.target_changed()  # its cached density came from TorchScript's graph
                # builds each group's steps; the info is the first group's (the reference's
                # leg where a stabilized ladder has two, as at set-up)
                for group, _ in reversed(by_group(run.rungs.explorers)):
                    run.explorer_info.update(engine_info(self.fast, group))
            private = run.explorer_info.get("private_api", [])
            private += [reason for reason in missing if reason not in private]
            if private:
                run.explorer_info["private_api"] = private
        self.compile_seconds = time.perf_counter() - began
        run.explorer_info["compile_seconds"] = self.compile_seconds
        engine = self.fast.compiled.engine if self.fast is not None else "inductor"
        self.engine = "Inductor" if engine == "inductor" else "TorchScript (Inductor failed)"
        if engine == "inductor" and self.comm.rank == 0:
            gm, point = _graph(self.fast)
            record(gm, point.dtype, point.device, _what(run), self.compile_seconds)
        why = why.format(took=_seconds(self.compile_seconds))
        self.decision = (f"Inductor from scan {t}: {why}" if engine == "inductor"
                         else f"TorchScript: the switch to Inductor at scan {t} failed "
                              f"({self.fast.compiled.engine_reason}); {why}")
        run.explorer_info["compile"] = self.decision

    def state_dict(self):
        """What a checkpoint keeps (:mod:`pyro_pt.checkpoint`): the scan of the switch, if any."""
        check_declared(self)
        return {"switched_at": self.switched_at, "since": self._since}

    def load_state_dict(self, state, run):
        """A resumed run switches at once where the checkpointed run had switched."""
        self._since = tuple(state["since"])
        if state["switched_at"] is not None:
            self.switch(run, state["switched_at"], "restored from the checkpoint")


def _graph(fast):
    """The graph a switch compiles (the record's key) and its first check point."""
    point = fast.compiled.check_points()[0]
    return fast.compiled.fx_graph(point.dtype, point.device), point


def _what(run):
    """What a switch compiles with the graph (the record's key): the batched HMC's fused or
    lockstep steps, against q too (:mod:`pyro_pt.reference.graph`: another step)."""
    steps = kind_of(run.options.explorer).steps
    if not steps:
        return "graph"
    return f"graph + {steps}" + ("" if run.reference is None else " against q")


def record_setup(run):
    """After a ``compile="inductor"`` set-up on rank 0: record its seconds as this graph's
    compilation (:func:`record`), so that a later ``"auto"`` run of the model expects the warm
    cache it left rather than a cold compilation. The set-up's seconds hold the capture and the
    checks too: the record errs long, on the side of not switching."""
    fast = run.fast
    if (run.options.compile != "inductor" or run.comm.rank != 0 or fast is None
            or fast.path != "functional" or fast.compiled.engine != "inductor"
            or not kind_of(run.options.explorer).gradients):
        return
    gm, point = _graph(fast)
    record(gm, point.dtype, point.device, _what(run), run.explorer_info["setup_seconds"])


# ----- what a compilation costs here: recorded, else estimated -----

# A cold switch (see above); a device type not listed is taken as the slowest.
COLD_SECONDS = {"cpu": 15.0, "cuda": 80.0}
SECONDS_PER_NODE = 0.01
# A switch from Inductor's cache over the first (cold) one: 0.13-0.17 measured.
WARM_FRACTION = 0.25
RECORDS = "pyro_pt_compile_seconds.json"


def _key(gm, dtype, device, what):
    text = "\n".join((gm.code, str(dtype), torch.device(device).type, what, torch.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _records_path():
    if "PYRO_PT_COMPILE_RECORDS" in os.environ:
        return os.environ["PYRO_PT_COMPILE_RECORDS"] or None
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
    ``(seconds, how)``: what compiling ``gm`` (and ``what`` with it, e.g. ``"graph + leapfrog
    steps"``) with Inductor is expected to cost here; ``how`` is ``"measured"`` (from the
    switches recorded on this machine) or ``"estimated"`` (a cold one, from the graph's size).
    """
    path = _records_path()
    entry = path and _read(path).get(_key(gm, dtype, device, what))
    if isinstance(entry, dict) and isinstance(entry.get("seconds"), (int, float)):
        seconds = max(float(entry["seconds"]), 0.0)
        # after the first switch Inductor's cache holds the graph: the next one is cheaper
        return (seconds * WARM_FRACTION if entry.get("switches") == 1 else seconds), "measured"
    return estimated_cold_seconds(gm, device), "estimated"


def record(gm, dtype, device, what, seconds):
    """Keep ``seconds`` as the latest cost of compiling ``gm`` (and ``what``) here. Written
    atomically; a failure to write (a read-only cache) only loses the record."""
    path = _records_path()
    if path is None:
        return
    records = _read(path)
    key = _key(gm, dtype, device, what)
    old = records.get(key)
    switches = old.get("switches", 0) if isinstance(old, dict) else 0
    records[key] = {"seconds": round(float(seconds), 3), "switches": int(switches) + 1}
    tmp = None
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            json.dump(records, out)
        os.replace(tmp, path)
    except OSError:  # e.g. $PYRO_PT_COMPILE_RECORDS names a folder: no record, no litter
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
