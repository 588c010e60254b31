"""The operator's side of the mismatch guard, pure: status.metrics in, RolloutMismatch and streaks out."""

from __future__ import annotations

from typing import Any

from flashrl_api.spec import MismatchGuardSpec
from flashrl_api.status import FlashRLJobStatus
from flashrl_operator.job.status.mapping import (
    Observation,
    desired_status,
    guard_conditions,
    guard_observation,
    guard_tripped_now,
    status_events,
    status_patch,
)

NOW = "2026-12-03T10:00:00Z"
KL = "rollout_corr/kl"


def metrics(kl: float, step: int) -> list[dict[str, Any]]:
    return [
        {"name": KL, "value": kl, "step": step},
        {"name": "perf/throughput", "value": 1800.0, "step": step},
    ]


def test_no_metrics_no_judgement() -> None:
    assert guard_observation(MismatchGuardSpec(), {}) is None
    assert (
        guard_observation(MismatchGuardSpec(), {"metrics": [{"name": KL, "value": "x", "step": 1}]}) is None
    )
    assert guard_conditions(None) == {}


def test_streaks_are_read_back_from_the_status_and_malformed_ones_skipped() -> None:
    previous = {
        "metrics": metrics(0.2, 6),
        "mismatchGuard": [{"metric": KL, "since": 4, "step": 5, "value": 0.15}, {"metric": 3}],
    }
    result = guard_observation(MismatchGuardSpec(), previous)
    assert result is not None and result.tripped and result.step == 6
    verdict = guard_conditions(result)["RolloutMismatch"]
    assert (verdict.status, verdict.reason) == ("True", "MismatchDrift")
    assert "rollout_corr/kl = 0.2 at step 6" in verdict.message


def test_drift_becomes_a_condition_a_warning_event_and_owned_keys() -> None:
    previous: dict[str, Any] = {
        "phase": "Running",
        "metrics": metrics(0.3, 7),
        "mismatchGuard": [{"metric": KL, "since": 5, "step": 6, "value": 0.2}],
    }
    guard = guard_observation(MismatchGuardSpec(), previous)
    status = desired_status(Observation(generation=1, previous=previous, guard=guard), NOW)
    assert isinstance(status, FlashRLJobStatus)
    cond = next(c for c in status.conditions if c.type == "RolloutMismatch")
    assert (cond.status, cond.reason) == ("True", "MismatchDrift")
    patch = status_patch(previous, status)
    assert patch["mismatchGuard"] == [{"metric": KL, "since": 5, "step": 7, "value": 0.3}]
    assert patch["mismatchGuardStep"] == 7
    assert "metrics" not in patch  # the launcher's key
    events = status_events(previous, status)
    drift = [e for e in events if e.reason == "MismatchDrift"]
    assert len(drift) == 1 and drift[0].type == "Warning" and "threshold 0.1" in drift[0].message
    assert guard_tripped_now(previous, status)
    # The next reconcile of the same drift: no new Event, no second suspension.
    after = {**previous, "conditions": [c.model_dump(mode="json", by_alias=True) for c in status.conditions]}
    again = desired_status(Observation(generation=1, previous=after, guard=guard), NOW)
    assert not [e for e in status_events(after, again) if e.reason == "MismatchDrift"]
    assert not guard_tripped_now(after, again)


def test_within_bounds_is_a_false_condition_and_no_streaks() -> None:
    previous: dict[str, Any] = {"phase": "Running", "metrics": metrics(0.01, 3)}
    guard = guard_observation(MismatchGuardSpec(), previous)
    status = desired_status(Observation(generation=1, previous=previous, guard=guard), NOW)
    cond = next(c for c in status.conditions if c.type == "RolloutMismatch")
    assert (cond.status, cond.reason) == ("False", "MismatchWithinBounds")
    assert status.mismatch_guard is None and status.mismatch_guard_step == 3
