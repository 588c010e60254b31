"""The launcher's checkpoint ledger, deadline, attempt number and end-of-run verdicts (no Ray, no verl)."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flashrl_api import parse_job
from flashrl_jobs import cli, contract
from flashrl_jobs.deadline import ESI_ENV, job_deadline
from flashrl_jobs.ledger import (
    TRACKER_FILE,
    Checkpoint,
    Ledger,
    TrackerProblem,
    probe_writable,
    read_checkpoint,
)
from flashrl_jobs.process import ChildResult
from flashrl_jobs.progress import StepParser
from flashrl_jobs.termination import LaunchError
from flashrl_jobs.verl_config import compose_config


def _job(**spec: Any) -> Any:
    return parse_job(
        {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": "j"}, "spec": spec}
    )


def _save(directory: Path, step: int, tracker: str | None = None) -> None:
    """What verl's ``_save_checkpoint`` leaves behind."""
    (directory / f"global_step_{step}" / "actor").mkdir(parents=True, exist_ok=True)
    (directory / TRACKER_FILE).write_text(str(step) if tracker is None else tracker)


def test_no_tracker_is_no_checkpoint_yet(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path) is None
    assert read_checkpoint(tmp_path / "not-created-yet") is None


def test_tracker_names_the_step_its_directory_and_when(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    os.utime(tmp_path / TRACKER_FILE, (1767323045, 1767323045))
    found = read_checkpoint(tmp_path)
    assert found == Checkpoint(step=10, time="2026-01-02T03:04:05Z", path=str(tmp_path / "global_step_10"))
    assert found.to_status(2) == {
        "step": 10,
        "time": "2026-01-02T03:04:05Z",
        "path": found.path,
        "attempt": 2,
    }


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "is empty"),
        ("  \n", "is empty"),
        ("ten", "does not hold a step number: 'ten'"),
        ("-5", "does not hold a step number"),
        ("1" * 100, "does not hold a step number"),
        ("\xff\xfe", "does not hold a step number"),
        ("7", "names step 7, but"),
    ],
)
def test_bad_tracker_contents_are_problems_not_crashes(tmp_path: Path, content: str, says: str) -> None:
    (tmp_path / TRACKER_FILE).write_text(content, encoding="latin-1")
    found = read_checkpoint(tmp_path)
    assert isinstance(found, TrackerProblem)
    assert says in found.message


def test_ledger_reports_each_checkpoint_once_and_each_problem_once(tmp_path: Path) -> None:
    lines: list[str] = []
    ledger = Ledger(tmp_path, lines.append)
    assert ledger.poll() is None
    _save(tmp_path, 5)
    first = ledger.poll()
    assert first is not None and first.step == 5
    assert ledger.poll() is None  # unchanged: no second request
    (tmp_path / TRACKER_FILE).write_text("garbage")
    assert ledger.poll() is None and ledger.poll() is None
    assert len(lines) == 1 and "does not hold a step number" in lines[0]
    assert ledger.latest == first  # the last good entry is kept
    _save(tmp_path, 10)
    newer = ledger.poll()
    assert newer is not None and newer.step == 10


def test_probe_finds_a_read_only_directory(tmp_path: Path) -> None:
    assert probe_writable(tmp_path / "a" / "b") is None
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())
    if os.geteuid() == 0:
        # root ignores permission bits; a read-only bind mount is what a read-only claim is.
        assert probe_writable(Path("/proc/self")) is not None
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    assert "Permission denied" in (probe_writable(locked) or "")


def test_unwritable_checkpoint_dir_is_a_launch_error_with_its_own_exit_code() -> None:
    with pytest.raises(LaunchError) as caught:
        cli.check_checkpoint_dir(Path("/proc/self/flashrl-checkpoints"))
    assert caught.value.exit_code == contract.EXIT_CHECKPOINT_UNWRITABLE == 73
    assert "checkpoint directory /proc/self/flashrl-checkpoints is not writable" in caught.value.reason


def test_attempt_number_from_the_environment() -> None:
    assert cli.attempt_number({}) is None
    assert cli.attempt_number({contract.ATTEMPT_ENV: "3"}) == 3
    assert cli.attempt_number({contract.ATTEMPT_ENV: "0"}) is None
    assert cli.attempt_number({contract.ATTEMPT_ENV: "two"}) is None


# --- deadline ---------------------------------------------------------------------------------------


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_no_deadline_no_variable() -> None:
    assert job_deadline(_job(), {}, NOW) is None


def test_deadline_counts_from_the_job_start_the_operator_passes() -> None:
    job = _job(lifecycle={"activeDeadlineSeconds": 3600})
    deadline = job_deadline(job, {contract.JOB_START_ENV: "2026-01-02T02:00:00Z"}, NOW)
    assert deadline is not None
    assert deadline.expires == datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC)
    assert deadline.timestamp == str(int(datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC).timestamp()))
    # Composes against verl and lands, as a string, in the runtime_env every Ray worker of verl gets.
    config = compose_config([*cli.verl_overrides(job), deadline.override()])
    env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars[ESI_ENV] == deadline.timestamp and isinstance(env_vars[ESI_ENV], str)


@pytest.mark.parametrize("start", ["", "yesterday", "2026-01-02T02:00:00"])
def test_without_a_usable_start_the_deadline_counts_from_now_and_says_so(start: str) -> None:
    job = _job(lifecycle={"activeDeadlineSeconds": 60})
    deadline = job_deadline(job, {contract.JOB_START_ENV: start} if start else {}, NOW)
    assert deadline is not None
    assert deadline.expires == datetime(2026, 1, 2, 3, 5, 5, tzinfo=UTC)
    assert "launcher's start" in deadline.start_source


# --- how verl's end becomes the launcher's ----------------------------------------------------------


def _outcome(
    tmp_path: Path, exit_code: int, steps: int, saved: int | None, tail: tuple[str, ...] = ()
) -> int:
    job = _job(training={"totalSteps": 10})
    parser = StepParser(total_steps=10)
    for step in range(1, steps + 1):
        parser.feed(f"step:{step} - x:1")
    ledger = Ledger(tmp_path, lambda _line: None)
    if saved is not None:
        _save(tmp_path, saved)
        ledger.poll()
    return cli._outcome(job, ChildResult(exit_code, tail, ()), parser, ledger)


def test_verl_exit_0_at_the_last_step_is_success(tmp_path: Path) -> None:
    assert _outcome(tmp_path, 0, 10, 10) == contract.EXIT_OK


def test_a_resume_that_finds_the_final_checkpoint_is_success(tmp_path: Path) -> None:
    # The previous attempt saved step 10 (the last) and failed afterwards: nothing left to run.
    assert _outcome(tmp_path, 0, 0, 10) == contract.EXIT_OK


def test_verl_exit_0_before_the_last_step_is_stopped_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(contract.TERMINATION_LOG_ENV, str(tmp_path / "termination-log"))
    assert _outcome(tmp_path, 0, 0, 5) == contract.EXIT_STOPPED_EARLY == 70
    said = (tmp_path / "termination-log").read_text()
    assert said == "verl stopped early: it exited 0 at step 5 of 10 (last step line 0, newest checkpoint 5)"


def test_verl_failure_passes_its_exit_code_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.TERMINATION_LOG_ENV, str(tmp_path / "termination-log"))
    assert _outcome(tmp_path, 1, 7, 5, ("RuntimeError: NCCL timeout",)) == 1
    assert (
        (tmp_path / "termination-log").read_text().startswith("verl exited with code 1 on its own at step 7")
    )


def test_disk_errors_count_only_when_the_checkpoint_volume_really_is_unwritable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(contract.TERMINATION_LOG_ENV, str(tmp_path / "termination-log"))
    # ENOSPC in the output, but the checkpoint volume still takes writes (e.g. /dev/shm was full).
    assert _outcome(tmp_path, 1, 7, 5, ("OSError: [Errno 28] No space left on device",)) == 1


def test_verl_failing_on_a_full_or_read_only_checkpoint_volume_is_not_retryable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(contract.TERMINATION_LOG_ENV, str(tmp_path / "termination-log"))
    job = _job(training={"totalSteps": 10})
    parser = StepParser(total_steps=10)
    parser.feed("step:4 - x:1")
    ledger = Ledger(Path("/proc/self/flashrl-checkpoints"), lambda _line: None)
    tail = ("torch.save(...)", "OSError: [Errno 30] Read-only file system: '/checkpoints/x/global_step_5'")
    code = cli._outcome(job, ChildResult(1, tail, ()), parser, ledger)
    assert code == contract.EXIT_CHECKPOINT_UNWRITABLE
    said = (tmp_path / "termination-log").read_text()
    assert said.startswith("checkpoint directory /proc/self/flashrl-checkpoints is not writable: ")
    assert "verl exited with code 1 at step 4 ('Read-only file system' in its output)" in said
