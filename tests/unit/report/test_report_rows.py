"""A report metric is one row (flashrl_api.report_metrics.ROWS): the history keeps what the report plots,
the page draws every row's figures in row order, and the synthetic runs log every row's metric."""

from __future__ import annotations

import json
from collections.abc import Iterable

from flashrl_api import history
from flashrl_api.report_metrics import ROWS, LinePlot, ReportMetric, figure_ids
from flashrl_report import PLOT_IDS, build_report
from flashrl_report.data import RunMetrics, parse_lines
from flashrl_report.synthetic import records


def _unkept(rows: Iterable[ReportMetric]) -> list[str]:
    """The metrics some figure reads that the job's history would not keep (so a report of a cluster
    job would draw an empty figure)."""
    out = []
    for row in rows:
        if row.plot is None and not row.figures:
            continue
        names = [row.name, *(row.plot.fallbacks if row.plot else ())]
        for name in names:
            kept = name in history.KEPT_PREFIXES if name.endswith("/") else history.keeps(name)
            if not (row.kept and kept):
                out.append(name)
    return out


def test_every_metric_a_figure_reads_is_kept_by_the_history() -> None:
    assert _unkept(ROWS) == []


def test_the_check_fails_for_a_plot_whose_metric_is_not_kept() -> None:
    bad = ReportMetric("actor/grad_norm", kept=False, plot=LinePlot("grad-norm", "Gradient norm", "norm"))
    assert _unkept([*ROWS, bad]) == ["actor/grad_norm"]
    forgotten = ReportMetric("actor/grad_norm", plot=LinePlot("grad-norm", "Gradient norm", "norm"))
    assert _unkept([forgotten]) == ["actor/grad_norm"]  # kept=True, but not a row of the history's


def test_the_history_keeps_exactly_the_kept_rows() -> None:
    assert {r.name for r in ROWS if r.kept and not r.family} == history.KEPT_NAMES
    assert {r.name for r in ROWS if r.kept and r.family} == set(history.KEPT_PREFIXES)


def test_the_page_is_the_rows_figures_in_row_order_each_once() -> None:
    assert figure_ids() == PLOT_IDS
    assert len(set(PLOT_IDS)) == len(PLOT_IDS)
    plotted = [r.plot.id for r in ROWS if r.plot is not None]
    assert [i for i in PLOT_IDS if i in plotted] == plotted


def test_the_synthetic_runs_log_every_rows_metric() -> None:
    logged: set[str] = set()
    for record in records("blockwise-fp8", 10):
        logged |= set(record["data"])
    for row in ROWS:
        if row.family:
            assert any(n.startswith(row.name) for n in logged), row.name
        else:
            assert row.synthetic is not None, f"{row.name} has no synthetic curve for the demo"
            assert row.name in logged, row.name


def test_every_row_plot_is_drawn_from_the_synthetic_runs() -> None:
    runs = []
    for precision in ("bf16", "blockwise-fp8"):
        run = RunMetrics(label=precision)
        parse_lines(run, [json.dumps(r) for r in records(precision, 30)], "synthetic")
        runs.append(run)
    report = build_report(runs)
    drawn = {p.id for p in report.plots if p.png is not None}
    assert {r.plot.id for r in ROWS if r.plot is not None} <= drawn
