"""The operator's retry decision: not retryable, retry budget, progress gate, lost steps (pure)."""

from __future__ import annotations

import pytest

from flashrl_operator.job.retry_policy import (
    BACKOFF_CAP_SECONDS,
    JITTER_FRACTION,
    AttemptEnd,
    PastAttempt,
    backoff_seconds,
    decide,
    stalls_from,
)


def end(**kw: object) -> AttemptEnd:
    fields: dict[str, object] = {
        "attempt": 1,
        "reason": "TrainerFailed",
        "message": "verl exited with code 1 on its own at step 12",
        "start_step": 0,
        "step": 12,
        "checkpoint_step": 10,
    }
    fields.update(kw)
    return AttemptEnd(**fields)  # type: ignore[arg-type]


def test_a_failure_after_a_checkpoint_is_retried_and_costs_the_steps_since() -> None:
    verdict = decide(end(), max_restarts=3)
    assert verdict.action == "retry" and verdict.reason == "TrainerFailed"
    assert verdict.lost_steps == 2
    assert 30.0 * (1 - JITTER_FRACTION) <= verdict.backoff_seconds <= 30.0
    assert "attempt 2 resumes from step 10" in verdict.message and "2 step(s)" in verdict.message


@pytest.mark.parametrize(
    "reason", ["InvalidConfig", "LauncherUsage", "CheckpointUnwritable", "StoppedEarly", "ValidationFailed"]
)
def test_non_retryable_reasons_fail_at_once(reason: str) -> None:
    verdict = decide(end(reason=reason), max_restarts=3)
    assert (verdict.action, verdict.reason) == ("fail", reason)
    assert "not retryable" in verdict.message


def test_the_jobs_deadline_is_final() -> None:
    assert decide(end(reason="DeadlineExceeded"), 3).action == "fail"
    assert decide(end(deadline_left_seconds=0.0), 3).reason == "DeadlineExceeded"
    assert decide(end(deadline_left_seconds=600.0), 3).action == "retry"


def test_the_retry_budget_is_max_restarts() -> None:
    assert decide(end(attempt=3), max_restarts=3).action == "retry"
    verdict = decide(end(attempt=4), max_restarts=3)
    assert (verdict.action, verdict.reason) == ("fail", "TrainerFailed")
    assert "no retries left" in verdict.message
    assert decide(end(attempt=1), max_restarts=0).action == "fail"


def test_a_failure_before_the_first_step_is_retried_without_progress() -> None:
    verdict = decide(end(reason="GPUWaitTimeout", start_step=10, step=10, checkpoint_step=10), 3)
    assert verdict.action == "retry" and verdict.lost_steps == 0
    assert "before its first step" in verdict.message


def test_one_more_try_from_the_same_checkpoint_then_no_progress_naming_the_step() -> None:
    first = end(attempt=2, start_step=35, step=37, checkpoint_step=35)
    assert decide(first, 3).action == "retry"
    history = [PastAttempt(1, 0, 37, 35), PastAttempt(2, 35, 37, 35)]
    second = end(
        attempt=3, start_step=35, step=37, checkpoint_step=35, earlier_stalls=stalls_from(history, 35)
    )
    verdict = decide(second, 3)
    assert (verdict.action, verdict.reason) == ("fail", "NoProgress")
    assert "attempts 2, 3 each resumed from step 35" in verdict.message
    assert "keep failing after step 37" in verdict.message
    assert verdict.lost_steps == 2


def test_stalls_count_only_attempts_that_trained_from_that_checkpoint_without_saving() -> None:
    history = [
        PastAttempt(1, 0, 7, 5),  # saved: not a stall
        PastAttempt(2, 5, 5, 5),  # never trained (e.g. GPU wait timeout)
        PastAttempt(3, 5, 8, 5),  # trained, saved nothing newer
        PastAttempt(4, 0, 3, 0),  # another checkpoint
    ]
    assert stalls_from(history, 5) == (3,)
    assert stalls_from(history, 0) == (4,)


def test_backoff_doubles_and_is_capped() -> None:
    waits = [backoff_seconds(k, key="uid") for k in (1, 2, 3)]
    assert all(f * (1 - JITTER_FRACTION) <= w <= f for w, f in zip(waits, (30.0, 60.0, 120.0), strict=True))
    assert BACKOFF_CAP_SECONDS * (1 - JITTER_FRACTION) <= backoff_seconds(50) <= BACKOFF_CAP_SECONDS
