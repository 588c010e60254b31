"""When a job's ``<job>-metrics`` history is folded, and where the fold runs (docs/architecture.md,
"The job's history").

The reconcile reads and writes the ConfigMap like any other child; this collaborator keeps what the
reconciler must not: when each job was last folded (at most once per ``interval``, however often its
status changes) and which reported status it last folded. The fold itself runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from flashrl_api.history import HISTORY_KEY, add_metrics
from flashrl_api.validation_summary import VALIDATION_KEY, add_status

#: The shortest time between two folds of one job's history (a training step takes minutes).
FOLD_INTERVAL_SECONDS: Final = 5.0

Key = tuple[str, str]


def reported(status: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """What the launcher reported for the history: ``status.metrics`` and ``status.validationProblems``."""
    metrics = status.get("metrics")
    validations = status.get("validationProblems")
    return (
        [m for m in metrics if isinstance(m, Mapping)] if isinstance(metrics, list) else [],
        list(validations) if isinstance(validations, list) else [],
    )


def fold(
    known: Mapping[str, str], status: Mapping[str, Any], total_steps: int | None = None
) -> dict[str, str]:
    """The history ConfigMap's data with the reported status folded in (pure); no real step is beyond
    ``total_steps`` (:func:`~flashrl_api.history.add_metrics` drops what cannot be real)."""
    metrics, validations = reported(status)
    history = add_metrics(known.get(HISTORY_KEY, ""), metrics, total_steps=total_steps)
    summaries = add_status(known.get(VALIDATION_KEY, ""), validations)
    return {k: v for k, v in ((HISTORY_KEY, history), (VALIDATION_KEY, summaries)) if v}


def _digest(status: Mapping[str, Any]) -> str:
    wire = json.dumps(reported(status), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(wire.encode()).hexdigest()


class History:
    """Per job: when its history was last folded and from which reported status."""

    def __init__(
        self, interval: float = FOLD_INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[Key, float] = {}
        self._done: dict[Key, str] = {}

    def wants(self, key: Key, status: Mapping[str, Any]) -> bool:
        """Whether the status reports something not folded yet."""
        metrics, validations = reported(status)
        return bool(metrics or validations) and self._done.get(key) != _digest(status)

    def due_in(self, key: Key) -> float:
        """Seconds until the job's history may be folded again (0: now)."""
        last = self._last.get(key)
        return 0.0 if last is None else max(0.0, last + self._interval - self._clock())

    async def fold(
        self, key: Key, known: Mapping[str, str], status: Mapping[str, Any], total_steps: int | None = None
    ) -> dict[str, str]:
        """Fold ``status`` into ``known`` in a worker thread (the event loop serves everyone meanwhile)."""
        self._last[key] = self._clock()
        return await asyncio.to_thread(fold, known, status, total_steps)

    def done(self, key: Key, status: Mapping[str, Any]) -> None:
        """The reported ``status`` is in the history (or the name is someone else's): not folded again."""
        self._done[key] = _digest(status)

    def forget(self, key: Key) -> None:
        """The job is gone."""
        self._last.pop(key, None)
        self._done.pop(key, None)
