"""The comparison's numbers (pure): per-variant summaries and the FP8-over-BF16 speed-up.

Statistics are kept honest in two ways. Every figure carries the number of steps it averages and
their step-to-step standard deviation. And a difference is only called one when its interval says
so: a speed-up is "faster" or "slower" only when the 95 % bootstrap interval of its mean per-step
ratio excludes 1 (:mod:`flashrl_report.intervals`), else "no clear difference", whatever its mean
says. The accuracy verdict is the paired per-problem one (:mod:`flashrl_report.paired`); without
validation samples, best and late scores are judged by the older spread rule (:func:`compared`).

Runs of one experiment share seed, data and step count, so step k of one variant trained on the
same prompts as step k of another (until dynamic sampling diverges): the speed-up is computed as a
per-step paired ratio over the steps both runs logged, and its spread is the spread of those ratios.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from flashrl_api import verl_metrics as vm
from flashrl_api.goodput import UNHELD, Ledger
from flashrl_report.data import PrecisionStretch, RunMetrics
from flashrl_report.intervals import LEVEL, Interval, mean_interval

#: Fewer steps than this and a run's quarters are too short to compare (two steps per quarter).
MIN_STEPS_FOR_QUARTERS: Final = 8
#: Steps in a rolling mean drawn over the per-step values.
ROLLING_WINDOW: Final = 5


@dataclass(frozen=True)
class Stat:
    """A mean over ``n`` steps, with the sample standard deviation of the per-step values."""

    mean: float
    std: float | None
    n: int
    first_step: int
    last_step: int

    def text(self, digits: int = 3, unit: str = "") -> str:
        """``1.23 ± 0.05 (n=37, steps 1–37)``."""
        spread = f" ± {_fmt(self.std, digits)}" if self.std is not None else ""
        return (
            f"{_fmt(self.mean, digits)}{unit}{spread} (n={self.n}, steps {self.first_step}–{self.last_step})"
        )

    @property
    def spread(self) -> float:
        """The standard deviation, 0 for a single step (nothing to compare it with)."""
        return self.std or 0.0


def _fmt(value: float, digits: int) -> str:
    if value != 0 and (abs(value) >= 10**digits or abs(value) < 10 ** -(digits - 1)):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


def stat(steps: Sequence[int], values: Sequence[float]) -> Stat | None:
    """The :class:`Stat` of a series, None when it is empty."""
    if not values:
        return None
    std = statistics.stdev(values) if len(values) > 1 else None
    return Stat(statistics.fmean(values), std, len(values), steps[0], steps[-1])


def quarters(steps: Sequence[int], values: Sequence[float]) -> tuple[Stat, Stat] | None:
    """Stats of the first and the last quarter of a series (None when it is too short to split)."""
    if len(values) < MIN_STEPS_FOR_QUARTERS:
        return None
    q = math.ceil(len(values) / 4)
    first = stat(steps[:q], values[:q])
    last = stat(steps[-q:], values[-q:])
    assert first is not None and last is not None
    return first, last


def rolling_mean(values: Sequence[float], window: int = ROLLING_WINDOW) -> list[float]:
    """Mean of each value and up to ``window - 1`` before it."""
    out: list[float] = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def best_stretch(steps: Sequence[int], values: Sequence[float]) -> Stat | None:
    """The best mean over a quarter of the validations in a row (as many as "late" averages), with its
    spread and n: one lucky validation is a spike, not a best (a run of four or fewer validations has
    stretches of one, and the report says there is no spread to judge them by)."""
    if not values:
        return None
    q = max(1, math.ceil(len(values) / 4))
    start = max(range(len(values) - q + 1), key=lambda i: (statistics.fmean(values[i : i + q]), -steps[i]))
    return stat(steps[start : start + q], values[start : start + q])


def late_stretch(steps: Sequence[int], values: Sequence[float]) -> Stat | None:
    """The mean of the last quarter of the validations (at least one)."""
    q = max(1, math.ceil(len(values) / 4))
    return stat(steps[-q:], values[-q:])


def compared(value: Stat | None, baseline: Stat | None, name: str) -> str | None:
    """The verdict on ``value`` against the baseline's (named ``name``), by the rule the speed-up
    follows: higher or lower only when the means are further apart than the larger step-to-step
    spread, and never from a single value (no spread to judge by). None without both."""
    if value is None or baseline is None:
        return None
    if value.std is None or baseline.std is None:
        return f"no clear difference from {name} (n=1: no spread to judge by)"
    if not differs(value, baseline):
        return f"no clear difference from {name} (within the spread)"
    return f"{'higher' if value.mean > baseline.mean else 'lower'} than {name}"


def differs(a: Stat, b: Stat) -> bool:
    """Whether two means are further apart than the larger of their step-to-step spreads."""
    return abs(a.mean - b.mean) > max(a.spread, b.spread)


def wall_hours(run: RunMetrics) -> dict[int, float]:
    """Hours of training and validation after each step: the running sum of ``timing_s/step`` and
    ``timing_s/testing``. Start-up, the initial validation and time lost to restarts are not in verl's
    metrics and are not counted; steps after one without ``timing_s/step`` have no wall time."""
    out: dict[int, float] = {0: 0.0} if 0 in run.steps else {}
    total = 0.0
    for step in run.training_steps():
        values = run.steps[step]
        if vm.TIMING_STEP not in values:
            break
        total += values[vm.TIMING_STEP] + values.get(vm.TIMING_TESTING, 0.0)
        out[step] = total / 3600.0
    return out


def score_key(runs: Sequence[RunMetrics]) -> str | None:
    """The validation score every run is compared on: the first ``val-core`` ``mean@N`` most runs logged."""
    counts: dict[str, int] = {}
    for run in runs:
        for key in vm.val_core_keys(run.names()):
            if vm.is_validation_score(key):
                counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    ranked = vm.val_core_keys(counts)
    return max(ranked, key=lambda k: (counts[k], -ranked.index(k)))


def mismatch_key(run: RunMetrics) -> str | None:
    """verl's direct KL estimate of the rollout/trainer mismatch, else its k3 estimate."""
    names = run.names()
    for key in (vm.MISMATCH_KL, vm.MISMATCH_K3_KL):
        if key in names:
            return key
    return None


def generation_speed(run: RunMetrics) -> tuple[str, dict[int, float]]:
    """Per-step generation cost to compare engines on, lower is faster, and what it is.

    ``timing_per_token_ms/gen`` (milliseconds per response token) does not depend on how long the
    responses are; without it, ``timing_s/gen`` (seconds per step) is used and the report says so.
    """
    for key in (vm.GEN_MS_PER_TOKEN, vm.TIMING_GEN):
        xs, ys = run.series(key, training_only=True)
        if xs:
            return key, {x: y for x, y in zip(xs, ys, strict=True) if y > 0}
    return "", {}


@dataclass(frozen=True)
class SpeedupWindow:
    """The paired generation speed-up over a stretch of steps, with the bootstrap interval of its mean."""

    stat: Stat
    interval: Interval

    @property
    def verdict(self) -> str:
        """faster or slower only when the interval of the mean ratio excludes 1, else no clear difference."""
        return self.interval.verdict("faster", "slower")

    def text(self) -> str:
        """``faster, 1.140× (95 % CI 1.120× to 1.160×), n=37 paired steps (steps 1–37)``."""
        return (
            f"{self.verdict}, {self.interval.text(unit='×')}, n={self.stat.n} paired steps "
            f"(steps {self.stat.first_step}–{self.stat.last_step})"
        )


#: The quarters' intervals are read together (four chances of a false call): each is at 1 − 0.05 / 4.
WINDOW_LEVEL: Final = 1 - (1 - LEVEL) / 4


def speedup_window(steps: Sequence[int], ratios: Sequence[float]) -> SpeedupWindow | None:
    """The window's stat and its interval (steps resampled, at :data:`WINDOW_LEVEL`), None when empty."""
    window = stat(steps, ratios)
    interval = mean_interval(ratios, null=1.0, level=WINDOW_LEVEL)
    if window is None or interval is None:
        return None
    return SpeedupWindow(window, interval)


@dataclass
class Speedup:
    """Generation speed-up of one variant over the baseline: baseline cost / variant cost, per step."""

    metric: str
    steps: list[int]
    ratios: list[float]
    overall: Stat
    windows: list[SpeedupWindow]
    #: The whole run's mean ratio with its bootstrap interval over the paired steps.
    interval: Interval | None = None

    @property
    def verdict(self) -> str:
        """faster / slower over the whole run only when its interval excludes 1."""
        return "no clear difference" if self.interval is None else self.interval.verdict("faster", "slower")

    def change(self) -> str:
        """Where the verdict changes over the run, in words ('' when the run is too short to tell)."""
        if not self.windows:
            return ""
        first = self.windows[0]
        for window in self.windows[1:]:
            if window.verdict != first.verdict:
                return (
                    f"{first.verdict} in steps {first.stat.first_step}–{first.stat.last_step} "
                    f"({first.interval.text(unit='×')}), {window.verdict} from step "
                    f"{window.stat.first_step} ({window.interval.text(unit='×')})"
                )
        return f"{first.verdict} in every quarter of the run"


def speedup(variant: RunMetrics, baseline: RunMetrics) -> Speedup | None:
    """The paired per-step generation speed-up of ``variant`` over ``baseline`` (None without data)."""
    key_v, cost_v = generation_speed(variant)
    key_b, cost_b = generation_speed(baseline)
    if not cost_v or not cost_b or key_v != key_b:
        return None
    steps = sorted(set(cost_v) & set(cost_b))
    if not steps:
        return None
    ratios = [cost_b[s] / cost_v[s] for s in steps]
    overall = stat(steps, ratios)
    assert overall is not None
    windows: list[SpeedupWindow] = []
    if len(steps) >= MIN_STEPS_FOR_QUARTERS:
        q = math.ceil(len(steps) / 4)
        for start in range(0, len(steps), q):
            window = speedup_window(steps[start : start + q], ratios[start : start + q])
            if window is not None:
                windows.append(window)
    return Speedup(key_v, steps, ratios, overall, windows, mean_interval(ratios, null=1.0))


@dataclass(frozen=True)
class RunCost:
    """A run's time and GPU-hours, the columns that weigh a faster training mode against the GPUs of its
    second pool: sync and separate-async side by side in one table."""

    held_gpu_hours: float
    #: GPU-hours held per pool when the run has two (the trainer's and the rollout pool's).
    by_pool: dict[str, float]
    #: GPU-hours held up to the common validation score (prorated by step time), when reached.
    gpu_hours_to_score: float | None = None
    #: Wall-clock hours of training and validation (:func:`wall_hours`) to the common score, and the step.
    hours_to_score: tuple[float, int] | None = None


def run_cost(
    run: RunMetrics, ledger: Ledger, gpu_hours_to_score: float | None, reached_step: int | None
) -> RunCost:
    """The run's :class:`RunCost` from its goodput ledger, the GPU-hours to the common score (prorated
    from the ledger's) and the step the score was reached at.

    With two pools, each pool's GPU-hours are the operator's own (``status.goodput.pools``'
    ``heldGPUSeconds``, :attr:`RunMetrics.pool_held_gpu_seconds`) when the run's status has them, else
    the time the ledger holds GPUs × that pool's GPUs: both worker groups are held for the whole attempt.
    That fallback holds whether the ledger's GPU-seconds count the rollout pool (the steps' own ledger,
    built with both pools' GPUs) or only the trainer's (the operator's ``status.goodput`` before it
    accounts per pool), and the total is their sum."""
    ledger_hours = ledger.held_gpu_seconds / 3600
    held_seconds = sum(v for p, v in ledger.seconds.items() if p not in UNHELD)
    if len(run.pool_held_gpu_seconds) > 1:
        by_pool = {pool: seconds / 3600 for pool, seconds in run.pool_held_gpu_seconds.items()}
    elif len(run.pools) > 1:
        by_pool = {pool: held_seconds * gpus / 3600 for pool, gpus in run.pools.items()}
    else:
        by_pool = {}
    held = sum(by_pool.values()) if by_pool else ledger_hours
    if gpu_hours_to_score is not None and ledger_hours > 0:
        gpu_hours_to_score *= held / ledger_hours
    hours = wall_hours(run).get(reached_step) if reached_step is not None else None
    to_score = (hours, reached_step) if hours is not None and reached_step is not None else None
    return RunCost(held, by_pool, gpu_hours_to_score, to_score)


@dataclass
class VariantSummary:
    """One row of the summary table."""

    label: str
    training_steps: int
    last_step: int
    #: The best quarter of validations in a row (:func:`best_stretch`), not the best single value.
    best_score: Stat | None = None
    final_score: tuple[float, int] | None = None
    late_score: Stat | None = None
    #: best_score and late_score against the baseline's (:func:`compared`); None for the baseline.
    best_verdict: str | None = None
    late_verdict: str | None = None
    throughput: Stat | None = None
    late_throughput: Stat | None = None
    speedup: Speedup | None = None
    weight_sync_share: tuple[float, int] | None = None
    mismatch_key: str | None = None
    mismatch_quarters: tuple[Stat, Stat] | None = None
    #: Seconds per training step (``timing_s/step``).
    step_seconds: Stat | None = None
    #: What the run cost beside what it reached (set once the goodput ledgers are known).
    cost: RunCost | None = None
    #: What this run did not log, or where it stopped, one sentence each.
    missing: list[str] = field(default_factory=list)
    #: The job status's own step, ``150/150``, shown instead of 0 training steps when the run logged no
    #: training metrics (:mod:`flashrl_report.verdict`).
    status_step: str | None = None
    #: After a FallbackToBF16: each precision's stretch and its generation throughput.
    stretches: list[tuple[PrecisionStretch, Stat | None]] = field(default_factory=list)
    #: What the run's rollout ran, from its job's spec (:func:`~flashrl_report.data.rollout_text`).
    rollout: str | None = None

    def stretch_lines(self) -> list[str]:
        """One line per precision stretch: its steps, attempts, GPU-hours and generation throughput."""
        lines = []
        for stretch, throughput in self.stretches:
            end = "" if stretch.last_step is None else str(stretch.last_step)
            attempts = ", ".join(map(str, stretch.attempts))
            speed = "–" if throughput is None else f"{_fmt(throughput.mean, 4)} (n={throughput.n})"
            lines.append(
                f"{stretch.precision}: steps {stretch.first_step}–{end} (attempt {attempts}), "
                f"{stretch.held_gpu_seconds / 3600:.3g} GPU-h held, generation throughput {speed}"
            )
        return lines

    def mismatch_drift(self) -> tuple[str, str] | None:
        """``("0.011 → 0.036, rises", "± 0.002 / ± 0.004, n=38 steps each")``; None without two quarters."""
        if self.mismatch_quarters is None:
            return None
        first, last = self.mismatch_quarters
        if not differs(first, last):
            trend = "no clear drift"
        else:
            trend = "rises" if last.mean > first.mean else "falls"
        return (
            f"{_fmt(first.mean, 3)} → {_fmt(last.mean, 3)}, {trend}",
            f"± {_fmt(first.spread, 2)} / ± {_fmt(last.spread, 2)}; "
            f"steps {first.first_step}–{first.last_step} vs {last.first_step}–{last.last_step} "
            f"(n={first.n}, {last.n})",
        )


#: Metric groups whose absence the report points out, with what they feed.
_GROUPS: Final[tuple[tuple[str, str], ...]] = (
    (vm.VAL_CORE_PREFIX, "validation score (val-core/*)"),
    (vm.RESPONSE_LENGTH_MEAN, "response length"),
    (vm.THROUGHPUT, "throughput (perf/throughput)"),
    (vm.TIMING_PREFIX, "step time breakdown (timing_s/*)"),
    ("rollout_corr/", "mismatch and importance-sampling metrics (rollout_corr/*)"),
    ("training/rollout_probs_diff", "rollout/trainer probability difference (training/rollout_probs_diff_*)"),
)


def _missing_groups(run: RunMetrics) -> list[str]:
    """The metric groups the run did not log; none for a run that logged no metric at all (its own
    line already says it has no training metrics: a note per group would only repeat it)."""
    names = run.names()
    if not names:
        return []
    return [
        f"logged no {what}"
        for prefix, what in _GROUPS
        if not any(name == prefix or name.startswith(prefix) for name in names)
    ]


def summarize(
    run: RunMetrics, score: str | None, baseline: RunMetrics | None, longest: int
) -> VariantSummary:
    """The summary row of one run; ``longest`` is the last step the longest run reached."""
    steps = run.training_steps()
    out = VariantSummary(
        run.label, len(steps), run.last_step, missing=_missing_groups(run), rollout=run.rollout
    )
    if run.last_step < longest:
        out.missing.append(
            f"stops at step {run.last_step} while another run reaches step {longest} "
            "(failed, stopped or still running): its late-run figures cover fewer steps"
        )
    if score is not None:
        xs, ys = run.series(score)
        if xs:
            out.best_score = best_stretch(xs, ys)
            out.final_score = (ys[-1], xs[-1])
            out.late_score = late_stretch(xs, ys)
            if baseline is not None and baseline is not run:
                bx, by = baseline.series(score)
                out.best_verdict = compared(out.best_score, best_stretch(bx, by), baseline.label)
                out.late_verdict = compared(out.late_score, late_stretch(bx, by), baseline.label)
        elif not any(m.startswith("logged no validation") for m in out.missing):
            out.missing.append(f"logged no {score}")
    xs, ys = run.series(vm.THROUGHPUT, training_only=True)
    out.throughput = stat(xs, ys)
    for stretch in run.stretches:
        kept = [(x, y) for x, y in zip(xs, ys, strict=True) if stretch.covers(x)]
        out.stretches.append((stretch, stat([x for x, _ in kept], [y for _, y in kept])))
    split = quarters(xs, ys)
    out.late_throughput = split[1] if split else None
    if baseline is not None and baseline is not run:
        out.speedup = speedup(run, baseline)
    sync_total = step_total = 0.0
    counted = 0
    for step in steps:
        values = run.steps[step]
        if vm.TIMING_UPDATE_WEIGHTS in values and vm.TIMING_STEP in values:
            sync_total += values[vm.TIMING_UPDATE_WEIGHTS]
            step_total += values[vm.TIMING_STEP]
            counted += 1
    if counted and step_total > 0:
        out.weight_sync_share = (sync_total / step_total, counted)
    out.step_seconds = stat(*run.series(vm.TIMING_STEP, training_only=True))
    out.mismatch_key = mismatch_key(run)
    if out.mismatch_key is not None:
        out.mismatch_quarters = quarters(*run.series(out.mismatch_key, training_only=True))
    return out


def choose_baseline(runs: Sequence[RunMetrics], requested: str | None) -> tuple[RunMetrics | None, str]:
    """The run speed-ups are measured against, and a note on how it was chosen.

    ``requested`` names it (``--baseline``); otherwise the one variant whose label contains ``bf16``.
    Replicas (``<variant>#<k>``) are one variant: its first replica is returned, and each run is
    compared with the baseline's replica of the same index (:func:`paired_baseline`).
    """
    if requested is not None:
        for run in runs:
            if run.label == requested or _variant(run.label) == requested:
                return run, f"speed-ups are relative to {requested} (--baseline)"
        return None, f"--baseline {requested!r} names no run; speed-ups are not computed"
    candidates = [run for run in runs if "bf16" in _variant(run.label).lower()]
    if len({_variant(run.label) for run in candidates}) == 1:
        name = _variant(candidates[0].label)
        return candidates[0], f"speed-ups are relative to {name} (the run labelled bf16)"
    if not candidates:
        return None, "no run is labelled bf16 and no --baseline was given; speed-ups are not computed"
    return None, "several runs are labelled bf16; name the baseline with --baseline"


def _variant(label: str) -> str:
    """The variant of a run label: ``bf16`` for ``bf16#2`` (replica 2) and for ``bf16``."""
    head, sep, tail = label.rpartition("#")
    return head if sep and tail.isdecimal() else label


def paired_baseline(
    run: RunMetrics, base: RunMetrics | None, runs: Sequence[RunMetrics]
) -> RunMetrics | None:
    """The baseline run ``run`` is compared with: the baseline variant's replica of the same index
    (the two share a seed: data order and sampling), else ``base``."""
    if base is None:
        return None
    _, sep, tail = run.label.rpartition("#")
    if sep and tail.isdecimal():
        twin = f"{_variant(base.label)}#{tail}"
        for other in runs:
            if other.label == twin:
                return other
    return base


__all__ = [
    "ROLLING_WINDOW",
    "Speedup",
    "SpeedupWindow",
    "Stat",
    "VariantSummary",
    "best_stretch",
    "choose_baseline",
    "compared",
    "differs",
    "generation_speed",
    "late_stretch",
    "mismatch_key",
    "paired_baseline",
    "quarters",
    "rolling_mean",
    "score_key",
    "speedup",
    "speedup_window",
    "stat",
    "summarize",
    "wall_hours",
]
