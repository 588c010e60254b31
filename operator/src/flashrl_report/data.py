"""Reading verl's per-step metrics into one table per run (pure, no plotting).

verl 0.9.1's ``file`` logger (``verl/utils/tracking.py`` ``FileLogger``) writes one JSON object per
line, ``{"step": n, "data": {name: value, ...}}``; the initial validation is logged at step 0 and
every training step after it. A restarted trainer truncates its file (it is opened ``"wb"``), so the
launcher keeps one file per attempt (``metrics/attempt-<k>.jsonl``); a directory of those is read as
one run, later attempts winning for the steps they repeat.

Nothing here raises on bad content: a truncated last line (a run that was killed mid-write), a line
that is not JSON, values that are not numbers are each skipped and noted in :attr:`RunMetrics.notes`,
so the report can say what is missing and still show the rest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from flashrl_api import pools as job_pools
from flashrl_api.goodput import Ledger

#: The launcher's per-attempt file names inside a job's metrics directory.
ATTEMPT_FILE = re.compile(r"^attempt-(?P<k>\d+)\.jsonl$")


class MetricsInputError(ValueError):
    """A metrics source the user named cannot be read at all (missing, a directory without files)."""


#: The pools a run's GPUs are counted in: the trainer's worker group and the standalone rollout pool.
TRAINER_POOL: Final = "trainer"
ROLLOUT_POOL: Final = "rollout pool"


def pool_gpus(spec: Mapping[str, object]) -> dict[str, int]:
    """GPUs per pool of a FlashRLJob spec in wire form (``resources``, ``rollout.pool``); pools whose
    counts the spec does not state (a malformed object read from the cluster) are left out."""

    def count(section: object) -> int | None:
        if not isinstance(section, Mapping):
            return None
        nodes, per_node = section.get("nodes"), section.get("gpusPerNode")
        return nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int) else None

    rollout = spec.get("rollout")
    found = {
        TRAINER_POOL: count(spec.get("resources")),
        ROLLOUT_POOL: count(rollout.get("pool")) if isinstance(rollout, Mapping) else None,
    }
    return {pool: gpus for pool, gpus in found.items() if gpus is not None}


#: ``status.goodput.pools[].name`` (:mod:`flashrl_api.pools`) -> the report's name of that pool.
STATUS_POOLS: Final = {job_pools.TRAINER_POOL: TRAINER_POOL, job_pools.ROLLOUT_POOL: ROLLOUT_POOL}


def pool_held_gpu_seconds(goodput: object) -> dict[str, float]:
    """Each pool's held GPU-seconds as the operator accounted them (``status.goodput.pools[]``,
    ``heldGPUSeconds``), by the report's pool names; empty when the status has no per-pool split (one
    pool, an operator before it, a malformed entry), and the report computes the split itself."""
    entries = goodput.get("pools") if isinstance(goodput, Mapping) else None
    out: dict[str, float] = {}
    for entry in entries if isinstance(entries, list) else []:
        name = STATUS_POOLS.get(str(entry.get("name"))) if isinstance(entry, Mapping) else None
        held = _number(entry.get("heldGPUSeconds")) if name is not None else None
        if name is None or held is None:
            return {}
        out[name] = held
    return out


@dataclass(frozen=True)
class PrecisionStretch:
    """The steps a run trained with one rollout precision (``status.goodput.byPrecision[]``): after the
    mismatch guard's FallbackToBF16, the FP8 stretch up to the checkpoint the BF16 attempt resumed
    from, then the BF16 one."""

    precision: str
    attempts: tuple[int, ...]
    held_gpu_seconds: float
    #: Training steps its launchers saw complete (redone steps included).
    steps: int
    #: The steps of the run's history it stands for (later attempts win the steps they redo).
    first_step: int
    last_step: int | None = None

    def covers(self, step: int) -> bool:
        """Whether ``step`` of the run's history was trained in this stretch."""
        return step >= self.first_step and (self.last_step is None or step <= self.last_step)


def precision_stretches(goodput: object, fallback: object) -> list[PrecisionStretch]:
    """The run's stretches by rollout precision, from ``status.goodput.byPrecision`` and
    ``status.rolloutFallback``; empty for a run that ran one precision (or an operator before them)."""
    entries = goodput.get("byPrecision") if isinstance(goodput, Mapping) else None
    if not isinstance(entries, list) or len(entries) < 2 or not isinstance(fallback, Mapping):
        return []
    resumed = fallback.get("checkpointStep")
    if not isinstance(resumed, int):
        return []
    out: list[PrecisionStretch] = []
    for index, entry in enumerate(entries[:2]):
        if not isinstance(entry, Mapping):
            return []
        held = _number(entry.get("heldGPUSeconds"))
        listed = entry.get("attempts")
        attempts = tuple(a for a in listed if isinstance(a, int)) if isinstance(listed, list) else ()
        out.append(
            PrecisionStretch(
                precision=str(entry.get("precision") or "?"),
                attempts=attempts,
                held_gpu_seconds=held or 0.0,
                steps=int(_number(entry.get("steps")) or 0),
                first_step=1 if index == 0 else resumed + 1,
                last_step=resumed if index == 0 else None,
            )
        )
    return out


def rollout_text(spec: object) -> str | None:
    """What a FlashRLJob spec's rollout ran, in words: ``blockwise-fp8 weights, fp8-e4m3 KV cache``
    (``auto``, the engine's default, is said so); ``None`` for a spec without a rollout precision."""
    rollout = spec.get("rollout") if isinstance(spec, Mapping) else None
    quantization = rollout.get("quantization") if isinstance(rollout, Mapping) else None
    if not isinstance(quantization, str) or not isinstance(rollout, Mapping):
        return None
    kv_cache = rollout.get("kvCache")
    cache = "the engine's default KV cache" if kv_cache in (None, "auto") else f"{kv_cache} KV cache"
    return f"{quantization} weights, {cache}"


@dataclass
class RunMetrics:
    """Every numeric metric of one run, by step."""

    label: str
    #: Where the numbers came from (paths, or a cluster object), for the report's header.
    sources: list[str] = field(default_factory=list)
    #: step -> metric name -> value (finite floats only).
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    #: What was skipped or looked wrong while reading, one sentence each.
    notes: list[str] = field(default_factory=list)
    #: The job's goodput ledger (``status.goodput``) when the run was read from the cluster: pods,
    #: start-up, restarts and teardown included. Without it the report splits the steps' own timings.
    goodput: Ledger | None = None
    #: GPUs the run held (both pools' with separate-async), when known.
    gpus: int | None = None
    #: GPUs per pool (:data:`TRAINER_POOL`, and :data:`ROLLOUT_POOL` with separate-async), when known.
    pools: dict[str, int] = field(default_factory=dict)
    #: GPU-seconds held per pool as ``status.goodput.pools`` states them (:func:`pool_held_gpu_seconds`),
    #: when the run was read from a cluster whose operator accounts per pool.
    pool_held_gpu_seconds: dict[str, float] = field(default_factory=dict)
    #: The job's own ``(status.progress.step, status.progress.totalSteps)``, as ``kubectl get`` prints
    #: them (STEP, STEPS), when the run was read from a cluster: a run without metrics still has it.
    status_step: tuple[int, int | None] | None = None
    #: The job's ``status.phase`` when the run was read from a cluster.
    status_phase: str | None = None
    #: After the mismatch guard's FallbackToBF16: the FP8 stretch and the BF16 one
    #: (:func:`precision_stretches`); empty for a run of one precision.
    stretches: list[PrecisionStretch] = field(default_factory=list)
    #: The rollout precision the job's spec asked for (:func:`rollout_text`), when the run was read from
    #: a cluster: an experiment's arms are named by the user, so the page says what each one ran.
    rollout: str | None = None

    def names(self) -> set[str]:
        """Every metric name logged at any step."""
        out: set[str] = set()
        for values in self.steps.values():
            out.update(values)
        return out

    def series(self, name: str, *, training_only: bool = False) -> tuple[list[int], list[float]]:
        """``(steps, values)`` of one metric in step order, steps without it left out.

        ``training_only`` drops step 0 (verl's initial validation, before any training).
        """
        xs: list[int] = []
        ys: list[float] = []
        for step in sorted(self.steps):
            if training_only and step < 1:
                continue
            value = self.steps[step].get(name)
            if value is not None:
                xs.append(step)
                ys.append(value)
        return xs, ys

    def training_steps(self) -> list[int]:
        """Steps at which training happened (1 and up), in order."""
        return sorted(step for step in self.steps if step >= 1)

    @property
    def last_step(self) -> int:
        """The highest step logged (0 when only the initial validation, or nothing, was)."""
        return max(self.steps, default=0)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def parse_lines(run: RunMetrics, lines: Iterable[str], source: str) -> None:
    """Add one verl JSONL stream to ``run``; a repeated step's values replace the earlier ones."""
    numbered = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
    skipped_values = 0
    for position, (lineno, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if position == len(numbered) - 1:
                run.notes.append(
                    f"{source}: the last line ({lineno}) is cut off; the run was stopped while writing it, "
                    "or is still writing"
                )
            else:
                run.notes.append(f"{source}: line {lineno} is not JSON; skipped")
            continue
        step = record.get("step") if isinstance(record, Mapping) else None
        data = record.get("data") if isinstance(record, Mapping) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0 or not isinstance(data, Mapping):
            run.notes.append(
                f'{source}: line {lineno} is not a verl record {{"step": n, "data": {{...}}}}; skipped'
            )
            continue
        values = run.steps.setdefault(step, {})
        for name, raw in data.items():
            number = _number(raw)
            if number is None:
                skipped_values += isinstance(raw, int | float)  # NaN/inf; strings and lists are not metrics
                values.pop(str(name), None)
                continue
            values[str(name)] = number
    if skipped_values:
        run.notes.append(f"{source}: {skipped_values} value(s) were NaN or infinite and are left out")


def _attempt_files(directory: Path) -> list[Path]:
    found = [(int(m["k"]), p) for p in directory.iterdir() if (m := ATTEMPT_FILE.match(p.name))]
    if not found:
        found = [(0, p) for p in sorted(directory.glob("*.jsonl"))]
    return [p for _, p in sorted(found)]


def load_run(label: str, path: str | Path) -> RunMetrics:
    """Read one run from a verl JSONL file, or a directory of per-attempt files (``attempt-<k>.jsonl``)."""
    path = Path(path)
    if path.is_dir():
        files = _attempt_files(path)
        if not files:
            raise MetricsInputError(
                f"{label}={path}: the directory holds no attempt-<k>.jsonl or *.jsonl file"
            )
    elif path.is_file():
        files = [path]
    else:
        raise MetricsInputError(f"{label}={path}: no such file or directory")
    run = RunMetrics(label=label, sources=[str(f) for f in files])
    for file in files:
        parse_lines(run, read_lines(label, file), str(file))
    if not run.steps:
        run.notes.append("no step could be read")
    return run


def read_lines(label: str, file: Path) -> list[str]:
    """A run's input file as lines (undecodable bytes replaced: one bad byte must not lose a run); one
    that cannot be read is an input error that names it."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MetricsInputError(f"{label}={file}: cannot read: {exc.strerror or exc}") from None
    return text.splitlines()


def parse_labelled_argument(option: str, value: str, form: str, example: str) -> tuple[str, str]:
    """``LABEL=PATH`` as given to ``option`` (``--metrics``, ``--validation``); ``form`` and ``example``
    say what is expected."""
    label, sep, path = value.partition("=")
    if not sep or not label.strip() or not path.strip():
        raise MetricsInputError(f"{option} {value!r}: expected {form}, e.g. {example}")
    return label.strip(), path.strip()


__all__ = [
    "ATTEMPT_FILE",
    "MetricsInputError",
    "PrecisionStretch",
    "RunMetrics",
    "load_run",
    "parse_labelled_argument",
    "parse_lines",
    "pool_held_gpu_seconds",
    "precision_stretches",
    "read_lines",
]
