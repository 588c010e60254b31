"""``flashrl report``: a side-by-side comparison of two or more training runs.

The input is verl's per-step metrics, one :class:`RunMetrics` per run, from wherever they were kept
(local JSONL files here; the cluster path reads the same records and hands them in). Everything
after loading is pure: :func:`build_report` computes the summaries and figures and :func:`write_report`
writes ``report.html`` (self-contained) and one PNG per figure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final

import numpy as np

from flashrl_api import report_metrics
from flashrl_report.analysis import (
    VariantSummary,
    choose_baseline,
    paired_baseline,
    run_cost,
    score_key,
    summarize,
)
from flashrl_report.data import MetricsInputError, RunMetrics, load_run, parse_labelled_argument
from flashrl_report.goodput import VariantGoodput, goodput_plot, goodput_section, goodput_summaries
from flashrl_report.html import render_html
from flashrl_report.paired import (
    PairedComparison,
    compare_all,
    difference_plot,
    paired_section,
    problems_plot,
    split_label,
)
from flashrl_report.plots import Plot, color_of, line_plot, speedup_plot, time_breakdown_plot
from flashrl_report.validation import ValidationSamples, load_validation
from flashrl_report.verdict import no_metrics_banner, status_step_text, verdict_lines

#: Every figure of a report, in page order (the browser test checks each is on the page): the rows'
#: (:data:`flashrl_api.report_metrics.ROWS`) line plots and the figures of their own they name.
PLOT_IDS: Final = report_metrics.figure_ids()
REPORT_FILE: Final = "report.html"


@dataclass
class Report:
    """A built report: the page and its figures."""

    html: str
    plots: list[Plot]
    summaries: list[VariantSummary]
    #: What is missing or partial, one sentence each (also on the page).
    notes: list[str] = field(default_factory=list)
    #: Which run the speed-ups are relative to, and how it was chosen.
    baseline_note: str = ""
    #: Each run's goodput: GPU-hours by phase, end-to-end and generation-only speed-ups.
    goodput: list[VariantGoodput] = field(default_factory=list)
    #: Each variant against the baseline, problem by problem (from the validation dumps).
    paired: list[PairedComparison] = field(default_factory=list)
    #: The page's opening: one line per variant, its speed-up and accuracy verdicts with intervals.
    verdicts: list[str] = field(default_factory=list)
    #: Why runs carry no training metrics (``None`` when every run has them); on the page as a banner.
    no_metrics: str | None = None


def build_report(
    runs: Sequence[RunMetrics],
    *,
    title: str = "FlashRL comparison",
    banner: str | None = None,
    baseline: str | None = None,
    validation: Sequence[ValidationSamples] = (),
) -> Report:
    """Summaries, figures and the page for ``runs`` (labels must be unique); ``validation`` holds the
    runs' validation samples (each labelled as its run)."""
    labels = [run.label for run in runs]
    if len(set(labels)) != len(labels):
        raise MetricsInputError(f"run labels must be unique, got {labels}")
    unknown = [s.label for s in validation if s.label not in labels]
    if unknown:
        raise MetricsInputError(
            f"validation samples of {', '.join(unknown)} name no run (give --metrics with the same label)"
        )
    base, base_note = choose_baseline(runs, baseline)
    score = score_key(runs)
    longest = max((run.last_step for run in runs), default=0)
    summaries = [summarize(run, score, paired_baseline(run, base, runs), longest) for run in runs]
    for run, summary in zip(runs, summaries, strict=True):
        summary.status_step = status_step_text(run)
    notes: list[str] = []
    if len(runs) < 2:
        notes.append("only one run was given: there is nothing to compare it with")
    for run, summary in zip(runs, summaries, strict=True):
        notes.extend(f"{run.label}: {text}" for text in [*summary.missing, *run.notes])
    for samples in validation:
        notes.extend(f"{samples.label}: {text}" for text in samples.notes)
    paired = compare_all(validation, base.label if base is not None else None)
    with_samples = {s.label for s in validation}
    paired_missing = (
        [
            f"{', '.join(label for label in labels if label not in with_samples)}: no validation samples "
            "(neither per-problem summaries in its ConfigMap nor --validation LABEL=DIR): not in the paired "
            "comparison"
        ]
        if validation and len(with_samples) < len(labels)
        else []
    )
    by_variant_name = {c.variant: c for c in paired}
    for summary in summaries:
        found = by_variant_name.get(split_label(summary.label)[0])
        if found is not None and found.late is not None:
            # The verdict is the paired one: the curve-of-means rule rests on a few validations.
            summary.late_verdict = f"{found.verdict}: {found.late.text(signed=True)} (paired, per problem)"
            summary.best_verdict = None
    speedups = {s.label: s.speedup for s in summaries if s.speedup is not None}
    colors = {run.label: color_of(runs, run) for run in runs}
    variant_colors = {split_label(label)[0]: color for label, color in colors.items()}
    goodput, target = goodput_summaries(runs, score, base)
    costs = {g.label: g for g in goodput}
    for run, summary in zip(runs, summaries, strict=True):
        if (spent := costs.get(run.label)) is not None:
            reached = spent.reached.last_step if spent.reached is not None else None
            summary.cost = run_cost(run, spent.ledger, spent.hours_to_score, reached)
    own: dict[str, Callable[[], Plot]] = {
        "paired-difference": lambda: difference_plot(paired, variant_colors),
        "per-problem": lambda: problems_plot(paired, variant_colors),
        "generation-speedup": lambda: speedup_plot(runs, base, speedups),
        "time-breakdown": lambda: time_breakdown_plot(runs),
        "goodput-phases": lambda: goodput_plot(goodput),
    }
    plots: list[Plot] = []
    for row in report_metrics.ROWS:
        if row.plot is not None:
            plot = row.plot
            plots.append(_drawn(plot.id, plot.title, partial(_line_plot, runs, row, score), notes))
        for figure in row.figures:
            plots.append(_drawn(figure, figure.replace("-", " ").capitalize(), own.pop(figure), notes))
    assert not own, f"figures no row names: {sorted(own)}"
    assert tuple(p.id for p in plots) == PLOT_IDS
    base_label = base.label if base is not None else None
    verdicts = verdict_lines(runs, summaries, paired, base_label)
    no_metrics = no_metrics_banner(runs)
    html = render_html(
        verdicts=verdicts,
        notice=no_metrics,
        title=title,
        banner=banner,
        sources=[(run.label, run.sources) for run in runs],
        summaries=summaries,
        colors=[color_of(runs, run) for run in runs],
        baseline=base.label if base is not None else None,
        score_key=score,
        baseline_note=base_note,
        notes=notes,
        plots=plots,
        sections=[
            paired_section(paired, validation, base.label if base is not None else None, paired_missing),
            goodput_section(goodput, target, score, base.label if base is not None else None),
        ],
    )
    return Report(html, plots, summaries, notes, base_note, goodput, paired, verdicts, no_metrics)


def _line_plot(runs: Sequence[RunMetrics], row: report_metrics.ReportMetric, score: str | None) -> Plot:
    """A row's line plot: its name, the run's validation score for the ``val-core`` family, or for a
    row with fallbacks the first of its names each run logged."""
    plot = row.plot
    assert plot is not None
    metric: str | Callable[[RunMetrics], str | None] = row.name
    if row.family:
        metric = score or f"{row.name}*"
    elif plot.fallbacks:
        names = (row.name, *plot.fallbacks)

        def metric(run: RunMetrics) -> str | None:
            logged = run.names()
            return next((n for n in names if n in logged), None)

    return line_plot(
        runs,
        plot.id,
        plot.title,
        metric,
        plot.ylabel,
        wall_time=plot.wall_time,
        smooth=plot.smooth,
        hline=plot.hline,
        markers=plot.markers,
        what=plot.what,
    )


def _drawn(plot_id: str, title: str, draw: Callable[[], Plot], notes: list[str]) -> Plot:
    """A figure, or, when its values cannot be drawn (matplotlib cannot place ticks on an axis from
    -1e308 to 1e308, for one), that figure alone marked not available, with a note: the rest of the
    report does not depend on it."""
    try:
        # Overflow inside matplotlib is answered by the note below, not by numpy on the terminal.
        with np.errstate(over="ignore", invalid="ignore"):
            return draw()
    except (ValueError, ArithmeticError) as error:
        why = f"its values could not be drawn ({type(error).__name__}: {error})"
        notes.append(f"figure {plot_id}: not drawn: {why}")
        return Plot(plot_id, title, "", None, why)


def write_report(report: Report, output: str | Path) -> list[Path]:
    """Write ``report.html`` and the figures' PNGs into ``output`` (created); return the files written."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in report.plots:
        if plot.png is not None:
            path = out / f"{plot.id}.png"
            path.write_bytes(plot.png)
            written.append(path)
    page = out / REPORT_FILE
    page.write_text(report.html, encoding="utf-8")
    written.append(page)
    return written


__all__ = [
    "PLOT_IDS",
    "REPORT_FILE",
    "MetricsInputError",
    "Report",
    "RunMetrics",
    "ValidationSamples",
    "build_report",
    "load_run",
    "load_validation",
    "parse_labelled_argument",
    "write_report",
]
