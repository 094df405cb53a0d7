"""Rounds of a tempered run: per-round statistics, ladder adaptation and the report table.

Warmup runs in rounds of doubling length (4, 8, 16, ... scans, ending before the warmup does;
Syed et al. 2021, Sec. 5). At the end of each round the round's swap statistics give the
pairs' rejection rates, hence the barrier and a stepping-stone log Z on the round's (fixed)
ladder; with adaptation on, the rungs then move to equal barrier increments. The sampling
phase is reported cumulatively at doubling scan counts and once more at the end. Every
number here is the same on every rank, except the seconds, which are the rank's own.
"""

import math
import sys
import time

import torch

from .ladder import adaptation_round_ends, equal_barrier_betas
from .stats import SwapStatistics, cumulative_barrier, stepping_stone

COLUMNS = ("round", "phase", "scans", "barrier", "log_Z", "min_swap_acc", "mean_swap_acc",
           "cold_local_acc", "round_trips", "seconds")
_HEADER = (f"{'round':>5} {'phase':>8} {'scans':>6} {'Λ':>7} {'log Z':>10} {'min acc':>8} "
           f"{'mean acc':>8} {'cold acc':>8} {'trips':>6} {'seconds':>8}")


def _format_row(row):
    def num(value, width, digits):
        return f"{value:>{width}.{digits}f}" if not math.isnan(value) else f"{'-':>{width}}"

    return (f"{row['round']:>5} {row['phase']:>8} {row['scans']:>6} "
            f"{num(row['barrier'], 7, 3)} {num(row['log_Z'], 10, 3)} "
            f"{num(row['min_swap_acc'], 8, 3)} {num(row['mean_swap_acc'], 8, 3)} "
            f"{num(row['cold_local_acc'], 8, 3)} {row['round_trips']:>6} "
            f"{row['seconds']:>8.2f}")


def _progress_bar_active():
    """Whether a visible tqdm bar (Pyro's MCMC progress bar) is on screen."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with Pyro
        return False
    return any(not getattr(bar, "disable", True) for bar in list(getattr(tqdm, "_instances", ())))


def _print_line(line):
    """Print above the progress bar (tqdm.write keeps the bar intact), or not at all."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


class TemperingRounds:
    """
    Bookkeeping of the rounds of one run, and the report rows they produce.

    The kernel calls :meth:`record` after every scan and :meth:`finish` at the end; when a
    warmup round closes, :meth:`record` returns the new inverse temperatures if the ladder is
    adapted.

    :param int warmup_steps: the run's warmup scans.
    :param bool adapt: re-place the ladder at the end of each warmup round.
    :param int num_replicas: K.
    :param comm: the run's communicator (rank 0 owns the cold rung and prints the report).
    :param int swap_interval: scans between swap rounds; rounds are counted in swap rounds.
    """

    def __init__(self, warmup_steps, adapt, num_replicas, comm, swap_interval=1):
        self.warmup_steps = warmup_steps
        self.adapt = adapt
        self.comm = comm
        # Rounds are counted in swap rounds (4, 8, 16, ...), so that every round holds swaps of
        # every pair even when swaps happen only every swap_interval scans.
        ends = adaptation_round_ends(-(-warmup_steps // swap_interval))
        self.round_ends = {e * swap_interval for e in ends if e * swap_interval < warmup_steps}
        self.rows = []
        self.history = []
        self._stats = SwapStatistics(num_replicas - 1)
        self._printing = comm.rank == 0 and _progress_bar_active()
        self._next_sampling_row = 16
        self._finished = False
        self._begin_round(0, 0)

    def _begin_round(self, scan, round_trips):
        self._stats.reset()
        self._ll = []
        self._cold_moves = 0
        self._round_start = (scan, round_trips, time.perf_counter())

    def record(self, scan, betas, ll, attempts, cold_moved, round_trips):
        """
        Account one scan (``scan`` counts from 1). ``attempts`` are the swap round's
        ``(pair, accepted, prob)``; ``cold_moved`` whether rung 0's explorer moved (None on
        ranks without rung 0). Returns new betas when a warmup round ends with adaptation on.
        """
        for pair, accepted, prob in attempts:
            self._stats.record(pair, accepted, prob)
        self._ll.append(list(ll))
        self._cold_moves += bool(cold_moved)
        new_betas = None
        if scan in self.round_ends:
            self._add_row("warmup", scan, betas, round_trips)
            if self.adapt:
                new_betas = self._adapt(scan, betas)
            self._begin_round(scan, round_trips)
        elif scan == self.warmup_steps:
            self._add_row("warmup", scan, betas, round_trips)
            self._begin_round(scan, 0)  # the sampling phase is reported from its start
        elif scan - self.warmup_steps == self._next_sampling_row:
            self._add_row("sampling", scan, betas, round_trips, reset=False)
            self._next_sampling_row *= 2
        return new_betas

    def finish(self, scan, betas, round_trips):
        """The closing row of the sampling phase (once; nothing if it has just been written)."""
        if self._finished:
            return
        self._finished = True
        done = self.rows[-1]["scans"] if self.rows and self.rows[-1]["phase"] == "sampling" else 0
        if scan > self.warmup_steps and scan - self.warmup_steps != done:
            self._add_row("sampling", scan, betas, round_trips, reset=False)

    def _cold_acceptance(self, num_scans):
        # Only rank 0 saw rung 0 move; one scalar per round is all the traffic this costs.
        moves = torch.tensor([float(self._cold_moves)], dtype=torch.float64)
        if self.comm.world_size > 1:
            moves = self.comm.broadcast(moves, src=0, what="broadcast of the cold acceptance")
        return float(moves[0]) / num_scans if num_scans else math.nan

    def _add_row(self, phase, scan, betas, round_trips, reset=True):
        start_scan, start_trips, start_time = self._round_start
        num_scans = scan - start_scan
        acceptance = self._stats.acceptance()
        known = [a for a in acceptance if not math.isnan(a)]
        log_z = math.nan
        if self._ll and len(betas) > 1:
            log_z = stepping_stone(betas, torch.tensor(self._ll, dtype=torch.float64))[0]
        row = {
            "round": len(self.rows) + 1,
            "phase": phase,
            "scans": num_scans,
            "barrier": sum(1.0 - a for a in known) if known else math.nan,
            "log_Z": log_z,
            "min_swap_acc": min(known) if known else math.nan,
            "mean_swap_acc": sum(known) / len(known) if known else math.nan,
            "cold_local_acc": self._cold_acceptance(num_scans),
            "round_trips": round_trips - (start_trips if reset else 0),
            "seconds": time.perf_counter() - start_time,
        }
        self.rows.append(row)
        if self._printing:
            if len(self.rows) == 1:
                _print_line(_HEADER)
            _print_line(_format_row(row))

    def _adapt(self, scan, betas):
        """Equalize the pairs' rejection rates (Syed et al. 2021, Sec. 5.1), same on all ranks."""
        rejections = [1.0 - a for a in self._stats.acceptance()]
        unattempted = any(math.isnan(r) for r in rejections)
        self.history.append({
            "scans": scan,
            "temperatures": [math.inf if b == 0.0 else 1.0 / b for b in betas],
            "rejection_rates": rejections,
            "barrier": math.nan if unattempted else cumulative_barrier(rejections)[-1],
        })
        # A pair never tried says nothing about its barrier: keep the ladder rather than guess.
        return None if unattempted else equal_barrier_betas(betas, rejections)

    def data_frame(self):
        """The report as a pandas DataFrame, one row per round."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=list(COLUMNS))
