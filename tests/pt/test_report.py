"""The per-round report: its schedule, its numbers against independent computations, its display."""

import math
import re

import pytest
import torch

import pyro
from pyro.infer import MCMC

from pyro_pt import ParallelTempering
from pyro_pt import report as report_module
from pyro_pt.recorders import stepping_stone
from pyro_pt.regeneration import regenerative_error
from pyro_pt.report import COLUMNS, Column

from .models import linear_data, linear_model


def run(warmup=40, samples=100, progress=False, adapt=True):
    pyro.set_rng_seed(3)
    kernel = ParallelTempering(linear_model, num_replicas=4, max_temperature=30.0,
                               explorer="rwmh", adapt_temperatures=adapt)
    ll_per_scan = []
    mcmc = MCMC(kernel, samples, warmup, disable_progbar=not progress,
                hook_fn=lambda k, params, stage, i: ll_per_scan.append(list(k.run.ll)))
    mcmc.run(*linear_data())
    return kernel, mcmc, torch.tensor(ll_per_scan, dtype=torch.float64)


def test_every_column_is_one_object_with_a_heading_and_a_value_in_every_row():
    kernel, _, _ = run(warmup=20, samples=20)
    headings = [c.heading for c in COLUMNS]
    assert all(isinstance(c, Column) for c in COLUMNS)
    assert all(isinstance(h, str) and h for h in headings) and len(set(headings)) == len(headings)
    # The DataFrame's columns are the list's, in its order; every row has every column's value.
    assert list(kernel.report.columns) == headings
    rows = kernel.run.report.rows
    assert rows and all(list(row) == headings for row in rows)
    for column in COLUMNS:
        if column.printed:  # a value prints within the column's width, right-aligned
            for row in rows:
                assert len(column.cell(row[column.heading])) == column.width >= len(column.heading)
        else:
            assert all(isinstance(row[column.heading], str) for row in rows)


def test_report_rows_follow_the_rounds_and_match_the_diagnostics():
    kernel, mcmc, ll = run()
    report = kernel.report
    # Warmup rounds end after 4, 12, 28 scans, the last warmup row closes the warmup at 40;
    # sampling rows are cumulative at 16, 32, 64 sampling scans and at the end.
    assert list(report.phase) == ["warmup"] * 4 + ["sampling"] * 4
    assert list(report.scans) == [4, 8, 16, 12, 16, 32, 64, 100]
    assert list(report["round"]) == list(range(1, 9))

    # The closing row is the sampling phase as diagnostics() sees it.
    diag = mcmc.diagnostics()
    final = report.iloc[-1]
    acceptance = diag["swap_acceptance"]["chain 0"]
    assert final.barrier == pytest.approx(diag["barrier"]["chain 0"], rel=1e-12)
    assert final.log_Z == pytest.approx(diag["log_Z"]["chain 0"], rel=1e-12)
    assert final.mean_swap_acc == pytest.approx(sum(acceptance) / len(acceptance), rel=1e-12)
    assert final.min_swap_acc == pytest.approx(min(acceptance), rel=1e-12)
    assert final.round_trips == diag["round_trips"]["chain 0"]
    # a finite hot end: restarts are not counted
    assert diag["restarts"]["chain 0"] is None and report.restarts.isna().all()
    assert diag["mcse"]["chain 0"] is None and report.mcse_sd.isna().all()
    # "Moved" counted by the kernel equals the random walk's own acceptance count.
    assert final.cold_local_acc == pytest.approx(diag["acceptance rate"]["chain 0"], rel=1e-12)

    # Warmup rows: the barrier the adaptation used, and the stepping stone of the round's
    # own scans on the ladder that round ran.
    history = kernel.adaptation_history
    assert [h["scans"] for h in history] == [4, 12, 28]
    starts = [0, 4, 12]
    for row, h, start in zip(report.itertuples(), history, starts):
        assert row.barrier == pytest.approx(h["barrier"], rel=1e-12)
        betas = [0.0 if math.isinf(t) else 1.0 / t for t in h["temperatures"]]
        expected = stepping_stone(betas, ll[start: h["scans"]])[0]
        assert row.log_Z == pytest.approx(expected, rel=1e-12)
    # The sampling rows' log Z uses the sampling draws on the final ladder.
    row = report.iloc[5]  # 32 sampling scans
    assert row.log_Z == pytest.approx(stepping_stone(kernel.betas, ll[40:72])[0], rel=1e-12)


def test_restarts_per_round_follow_the_lineages():
    """With the prior rung, each row counts the restarts of its own round (warmup) or of the
    sampling phase so far: a lineage that sat at the hot end and then reached the cold rung,
    counted here again from the lineages' positions after every scan."""
    pyro.set_rng_seed(5)
    kernel = ParallelTempering(linear_model, num_replicas=3, max_temperature=math.inf,
                               explorer="rwmh")
    positions = []
    mcmc = MCMC(kernel, 60, 40, disable_progbar=True,
                hook_fn=lambda k, params, stage, i: positions.append(
                    list(k.run.recorder.index.lineage)))
    mcmc.run(*linear_data())
    fresh, restarts = {2}, []  # lineage 2 starts at the hot end, drawn from the prior
    visits, tours = [0, 0, 0], []  # each lineage's visits to the hot end; rung 0's tour
    for lineage in positions:
        fresh.add(lineage[2])
        restarts.append(int(lineage[0] in fresh))
        fresh.discard(lineage[0])
        visits[lineage[2]] += 1
        tours.append((lineage[0], visits[lineage[0]]))
    report = kernel.report
    # rounds end after 4, 12, 28 scans, the warmup at 40; sampling rows are cumulative
    expected = [sum(restarts[a:b]) for a, b in ((0, 4), (4, 12), (12, 28), (28, 40))]
    expected += [sum(restarts[40:40 + n]) for n in (16, 32, 60)]
    assert list(report.restarts) == expected
    assert mcmc.diagnostics()["restarts"]["chain 0"] == expected[-1] > 0
    # The sampling phase's draws, each credited to the tour rung 0's lineage is on (counted
    # here again from the positions), give the cold chain's Monte Carlo errors.
    tours = tours[40:]
    w = mcmc.get_samples()["w"]
    diagnostics = kernel.diagnostics()
    assert diagnostics["mcse_tours"] == len(set(tours))
    assert torch.allclose(diagnostics["mcse"]["w"], regenerative_error(w, tours))
    ratio = regenerative_error(w, tours) / w.double().std(0)
    assert report.mcse_sd.iloc[-1] == pytest.approx(float(ratio.max()), rel=1e-9)
    assert report.mcse_sd.iloc[:4].isna().all()  # warmup rows state none


def test_fixed_ladder_still_reports_its_rounds():
    kernel, _, _ = run(adapt=False)
    assert kernel.adaptation_history == []
    assert list(kernel.report.scans) == [4, 8, 16, 12, 16, 32, 64, 100]
    assert kernel.temperatures == pytest.approx([30.0 ** (k / 3) for k in range(4)])


def test_report_prints_whole_lines_above_the_progress_bar(monkeypatch, capsys):
    # Pyro hides its bar when CI or PYTEST_XDIST_WORKER is set
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    kernel, _, _ = run(warmup=20, samples=20, progress=True)
    err = capsys.readouterr().err
    lines = [line.strip() for line in re.split(r"[\r\n]", err)]
    assert sum(line.startswith("round") and "log_Z" in line for line in lines) == 1
    # The printed names are the DataFrame's (its text column, warnings, prints as lines).
    (header,) = [line for line in lines if line.startswith("round") and "log_Z" in line]
    assert header.split() == list(kernel.report.columns)[:-1]
    problems = kernel.report.warnings.iloc[-1].split("\n")
    assert problems != [""] and all(f"warning: {p}" in lines for p in problems)
    lines = [line for line in re.split(r"[\r\n]", err)]  # unstripped: the columns' widths
    rows = [line for line in lines if re.match(r"^ *\d+ +(warmup|sampling) ", line)]
    assert len(rows) == len(kernel.report)
    printed = [c for c in COLUMNS if c.printed]
    for line, row in zip(rows, kernel.run.report.rows):
        # each printed column's cell of the row's value, in the list's order and widths
        assert line == " ".join(c.cell(row[c.heading]) for c in printed)
        fields = dict(zip([c.heading for c in printed], line.split()))
        assert int(fields["round"]) == row["round"] and int(fields["scans"]) == row["scans"]
        assert fields["restarts"] == "-"  # restarts: not counted on a finite hot end
        assert fields["mcse_sd"] == "-"  # nor regenerations, nor the errors they give


def test_no_report_lines_without_a_progress_bar(capsys):
    run(warmup=20, samples=20, progress=False)
    assert "log_Z" not in capsys.readouterr().err


def test_report_before_run_is_an_error():
    with pytest.raises(RuntimeError, match="after MCMC.run"):
        ParallelTempering(linear_model).report


def test_rounds_count_swap_rounds_when_swaps_are_sparse():
    pyro.set_rng_seed(0)
    kernel = ParallelTempering(linear_model, num_replicas=4, max_temperature=30.0,
                               explorer="rwmh", swap_interval=3)
    MCMC(kernel, 20, 40, disable_progbar=True).run(*linear_data())
    # 13 swap rounds in 40 warmup scans: rounds of 4 and 8 swap rounds end at scans 12 and 36.
    history = kernel.adaptation_history
    assert [h["scans"] for h in history] == [12, 36]
    for h in history:  # every pair was tried in every round
        assert not any(math.isnan(r) for r in h["rejection_rates"])


def test_a_round_with_an_untried_pair_keeps_the_ladder():
    from types import SimpleNamespace

    from pyro_pt.comm import LocalComm
    from pyro_pt.ladder import Ladder, temperatures_of
    from pyro_pt.recorders import TemperingRecorder
    from pyro_pt.report import Report
    from pyro_pt.rounds import LadderAdaptation, ReportRow, RoundSchedule

    betas = [1.0, 0.5, 0.1]
    ladder = Ladder(temperatures_of(betas))
    run = SimpleNamespace(ladder=ladder, recorder=TemperingRecorder(3, warmup_steps=20),
                          report=Report(warmup_steps=20, comm=LocalComm()), growth=None,
                          rungs=SimpleNamespace(rungs=[], explorers=[]), comm=LocalComm(), joining=None,
                          scans=0)
    run.together = [run]  # one ladder
    run.report.begin_round(run)
    schedule = RoundSchedule(20, 1, [ReportRow(), LadderAdaptation()])

    adapted = []  # what each call of the ladder's adaptation returned
    adapt = ladder.adapt
    ladder.adapt = lambda *a, **k: adapted.append(adapt(*a, **k)) or adapted[-1]

    def scan(attempts):
        """One scan; what the ladder's adaptation returned where the scan ended a round (its
        new betas, or None where it stays), else None."""
        calls = len(adapted)
        run.recorder.record_swaps(attempts)
        run.recorder.record_scan([0.0] * 3, [math.nan] * 2)
        run.scans = run.recorder.scans
        schedule.after_scan(run)
        return adapted[-1] if len(adapted) > calls else None

    for _ in range(1, 4):
        assert scan([(0, True, 0.9)]) is None
    # Scan 4 ends the first round; pair 1 was never attempted: no re-placement.
    assert scan([(0, False, 0.2)]) is None
    assert math.isnan(ladder.history[0]["rejection_rates"][1])
    # With both pairs tried, the next round does move the rungs.
    for _ in range(5, 12):
        scan([(0, True, 0.9), (1, False, 0.1)])
    new = scan([(0, True, 0.9), (1, False, 0.1)])
    assert new is not None and new[0] == 1.0 and new[-1] == 0.1 and new[1] != 0.5


class AcceptedSwaps(Column):
    """A column a contributor adds: the swaps accepted in each row's scans (since the previous
    row, in sampling too), observed from each scan's swap outcomes."""

    heading = "swaps"
    cumulative = False

    def begin(self, run):
        return 0

    def observe(self, kept, run, scan):
        return kept + sum(outcome == 1.0 for outcome in scan.swaps)

    def value(self, run, end, kept):
        return kept


def test_a_new_column_is_one_object(monkeypatch):
    # Added to the list alone: no kernel, rung or explorer code knows of it.
    monkeypatch.setattr(report_module, "COLUMNS", COLUMNS + (AcceptedSwaps(),))
    pyro.set_rng_seed(3)
    kernel = ParallelTempering(linear_model, num_replicas=4, max_temperature=30.0,
                               explorer="rwmh")
    lineages = [list(range(4))]  # which lineage sits at each rung, before and after each scan
    MCMC(kernel, 100, 40, disable_progbar=True,
         hook_fn=lambda k, params, stage, i: lineages.append(list(k.run.recorder.index.lineage))
         ).run(*linear_data())
    report = kernel.report
    assert list(report.columns) == [c.heading for c in COLUMNS] + ["swaps"]
    # Counted again from the lineages: the even-odd pairs of a swap round are disjoint, so an
    # accepted swap moves exactly two lineages.
    per_scan = [sum(a != b for a, b in zip(before, after)) // 2
                for before, after in zip(lineages, lineages[1:])]
    ends = [0] + list(_row_ends(report))
    expected = [sum(per_scan[a:b]) for a, b in zip(ends, ends[1:])]
    assert list(report.swaps) == expected and sum(expected) > 0


def _row_ends(report):
    """The scan at which each row ends: warmup rows cover a round each, sampling rows are
    cumulative from the warmup's end."""
    warmup = 0
    for phase, scans in zip(report.phase, report.scans):
        if phase == "warmup":
            warmup += scans
            yield warmup
        else:
            yield warmup + scans
