"""Events come from status transitions through one rule; watch events reconcile only on new generations."""

from __future__ import annotations

from typing import Any

from flashrl_api.spec import MismatchGuardSpec
from flashrl_api.status import WARNING_REASONS, ConditionType, Reason
from flashrl_operator.job.status.mapping import (
    Observation,
    desired_status,
    guard_observation,
    operator_keys,
    status_events,
)
from flashrl_operator.job.status.staging import StagingObservation
from flashrl_operator.job.triggers import needs_reconcile
from flashrl_operator.vocab.kuberay import RayJobView

NOW = "2026-01-01T00:00:00Z"


def rj(deployment: str = "", job: str = "", **status: Any) -> RayJobView:
    return RayJobView.of({"status": {"jobDeploymentStatus": deployment, "jobStatus": job, **status}})


def test_a_phase_change_is_one_event_and_an_unchanged_status_none() -> None:
    first = desired_status(Observation(generation=1, ray_job_name="j"), NOW)
    events = status_events({}, first)
    assert [(e.type, e.reason) for e in events] == [("Normal", "Pending")]
    assert events[0].message.startswith("Phase New -> Pending")
    again = desired_status(Observation(generation=1, ray_job_name="j", previous=operator_keys(first)), NOW)
    assert status_events(operator_keys(first), again) == []


def test_a_failure_is_a_warning_with_its_reason_once() -> None:
    running = operator_keys(
        desired_status(Observation(ray_job_name="j", ray_job=rj("Running", "RUNNING")), NOW)
    )
    failed = desired_status(
        Observation(
            ray_job_name="j",
            ray_job=rj("Failed", "FAILED", reason="DeadlineExceeded", message="too long"),
            previous=running,
        ),
        NOW,
    )
    events = status_events(running, failed)
    assert [(e.type, e.reason) for e in events] == [("Warning", "DeadlineExceeded")]


def test_a_condition_turning_to_a_warning_reason_is_announced_without_a_phase_change() -> None:
    running = operator_keys(
        desired_status(Observation(ray_job_name="j", ray_job=rj("Running", "RUNNING")), NOW)
    )
    refused = desired_status(
        Observation(
            ray_job_name="j",
            ray_job=rj("Running", "RUNNING"),
            immutable_changes=("spec.rollout.samplesPerPrompt",),
            previous=running,
        ),
        NOW,
    )
    events = status_events(running, refused)
    assert [(e.type, e.reason) for e in events] == [("Warning", Reason.IMMUTABLE_FIELD_CHANGED)]
    assert "spec.rollout.samplesPerPrompt" in events[0].message


def test_vocabulary_sets_are_members_and_conditions_are_written_in_order() -> None:
    assert all(isinstance(r, Reason) for r in WARNING_REASONS)
    status = desired_status(Observation(ray_job_name="j", staging=StagingObservation()), NOW)
    # RolloutMismatch is written once the launcher has reported metrics for the guard to judge.
    # RolloutFallback only once the guard's FallbackToBF16 acted.
    later = (ConditionType.ROLLOUT_MISMATCH, ConditionType.ROLLOUT_FALLBACK)
    assert [c.type for c in status.conditions] == [t for t in ConditionType if t not in later]
    judged = desired_status(
        Observation(
            ray_job_name="j",
            staging=StagingObservation(),
            guard=guard_observation(
                MismatchGuardSpec(), {"metrics": [{"name": "rollout_corr/kl", "value": 0.0, "step": 1}]}
            ),
        ),
        NOW,
    )
    assert [c.type for c in judged.conditions] == [
        t for t in ConditionType if t != ConditionType.ROLLOUT_FALLBACK
    ]


def test_watch_events_reconcile_new_generations_only() -> None:
    new = {"metadata": {"generation": 1}}
    seen = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2}}
    edited = {"metadata": {"generation": 3}, "status": {"observedGeneration": 2}}
    assert needs_reconcile("ADDED", new)
    assert needs_reconcile(None, seen)  # listed when the operator starts
    assert not needs_reconcile("MODIFIED", seen)  # a status write, the launcher's progress
    assert needs_reconcile("MODIFIED", edited)
    assert not needs_reconcile("DELETED", edited)
    assert not needs_reconcile(
        "MODIFIED", {**edited, "metadata": {**edited["metadata"], "deletionTimestamp": "x"}}
    )
