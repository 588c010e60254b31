"""verl's per-step metrics, read by the launcher: the file logger's JSONL first, the console as fallback.

verl 0.9.1's ``file`` logger (``verl/utils/tracking.py`` ``FileLogger``) writes one line per
``Tracking.log`` call, ``{"step": n, "data": {...}}`` serialised by orjson, to ``$VERL_FILE_LOGGER_PATH``,
opened with ``"wb"`` and unbuffered. The V1 trainer (``trainer/ppo/v1/trainer_base.py`` ``fit``) logs the
validation before training as step 0 and then every completed step ``n``. The launcher tails that file
(:class:`JsonlTail`); whatever goes wrong with it (not created yet, a truncated last line, a line that is
not JSON, a value that is not a number, the file replaced or truncated under it) is logged once and
skipped. The console line (``concat_dict_to_str`` in ``verl/utils/logger/aggregate_logger.py``:
``step:<n> - key:value - ...``, values through ``pprint.pformat``, so numpy scalars print as
``np.float64(0.5)``) carries the same numbers and is used only until the file has produced a record.

No library tails a file that a writer in another process may truncate; the loop here is small and
stdlib only, because it runs inside the trainer image.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from flashrl_api import exported_metrics as names
from flashrl_api import verl_metrics as verl
from flashrl_api.goodput import LauncherClock, launcher_phases

Log = Callable[[str], None]

#: Environment variable verl's FileLogger writes to (``verl/utils/tracking.py``).
FILE_LOGGER_ENV: Final = "VERL_FILE_LOGGER_PATH"
#: Step durations the remaining-time estimate averages over.
ETA_WINDOW: Final = 10
#: A line longer than this without a newline is not a verl record (and would grow memory forever).
MAX_LINE_BYTES: Final = 16 * 2**20

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CONSOLE_STEP = re.compile(r"(?:^|[\s)])step:(\d+)\s+-\s(.*)$")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


@dataclass(frozen=True)
class Record:
    """One logged step: its number and its numeric metrics (NaN and infinities dropped)."""

    step: int
    values: Mapping[str, float]


def numeric(value: object) -> float | None:
    """A finite float, or ``None`` for anything else (bools, strings, NaN, infinities, lists)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def parse_record(line: bytes) -> tuple[Record | None, str | None]:
    """``(record, None)`` for a well-formed line, else ``(None, problem)``."""
    try:
        obj: Any = json.loads(line)
    except ValueError as exc:
        return None, f"not JSON ({exc.__class__.__name__})"
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), dict):
        return None, 'not a {"step": n, "data": {...}} object'
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None, f"step {step!r} is not a non-negative integer"
    values = {str(k): v for k, raw in obj["data"].items() if (v := numeric(raw)) is not None}
    return Record(step, values), None


def parse_console(line: str) -> Record | None:
    """The record a console ``step:<n> - key:value - ...`` line carries, or ``None``."""
    match = _CONSOLE_STEP.search(_ANSI.sub("", line))
    if match is None:
        return None
    values: dict[str, float] = {}
    for part in match.group(2).split(" - "):
        key, sep, text = part.strip().rpartition(":")
        if not sep or not key:
            continue
        wrapped = _NUMPY_SCALAR.match(text)
        if wrapped is not None:
            text = wrapped.group(1)
        try:
            number = float(text)
        except ValueError:
            continue
        if math.isfinite(number):
            values[key] = number
    return Record(int(match.group(1)), values)


class JsonlTail:
    """Reads the complete lines appended to one JSONL file since the last :meth:`poll`.

    A file that is missing, replaced (new inode) or truncated (shorter than what was read) is reopened
    from its start; each kind of problem is logged once, with the count of skipped lines at the end.
    """

    def __init__(self, path: Path, log: Log) -> None:
        self.path = path
        self._log = log
        self._offset = 0
        self._inode: int | None = None
        self._partial = b""
        self._told: set[str] = set()
        self.skipped = 0

    def _once(self, kind: str, message: str) -> None:
        if kind not in self._told:
            self._told.add(kind)
            self._log(message)

    def poll(self) -> list[Record]:
        """New records, in file order; never raises for the file's sake."""
        try:
            stat = self.path.stat()
        except OSError as exc:
            self._once(
                "missing",
                f"verl's metrics file {self.path} is not there yet ({exc.strerror}); waiting for it",
            )
            return []
        if self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self._offset):
            self._once(
                "restarted",
                f"verl's metrics file {self.path} was replaced or truncated; reading it from its start",
            )
            self._offset, self._partial = 0, b""
        self._inode = stat.st_ino
        if stat.st_size == self._offset:
            return []
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read(stat.st_size - self._offset)
        except OSError as exc:
            self._once("unreadable", f"cannot read verl's metrics file {self.path}: {exc}; will retry")
            return []
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()  # the text after the last newline: a line verl is still writing
        if len(self._partial) > MAX_LINE_BYTES:
            self._skip(f"a line longer than {MAX_LINE_BYTES} bytes")
            self._partial = b""
        records = []
        for line in lines:
            if not line.strip():
                continue
            record, problem = parse_record(line)
            if record is None:
                self._skip(str(problem))
            else:
                records.append(record)
        return records

    def _skip(self, problem: str) -> None:
        self.skipped += 1
        self._once(
            "bad-line",
            f"Skipping a malformed line in {self.path} ({problem}); later ones are skipped quietly",
        )


@dataclass(frozen=True)
class StatusMetric:
    """One entry of ``status.metrics``: a verl metric's newest value and the step it came from."""

    name: str
    value: float
    step: int

    def to_wire(self) -> dict[str, Any]:
        """The JSON object in the status."""
        return {"name": self.name, "value": self.value, "step": self.step}


@dataclass
class RunState:
    """The newest value of every verl metric and how far the run is; fed records, read by the exporter
    and the status reporter. Thread-safe (the file poller and the console reader both feed it)."""

    total_steps: int
    step: int = 0
    latest: dict[str, tuple[float, int]] = field(default_factory=dict)
    last_step_time: float | None = None
    #: Step of the newest checkpoint the launcher's ledger has seen (``None`` before the first).
    checkpoint_step: int | None = None
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=ETA_WINDOW))
    #: The launcher's split of its wall-clock by goodput phase (fed each new step); ``None`` in tests
    #: and tools that only follow the metrics.
    clock: LauncherClock | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: Record, now: float) -> bool:
        """Merge one record; ``True`` when it completes a new training step (step 0 is validation)."""
        with self._lock:
            for key, value in record.values.items():
                self.latest[key] = (value, record.step)
            if record.step <= self.step:
                return False
            seconds = record.values.get(verl.TIMING_STEP)
            if seconds is None and self.last_step_time is not None and record.step == self.step + 1:
                seconds = now - self.last_step_time
            if seconds is not None and seconds > 0:
                self.durations.append(seconds)
            if self.clock is not None:
                self.clock.step(record.values, now)
            self.step = record.step
            self.last_step_time = now
            return True

    def phases(self, now: float) -> dict[str, float] | None:
        """Seconds per goodput phase since the launcher started, up to ``now`` (``None`` without a clock)."""
        with self._lock:
            if self.clock is None:
                return None
            return {str(p): s for p, s in self.clock.phases(now).items()}

    def phases_wire(self, now: float, attempt: int | None, gpus: int) -> dict[str, Any] | None:
        """``status.launcherPhases`` up to ``now``, or ``None`` without a clock."""
        with self._lock:
            if self.clock is None:
                return None
            return launcher_phases(self.clock, now, attempt, gpus)

    def set_total(self, total: int) -> None:
        """verl printed its own total (it wins over the spec's)."""
        with self._lock:
            self.total_steps = total

    def set_checkpoint(self, step: int) -> None:
        """The ledger saw a checkpoint of ``step`` (new, or the one a resumed attempt starts from)."""
        with self._lock:
            self.checkpoint_step = step

    def checkpoint(self) -> int | None:
        """Step of the newest checkpoint seen, or ``None``."""
        with self._lock:
            return self.checkpoint_step

    def snapshot(self) -> tuple[int, int, float | None, dict[str, tuple[float, int]]]:
        """``(step, total_steps, last_step_time, latest)`` consistently."""
        with self._lock:
            return self.step, self.total_steps, self.last_step_time, dict(self.latest)

    def percent(self) -> int:
        """Whole percent of the steps done, 0..100."""
        with self._lock:
            if self.total_steps <= 0:
                return 0
            return max(0, min(100, (100 * self.step) // self.total_steps))

    def remaining_seconds(self) -> int | None:
        """Steps left times the mean of the recent step durations; ``None`` before any duration."""
        with self._lock:
            if not self.durations:
                return None
            left = max(0, self.total_steps - self.step)
            return round(left * sum(self.durations) / len(self.durations))

    def status_metrics(self) -> list[StatusMetric]:
        """The curated ``status.metrics`` (:func:`flashrl_api.exported_metrics.status_metric_names`), each
        when verl has reported it."""
        with self._lock:
            latest = dict(self.latest)
        keys = names.status_metric_names(latest)
        return [StatusMetric(k, latest[k][0], latest[k][1]) for k in keys]

    def validation_score(self) -> StatusMetric | None:
        """The headline validation score: the first ``val-core/.../mean@N`` (for the printer column)."""
        found = [m for m in self.status_metrics() if verl.is_validation_score(m.name)]
        return found[0] if found else None
