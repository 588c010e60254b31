"""Failures the launcher reports, and where it reports them.

A launcher failure prints its one-paragraph reason as its last line of output and writes it to the
container's termination-message file. Inside a RayJob the launcher is the Ray job's driver, so the
line is what counts: Ray puts the output's last lines into the job's message, KubeRay copies that
into the RayJob, and the operator maps the exit code and this line to the FlashRLJob's reason
(``flashrl_operator.job.status.launcher_failure``). The termination message serves runs where the launcher is
the container's main process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from flashrl_api.status import Reason
from flashrl_jobs import contract

#: Kubernetes keeps at most 4096 bytes of a termination message.
MAX_MESSAGE_BYTES = 4096


class LaunchError(Exception):
    """A launcher failure: ``failure``, a row of ``flashrl_api.status.LAUNCHER_FAILURES``, gives the exit
    code the launcher ends with; ``reason`` is its one paragraph for humans."""

    def __init__(self, failure: Reason, reason: str) -> None:
        super().__init__(reason)
        self.failure = failure
        self.exit_code = contract.exit_code(failure)
        self.reason = reason


def termination_log_path() -> Path:
    """``$FLASHRL_TERMINATION_LOG`` or Kubernetes' default ``/dev/termination-log``."""
    return Path(os.environ.get(contract.TERMINATION_LOG_ENV) or contract.TERMINATION_LOG)


def write_termination_message(reason: str) -> None:
    """Best effort: a pod without the file (or a local run) still gets the reason on stderr."""
    data = reason.encode("utf-8", errors="replace")
    if len(data) > MAX_MESSAGE_BYTES:
        data = data[: MAX_MESSAGE_BYTES - 3] + b"..."
    path = termination_log_path()
    try:
        path.write_bytes(data)
    except OSError as exc:
        print(f"flashrl-launch: could not write the termination message to {path}: {exc}", file=sys.stderr)
