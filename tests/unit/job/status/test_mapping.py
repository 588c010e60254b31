"""RayJob status -> FlashRLJob phase, conditions and fields, from a table of KubeRay states."""

from __future__ import annotations

from typing import Any

import pytest
from status_wire import NOW, desired_status

from flashrl_api import parse_job
from flashrl_api.staging import staging_plan
from flashrl_operator.job.status.conditions import find_condition
from flashrl_operator.job.status.mapping import (
    Observation,
    RayJobView,
    decide_phase,
    is_final,
    phase_changed,
    status_patch,
)
from flashrl_operator.job.status.staging import StagingObservation
from flashrl_operator.vocab.kueue import WorkloadView


def ray_job(
    deployment: str = "",
    job: str = "",
    reason: str = "",
    message: str = "",
    suspend: bool = False,
    **extra: Any,
) -> RayJobView:
    status = {
        "jobDeploymentStatus": deployment,
        "jobStatus": job,
        "reason": reason,
        "message": message,
        **extra,
    }
    return RayJobView.of({"spec": {"suspend": suspend}, "status": status})


@pytest.mark.parametrize(
    ("view", "phase", "reason"),
    [
        (ray_job(), "Pending", "WaitingForKubeRay"),
        (ray_job("Initializing"), "Starting", "ClusterStarting"),
        (ray_job("Waiting"), "Starting", "ClusterStarting"),
        (ray_job("Running", "PENDING"), "Starting", "Submitted"),
        (ray_job("Running", ""), "Starting", "Submitted"),
        (ray_job("Running", "RUNNING"), "Running", "Running"),
        (ray_job("Retrying", "FAILED"), "Starting", "Retrying"),
        (ray_job("Complete", "SUCCEEDED"), "Succeeded", "Succeeded"),
        (ray_job("Complete", "FAILED"), "Failed", "AppFailed"),
        (ray_job("Complete", "STOPPED"), "Failed", "Stopped"),
        (ray_job("Failed", "FAILED", "AppFailed", "exit 1"), "Failed", "AppFailed"),
        (ray_job("Failed", "RUNNING", "DeadlineExceeded"), "Failed", "DeadlineExceeded"),
        (ray_job("Failed", "", "PreRunningDeadlineExceeded"), "Failed", "PreRunningDeadlineExceeded"),
        (ray_job("Failed", "", "SubmissionFailed"), "Failed", "SubmissionFailed"),
        (ray_job("ValidationFailed", "", "ValidationFailed", "bad"), "Failed", "ValidationFailed"),
        (ray_job("Suspending"), "Suspended", "Suspended"),
        (ray_job("Suspended"), "Suspended", "Suspended"),
    ],
)
def test_phase_from_kuberay(view: RayJobView, phase: str, reason: str) -> None:
    decision = decide_phase(
        Observation(ray_job=view, ray_job_name="j", suspend_requested=phase == "Suspended")
    )
    assert (decision.phase, decision.reason) == (phase, reason)


def test_kueue_suspension_is_reported_as_queued() -> None:
    obs = Observation(ray_job=ray_job(suspend=True), queued=True, ray_job_name="j")
    assert (decide_phase(obs).phase, decide_phase(obs).reason) == ("Pending", "Queued")
    obs = Observation(ray_job=ray_job("Suspended"), queued=True, ray_job_name="j")
    assert decide_phase(obs).reason == "Queued"


def test_a_queued_job_names_its_kueue_workload_and_why_it_waits() -> None:
    workload = WorkloadView.of(
        {
            "metadata": {"name": "rayjob-j-1a2b3"},
            "spec": {"queueName": "h20-training"},
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": "couldn't assign flavors to pod set workers: insufficient unused quota "
                        "for nvidia.com/gpu in flavor nvidia-h20, 8 more needed",
                    }
                ]
            },
        }
    )
    obs = Observation(ray_job=ray_job("Suspended"), queued=True, ray_job_name="j", workload=workload)
    decision = decide_phase(obs)
    assert (decision.phase, decision.reason) == ("Pending", "Queued")
    assert "Kueue workload rayjob-j-1a2b3 (LocalQueue h20-training)" in decision.message
    assert (
        "insufficient unused quota for nvidia.com/gpu in flavor nvidia-h20, 8 more needed" in decision.message
    )
    # Suspended by the user stays Suspended, queue or not.
    user = Observation(ray_job=ray_job("Suspended"), queued=True, suspend_requested=True, ray_job_name="j")
    assert decide_phase(user).phase == "Suspended"


def test_invalid_spec_fails_with_paths_and_no_ray_job() -> None:
    obs = Observation(
        generation=1, spec_problems=("spec.rollout.samplesPerPrompt: must be >= 1",), ray_job_name="j"
    )
    status = desired_status(obs, NOW)
    assert status["phase"] == "Failed"
    assert status["reason"] == "InvalidSpec"
    assert "spec.rollout.samplesPerPrompt" in status["message"]
    accepted = find_condition(status["conditions"], "Accepted")
    assert accepted is not None and accepted["status"] == "False" and accepted["reason"] == "InvalidSpec"
    assert status["rayJobName"] is None
    assert status["completionTime"] is None  # fixable: not final
    assert not is_final(status)


def test_rejected_child_fails_and_names_it() -> None:
    obs = Observation(rejected="RoleBinding ns/x rejected (422): bad", ray_job_name="j")
    status = desired_status(obs, NOW)
    assert (status["phase"], status["reason"]) == ("Failed", "ChildRejected")
    assert "RoleBinding ns/x" in status["message"]


def test_immutable_change_keeps_phase_and_sets_accepted_false() -> None:
    obs = Observation(
        ray_job=ray_job("Running", "RUNNING"),
        immutable_changes=("spec.rollout.samplesPerPrompt",),
        ray_job_name="j",
    )
    status = desired_status(obs, NOW)
    assert status["phase"] == "Running"
    accepted = find_condition(status["conditions"], "Accepted")
    assert accepted is not None
    assert (accepted["status"], accepted["reason"]) == ("False", "ImmutableFieldChanged")
    assert "spec.rollout.samplesPerPrompt" in accepted["message"]


def test_running_status_fields_and_conditions() -> None:
    view = ray_job(
        "Running",
        "RUNNING",
        rayClusterName="j-raycluster-abc",
        dashboardURL="j-head-svc.ns.svc.cluster.local:8265",
        startTime="2026-01-01T00:00:01Z",
    )
    status = desired_status(Observation(generation=3, ray_job=view, ray_job_name="j"), NOW)
    assert status["observedGeneration"] == 3
    assert status["rayJobName"] == "j"
    assert status["rayClusterName"] == "j-raycluster-abc"
    assert status["dashboardUrl"] == "j-head-svc.ns.svc.cluster.local:8265"
    assert status["startTime"] == "2026-01-01T00:00:01Z"
    assert status["reason"] is None and status["completionTime"] is None
    by_type = {c["type"]: c["status"] for c in status["conditions"]}
    assert by_type == {
        "Accepted": "True",
        "ClusterReady": "True",
        "Running": "True",
        "Succeeded": "False",
        "Failed": "False",
        "Suspended": "False",
    }


def test_failure_copies_kuberay_reason_and_message() -> None:
    view = ray_job(
        "Failed", "FAILED", "AppFailed", "Job entrypoint exited with 1", endTime="2026-01-01T01:00:00Z"
    )
    status = desired_status(Observation(ray_job=view, ray_job_name="j"), NOW)
    assert (status["phase"], status["reason"]) == ("Failed", "AppFailed")
    assert status["message"] == "Job entrypoint exited with 1"
    assert status["completionTime"] == "2026-01-01T01:00:00Z"
    failed = find_condition(status["conditions"], "Failed")
    assert failed is not None and (failed["status"], failed["reason"]) == ("True", "AppFailed")
    assert is_final(status)


def test_final_phase_survives_the_ray_job_disappearing() -> None:
    done = desired_status(Observation(ray_job=ray_job("Complete", "SUCCEEDED"), ray_job_name="j"), NOW)
    later = desired_status(Observation(ray_job=None, ray_job_name="j", previous=done), "2026-01-02T00:00:00Z")
    assert later["phase"] == "Succeeded"
    assert later["completionTime"] == done["completionTime"] == NOW
    assert status_patch(done, later) == {}


def test_patch_is_empty_when_nothing_changed_and_never_touches_progress() -> None:
    obs = Observation(ray_job=ray_job("Initializing"), ray_job_name="j")
    first = desired_status(obs, NOW)
    previous = {**first, "progress": {"step": 3, "totalSteps": 10}}
    again = desired_status(
        Observation(ray_job=ray_job("Initializing"), ray_job_name="j", previous=previous), "later"
    )
    assert status_patch(previous, again) == {}
    assert not phase_changed(previous, again)
    running = desired_status(
        Observation(ray_job=ray_job("Running", "RUNNING"), ray_job_name="j", previous=previous), "later"
    )
    patch = status_patch(previous, running)
    assert "progress" not in patch
    assert patch["phase"] == "Running"
    assert phase_changed(previous, running)


def test_removed_keys_are_nulled_in_the_patch() -> None:
    previous = {"phase": "Failed", "reason": "InvalidSpec", "message": "x"}
    desired = {"phase": "Pending", "reason": None, "message": "y"}
    assert status_patch(previous, desired) == {"phase": "Pending", "reason": None, "message": "y"}


def test_no_ray_job_yet() -> None:
    assert decide_phase(Observation(ray_job_name="j")).phase == "Pending"
    assert decide_phase(Observation(ray_job_name="j", suspend_requested=True)).phase == "Suspended"


def test_owned_keys_are_fields_of_the_status_model() -> None:
    """The CRD's status schema comes from FlashRLJobStatus; a key outside it would be pruned. The owned
    keys are exactly the fields marked as the operator's (flashrl_api.status.WrittenBy)."""
    from flashrl_api import FlashRLJobStatus
    from flashrl_api.status import OPERATOR
    from flashrl_operator.job.status.mapping import OWNED_KEYS

    aliases = {field.alias for field in FlashRLJobStatus.model_fields.values()}
    assert set(OWNED_KEYS) <= aliases
    assert "progress" in aliases and "progress" not in OWNED_KEYS
    marked = [field.alias for field in FlashRLJobStatus.model_fields.values() if OPERATOR in field.metadata]
    assert sorted(OWNED_KEYS) == sorted(marked)
    status = desired_status(Observation(ray_job=ray_job("Running", "RUNNING"), ray_job_name="j"), NOW)
    FlashRLJobStatus.model_validate({k: v for k, v in status.items() if v is not None})


def test_every_key_the_status_computation_sets_is_owned() -> None:
    """A key that status_of computes but the model does not mark as the operator's would silently never
    be written (the patch carries owned keys only); a failed, retried, guarded job sets every one."""
    from flashrl_api.spec import MismatchGuardSpec
    from flashrl_operator.job.status.mapping import OWNED_KEYS, Decided, guard_observation, status_of

    previous = {"metrics": [{"name": "rollout_corr/kl", "value": 0.3, "step": 7}]}
    failed = ray_job(
        "Failed",
        "FAILED",
        "AppFailed",
        "boom",
        rayClusterName="j-abcde",
        dashboardURL="j-head:8265",
        startTime=NOW,
        endTime=NOW,
    )
    obs = Observation(
        generation=2,
        ray_job=failed,
        ray_job_name="j",
        previous=previous,
        guard=guard_observation(MismatchGuardSpec(), previous),
    )
    attempts = {
        "attempt": 1,
        "attempts": [{"attempt": 1, "startStep": 0, "startTime": NOW}],
        "lostSteps": 3,
        "nextAttemptTime": NOW,
    }
    decided = Decided(decide_phase(obs), attempts=attempts, goodput={"heldGPUSeconds": 16.0})
    status = status_of(obs, decided, NOW)
    written = set(status.model_dump(by_alias=True, exclude_unset=True, exclude_none=True))
    assert written == set(OWNED_KEYS)


def test_the_rayjob_is_named_only_once_it_exists_as_cluster_ready_says() -> None:
    # Staging (or queued, or a retry's next attempt): ClusterReady says the RayJob does not exist yet, and
    # the status (the RAYJOB printer column, .status.rayJobName) names none.
    manifest = {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": "j"}}
    plan = tuple(staging_plan(parse_job({**manifest, "spec": {}}).spec))  # the defaults: Hub sources
    assert plan
    staging = desired_status(Observation(ray_job_name="j", staging=StagingObservation(plan=plan)), NOW)
    assert (staging["phase"], staging["reason"]) == ("Staging", None)
    ready = find_condition(staging["conditions"], "ClusterReady")
    assert ready is not None
    assert (ready["reason"], ready["message"]) == ("ClusterNotCreated", "The RayJob does not exist yet")
    assert staging["rayJobName"] is None
    # The reconcile that creates it names it, and ClusterReady says it is being created.
    creating = desired_status(Observation(ray_job_name="j"), NOW)
    ready = find_condition(creating["conditions"], "ClusterReady")
    assert ready is not None and ready["message"] == "The RayJob is being created"
    assert (creating["phase"], creating["rayJobName"]) == ("Pending", "j")
    created = desired_status(Observation(ray_job=ray_job("Initializing"), ray_job_name="j"), NOW)
    assert created["rayJobName"] == "j"
