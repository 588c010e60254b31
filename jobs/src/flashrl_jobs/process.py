"""Run verl as a child process: an argument list (no shell), signals forwarded, exit code kept.

The child gets its own process group, so SIGTERM from Kubernetes (or Ray's job stop) reaches the
launcher once and is forwarded once, to the whole group: verl's driver and anything it spawned
locally. Its output (stdout and stderr, merged) is copied line by line to the launcher's stdout, and
each line is offered to ``on_line`` (the progress parser). The last lines are kept so a failure can
be summarised in the termination message.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
TAIL_LINES = 20


@dataclass(frozen=True)
class ChildResult:
    """How the child ended: its exit code (``128 + n`` when killed by signal ``n``) and its last lines."""

    exit_code: int
    tail: tuple[str, ...]
    forwarded: tuple[int, ...]


def shell_exit_code(returncode: int) -> int:
    """``Popen.returncode`` as a shell reports it: a signal death ``-n`` becomes ``128 + n``."""
    return 128 - returncode if returncode < 0 else returncode


def run_child(
    argv: Sequence[str],
    env: Mapping[str, str],
    on_line: Callable[[str], None] = lambda _line: None,
) -> ChildResult:
    """Run ``argv`` to completion; return its exit code and the tail of its output."""
    forwarded: list[int] = []
    child = subprocess.Popen(
        list(argv),
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
    )

    def forward(signum: int, _frame: FrameType | None) -> None:
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line.rstrip("\n"))
            try:
                on_line(line)
            except Exception as exc:  # a progress bug must never take training down
                print(f"flashrl-launch: progress parser failed on a line: {exc}", file=sys.stderr)
        returncode = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if child.poll() is None:  # the launcher itself is failing: do not leave verl behind
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return ChildResult(exit_code=shell_exit_code(returncode), tail=tuple(tail), forwarded=tuple(forwarded))
