"""The demos' waits give up only when nothing moved, or at once when the run failed or the operator
stopped; whatever moves (a write, a log line) keeps them waiting."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from flashrl_operator.sim.logs import HeldLogs
from flashrl_operator.sim.progress import Progress, StalledError, children_cpu_ticks


class _Server:
    """What :class:`Progress` reads of the emulated API server: its record of writes."""

    def __init__(self) -> None:
        self.writes: list[Any] = []


def _progress(server: _Server, held: HeldLogs | None = None, **kwargs: Any) -> Progress:
    return Progress(server, held, **kwargs)  # type: ignore[arg-type]


async def _never() -> None:
    return None


async def test_a_wait_where_nothing_moves_gives_up_saying_what_it_waited_for() -> None:
    with pytest.raises(StalledError, match=r"nothing moved for 0s .* while waiting for the impossible"):
        await _progress(_Server(), stall_s=0.3).until(_never, "the impossible")


async def test_a_wait_that_keeps_moving_outlasts_the_stall_window() -> None:
    server, held = _Server(), HeldLogs()
    progress = _progress(server, held, stall_s=0.4)
    started = time.monotonic()

    async def done_after_a_while() -> bool | None:
        elapsed = time.monotonic() - started
        # Something moves every 0.1 s: a write, then a log line, taking turns.
        if int(elapsed * 10) % 2:
            server.writes.append(object())
        else:
            held.lines.append("INFO flashrl_operator: working")
        return True if elapsed > 1.6 else None  # four stall windows

    assert await progress.until(done_after_a_while, "the slow run", interval=0.02) is True
    assert time.monotonic() - started > 1.6


async def test_a_failed_run_ends_the_wait_at_once() -> None:
    progress = _progress(_Server(), stall_s=3600)
    started = time.monotonic()
    with pytest.raises(
        StalledError, match=r"the job Failed \(TrainerFailed\), while waiting for phase Running"
    ):
        await progress.until(_never, "phase Running", lambda: "the job Failed (TrainerFailed)")
    assert time.monotonic() - started < 600  # not the stall window


async def test_a_stopped_operator_ends_the_wait_at_once() -> None:
    progress = _progress(_Server(), stall_s=3600, alive=lambda: False)
    with pytest.raises(StalledError, match="the operator stopped while waiting for the RayJob"):
        await progress.until(_never, "the RayJob")


def test_a_working_child_process_counts_as_progress() -> None:
    # verl's check runs in a child process of the demo's: its CPU time moves while it works.
    spin = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", spin])
    try:
        before = children_cpu_ticks()
        for _ in range(200):
            time.sleep(0.05)
            if children_cpu_ticks() > before:
                break
        assert children_cpu_ticks() > before
    finally:
        child.kill()
        child.wait()
