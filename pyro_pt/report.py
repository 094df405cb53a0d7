"""The report of a tempered run: one row per round (:mod:`pyro_pt.rounds`), printed above the
progress bar, and the DataFrame; and :class:`Reporting`, what the kernel says about its run.

A warmup row holds its round's swap statistics, hence the barrier and a stepping-stone log Z on
the round's fixed ladder; sampling rows are cumulative, the closing row's ``warnings`` the
review's (:mod:`pyro_pt.health`). A sampling row's ``mcse_sd`` is the largest regenerative Monte
Carlo error of a cold-chain mean over its posterior sd (:mod:`pyro_pt.regeneration`), which the
review warns above :data:`~pyro_pt.health.MCSE_TOLERANCE`. Every number is the same on every
rank but the seconds.
"""

import math
import sys
import time
import warnings

import torch

from .explorers import kind_of
from .health import UNRELIABLE, TemperingWarning, review, warning_text, worst_mean
from .barrier import global_barrier
from .recorders import stepping_stone
from .regeneration import regenerative_error
from .shortfall import too_few_rungs

# The printed table: the DataFrame's columns and (decimals) formats; the warnings, text, are
# printed as lines under the closing row.
_PRINTED = (("round", None), ("phase", None), ("scans", None), ("barrier", 3), ("log_Z", 3),
            ("min_swap_acc", 3), ("mean_swap_acc", 3), ("cold_local_acc", 3),
            ("round_trips", None), ("restarts", None), ("mcse_sd", 3), ("seconds", 2))
COLUMNS = tuple(name for name, _ in _PRINTED) + ("warnings",)
_WIDTHS = {name: max(len(name), 10 if name == "log_Z" else 8) for name, _ in _PRINTED}
_HEADER = " ".join(f"{name:>{_WIDTHS[name]}}" for name, _ in _PRINTED)


def _format_row(row):
    cells = []
    for name, digits in _PRINTED:
        value, width = row[name], _WIDTHS[name]
        if value is None or digits is not None and math.isnan(value):  # unknown, or not counted
            cells.append(f"{'-':>{width}}")
        else:
            cells.append(f"{value:>{width}}" if digits is None else f"{value:>{width}.{digits}f}")
    return " ".join(cells)


def _progress_bar_active():
    """Whether a visible tqdm bar (Pyro's MCMC progress bar; tqdm comes with Pyro) is on screen."""
    from tqdm import tqdm

    return any(not getattr(bar, "disable", True) for bar in list(getattr(tqdm, "_instances", ())))


def _print_line(line):
    """Print above the progress bar (tqdm.write keeps the bar intact), or not at all."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


# A set-up at least this long (seconds) is shown on the progress bar: a cold compile.
SHOWN_SETUP_SECONDS = 5.0


class Report:
    """
    The rows of one run's report. The round schedule adds a row at each round's end and begins
    the next round; the kernel counts the cold rung's moves after every scan
    (:meth:`count_cold`) and calls :meth:`finish` at the end. Rank 0 of ``comm`` owns the cold
    rung and prints; ``max_replicas`` is a growing ladder's cap (None: it does not grow).
    """

    def __init__(self, warmup_steps, comm, max_replicas=None):
        self.warmup_steps = warmup_steps
        self.comm = comm
        self.rows = []
        self._printing = comm.rank == 0 and _progress_bar_active()
        self._finished = False
        self.max_replicas = max_replicas
        self.begin_round(0)

    def begin_round(self, scan, index=None):
        """A round from ``scan`` on; its trips and restarts count from the index process's."""
        self._cold_moves = 0
        counts = (index.round_trips, index.restarts) if index is not None else (0, 0)
        self._round_start = (scan, *counts, time.perf_counter())

    def count_cold(self, cold_moved):
        """Whether rung 0's explorer moved this scan (None on ranks without rung 0)."""
        self._cold_moves += bool(cold_moved)

    def finish(self, ladder, recorder, problems=()):
        """The closing row of the sampling phase (once; nothing if it has just been written),
        the run's ``problems`` (:func:`pyro_pt.health.review`) in its ``warnings`` column, one
        per line, printed under it, and one :class:`~pyro_pt.health.TemperingWarning`."""
        if self._finished:
            return
        self._finished = True
        scan = recorder.scans
        done = self.rows[-1]["scans"] if self.rows and self.rows[-1]["phase"] == "sampling" else 0
        if scan > self.warmup_steps and scan - self.warmup_steps != done:
            self.add_row("sampling", scan, ladder.betas, recorder)
        if not problems or not self.rows:
            return
        self.rows[-1]["warnings"] = "\n".join(problems)
        if self._printing:
            for problem in problems:
                _print_line(f"warning: {problem}")
        if self.comm.rank == 0:  # the numbers are the same on every rank: one warning per run
            warnings.warn(warning_text(problems), TemperingWarning, stacklevel=2)

    def check_rungs(self, legs):
        """At the end of warmup: one :class:`~pyro_pt.health.TemperingWarning` when the barrier
        of warmup's last scans calls for more rungs (:func:`~pyro_pt.shortfall.too_few_rungs`)."""
        row = self.rows[-1]
        problem = too_few_rungs(row["barrier"], legs, f"over warmup's last {row['scans']} scans",
                                self.max_replicas)
        if problem is not None and self.comm.rank == 0:
            warnings.warn(f"ParallelTempering, at the end of warmup: {problem}", TemperingWarning,
                          stacklevel=2)

    def _cold_acceptance(self, num_scans):
        # Only rank 0 saw rung 0 move; one scalar per round is all the traffic this costs.
        moves = torch.tensor([float(self._cold_moves)], dtype=torch.float64)
        if self.comm.world_size > 1:
            moves = self.comm.broadcast(moves, src=0, what="broadcast of the cold acceptance")
        return float(moves[0]) / num_scans if num_scans else math.nan

    def add_row(self, phase, scan, betas, recorder, pairs=None):
        """The row of the round that ends at ``scan`` (``phase``: "warmup" or "sampling")."""
        start_scan, start_trips, start_restarts, start_time = self._round_start
        restarts = recorder.index.restarts
        num_scans = scan - start_scan
        acceptance = recorder.round.acceptance()
        known = [a for a in acceptance if not math.isnan(a)]
        log_z = math.nan
        legs = recorder.legs  # log Z and the barrier: of the first leg (the reference's)
        if recorder.round_ll and len(betas) > 1:
            ll = torch.tensor(recorder.round_ll, dtype=torch.float64)
            log_z = stepping_stone(*legs.pick(0, betas, columns=ll))[0]
        pairs = pairs or recorder.round_pair_barriers(betas)
        row = {
            "round": len(self.rows) + 1,
            "phase": phase,
            "scans": num_scans,
            "barrier": global_barrier(legs.pick(0, betas, pairs)[1]) if known else math.nan,
            "log_Z": log_z,
            "min_swap_acc": min(known) if known else math.nan,
            "mean_swap_acc": sum(known) / len(known) if known else math.nan,
            "cold_local_acc": self._cold_acceptance(num_scans),
            "round_trips": recorder.index.round_trips - start_trips,
            "restarts": None if restarts is None else restarts - (start_restarts or 0),
            "mcse_sd": _worst_ratio(recorder) if phase == "sampling" else math.nan,
            "seconds": time.perf_counter() - start_time,
            "warnings": "",
        }
        self.rows.append(row)
        if self._printing:
            if len(self.rows) == 1:
                _print_line(_HEADER)
            _print_line(_format_row(row))

    def data_frame(self):
        """The report as a pandas DataFrame, one row per round."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(COLUMNS))


def _worst_ratio(recorder):
    """The largest Monte Carlo error of a cold-chain mean over its posterior sd, so far in the
    sampling phase (:mod:`pyro_pt.regeneration`; NaN without an exact hot end)."""
    if recorder.index.restarts is None:
        return math.nan
    _, sd, errors = recorder.tours.summary()
    worst = worst_mean({"mcse": errors, "posterior_sd": sd})
    return math.nan if worst is None else worst[0]


class Reporting:
    """The kernel's report, adaptation history, progress-bar fields and :meth:`diagnostics`
    (reviewed by :mod:`pyro_pt.health`), read from its :attr:`run` (:mod:`pyro_pt.run`)."""

    @property
    def adaptation_history(self):
        """Per adaptation round: its scans, the ladder it ran and the rejection rates seen."""
        return list(self.run.ladder.history) if self.run else []

    @property
    def report(self):
        """The per-round report as a pandas DataFrame (:data:`pyro_pt.report.COLUMNS`); warmup
        rows cover one round each, sampling rows are cumulative."""
        if not self.run:
            raise RuntimeError("report is available after MCMC.run has set the kernel up")
        return self.run.report.data_frame()

    def cleanup(self):
        run = self.run
        if run:
            problems = self.diagnostics()["warnings"] if run.recorder.sampling else []
            run.report.finish(run.ladder, run.recorder, problems)

    def logging(self):
        # The cold explorer lives on rank 0; other ranks log the (shared) swap statistics.
        run = self.run
        cold = run.rungs.explorers[0] if run.rungs.start == 0 else None
        out = dict(cold.logging() or {}) if cold is not None else {}
        out["swap acc."] = f"{run.recorder.phase.mean_acceptance():.3f}"
        out["round trips"] = run.recorder.index.round_trips
        if run.recorder.index.restarts is not None:
            out["restarts"] = run.recorder.index.restarts
        seconds = run.explorer_info.get("setup_seconds", 0.0)
        if seconds >= SHOWN_SETUP_SECONDS:  # a long compile, said where the run's progress is
            out["set-up"] = f"{seconds:.0f} s"
        switch = run.autocompile
        if switch and switch.compile_seconds is not None:  # compile="auto" switched
            out["compile"] = f"{switch.engine}, {switch.compile_seconds:.0f} s"
        return out

    def mcse(self, fn, samples=None):
        """
        The Monte Carlo standard error of the mean over the cold chain's draws of ``fn``, from
        the tours of the run's lineages (:mod:`pyro_pt.regeneration`): valid where the cold
        chain cannot cross between modes on its own, e.g. for a mode indicator's mean (the
        mode's share) or a prediction. Needs an exact hot end (``max_temperature=inf``, the
        default): without one no such error exists, and it warns and returns NaN. With fewer
        than :data:`~pyro_pt.regeneration.MIN_TOURS` tours it is ``inf``.

        Of the kernel's last run, one chain (of several, the last:
        ``{k: v[-1] for k, v in mcmc.get_samples(group_by_chain=True).items()}``); the means of
        the latent sites themselves are ``diagnostics()["mcse"]``, per chain.

        :param fn: a function of the draws ``{site: tensor[num_draws, ...]}`` (as
            ``mcmc.get_samples()`` gives them) returning a tensor ``[num_draws, ...]``: one
            value per draw, vectorized over the draws (a per-draw function ``f`` can be given
            as ``lambda s: torch.stack([f({k: v[n] for k, v in s.items()}) for n in
            range(len(next(iter(s.values()))))])``); or the values themselves, a tensor
            ``[num_draws, ...]``, with ``samples`` left out.
        :param dict samples: ``mcmc.get_samples()`` of the run (the kernel keeps no draws).
        :returns: a float64 tensor of the shape of one draw's value.
        """
        if not self.run or not self.run.recorder.sampling:
            raise RuntimeError("mcse is available after MCMC.run has drawn samples with this "
                               "kernel")
        if callable(fn):
            if samples is None:
                raise ValueError("mcse(fn) needs the draws: mcse(fn, samples=mcmc.get_samples())")
            values = fn(samples)
        elif samples is None:
            values = fn
        else:
            raise TypeError("mcse takes a function of the draws with samples=, or the values "
                            f"[num_draws, ...] alone; got {type(fn).__name__} with samples")
        if not torch.is_tensor(values):
            values = torch.as_tensor(values)
        tours = self.run.recorder.tours.tours
        recorded = len(tours)
        resumed = recorded - self.run.draws_before  # the draws of this MCMC.run, if resumed
        if values.dim() == 0 or values.shape[0] not in (recorded, resumed):
            raise ValueError(
                f"mcse: fn's values have shape {tuple(values.shape)}, expected one value per "
                f"draw of the sampling phase, [num_draws={recorded}, ...]; pass "
                "samples=mcmc.get_samples() of this kernel's last run (not grouped by chain)")
        if values.shape[0] != recorded:  # a resumed run's MCMC holds only the draws since
            tours = tours[self.run.draws_before:]
        if self.run.recorder.index.restarts is None:
            warnings.warn("mcse: this run has no exact hot end (max_temperature is finite), so "
                          "its cold chain has no regenerations and no Monte Carlo error that "
                          "holds across modes can be given; run with max_temperature=inf",
                          TemperingWarning, stacklevel=2)
            return torch.full(values.shape[1:], math.nan, dtype=torch.float64)
        return regenerative_error(values.detach().cpu(), tours)

    def diagnostics(self):
        run = self.run
        interval, scans, betas = run.options.swap_interval, run.scans, run.betas
        num_rounds = max(0, scans // interval - run.warmup_steps // interval)
        rungs = run.rungs.summary(scans, run.ladder.temperatures)
        out = run.recorder.summary(betas, num_rounds, rungs)
        # The cold chain's means and their Monte Carlo errors over the lineages' tours (None
        # without an exact hot end: no tours, pyro_pt.regeneration).
        tours = run.recorder.tours
        _, out["posterior_sd"], errors = tours.summary()
        regenerates = out["restarts"] is not None
        out["mcse"] = errors if regenerates else None
        out["mcse_tours"] = len(tours.sums) if regenerates else None
        # Per chain in MCMC.diagnostics(), where the kernel object keeps only the last chain's.
        out["adaptation_history"] = self.adaptation_history
        legs = run.recorder.legs
        if run.reference is not None and betas[legs.hots[0]] == 0.0:
            # the stepping stones run from q (normalized) to the posterior: still log p(y)
            out["log_Z_meaning"] = ("log evidence log p(y) (the hottest rung is the reference "
                                    f"q, a normalized {run.reference.kind} Gaussian)")
        # The review (pyro_pt.health): warnings, and whether log Z is to be trusted.
        out["warnings"], out["log_Z_error"], unreliable = review(
            out, betas, num_rounds, max(0, scans - run.warmup_steps),
            kind_of(run.options.explorer).on_divergence,
            run.reference and run.reference.describe(), legs,
            run.growth and run.growth.max_replicas or None)
        if unreliable is not None:
            out["log_Z_meaning"] += UNRELIABLE + unreliable
        unfitted = run.refitting and run.refitting.problem()
        if unfitted:
            out["warnings"].append(unfitted)
        return out
