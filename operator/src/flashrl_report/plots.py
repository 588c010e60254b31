"""The report's figures, drawn with matplotlib (object API, Agg canvas: no display, no global state).

Each function takes the runs and returns a :class:`Plot`: its PNG bytes, or None with the reason when
no run logged what it shows, plus a caption that states how many steps it draws and which runs are
absent from it.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from flashrl_api import verl_metrics as vm
from flashrl_api.goodput import IN_STEP_KEYS, UNHELD, GoodputPhase
from flashrl_report.analysis import ROLLING_WINDOW, Speedup, rolling_mean, wall_hours
from flashrl_report.data import RunMetrics

#: The colours runs are drawn in (matplotlib's default cycle, distinct for colour-blind readers).
PALETTE: Final = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
#: The project's own precisions keep these palette entries in every report: the comparison people make
#: most (BF16 blue, blockwise FP8 red, channel-wise FP8 green) reads the same in every report.
FIXED_COLORS: Final[dict[str, int]] = {"bf16": 0, "blockwise-fp8": 1, "channel-fp8": 2}
DPI: Final = 110

#: One colour per phase, in :class:`GoodputPhase` order (the unheld phases are not drawn).
PHASE_COLORS: Final[dict[GoodputPhase, str]] = dict(
    zip(
        [p for p in GoodputPhase if p not in UNHELD],
        (
            "#c7c7c7",  # pods_starting
            "#bcbd22",  # gpu_gate
            "#dbdb8d",  # startup
            "#d62728",  # generation
            "#ff9896",  # discarded_generation
            "#9467bd",  # weight_sync
            "#17becf",  # log_prob
            "#1f77b4",  # actor_update
            "#8c564b",  # reward
            "#2ca02c",  # validation
            "#ff7f0e",  # checkpoint
            "#7f7f7f",  # step_other
            "#000000",  # lost_steps
            "#393b79",  # lost_in_flight
            "#e377c2",  # teardown
            "#f7b6d2",  # held_after_end
        ),
        strict=True,
    )
)


@dataclass
class Plot:
    """One figure of the report."""

    id: str
    title: str
    caption: str
    png: bytes | None = None
    #: Why there is no image (set when ``png`` is None).
    unavailable: str = ""
    #: Runs that could not be drawn in it.
    absent: list[str] = field(default_factory=list)


def preferred_color(label: str) -> int:
    """The palette entry a label asks for: a fixed one for the project's precisions (matched as the
    label's last part, so ``fp8-vs-bf16-bf16`` is ``bf16``), else one drawn from a hash of the label
    (stable across processes and reports, unlike ``hash()``)."""
    for name, index in FIXED_COLORS.items():
        if label == name or label.endswith(f"-{name}"):
            return index
    return int.from_bytes(hashlib.sha256(label.encode("utf-8")).digest()[:4], "big") % len(PALETTE)


def colors_by_label(labels: Sequence[str]) -> dict[str, str]:
    """A colour per label, by the label and never by run order: a variant keeps its colour in every
    report. Two labels asking for one entry are resolved in label order (the first keeps it, the
    next takes the next free entry), so even then the order the runs were given changes nothing."""
    taken: dict[int, str] = {}
    out: dict[str, str] = {}
    for label in sorted(set(labels)):
        index = preferred_color(label)
        for probe in range(len(PALETTE)):
            candidate = (index + probe) % len(PALETTE)
            if candidate not in taken:
                index = candidate
                break
        taken.setdefault(index, label)
        out[label] = PALETTE[index]
    return out


def color_of(runs: Sequence[RunMetrics], run: RunMetrics) -> str:
    """The run's colour, the same in every figure and every report (:func:`colors_by_label`)."""
    return colors_by_label([r.label for r in runs])[run.label]


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (Agg canvas, :data:`DPI`)."""
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _figure(panels: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=(6.2 * panels, 3.6), layout="constrained")
    axes = [fig.add_subplot(1, panels, i + 1) for i in range(panels)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def _counts(drawn: dict[str, int]) -> str:
    return ", ".join(f"{label}: {n} steps" for label, n in drawn.items())


def _absent_text(absent: Sequence[str], what: str) -> str:
    return f" Not drawn ({what} not logged): {', '.join(absent)}." if absent else ""


def line_plot(
    runs: Sequence[RunMetrics],
    plot_id: str,
    title: str,
    metric: str | Callable[[RunMetrics], str | None],
    ylabel: str,
    *,
    wall_time: bool = False,
    smooth: bool = True,
    hline: tuple[float, str] | None = None,
    markers: bool = False,
    what: str = "",
) -> Plot:
    """One metric against step (and, with ``wall_time``, against hours of training) for every run."""
    fig, axes = _figure(2 if wall_time else 1)
    drawn: dict[str, int] = {}
    absent: list[str] = []
    for run in runs:
        key = metric(run) if callable(metric) else metric
        xs, ys = run.series(key, training_only=not markers) if key else ([], [])
        if not xs:
            absent.append(run.label)
            continue
        drawn[run.label] = len(xs)
        color = color_of(runs, run)
        marker = "o" if markers else None
        if smooth and len(xs) > ROLLING_WINDOW:
            axes[0].plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
            axes[0].plot(xs, rolling_mean(ys), color=color, linewidth=1.8, label=run.label)
        else:
            axes[0].plot(xs, ys, color=color, linewidth=1.6, label=run.label, marker=marker, markersize=3.5)
        if wall_time:
            hours = wall_hours(run)
            points = [(hours[x], y) for x, y in zip(xs, ys, strict=True) if x in hours]
            if points:
                hx, hy = zip(*points, strict=True)
                if smooth and len(hx) > ROLLING_WINDOW:
                    axes[1].plot(hx, hy, color=color, alpha=0.25, linewidth=0.8)
                    axes[1].plot(hx, rolling_mean(hy), color=color, linewidth=1.8, label=run.label)
                else:
                    axes[1].plot(
                        hx, hy, color=color, linewidth=1.6, label=run.label, marker=marker, markersize=3.5
                    )
    name = metric if isinstance(metric, str) else what
    if not drawn:
        return Plot(plot_id, title, "", None, f"no run logged {name}", absent)
    for ax in axes:
        ax.set_ylabel(ylabel)
        if hline is not None:
            ax.axhline(hline[0], color="#555555", linestyle="--", linewidth=1, label=hline[1])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    axes[0].set_xlabel("training step")
    axes[0].set_title(title + (" vs step" if wall_time else ""), fontsize=11)
    if wall_time:
        axes[1].set_xlabel("hours (running sum of timing_s/step + timing_s/testing)")
        axes[1].set_title(title + " vs wall time", fontsize=11)
    caption = f"{name}; {_counts(drawn)}."
    if smooth and any(n > ROLLING_WINDOW for n in drawn.values()):
        caption += f" Thin lines: every step; thick: mean of the last {ROLLING_WINDOW} steps."
    caption += _absent_text(absent, name)
    return Plot(plot_id, title, caption, png_bytes(fig), absent=absent)


def speedup_plot(
    runs: Sequence[RunMetrics], baseline: RunMetrics | None, speedups: dict[str, Speedup]
) -> Plot:
    """Per-step generation speed-up of each variant over the baseline, with its rolling mean."""
    title = "Generation speed-up over the baseline"
    if baseline is None or not speedups:
        why = "no baseline run" if baseline is None else "no run shares generation timings with the baseline"
        return Plot("generation-speedup", title, "", None, why)
    fig, (ax,) = _figure()
    for run in runs:
        s = speedups.get(run.label)
        if s is None:
            continue
        color = color_of(runs, run)
        ax.plot(s.steps, s.ratios, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(
            s.steps,
            rolling_mean(s.ratios),
            color=color,
            linewidth=1.8,
            label=f"{run.label} / {baseline.label}",
        )
    ax.axhline(1.0, color="#555555", linestyle="--", linewidth=1, label="no speed-up")
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{baseline.label} cost / variant cost")
    ax.set_title(title + f" ({baseline.label})", fontsize=11)
    ax.legend(fontsize=8)
    metric = next(iter(speedups.values())).metric
    absent = [r.label for r in runs if r is not baseline and r.label not in speedups]
    caption = (
        f"Per-step ratio of {metric} ({baseline.label} / variant) over the steps both runs logged; "
        f"above 1 the variant generates faster. {_counts({k: len(v.steps) for k, v in speedups.items()})}. "
        f"Thin: every step; thick: mean of the last {ROLLING_WINDOW}."
    )
    caption += _absent_text(absent, "generation timing")
    return Plot("generation-speedup", title, caption, png_bytes(fig), absent=absent)


def stacked_bars(
    labels: Sequence[str],
    bands: Iterable[tuple[str, str, Sequence[float]]],
    xlabel: str,
    title: str,
    base_height: float,
) -> Figure:
    """One horizontal bar per label, top to bottom, stacked from ``bands`` in order: each a legend name,
    a colour and a width per bar. A band that is zero in every bar is left out, legend included (with
    every band zero there is no legend: matplotlib would warn on the terminal that it has nothing to
    list; callers say "not drawn" before that)."""
    fig = Figure(figsize=(12.4, base_height + 0.6 * len(labels)), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    left = [0.0] * len(labels)
    for name, color, widths in bands:
        if not any(w > 0 for w in widths):
            continue
        ax.barh(labels, widths, left=left, color=color, label=name, edgecolor="white", linewidth=0.5)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=11)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def time_breakdown_plot(runs: Sequence[RunMetrics]) -> Plot:
    """Mean seconds per step in each goodput phase, one stacked bar per run: the step's ``timing_s/*``
    grouped, named and coloured as the goodput figure's phases, so one phase reads the same in both."""
    title = "Where the time of a step goes"
    phases = list(dict.fromkeys([*IN_STEP_KEYS.values(), GoodputPhase.STEP_OTHER]))
    rows: list[tuple[RunMetrics, dict[GoodputPhase, float], int]] = []
    absent: list[str] = []
    for run in runs:
        steps = [s for s in run.training_steps() if vm.TIMING_STEP in run.steps[s]]
        if not steps:
            absent.append(run.label)
            continue
        means = dict.fromkeys(phases, 0.0)
        for key, phase in IN_STEP_KEYS.items():
            means[phase] += sum(run.steps[s].get(key, 0.0) for s in steps) / len(steps)
        total = sum(run.steps[s][vm.TIMING_STEP] for s in steps) / len(steps)
        means[GoodputPhase.STEP_OTHER] = max(0.0, total - sum(means.values()))
        rows.append((run, means, len(steps)))
    if not rows:
        return Plot("time-breakdown", title, "", None, f"no run logged {vm.TIMING_STEP}", absent)
    labels = [f"{run.label} (n={n})" for run, _, n in rows]
    bands = ((str(phase), PHASE_COLORS[phase], [means[phase] for _, means, _ in rows]) for phase in phases)
    fig = stacked_bars(labels, bands, "mean seconds per training step", title, base_height=1.4)
    caption = (
        "Mean seconds per training step in each phase, over the steps that logged timing_s/step (n per "
        "bar), named and coloured as in the goodput figure: generation is timing_s/gen, weight_sync "
        "timing_s/update_weights, log_prob timing_s/{old_log_prob,ref,values}, actor_update "
        "timing_s/{adv,update_critic,update_actor}, reward timing_s/reward, checkpoint "
        "timing_s/save_checkpoint, and step_other the rest of timing_s/step. Validation (timing_s/testing) "
        "runs after the step and is not in the bar." + _absent_text(absent, vm.TIMING_STEP)
    )
    return Plot("time-breakdown", title, caption, png_bytes(fig), absent=absent)


__all__ = [
    "FIXED_COLORS",
    "PALETTE",
    "PHASE_COLORS",
    "Plot",
    "color_of",
    "colors_by_label",
    "line_plot",
    "png_bytes",
    "preferred_color",
    "speedup_plot",
    "stacked_bars",
    "time_breakdown_plot",
]
