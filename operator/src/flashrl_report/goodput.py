"""The report's goodput answer: where each variant's GPU-hours went, and what FP8 buys end to end.

Per variant: the GPU-hours held, the productive fraction, the GPU-hours to reach a validation score
(the highest score every variant reached), and the speed-up over the baseline per training step, both
end to end (every held GPU-second: pods starting, start-up, weight sync, validation, checkpoints,
restarts, teardown) and in generation alone, with the phase that makes the difference between them.

A run read from the cluster brings its job's ``status.goodput`` (the whole ledger); a metrics file
brings only verl's steps, so its ledger is the steps' own ``timing_s/*`` (no start-up or restarts),
and the report says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Final

from flashrl_api import verl_metrics as vm
from flashrl_api.goodput import Comparison, GoodputPhase, Ledger, compare, step_ledger
from flashrl_report.analysis import Stat, best_stretch, paired_baseline, stat
from flashrl_report.data import RunMetrics
from flashrl_report.plots import PHASE_COLORS, Plot, png_bytes, stacked_bars

PLOT_ID: Final = "goodput-phases"


@dataclass(frozen=True)
class VariantGoodput:
    """One run's goodput figures."""

    label: str
    ledger: Ledger
    #: Training steps the run completed (net of redone ones).
    steps: int
    #: True when the ledger is the job's status.goodput; False when built from verl's steps alone.
    whole: bool
    #: GPU-hours to reach the common score, prorated by training time (None: never reached or no score).
    hours_to_score: float | None = None
    comparison: Comparison | None = None
    #: The stretch of validations that reached the common score (its steps, mean, spread and n).
    reached: Stat | None = None

    @property
    def held_hours(self) -> float:
        """GPU-hours held."""
        return self.ledger.held_gpu_seconds / 3600

    @property
    def after_end_hours(self) -> float:
        """GPU-hours held after the run's Ray job ended, until its GPU workers were gone."""
        return self.ledger.gpu_seconds[GoodputPhase.HELD_AFTER_END] / 3600


def run_ledger(run: RunMetrics) -> tuple[Ledger, int, bool] | None:
    """The run's ledger, its completed steps, and whether the ledger is the whole job's."""
    steps = run.training_steps()
    timed = [run.steps[s] for s in steps if vm.TIMING_STEP in run.steps[s]]
    # A job's ledger without any step in it (a launcher that did not report its phases) would hide the
    # steps the history holds: the steps' own timings say more then.
    if run.goodput is not None and (run.goodput.training_gpu_seconds > 0 or not timed):
        return run.goodput, run.last_step, True
    if not timed:
        return None
    return step_ledger(timed, gpus=run.gpus or 1), len(timed), False


def common_score(runs: Sequence[RunMetrics], key: str | None) -> float | None:
    """The highest validation score every run reached by the best-stretch rule: the lowest of their
    best stretches (:func:`best_stretch`, a quarter of the validations in a row). None when a run has
    no validation, or only stretches of one validation (a spike is not a score reached)."""
    if key is None:
        return None
    bests = []
    for run in runs:
        steps, values = run.series(key)
        best = best_stretch(steps, values)
        if best is None or best.n < 2:
            return None
        bests.append(best.mean)
    return min(bests) if bests else None


def first_stretch(run: RunMetrics, key: str, target: float) -> Stat | None:
    """The first stretch of validations in a row (as long as the run's best stretch) whose mean reaches
    ``target``: the score is reached at its last step, never at a single lucky validation."""
    steps, values = run.series(key)
    best = best_stretch(steps, values)
    if best is None:
        return None
    q = best.n
    for start in range(len(values) - q + 1):
        window = stat(steps[start : start + q], values[start : start + q])
        if window is not None and window.mean >= target:
            return window
    return None


def _hours_to(run: RunMetrics, held_hours: float, reached: int) -> float | None:
    """Held GPU-hours × the share of the run's step time spent up to step ``reached``."""
    if reached == 0:
        return 0.0
    times = {
        s: run.steps[s].get(vm.TIMING_STEP, 0.0) + run.steps[s].get(vm.TIMING_TESTING, 0.0)
        for s in run.training_steps()
    }
    total = sum(times.values())
    if total <= 0:
        return None
    return held_hours * sum(t for s, t in times.items() if s <= reached) / total


def goodput_summaries(
    runs: Sequence[RunMetrics], score: str | None, baseline: RunMetrics | None
) -> tuple[list[VariantGoodput], float | None]:
    """Every run with a ledger, compared with the baseline's; and the common score."""
    target = common_score(runs, score)
    ledgers = {run.label: found for run in runs if (found := run_ledger(run)) is not None}
    out = []
    for run in runs:
        # Replica k is compared with the baseline's replica k (the two share a seed).
        twin = paired_baseline(run, baseline, runs)
        base = ledgers.get(twin.label) if twin is not None else None
        found = ledgers.get(run.label)
        if found is None:
            continue
        ledger, steps, whole = found
        hours = None
        stretch = first_stretch(run, score, target) if score is not None and target is not None else None
        if stretch is not None:
            hours = _hours_to(run, ledger.held_gpu_seconds / 3600, stretch.last_step)
        comparison = None
        if base is not None and twin is not None and run is not twin:
            comparison = compare(ledger, steps, base[0], base[1])
        out.append(VariantGoodput(run.label, ledger, steps, whole, hours, comparison, stretch))
    return out, target


def _num(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def goodput_section(
    variants: Sequence[VariantGoodput], target: float | None, score: str | None, baseline: str | None
) -> str:
    """The page's section "Where the GPU-hours go": a table and one sentence per comparison."""
    if not variants:
        return (
            '<section id="goodput"><h2>Where the GPU-hours go</h2><p>No run has a goodput ledger or '
            "verl step timings.</p></section>"
        )
    reach = (
        f"to reach {escape(score or '')} ≥ {target:.3g} (best-stretch rule)"
        if target is not None
        else "to reach a common score"
    )
    rows = [
        '<section id="goodput"><h2>Where the GPU-hours go</h2><table><thead><tr>',
        "<th>variant</th><th>GPU-hours held</th><th>held after the end</th><th>productive fraction</th>",
        f"<th>GPU-hours {reach}</th><th>speed-up end to end</th><th>speed-up in generation</th>",
        "</tr></thead><tbody>",
    ]
    for v in variants:
        c = v.comparison
        name = escape(v.label) + (" (baseline)" if v.label == baseline else "")
        rows.append(
            f'<tr data-variant="{escape(v.label)}"><td>{name}</td>'
            f'<td>{_num(v.held_hours)}</td><td class="after-end">{_num(v.after_end_hours)}</td>'
            f"<td>{_num(v.ledger.productive_fraction)}</td>"
            f"<td>{_num(v.hours_to_score)}{_reached(v, target)}</td>"
            f'<td class="e2e">{_num(c.end_to_end if c else None, suffix="x")}{_one(c)}</td>'
            f'<td class="gen">{_num(c.generation if c else None, suffix="x")}{_one(c)}</td></tr>'
        )
    rows.append("</tbody></table>")
    rows.extend(_pooled_speedups(variants))
    sentences = [
        v.comparison.sentence(v.label, baseline or "") for v in variants if v.comparison and baseline
    ]
    if sentences:
        rows.append('<ul class="goodput">' + "".join(f"<li>{escape(s)}</li>" for s in sentences) + "</ul>")
    partial = [v.label for v in variants if not v.whole]
    rows.append(
        "<p class=\"stats\">GPU-hours held run from each attempt's RayJob to its GPU workers' deletion (held "
        "after the end: from the Ray job's end until then, GPUs no run used); the "
        "productive fraction is the share spent in the steps that were kept (docs/observability.md defines "
        "each phase). The speed-ups are per completed training step, one ratio of each run's totals (no "
        "interval for one pair; with replicas, their mean, spread and n are listed under the table). "
        "The score is the highest every variant reached by the best-stretch rule (the lowest of their best "
        "means over a quarter of the validations in a row); the GPU-hours to it are prorated by the step "
        "time spent until the end of the first such stretch at that score, never one validation."
        + (
            " From verl's step timings only (no start-up, restarts or teardown): "
            f"{escape(', '.join(partial))}."
            if partial
            else ""
        )
        + "</p></section>"
    )
    return "\n".join(rows)


def _reached(v: VariantGoodput, target: float | None) -> str:
    if target is None:
        return (
            '<span class="sub">not shown: a run has no validation stretch of two or more validations '
            "(one validation is a spike, not a score reached)</span>"
        )
    if v.reached is None:
        return '<span class="sub">no stretch of validations reached it</span>'
    r = v.reached
    return (
        f'<span class="sub">first reached over steps {r.first_step}–{r.last_step}: '
        f"{r.mean:.3g} ± {r.spread:.2g} (n={r.n} validations)</span>"
    )


def _one(c: Comparison | None) -> str:
    """The ledger speed-up is one ratio of totals: n=1 pair of runs, no interval of its own."""
    return "" if c is None else '<span class="sub">n=1 pair of runs: no interval</span>'


def _pooled_speedups(variants: Sequence[VariantGoodput]) -> list[str]:
    """With replicas (``<variant>#<k>``), each variant's speed-ups over its replica pairs: mean ± sd, n."""
    groups: dict[str, list[Comparison]] = {}
    for v in variants:
        head, sep, tail = v.label.rpartition("#")
        if sep and tail.isdecimal() and v.comparison is not None:
            groups.setdefault(head, []).append(v.comparison)
    items = []
    for name, found in groups.items():
        if len(found) < 2:
            continue
        e2e = [c.end_to_end for c in found]
        gen = [c.generation for c in found]
        e2e_stat, gen_stat = stat(range(len(e2e)), e2e), stat(range(len(gen)), gen)
        assert e2e_stat is not None and gen_stat is not None
        items.append(
            f"<li>{escape(name)} over its {len(found)} replica pairs: end to end {e2e_stat.mean:.3f}x ± "
            f"{e2e_stat.spread:.3f}, in generation {gen_stat.mean:.3f}x ± {gen_stat.spread:.3f} "
            f"(sd across seeds, n={len(found)})</li>"
        )
    return ['<ul class="goodput-replicas">' + "".join(items) + "</ul>"] if items else []


def goodput_plot(variants: Sequence[VariantGoodput]) -> Plot:
    """GPU-hours by phase, one stacked bar per variant."""
    title = "Where the GPU-hours go"
    if not variants:
        return Plot(PLOT_ID, title, "", None, "no run has a goodput ledger or verl step timings")
    if not any(seconds > 0 for v in variants for seconds in v.ledger.gpu_seconds.values()):
        # Every ledger so far is staging or queueing: no GPU was held, there is no bar to draw.
        return Plot(PLOT_ID, title, "", None, "no run has held a GPU yet (staging or waiting for GPUs)")
    labels = [f"{v.label} ({v.steps} steps)" for v in variants]
    bands = (
        (str(phase), color, [v.ledger.gpu_seconds[phase] / 3600 for v in variants])
        for phase, color in PHASE_COLORS.items()
    )
    fig = stacked_bars(labels, bands, "GPU-hours", title, base_height=1.6)
    partial = [v.label for v in variants if not v.whole]
    drawn = [str(p) for p in PHASE_COLORS if any(v.ledger.gpu_seconds[p] > 0 for v in variants)]
    caption = (
        "GPU-hours each variant held, by goodput phase (status.goodput; docs/observability.md), the phases "
        "stacked left to right in the order they happen; the legend lists only the phases some variant "
        f"spent time in ({', '.join(drawn)}). The step phases share their names and colours with the "
        "step-time figure." + (f" From verl's step timings only: {', '.join(partial)}." if partial else "")
    )
    return Plot(PLOT_ID, title, caption, png_bytes(fig))
