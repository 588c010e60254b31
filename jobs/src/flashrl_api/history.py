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
from collections.abc import Iterable, Mapping
from typing import Any, Final

from flashrl_api import verl_metrics as vm

#: The ConfigMap key holding the history.
HISTORY_KEY: Final = "history.jsonl"
#: Its bound, well under the 1 MiB a ConfigMap may hold (with the per-problem validation summaries'
#: 192 KiB, :data:`flashrl_api.validation_summary.MAX_VALIDATION_BYTES`, 960 KiB of data).
MAX_HISTORY_BYTES: Final = 768 * 1024
#: Its name: ``<job>-metrics``.
HISTORY_SUFFIX: Final = "metrics"

#: The metrics kept per step: what ``flashrl report`` draws (prefixes end with ``/``).
KEPT_PREFIXES: Final[tuple[str, ...]] = (
    vm.VAL_CORE_PREFIX,
    vm.TIMING_PREFIX,
)
KEPT_NAMES: Final[frozenset[str]] = frozenset(
    {
        vm.RESPONSE_LENGTH_MEAN,
        vm.RESPONSE_LENGTH_CLIP_RATIO,
        vm.THROUGHPUT,
        vm.TOTAL_TOKENS,
        vm.GEN_MS_PER_TOKEN,
        vm.CRITIC_SCORE_MEAN,
        vm.ENTROPY,
        vm.MISMATCH_KL,
        vm.MISMATCH_K3_KL,
        vm.LOG_PPL_ABS_DIFF,
        vm.IS_ESS,
        vm.IS_MEAN,
        vm.IS_CLIP_FRACTION,
        vm.PROBS_DIFF_MEAN,
        vm.PROBS_DIFF_MAX,
    }
)


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


def _select(
    records: Mapping[int, Mapping[str, float]], stride: int, keep_validations: bool
) -> dict[int, Mapping[str, float]]:
    latest = max(records, default=0)
    return {
        step: values
        for step, values in records.items()
        if step % stride == 0
        or step > latest - RECENT_STEPS
        or (keep_validations and any(k.startswith(vm.VAL_CORE_PREFIX) for k in values))
    }


def render_history(records: Mapping[int, Mapping[str, float]], max_bytes: int = MAX_HISTORY_BYTES) -> str:
    """The ConfigMap value: one line per step in step order, within ``max_bytes``.

    When every step does not fit, older steps are kept only at multiples of a stride (2, 4, 8, ...:
    the smallest that fits), always with the newest :data:`RECENT_STEPS` steps and every validation
    step; only if those alone overflow are validations thinned too. Thinning a thinned history with a
    larger stride gives the same result as thinning the full one, so the history does not degrade as
    it is rewritten step after step.
    """
    present = {s: v for s, v in records.items() if v}
    latest = max(present, default=0)
    text = ""
    for keep_validations in (True, False):
        stride = 1
        while True:
            chosen = _select(present, stride, keep_validations)
            text = "".join(_line(s, chosen[s]) + "\n" for s in sorted(chosen))
            if len(text.encode("utf-8")) <= max_bytes:
                return text
            if stride > latest:
                break
            stride *= 2
    return text


def add_step(text: str, step: int, data: Mapping[str, Any], max_bytes: int = MAX_HISTORY_BYTES) -> str:
    """The history with one step's metrics merged in (a repeated step's values are updated)."""
    records = parse_history(text)
    merged = {**records.get(step, {}), **kept(data)}
    if not merged:
        return text
    records[step] = merged
    return render_history(records, max_bytes)


def add_metrics(text: str, metrics: Iterable[Mapping[str, Any]], max_bytes: int = MAX_HISTORY_BYTES) -> str:
    """The history with a status' latest metrics (``[{name, value, step}]``) recorded at their steps."""
    by_step: dict[int, dict[str, Any]] = {}
    for metric in metrics:
        step, name, value = metric.get("step"), metric.get("name"), metric.get("value")
        if isinstance(step, int) and isinstance(name, str):
            by_step.setdefault(step, {})[name] = value
    for step, data in sorted(by_step.items()):
        text = add_step(text, step, data, max_bytes)
    return text


__all__ = [
    "HISTORY_KEY",
    "HISTORY_SUFFIX",
    "KEPT_NAMES",
    "KEPT_PREFIXES",
    "MAX_HISTORY_BYTES",
    "add_metrics",
    "add_step",
    "history_name",
    "kept",
    "parse_history",
    "render_history",
]
