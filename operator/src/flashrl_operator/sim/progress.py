"""The demos' waits, bounded by progress instead of by the clock (shared by
:mod:`flashrl_operator.sim.demo` and :mod:`flashrl_operator.sim.experiment_demo`).

A total wall-clock budget is sized for an idle machine: on a laptop or a CI runner busy with other work
the same run takes several times as long and the demo would fail although nothing is wrong. So a wait
here fails only when *nothing moved* for :data:`DEFAULT_STALL_S` seconds: no write reached the emulated
API server, the operator logged nothing, and no child process (verl's configuration check) used any
CPU. However slow the machine, a run that keeps moving is waited for; an operator that stopped (its
thread ended) or a job that failed ends the wait at once, saying what was awaited.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    from flashrl_operator.sim.apiserver import EmulatedApiServer
    from flashrl_operator.sim.logs import HeldLogs

__all__ = ["DEFAULT_STALL_S", "Progress", "StalledError", "children_cpu_ticks"]

T = TypeVar("T")

#: Seconds without any progress after which a demo's wait gives up.
DEFAULT_STALL_S: Final = 60.0


class StalledError(TimeoutError):
    """Nothing moved for the stall window, or the run failed while waiting; the message says what was
    awaited."""


def children_cpu_ticks(pid: int | None = None) -> int:
    """CPU clock ticks (user + system) used so far by the live child processes of ``pid`` (this
    process by default): a check the operator runs in a child process moves this while it works."""
    root = Path(f"/proc/{pid or os.getpid()}/task")
    total = 0
    try:
        tasks = list(root.iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total


class Progress:
    """What counts as the run moving, and the wait that gives up only when it stopped moving."""

    def __init__(
        self,
        server: EmulatedApiServer,
        held: HeldLogs | None = None,
        stall_s: float = DEFAULT_STALL_S,
        alive: Callable[[], bool] | None = None,
    ) -> None:
        """``alive``: whether the operator still runs (its end fails a wait at once)."""
        self.server = server
        self.held = held
        self.stall_s = stall_s
        self.alive = alive

    def mark(self) -> tuple[int, int, int]:
        """A value that changes whenever something moved: the server's writes, the operator's log lines
        and its children's CPU time."""
        lines = len(self.held.lines) if self.held is not None else 0
        return len(self.server.writes), lines, children_cpu_ticks()

    async def until(
        self,
        probe: Callable[[], Awaitable[T | None]],
        what: str,
        failed: Callable[[], str | None] | None = None,
        interval: float = 0.05,
    ) -> T:
        """Poll ``probe`` until it returns something truthy. Raise :class:`StalledError` when nothing
        moved for :attr:`stall_s` seconds, when the operator stopped, or at once when ``failed`` says
        why the awaited state cannot come (it reads what the probe last saw)."""
        last_mark = self.mark()
        since = time.monotonic()
        while True:
            seen = await probe()
            if seen:
                return seen
            why = failed() if failed is not None else None
            if why:
                raise StalledError(f"{why}, while waiting for {what}")
            if self.alive is not None and not self.alive():
                raise StalledError(f"the operator stopped while waiting for {what}")
            mark, now = self.mark(), time.monotonic()
            if mark != last_mark:
                last_mark, since = mark, now
            elif now - since >= self.stall_s:
                raise StalledError(
                    f"nothing moved for {self.stall_s:.0f}s (no write to the API server, no operator log "
                    f"line, no check running) while waiting for {what} (last seen: {seen!r})"
                )
            await asyncio.sleep(interval)
