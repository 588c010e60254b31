"""The report's opening: one line per variant that answers both questions (is it faster, does it cost
accuracy), each with its interval, and a banner when runs carry no training metrics.

The summary table holds the same figures in 13 columns; a reader should not have to dig them out. And a
run without training metrics (a played run on a dev cluster, where no verl ran, or a job whose launcher
has not reported yet) must not read as "0 steps" while ``kubectl get`` shows its status at STEP 150/150:
its line and its row show the status's own step, and the banner says why there are no metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from flashrl_report.analysis import VariantSummary
from flashrl_report.data import RunMetrics
from flashrl_report.paired import PairedComparison, split_label

#: The words every page and line about runs without metrics uses (the docs and tests look for them).
NO_METRICS: Final = "no training metrics"


def status_step_text(run: RunMetrics) -> str | None:
    """``150/150``: the job's own ``status.progress`` step and total, as ``kubectl get`` prints them in
    STEP and STEPS (``None`` when the run was not read from a cluster, or its status has no step)."""
    if run.status_step is None:
        return None
    step, total = run.status_step
    return f"{step}/{total}" if total is not None else str(step)


def without_metrics(runs: Sequence[RunMetrics]) -> list[RunMetrics]:
    """The runs that logged no training step (step 0, verl's first validation, is not training)."""
    return [run for run in runs if not run.training_steps()]


def no_metrics_banner(runs: Sequence[RunMetrics]) -> str | None:
    """The banner over a report with runs that carry no training metrics, saying why: runs that ended
    with a step but no metrics were played (a dev cluster or the kwok e2e post only the last step's
    progress; nothing ran verl); the others have not reported metrics yet."""
    missing = without_metrics(runs)
    if not missing:
        return None
    played = [r for r in missing if r.status_phase == "Succeeded" and r.status_step is not None]
    waiting = [r for r in missing if r not in played]
    parts = []
    if played:
        steps = ", ".join(f"{r.label} at step {status_step_text(r)}" for r in played)
        parts.append(
            f"{steps}: the status says the run ended, but its launcher reported no per-step metrics, "
            "as in a played run (make dev-cluster-play, the kwok e2e: no verl ran, only the last step "
            "was posted), so there is nothing to compare"
        )
    if waiting:
        steps = ", ".join(
            r.label + (f" (status at step {status_step_text(r)})" if r.status_step is not None else "")
            for r in waiting
        )
        parts.append(f"{steps}: metrics not yet reported (the launcher reports them from verl's first step)")
    return f"{NO_METRICS.capitalize()} for {len(missing)} of {len(runs)} runs: " + "; ".join(parts) + "."


#: A run's line when no run is the baseline (none labelled bf16, no ``--baseline``).
NO_BASELINE: Final = "no speed-up or accuracy verdict without a baseline (--baseline names one)"


def verdict_lines(
    runs: Sequence[RunMetrics],
    summaries: Sequence[VariantSummary],
    paired: Sequence[PairedComparison],
    baseline: str | None,
) -> list[str]:
    """One line per run: the baseline says it is; every other run gives its generation speed-up over the
    baseline with its interval, and its accuracy verdict with its interval; a run without training
    metrics says so, with its status's step."""
    by_variant = {c.variant: c for c in paired}
    lines = []
    for run, summary in zip(runs, summaries, strict=True):
        label = summary.label
        if not run.training_steps():
            step = status_step_text(run)
            where = f"status at step {step}" if step is not None else "no step reported"
            lines.append(f"{label}: {NO_METRICS} ({where}): no speed-up or accuracy verdict")
            continue
        if label == baseline:
            lines.append(f"{label}: the baseline")
            continue
        if baseline is None:  # nothing to compare with: not a missing score nor missing timings
            lines.append(f"{label}: {NO_BASELINE}")
            continue
        against = baseline or "the baseline"
        s = summary.speedup
        if s is None or s.interval is None:
            speed = "generation speed-up: not measured (no paired per-step generation timings)"
        else:
            speed = f"generation {s.verdict}, {s.interval.text(unit='×')}"
            change = s.change()
            if change and "every quarter" not in change:
                speed += f"; {change}"
        found = by_variant.get(split_label(label)[0])
        if found is not None and found.late is not None:
            accuracy = f"accuracy {found.verdict}, {found.late.text(signed=True)} (paired, per problem)"
        elif summary.late_verdict:
            accuracy = f"accuracy {summary.late_verdict}"
        else:
            accuracy = "accuracy: no verdict (no validation score)"
        lines.append(f"{label} vs {against}: {speed}; {accuracy}")
    return lines


__all__ = ["NO_METRICS", "no_metrics_banner", "status_step_text", "verdict_lines", "without_metrics"]
