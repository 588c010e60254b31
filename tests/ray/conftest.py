"""A real local Ray head shared by this directory's tests, and a way to run ``flashrl-launch`` against it."""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from local_ray import DRIVER_ENV, LocalRay

LAUNCHER = Path(sys.executable).parent / "flashrl-launch"
HEAD_GPUS = 2


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LocalRay]:
    cluster = LocalRay()
    try:
        cluster.start_head(num_gpus=HEAD_GPUS)
        yield cluster
    finally:
        cluster.stop()


@dataclass
class Launch:
    """A running ``flashrl-launch``; its merged output is collected line by line on a thread."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, needle: str, timeout: float = 120.0) -> str:
        """Return the first output line containing ``needle``; fail with the output so far otherwise."""
        for line in self.lines:
            if needle in line:
                return line
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                self._queue.put(None)
                break
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no line containing {needle!r} within {timeout}s:\n" + "\n".join(self.lines))

    def wait(self, timeout: float = 180.0) -> int:
        code = self.proc.wait(timeout)
        while (line := self._queue.get(timeout=timeout)) is not None:
            self.lines.append(line)
        self._queue.put(None)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def kill_all(self) -> None:
        """Kill the launcher and everything it started (verl's stand-in runs in its own session)."""
        try:
            procs = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(procs, timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[object]:
    """``launch(*args, env={...})`` starts the launcher; every one started is killed at teardown."""
    started: list[Launch] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Launch:
        full_env = dict(os.environ)
        full_env.pop("RAY_ADDRESS", None)
        full_env.update(DRIVER_ENV)
        full_env["FLASHRL_TERMINATION_LOG"] = str(tmp_path / "termination-log")
        full_env["FLASHRL_SERVICEACCOUNT_DIR"] = str(tmp_path / "no-service-account")
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        proc = subprocess.Popen(
            [str(LAUNCHER), *args],
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(Launch(proc))
        return started[-1]

    yield start
    for launched in started:
        launched.kill_all()
