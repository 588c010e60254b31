"""A job's per-step metric history, bounded to fit in one ConfigMap (pure).

Where the history lives, and why. ``flashrl report`` must work from a laptop with the user's
kubeconfig after the Ray cluster is gone (KubeRay deletes it ``ttlSecondsAfterFinished`` after the
end). verl's full JSONL is on the checkpoint volume, but a PersistentVolumeClaim cannot be read
through the API without starting a pod that mounts it (and a ReadWriteOnce claim may be attached
elsewhere); Prometheus may not be installed, and its retention is not ours. So each FlashRLJob has a
ConfigMap, ``<job>-metrics``, owned by the job (it goes when the job is deleted, not when its Ray
cluster is), holding the metrics the report draws for each step in verl's own line format,
``{"step": n, "data": {...}}``, under the key :data:`HISTORY_KEY`. Kubernetes' built-in ``view``
role already lets a user read ConfigMaps in the namespaces they work in.

It is bounded: a ConfigMap holds at most 1 MiB, so the history keeps under :data:`MAX_HISTORY_BYTES`
by thinning its older half (every other step dropped, validation steps and the first and newest
kept) whenever a new step would overflow it. A 150-step run never thins; a 10,000-step run keeps
its recent steps at full resolution and its early ones sparser. The report says when steps are
missing. The full-resolution record stays verl's JSONL on the checkpoint volume.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from flashrl_api import report_metrics
from flashrl_api import verl_metrics as vm

#: The ConfigMap key holding the history.
HISTORY_KEY: Final = "history.jsonl"
#: Its bound, well under the 1 MiB a ConfigMap may hold (with the per-problem validation summaries'
#: 192 KiB, :data:`flashrl_api.validation_summary.MAX_VALIDATION_BYTES`, 960 KiB of data).
MAX_HISTORY_BYTES: Final = 768 * 1024
#: Its name: ``<job>-metrics``.
HISTORY_SUFFIX: Final = "metrics"

#: The metrics kept per step: what ``flashrl report`` reads, one row each in
#: :data:`flashrl_api.report_metrics.ROWS` (prefixes end with ``/``).
KEPT_PREFIXES: Final[tuple[str, ...]] = report_metrics.kept_prefixes()
KEPT_NAMES: Final[frozenset[str]] = report_metrics.kept_names()


def history_name(job_name: str) -> str:
    """The history ConfigMap of a job: ``<job>-metrics``."""
    return f"{job_name}-{HISTORY_SUFFIX}"


def keeps(name: str) -> bool:
    """Whether the history keeps verl's metric ``name`` (when its value is a finite number)."""
    return name in KEPT_NAMES or name.startswith(KEPT_PREFIXES)


def kept(data: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric metrics of one step that the history keeps."""
    out: dict[str, float] = {}
    for name, value in data.items():
        if not keeps(name):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        out[name] = float(value)
    return out


def _line(step: int, data: Mapping[str, float]) -> str:
    return json.dumps({"step": step, "data": dict(sorted(data.items()))}, separators=(",", ":"))


def parse_history(text: str) -> dict[int, dict[str, float]]:
    """The history's records by step (lines that are not records are skipped)."""
    out: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            isinstance(record, dict)
            and isinstance(record.get("step"), int)
            and isinstance(record.get("data"), dict)
        ):
            out[record["step"]] = kept(record["data"])
    return out


#: The newest steps, always kept at full resolution.
RECENT_STEPS: Final = 50


def _halvings(step: int, top: int) -> int:
    """The largest ``k <= top`` with ``step`` a multiple of ``2**k`` (``top`` for step 0): the step
    survives thinning at every stride up to ``2**k``."""
    return top if step == 0 else min(top, (step & -step).bit_length() - 1)


def _has_validation(values: Mapping[str, float]) -> bool:
    return any(k.startswith(vm.VAL_CORE_PREFIX) for k in values)


def render_history(records: Mapping[int, Mapping[str, float]], max_bytes: int = MAX_HISTORY_BYTES) -> str:
    """The ConfigMap value: one line per step in step order, within ``max_bytes``.

    When every step does not fit, older steps are kept only at multiples of a stride (2, 4, 8, ...:
    the smallest that fits), always with the newest :data:`RECENT_STEPS` steps and every validation
    step; only if those alone overflow are validations thinned too. Thinning a thinned history with a
    larger stride gives the same result as thinning the full one, so the history does not degrade as
    it is rewritten step after step.

    Each line is rendered once and the stride is computed from the lines' sizes (a step at a multiple
    of ``2**k`` survives every stride up to ``2**k``), so the cost is one pass over the history
    whatever the steps' numbers are: trying the strides one by one would render the whole history
    once per doubling, some 60 times for a step near ``2**62``.
    """
    present = {s: v for s, v in records.items() if v}
    latest = max(present, default=0)
    # The strides tried are 2**0 .. 2**top, the first one larger than the newest step.
    top = latest.bit_length() if latest > 0 else 0
    lines = {s: _line(s, present[s]) + "\n" for s in present}
    sizes = {s: len(line.encode("utf-8")) for s, line in lines.items()}
    levels = {s: _halvings(s, top) for s in present}
    chosen_level = top
    keep_validations = False
    for keep_validations in (True, False):
        always = 0
        # by_level[k]: bytes of the thinnable steps that survive strides up to 2**k and no larger.
        by_level = [0] * (top + 1)
        for s, values in present.items():
            if s > latest - RECENT_STEPS or (keep_validations and _has_validation(values)):
                always += sizes[s]
            else:
                by_level[levels[s]] += sizes[s]
        surviving = sum(by_level)
        fits = None
        for k in range(top + 1):
            if always + surviving <= max_bytes:
                fits = k
                break
            surviving -= by_level[k]
        if fits is not None:
            chosen_level = fits
            break
    return "".join(
        lines[s]
        for s in sorted(present)
        if levels[s] >= chosen_level
        or s > latest - RECENT_STEPS
        or (keep_validations and _has_validation(present[s]))
    )


#: The largest step a status may report: ``spec.training.totalSteps``' own bound, ``INT32_MAX`` (the
#: CRD's maximum of ``status.metrics[].step``).
MAX_STEP: Final = 2**31 - 1
#: The largest magnitude a metric value may have: no metric the report draws comes near it (tokens per
#: step, seconds, scores, ratios), and a plot's axis over such values stays computable.
MAX_VALUE: Final = 1e15
#: The shape of verl's phase timers (``marked_timer`` names: identifiers).
TIMING_PATTERN: Final = re.compile(r"^timing_s/[A-Za-z0-9_]{1,64}$")
_NAME: Final = re.compile(vm.METRIC_NAME_PATTERN)


def plausible_name(name: str) -> bool:
    """Whether verl could have logged ``name`` and the history keeps it: a kept name, a ``val-core``
    score in verl's shape, or a phase timer."""
    if len(name) > vm.MAX_METRIC_NAME or _NAME.fullmatch(name) is None:
        return False
    if name in KEPT_NAMES:
        return True
    if name.startswith(vm.VAL_CORE_PREFIX):
        return vm.VAL_CORE_PATTERN.fullmatch(name) is not None
    if name.startswith(vm.TIMING_PREFIX):
        return TIMING_PATTERN.fullmatch(name) is not None
    return False


def plausible_value(value: object) -> float | None:
    """A metric value as a float, or None when it cannot be a real one (not a number, non-finite, or
    beyond :data:`MAX_VALUE`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_VALUE:
        return None  # float() of a huge int raises
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= MAX_VALUE else None


def plausible_metrics(
    metrics: Iterable[Mapping[str, Any]], total_steps: int | None = None
) -> dict[int, dict[str, float]]:
    """The values of a status' ``metrics`` (``[{name, value, step}]``) that can be real, by step: a step
    from 0 to the job's ``total_steps`` (:data:`MAX_STEP` when not given), a name verl logs that the
    history keeps (:func:`plausible_name`) and a plausible value. The rest is dropped before any work is
    spent on it: a status is written by whoever holds the launcher's token."""
    last = MAX_STEP if total_steps is None else min(total_steps, MAX_STEP)
    by_step: dict[int, dict[str, float]] = {}
    for metric in metrics:
        if not isinstance(metric, Mapping):
            continue
        step, name = metric.get("step"), metric.get("name")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= last:
            continue
        if not isinstance(name, str) or not plausible_name(name):
            continue
        value = plausible_value(metric.get("value"))
        if value is not None:
            by_step.setdefault(step, {})[name] = value
    return by_step


def add_step(text: str, step: int, data: Mapping[str, Any], max_bytes: int = MAX_HISTORY_BYTES) -> str:
    """The history with one step's metrics merged in (a repeated step's values are updated)."""
    records = parse_history(text)
    merged = {**records.get(step, {}), **kept(data)}
    if not merged:
        return text
    records[step] = merged
    return render_history(records, max_bytes)


def add_metrics(
    text: str,
    metrics: Iterable[Mapping[str, Any]],
    max_bytes: int = MAX_HISTORY_BYTES,
    *,
    total_steps: int | None = None,
) -> str:
    """The history with a status' latest metrics (``[{name, value, step}]``) recorded at their steps:
    those that can be real (:func:`plausible_metrics`), merged in one pass and rendered once; the text
    unchanged (and nothing rendered) when they add nothing new."""
    by_step = plausible_metrics(metrics, total_steps)
    if not by_step:
        return text
    records = parse_history(text)
    if all(records.get(step, {}).get(k) == v for step, data in by_step.items() for k, v in data.items()):
        return text
    for step, data in by_step.items():
        records[step] = {**records.get(step, {}), **data}
    return render_history(records, max_bytes)


__all__ = [
    "HISTORY_KEY",
    "HISTORY_SUFFIX",
    "KEPT_NAMES",
    "KEPT_PREFIXES",
    "MAX_HISTORY_BYTES",
    "MAX_STEP",
    "MAX_VALUE",
    "add_metrics",
    "add_step",
    "history_name",
    "kept",
    "parse_history",
    "plausible_metrics",
    "plausible_name",
    "plausible_value",
    "render_history",
]
