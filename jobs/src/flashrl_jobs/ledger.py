"""The checkpoint ledger: which checkpoint verl last finished, read from verl's own tracker file.

verl (0.9.1, ``trainer/ppo/v1/trainer_base.py`` ``_save_checkpoint``) writes every checkpoint to
``<trainer.default_local_dir>/global_step_<n>/`` and, once the actor, critic and dataloader state are
all written, records ``n`` in ``<trainer.default_local_dir>/latest_checkpointed_iteration.txt``
(``get_checkpoint_tracker_filename`` in ``utils/checkpoint/checkpoint_manager.py``). That file is what
``resume_mode=auto`` resumes from (``find_latest_ckpt_path``), so it is also what the ledger reports:
a checkpoint counts once verl itself would resume from it. The save happens inside the step, before
the step's console line, so reading the file after each ``step:<n>`` line sees the checkpoint of
step ``n`` when there is one.

A tracker that is empty, not a number, or names a directory that is missing is reported (one log line
per distinct problem) and never raises: the launcher keeps the last good entry and training goes on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from flashrl_api.times import rfc3339

#: verl's tracker file name (``get_checkpoint_tracker_filename``).
TRACKER_FILE: Final = "latest_checkpointed_iteration.txt"
#: verl's per-step checkpoint directory (``_save_checkpoint``).
STEP_DIR_PREFIX: Final = "global_step_"
#: Larger tracker contents are not verl's (it writes a decimal number).
MAX_TRACKER_BYTES: Final = 64


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint verl would resume from."""

    step: int
    time: str
    path: str

    def to_status(self, attempt: int | None) -> dict[str, object]:
        """``status.checkpoint`` (:class:`flashrl_api.status.CheckpointRecord`) on the wire."""
        record: dict[str, object] = {"step": self.step, "time": self.time, "path": self.path}
        if attempt is not None:
            record["attempt"] = attempt
        return record


@dataclass(frozen=True)
class TrackerProblem:
    """Why the tracker file could not be used."""

    message: str


def read_checkpoint(directory: Path) -> Checkpoint | TrackerProblem | None:
    """The checkpoint the tracker in ``directory`` names; ``None`` when verl has not saved yet."""
    tracker = directory / TRACKER_FILE
    try:
        with tracker.open("rb") as handle:
            raw = handle.read(MAX_TRACKER_BYTES + 1)
            mtime = os.fstat(handle.fileno()).st_mtime
    except FileNotFoundError:
        return None
    except OSError as exc:
        return TrackerProblem(f"cannot read {tracker}: {exc.strerror or exc}")
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return TrackerProblem(f"{tracker} is empty")
    if len(raw) > MAX_TRACKER_BYTES or not text.isdecimal():
        return TrackerProblem(f"{tracker} does not hold a step number: {text[:32]!r}")
    step = int(text)
    step_dir = directory / f"{STEP_DIR_PREFIX}{step}"
    if not step_dir.is_dir():
        return TrackerProblem(f"{tracker} names step {step}, but {step_dir} does not exist")
    return Checkpoint(step=step, time=rfc3339(datetime.fromtimestamp(mtime, UTC)), path=str(step_dir))


class Ledger:
    """Polls the tracker; yields each new checkpoint once and each new problem once."""

    def __init__(self, directory: Path, log: Callable[[str], None]) -> None:
        self.directory = directory
        self._log = log
        self.latest: Checkpoint | None = None
        self._problem: str | None = None

    def poll(self) -> Checkpoint | None:
        """A checkpoint newer than (or different from) the last one reported, else ``None``."""
        found = read_checkpoint(self.directory)
        if isinstance(found, TrackerProblem):
            if found.message != self._problem:
                self._problem = found.message
                self._log(f"Checkpoint ledger: {found.message}; keeping the last good checkpoint")
            return None
        self._problem = None
        if found is None or found == self.latest:
            return None
        if self.latest is not None and (found.step, found.path) == (self.latest.step, self.latest.path):
            # Same checkpoint, the tracker was merely rewritten: not a change worth a request.
            return None
        self.latest = found
        return found


#: How verl's output reads when a write failed because the volume is full or read-only (``strerror`` of
#: ENOSPC and EROFS, as Python and torch print them).
WRITE_FAILURE_TEXTS: Final = ("No space left on device", "Read-only file system", "Disk quota exceeded")


def probe_writable(directory: Path) -> str | None:
    """``None`` when a file can be created, written, synced and removed in ``directory`` (created if
    missing, as verl would); otherwise why not, in words (read-only claim, full volume, permissions)."""
    probe = directory / f".flashrl-write-probe-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"flashrl checkpoint directory probe\n" * 128)
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        with contextlib.suppress(OSError):
            probe.unlink()
        return f"{exc.strerror or exc} ({type(exc).__name__} errno {exc.errno})"
    return None


def free_bytes(directory: Path) -> int | None:
    """Free space for an unprivileged writer on the volume holding ``directory``, when it can be read."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize
