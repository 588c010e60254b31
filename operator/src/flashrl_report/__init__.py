"""``flashrl report``: a side-by-side comparison of two or more training runs.

The input is verl's per-step metrics, one :class:`RunMetrics` per run, from wherever they were kept
(local JSONL files here; the cluster path reads the same records and hands them in). Everything
after loading is pure: :func:`build_report` computes the summaries and figures and :func:`write_report`
writes ``report.html`` (self-contained) and one PNG per figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from flashrl_api import verl_metrics as vm
from flashrl_report.analysis import (
    VariantSummary,
    choose_baseline,
    mismatch_key,
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

#: Every figure of a report, in page order (the browser test checks each is on the page).
PLOT_IDS: Final = (
    "validation-score",
    "paired-difference",
    "per-problem",
    "training-score",
    "entropy",
    "response-length",
    "response-clip-ratio",
    "throughput",
    "generation-speedup",
    "time-breakdown",
    "goodput-phases",
    "mismatch-kl",
    "is-ess",
    "tis-clip-fraction",
    "probs-diff",
)
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
    plots = [
        line_plot(
            runs,
            "validation-score",
            "Validation score",
            score or "val-core/*",
            "score",
            wall_time=True,
            smooth=False,
            markers=True,
        ),
        difference_plot(paired, variant_colors),
        problems_plot(paired, variant_colors),
        line_plot(runs, "training-score", "Training score (reward)", vm.CRITIC_SCORE_MEAN, "mean score"),
        line_plot(runs, "entropy", "Policy entropy", vm.ENTROPY, "entropy (nats / token)"),
        line_plot(runs, "response-length", "Mean response length", vm.RESPONSE_LENGTH_MEAN, "tokens"),
        line_plot(
            runs,
            "response-clip-ratio",
            "Responses cut at the maximum length",
            vm.RESPONSE_LENGTH_CLIP_RATIO,
            "fraction of responses",
        ),
        line_plot(runs, "throughput", "Throughput", vm.THROUGHPUT, "tokens / s / GPU", wall_time=True),
        speedup_plot(runs, base, speedups),
        time_breakdown_plot(runs),
        goodput_plot(goodput),
        line_plot(
            runs,
            "mismatch-kl",
            "Rollout/trainer mismatch KL",
            mismatch_key,
            "KL(rollout ‖ trainer)",
            what="rollout_corr/kl (or rollout_corr/k3_kl)",
        ),
        line_plot(
            runs,
            "is-ess",
            "Importance-sampling effective sample size",
            vm.IS_ESS,
            "ESS fraction",
            hline=(0.3, "verl's health threshold 0.3"),
        ),
        line_plot(
            runs,
            "tis-clip-fraction",
            "TIS clipped fraction",
            vm.IS_CLIP_FRACTION,
            "fraction of tokens at the cap",
        ),
        line_plot(
            runs,
            "probs-diff",
            "Rollout vs trainer token-probability difference",
            vm.PROBS_DIFF_MEAN,
            "mean |p_rollout − p_train|",
        ),
    ]
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
