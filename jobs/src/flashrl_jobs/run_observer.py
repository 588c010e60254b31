"""Follows one verl run: its metrics file on a polling thread, its console lines as they come.

Both feed one :class:`~flashrl_jobs.run_metrics.RunState`; each new training step calls ``on_step`` once
(the launcher then reports the status and looks for a new checkpoint). The console is a fallback: once
the file has produced a record, console lines only update the total number of steps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from flashrl_jobs.progress import StepParser, StepReport
from flashrl_jobs.run_metrics import JsonlTail, Record, RunState, parse_console

#: Seconds between two reads of the metrics file (a verl step takes minutes).
POLL_SECONDS: Final = 1.0


def step_report(state: RunState) -> StepReport:
    """What the launcher reports for the newest step: progress, percentage, time left, metrics."""
    score = state.validation_score()
    return StepReport(
        step=state.step,
        total_steps=state.total_steps,
        percent=state.percent(),
        remaining_seconds=state.remaining_seconds(),
        metrics=tuple(m.to_wire() for m in state.status_metrics()),
        validation_score=score.to_wire() if score is not None else None,
    )


class RunObserver:
    """Feeds :attr:`state` from verl's file logger and console; thread-safe."""

    def __init__(
        self,
        state: RunState,
        tail: JsonlTail,
        on_step: Callable[[int], None],
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.state = state
        self.tail = tail
        self._on_step = on_step
        self._poll_seconds = poll_seconds
        self._parser = StepParser(total_steps=state.total_steps)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verl-metrics", daemon=True)
        #: True once the file logger has produced a record: the console is then ignored for steps.
        self.file_active = False

    def start(self) -> None:
        """Start polling the metrics file."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling, then read what verl wrote last."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.poll()

    def console(self, line: str) -> None:
        """One line of verl's output."""
        total = self._parser.total_steps
        self._parser.feed(line)
        if self._parser.total_steps != total:
            self.state.set_total(self._parser.total_steps)
        if self.file_active:
            return
        record = parse_console(line)
        if record is not None:
            self._add(record)

    def poll(self) -> None:
        """Read the records verl appended to the file since the last poll."""
        for record in self.tail.poll():
            self.file_active = True
            self._add(record)

    def _add(self, record: Record) -> None:
        with self._lock:
            if self.state.add(record, time.time()):
                self._on_step(record.step)

    def _run(self) -> None:
        while not self._stop.wait(self._poll_seconds):
            self.poll()
