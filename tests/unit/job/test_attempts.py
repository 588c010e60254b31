"""Attempt bookkeeping in the status: names, history, lost steps, what a failure does (pure)."""

from __future__ import annotations

import datetime

from flashrl_api.status import AttemptRecord
from flashrl_operator.job.attempts import MAX_HISTORY, Attempt, Attempts, Reported, on_failure

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def ended(
    attempt: int, start: int, end: int, checkpoint: int, reason: str | None, t0: str, t1: str
) -> Attempt:
    """An attempt that ended: its start step, last step, newest checkpoint, why, and when."""
    return Attempt(
        attempt=attempt,
        start_step=start,
        end_step=end,
        checkpoint_step=checkpoint,
        reason=reason,
        start_time=t0,
        end_time=t1,
    )


def test_a_fresh_job_is_attempt_1_and_its_start_is_recorded_once() -> None:
    state = Attempts.of({})
    assert (state.attempt, state.history, state.lost_steps, state.created) == (1, (), 0, False)
    started = state.started("2026-01-02T03:04:05Z", checkpoint_step=0)
    assert started.created and started.current == Attempt(
        attempt=1, start_step=0, start_time="2026-01-02T03:04:05Z"
    )
    assert started.started("2026-01-02T09:09:09Z", 0) == started
    wire = started.to_status()
    assert wire == {
        "attempt": 1,
        "attempts": [{"attempt": 1, "startStep": 0, "startTime": "2026-01-02T03:04:05Z"}],
        "lostSteps": 0,
        "nextAttemptTime": None,
    }
    assert Attempts.of(wire) == started


def test_a_failure_past_a_checkpoint_opens_attempt_2_from_it_after_the_backoff() -> None:
    state = Attempts.of({}).started("2026-01-02T02:00:00Z", 0)
    reported = Reported(step=12, step_attempt=1, checkpoint_step=10)
    failure = on_failure(state, reported, "TrainerFailed", "verl exited with code 1", 3, NOW)
    assert failure.decision.action == "retry" and failure.decision.lost_steps == 2
    after = failure.attempts
    assert after.attempt == 2 and after.lost_steps == 2 and not after.created
    # 30 s after NOW (03:04:05), shortened by this job's jitter (at most a quarter): 03:04:27 to 03:04:35.
    assert "2026-01-02T03:04:27Z" <= (after.next_attempt_time or "") <= "2026-01-02T03:04:35Z"
    first, second = after.history
    assert first == ended(1, 0, 12, 10, "TrainerFailed", "2026-01-02T02:00:00Z", "2026-01-02T03:04:05Z")
    assert second == Attempt(attempt=2, start_step=10)
    assert failure.event_reason == "Retrying" and "2 step(s)" in failure.event_message


def test_a_step_reported_by_an_earlier_attempt_is_not_this_attempts_progress() -> None:
    state = Attempts(
        attempt=2,
        history=(
            ended(1, 0, 12, 10, "TrainerFailed", "t0", "t1"),
            Attempt(attempt=2, start_step=10, start_time="t2"),
        ),
    )
    # The progress still says step 12 from attempt 1: attempt 2 failed before its first step.
    failure = on_failure(
        state, Reported(step=12, step_attempt=1, checkpoint_step=10), "GPUWaitTimeout", "x", 3, NOW
    )
    assert failure.decision.action == "retry" and failure.decision.lost_steps == 0
    assert "before its first step" in failure.decision.message


def test_repeated_failure_from_one_checkpoint_is_no_progress_and_final() -> None:
    history = (
        ended(1, 0, 37, 35, "TrainerFailed", "t0", "t1"),
        ended(2, 35, 37, 35, "TrainerFailed", "t2", "t3"),
        Attempt(attempt=3, start_step=35, start_time="t4"),
    )
    state = Attempts(attempt=3, history=history, lost_steps=4)
    failure = on_failure(
        state, Reported(step=37, step_attempt=3, checkpoint_step=35), "TrainerFailed", "x", 5, NOW
    )
    assert (failure.decision.action, failure.decision.reason) == ("fail", "NoProgress")
    assert failure.attempts.attempt == 3 and failure.attempts.lost_steps == 6
    assert failure.attempts.history[-1].end_time == "2026-01-02T03:04:05Z"
    assert "keep failing after step 37" in failure.event_message


def test_history_is_bounded() -> None:
    state = Attempts.of({}).started("t", 0)
    for k in range(1, 30):
        reported = Reported(step=5 * k + 1, step_attempt=k, checkpoint_step=5 * k)
        state = on_failure(state, reported, "TrainerFailed", "x", 100, NOW).attempts.started("t", 0)
    assert len(state.history) == MAX_HISTORY
    assert state.history[-1].attempt == state.attempt == 30
    assert state.lost_steps == 29


def test_success_closes_the_attempt() -> None:
    state = Attempts.of({}).started("t0", 0)
    done = state.finished("t1", Reported(step=150, step_attempt=1, checkpoint_step=150), None)
    assert done.current == ended(1, 0, 150, 150, None, "t0", "t1")
    assert done.finished("t2", Reported(), None) == done


def test_an_entry_is_the_apis_attempt_record_and_round_trips_as_stored() -> None:
    """One declaration of the fields (flashrl_api.status.AttemptRecord): what the operator stored reads
    back and is written out unchanged, the launcher's phases included; an entry the CRD's schema would
    not have admitted is skipped rather than guessed at."""
    launcher = {
        "attempt": 1,
        "launchTime": "2026-01-02T02:01:00.000Z",
        "reportTime": "2026-01-02T02:31:00.500Z",
        "steps": 3,
        "phases": [{"phase": "gate", "seconds": 60.0, "gpuSeconds": 960.0}],
    }
    stored = {
        "attempt": 2,
        "attempts": [
            {"attempt": 1, "startStep": 0, "endStep": 3, "checkpointStep": 2, "reason": "TrainerFailed"}
            | {"startTime": "t0", "endTime": "t1", "admitTime": "t0", "releaseTime": "t2"}
            | {"gpus": 16, "launcher": launcher},
            {"attempt": 0, "startStep": -1},
            {"attempt": 2, "startStep": 2, "startTime": "t3"},
        ],
        "lostSteps": 1,
        "nextAttemptTime": None,
    }
    state = Attempts.of(stored)
    assert isinstance(state.history[0], AttemptRecord)
    assert [e.attempt for e in state.history] == [1, 2]
    assert state.to_status() == {**stored, "attempts": [stored["attempts"][0], stored["attempts"][2]]}
