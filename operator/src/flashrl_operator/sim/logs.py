"""The demos' held log: the operator's and kopf's log records kept while a demo runs, printed only if
it fails (shared by :mod:`flashrl_operator.sim.demo` and :mod:`flashrl_operator.sim.experiment_demo`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HeldLogs", "held_logs"]


class HeldLogs(logging.Handler):
    """Keeps log records instead of printing them (the demo prints them only if it fails)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record's line (formatted now: the record's arguments may change later)."""
        self.lines.append(self.format(record))


@contextmanager
def held_logs() -> Iterator[HeldLogs]:
    """Route the operator's and kopf's log records to a :class:`HeldLogs` while the demo runs."""
    held = HeldLogs()
    levels = {"flashrl_operator": logging.INFO, "kopf": logging.INFO, "aiohttp": logging.WARNING}
    loggers = [logging.getLogger(name) for name in levels]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(held)
        lg.setLevel(levels[lg.name])
        lg.propagate = False
    try:
        yield held
    finally:
        for lg, (level, propagate) in zip(loggers, saved, strict=True):
            lg.removeHandler(held)
            lg.setLevel(level)
            lg.propagate = propagate
