"""One reconcile's whole outcome from plain data: ``next_step`` (pure), case by case.

Each test builds what a reconcile would have read (the job, its children as the API server returns
them, the claims, the cluster) and asserts the whole Step: the children written and how, the
deletions and patches, the status's phase, reason, conditions and attempts, the Events in order,
and the next wake-up.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

import flashrl_operator.job.status.mapping as mapping_module
import flashrl_operator.job.step as step_module
from flashrl_api import FlashRLJob, parse_job
from flashrl_api.staging import staging_plan
from flashrl_api.status import Reason
from flashrl_operator.job.attempts import Reported
from flashrl_operator.job.staging import record_patches
from flashrl_operator.job.status.mapping import Announcement, Observation, decide_phase
from flashrl_operator.job.status.ray import PhaseDecision
from flashrl_operator.job.step import (
    GUARD_SUSPEND_MESSAGE,
    WAKE_MARGIN_SECONDS,
    HistoryRead,
    Patch,
    Reads,
    Ref,
    Step,
    attempt_context,
    children_to_read,
    claims_to_read,
    converging,
    creates_first,
    may_end_attempt,
    needs_staging_pods,
    next_step,
    release_checks,
)
from flashrl_operator.render import Child, attempt_ray_job_name, render
from flashrl_operator.render.rayjob import deletion_rules
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.kinds import PERSISTENT_VOLUME_CLAIM
from flashrl_operator.vocab.kueue import WorkloadView

UID = "0b5e7c1e-0000-4000-8000-00000000f1a5"
NAMESPACE = "rl"
NAME = "qwen"
NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
CREATED = NOW - datetime.timedelta(hours=1)
T0 = "2026-03-01T11:00:30Z"  # when attempt 1's RayJob was first seen
NOW_S = "2026-03-01T12:00:00Z"
#: Model and data as paths on the job's volumes: nothing to stage.
LOCAL = {
    "model": {"source": "/models/Qwen3-8B-Base"},
    "data": {"train": "/data/train.parquet", "validation": "/data/val.parquet"},
}


def make_job(spec: Mapping[str, Any] | None = None, *, hf: bool = False) -> FlashRLJob:
    full = {**({} if hf else LOCAL), **(spec or {})}
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID, "generation": 1},
            "spec": full,
        }
    )


def observe(job: FlashRLJob, previous: Mapping[str, Any] | None = None, **read: Any) -> Reads:
    """What a reconcile read: ``live`` maps a kind to its live object (absent: missing)."""
    prev = previous or {}
    desired = render(job, attempt_context(job, prev, CREATED))
    by_kind = read.pop("live", {})
    live = {c.describe(): by_kind.get(c.resource.kind) for c in desired.children}
    return Reads(
        namespace=NAMESPACE,
        name=NAME,
        uid=UID,
        now=NOW,
        created=CREATED,
        generation=1,
        previous=prev,
        job=job,
        desired=desired,
        live=live,
        **read,
    )


def children(job: FlashRLJob, previous: Mapping[str, Any] | None = None) -> dict[str, Child]:
    """The rendered children by kind."""
    return {c.resource.kind: c for c in render(job, attempt_context(job, previous or {}, CREATED)).children}


def as_live(job: FlashRLJob, previous: Mapping[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    """Every child as the API server returns it: this job's, unchanged; ``status`` by kind."""
    out = {}
    for kind, child in children(job, previous).items():
        body = copy.deepcopy(child.body)
        body["metadata"]["uid"] = f"uid-{kind}"
        if kind in status:
            body["status"] = status[kind]
        out[kind] = body
    return out


def ray_status(deployment: str, job_status: str = "", **extra: Any) -> dict[str, Any]:
    return {"jobDeploymentStatus": deployment, "jobStatus": job_status, **extra}


def foreign_object(api_version: str, kind: str, name: str) -> dict[str, Any]:
    """An object under a child's name that someone else made (no owner reference to the job)."""
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE}}


def conditions(step: Step) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in step.status.conditions}


def running(attempt: int = 1, **extra: Any) -> dict[str, Any]:
    """The status of a job whose attempt ``attempt`` runs (attempt 1 from step 0)."""
    history = [{"attempt": 1, "startStep": 0, "startTime": T0}]
    if attempt > 1:
        history = [
            {
                "attempt": 1,
                "startStep": 0,
                "endStep": 20,
                "checkpointStep": 20,
                "reason": "AppFailed",
                "startTime": T0,
                "endTime": "2026-03-01T11:30:00Z",
            },
            {"attempt": 2, "startStep": 20, "startTime": "2026-03-01T11:31:00Z"},
        ]
    return {
        "phase": "Running",
        "observedGeneration": 1,
        "rayJobName": attempt_ray_job_name(make_job(), attempt),
        "attempt": attempt,
        "attempts": history,
        "lostSteps": 0,
        **extra,
    }


def applied(step: Step) -> list[tuple[str, str, dict[str, Any]]]:
    return [(a.child.resource.kind, a.mode, dict(a.patch)) for a in step.apply]


ALL_CREATED = [
    ("ServiceAccount", "create", {}),
    ("Role", "create", {}),
    ("RoleBinding", "create", {}),
    ("ConfigMap", "create", {}),
    ("NetworkPolicy", "create", {}),
]
ACCEPTED = ("True", "Accepted")
NOTHING_TO_STAGE = ("True", "NothingToStage")
PHASES_FALSE = {
    "Failed": ("False", "NotFailed"),
    "Running": ("False", "NotRunning"),
    "Succeeded": ("False", "NotSucceeded"),
    "Suspended": ("False", "NotSuspended"),
}


# The first attempt.


def test_a_new_job_creates_every_child_and_its_first_attempt_starts() -> None:
    step = next_step(observe(make_job()))
    assert applied(step) == [*ALL_CREATED, ("RayJob", "create", {})]
    assert step.apply[-1].child.name == NAME
    assert (step.status.phase, step.status.reason) == ("Pending", None)
    assert step.status.message == "RayJob created; waiting for KubeRay to act on it"
    assert conditions(step) == {
        "Accepted": ACCEPTED,
        "ClusterReady": ("False", "ClusterStarting"),
        "Staged": NOTHING_TO_STAGE,
        **PHASES_FALSE,
    }
    assert step.events == (
        Announcement(
            "Normal", "Pending", "Phase New -> Pending: RayJob created; waiting for KubeRay to act on it"
        ),
    )
    assert step.status.attempt == 1 and step.status.next_attempt_time is None
    assert [(a.attempt, a.start_time, a.end_time) for a in step.status.attempts or []] == [(1, NOW_S, None)]
    assert (step.delete, step.claim_patches, step.spec_patch, step.wake_after) == ((), (), None, None)
    assert step.status_patch["phase"] == "Pending" and step.status_patch["rayJobName"] == NAME


def test_an_unchanged_running_job_writes_nothing_and_announces_nothing() -> None:
    job = make_job()
    first = next_step(
        observe(job, running(), live=as_live(job, running(), RayJob=ray_status("Running", "RUNNING")))
    )
    assert (first.status.phase, first.apply) == ("Running", ())
    previous = {**running(), **first.status_patch}
    again = next_step(
        observe(job, previous, live=as_live(job, previous, RayJob=ray_status("Running", "RUNNING")))
    )
    assert again.apply == () and again.status_patch == {} and again.events == ()


def test_a_drifted_child_is_restored_and_a_drifted_rayjob_merge_patched() -> None:
    job = make_job()
    live = as_live(job, running(), RayJob=ray_status("Running", "RUNNING"))
    live["ConfigMap"]["data"] = {"spec.json": "{}"}
    live["RayJob"]["spec"]["ttlSecondsAfterFinished"] = 5
    step = next_step(observe(job, running(), live=live))
    cm = children(job)["ConfigMap"].body
    assert applied(step) == [
        ("ConfigMap", "restore", {"data": cm["data"]}),
        # With the deletion rules the RayJob's own TTL stays 0 (KubeRay refuses it beside them).
        ("RayJob", "merge", {"spec": {"ttlSecondsAfterFinished": 0}}),
    ]
    assert step.status.phase == "Running" and step.events == ()


# Retries.


def failed_attempt(job: FlashRLJob, previous: Mapping[str, Any], ray: dict[str, Any], **read: Any) -> Step:
    live = as_live(job, previous, RayJob=ray)
    return next_step(observe(job, previous, live=live, retry_backoff=10.0, **read))


def test_a_retryable_failure_deletes_the_rayjob_and_starts_a_new_attempt_after_the_backoff() -> None:
    job = make_job({"lifecycle": {"maxRestarts": 2}})
    # The launcher reported step 12 and a checkpoint at 10 after the job was first read.
    step = failed_attempt(job, running(), ray_status("Complete", "FAILED"), reported=Reported(12, 1, 10))
    assert step.apply == ()
    assert step.delete == (Ref(kuberay.RAY_JOB, NAMESPACE, NAME, "uid-RayJob"),)
    status = step.status
    assert (status.phase, status.reason, status.attempt, status.lost_steps) == ("Starting", None, 2, 2)
    # The next attempt's RayJob (attempt_ray_job_name(job, 2)) does not exist yet, and ClusterReady says
    # so: the RAYJOB column names none until it does, neither the deleted one.
    assert attempt_ray_job_name(job, 2) != NAME
    assert status.ray_job_name is None
    assert any(c.reason == Reason.CLUSTER_NOT_CREATED for c in status.conditions or [])
    assert [
        (a.attempt, a.start_step, a.end_step, a.checkpoint_step, a.reason, a.end_time)
        for a in status.attempts or []
    ] == [
        (1, 0, 12, 10, "AppFailed", NOW_S),
        (2, 10, None, None, None, None),
    ]
    # The backoff (10 s, less this job's jitter), in whole seconds as the status stores it.
    next_time = datetime.datetime.fromisoformat(str(status.next_attempt_time))
    assert NOW + datetime.timedelta(seconds=7) <= next_time <= NOW + datetime.timedelta(seconds=10)
    assert step.wake_after == (next_time - NOW).total_seconds() + WAKE_MARGIN_SECONDS
    assert "attempt 2 resumes from step 10" in status.message
    assert step.events == (
        Announcement("Warning", "Retrying", status.message),
        Announcement("Normal", "Starting", f"Phase Running -> Starting: {status.message}"),
    )
    assert conditions(step)["ClusterReady"] == ("False", "ClusterNotCreated")


def test_while_the_backoff_runs_the_next_rayjob_waits_and_the_job_wakes_when_it_ends() -> None:
    job = make_job({"lifecycle": {"maxRestarts": 2}})
    previous = {
        **running(),
        "phase": "Starting",
        "message": "attempt 2 resumes from step 10 in 8s",
        "attempt": 2,
        "attempts": [
            {
                "attempt": 1,
                "startStep": 0,
                "endStep": 12,
                "checkpointStep": 10,
                "reason": "AppFailed",
                "startTime": T0,
                "endTime": "2026-03-01T11:59:55Z",
            },
            {"attempt": 2, "startStep": 10},
        ],
        "nextAttemptTime": "2026-03-01T12:00:03Z",
    }
    live = as_live(job, previous)
    del live["RayJob"]
    step = next_step(observe(job, previous, live=live))
    assert step.apply == () and step.delete == ()
    assert (step.status.phase, step.status.message) == ("Starting", "attempt 2 resumes from step 10 in 8s")
    assert step.status.next_attempt_time == "2026-03-01T12:00:03Z"
    assert step.wake_after == 3 + WAKE_MARGIN_SECONDS
    assert step.events == ()
    # Once it is over, the next attempt's RayJob is created, named for attempt 2.
    later = next_step(replace_now(observe(job, previous, live=live), seconds=4))
    assert applied(later) == [("RayJob", "create", {})]
    assert later.apply[0].child.name == attempt_ray_job_name(job, 2)
    assert (later.status.phase, later.status.reason, later.wake_after) == ("Starting", None, None)
    assert later.status.message.startswith("Attempt 2: RayJob created")
    assert later.status.next_attempt_time is None


def replace_now(observed: Reads, *, seconds: int) -> Reads:
    return replace(observed, now=observed.now + datetime.timedelta(seconds=seconds))


def test_a_non_retryable_failure_fails_the_job_at_once() -> None:
    job = make_job({"lifecycle": {"maxRestarts": 5}})
    ray = ray_status("Failed", "", reason="DeadlineExceeded", message="The RayJob ran past its deadline")
    step = failed_attempt(job, running(), ray)
    assert step.apply == () and step.delete == () and step.wake_after is None
    assert (step.status.phase, step.status.reason, step.status.attempt) == ("Failed", "DeadlineExceeded", 1)
    assert conditions(step)["Failed"] == ("True", "DeadlineExceeded")
    assert step.status.completion_time == NOW_S
    assert [(a.attempt, a.reason, a.end_time) for a in step.status.attempts or []] == [
        (1, "DeadlineExceeded", NOW_S)
    ]
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "DeadlineExceeded")]
    assert step.events[0].message == f"Phase Running -> Failed: {step.status.message}"


def test_with_the_retries_spent_the_job_fails_with_the_attempts_reason() -> None:
    job = make_job({"lifecycle": {"maxRestarts": 1}})
    previous = running(2)
    step = failed_attempt(job, previous, ray_status("Complete", "FAILED"), reported=Reported(30, 2, 30))
    assert step.delete == () and step.wake_after is None
    assert (step.status.phase, step.status.reason, step.status.attempt) == ("Failed", "AppFailed", 2)
    assert "1 restart" in step.status.message or "maxRestarts" in step.status.message
    assert [(a.attempt, a.end_step, a.reason) for a in step.status.attempts or []] == [
        (1, 20, "AppFailed"),
        (2, 30, "AppFailed"),
    ]
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "AppFailed")]


def test_an_attempt_ended_by_the_guards_fallback_spends_no_retry() -> None:
    # The same failure of attempt 2 as above, but attempt 1 was ended by FallbackToBF16: retried.
    job = make_job({**FALLBACK, "lifecycle": {"maxRestarts": 1}})
    previous = running(2)
    previous["attempts"][0]["reason"] = "FellBackToBF16"
    previous["rolloutFallback"] = {
        "attempt": 2,
        "step": 20,
        "checkpointStep": 20,
        "metric": "rollout_corr/kl",
        "value": 0.9,
        "threshold": 0.1,
        "fromQuantization": "blockwise-fp8",
        "fromKvCache": "fp8-e4m3",
        "time": T0,
    }
    bf16 = step_module.with_rollout_precision(job, previous)
    step = failed_attempt(bf16, previous, ray_status("Complete", "FAILED"), reported=Reported(30, 2, 30))
    assert (step.status.phase, step.status.attempt) == ("Starting", 3)
    assert conditions(step)["RolloutFallback"] == ("True", "FellBackToBF16")  # the record stays
    assert step.status.quantization == "bf16"


def test_a_rayjob_deleted_while_the_job_ran_is_a_failed_attempt_not_a_silent_restart() -> None:
    job = make_job({"lifecycle": {"maxRestarts": 1}})
    live = as_live(job, running())
    del live["RayJob"]
    step = next_step(observe(job, running(), live=live, retry_backoff=10.0))
    assert step.apply == () and step.delete == ()  # nothing left to delete, nothing recreated yet
    assert (step.status.phase, step.status.attempt) == ("Starting", 2)
    assert [(a.attempt, a.reason) for a in step.status.attempts or []] == [(1, "RayJobDeleted"), (2, None)]
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "Retrying"), ("Normal", "Starting")]
    assert step.wake_after is not None


def test_success_closes_the_attempt_with_the_launchers_last_step() -> None:
    job = make_job()
    step = failed_attempt(
        job, running(), ray_status("Complete", "SUCCEEDED", message="done"), reported=Reported(150, 1, 150)
    )
    assert (step.status.phase, step.status.reason, step.status.message) == ("Succeeded", None, "done")
    assert [(a.end_step, a.checkpoint_step, a.reason, a.end_time) for a in step.status.attempts or []] == [
        (150, 150, None, NOW_S)
    ]
    assert conditions(step)["Succeeded"] == ("True", "JobSucceeded")
    assert step.events == (Announcement("Normal", "Succeeded", "Phase Running -> Succeeded: done"),)


def test_success_short_of_the_last_step_is_stopped_early_and_not_retried() -> None:
    """KubeRay says SUCCEEDED, the launcher's progress says 40 of 150: Failed/StoppedEarly, at once."""
    job = make_job({"lifecycle": {"maxRestarts": 3}})
    ray = ray_status("Complete", "SUCCEEDED", message="Job finished successfully.")
    step = failed_attempt(job, running(), ray, reported=Reported(40, 1, 40, 150))
    assert (step.status.phase, step.status.reason) == ("Failed", "StoppedEarly")
    assert step.status.message == (
        "KubeRay reports SUCCEEDED but training stopped at step 40 of 150 (newest checkpoint 40) "
        "(not retryable)"
    )
    assert step.delete == () and step.wake_after is None  # not retried: the launcher's exit 70 is not either
    assert conditions(step)["Succeeded"] == ("False", "NotSucceeded")
    assert conditions(step)["Failed"] == ("True", "StoppedEarly")
    assert [(a.attempt, a.end_step, a.reason) for a in step.status.attempts or []] == [
        (1, 40, "StoppedEarly")
    ]
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "StoppedEarly")]

    # Final: the next reconcile, with KubeRay still saying SUCCEEDED, changes nothing.
    previous = {**running(), **step.status.model_dump(mode="json", by_alias=True, exclude_none=True)}
    previous["progress"] = {"step": 40, "totalSteps": 150, "attempt": 1}
    again = next_step(observe(job, previous, live=as_live(job, previous, RayJob=ray)))
    assert (again.status.phase, again.status.reason, again.status.message) == (
        "Failed",
        "StoppedEarly",
        step.status.message,
    )
    assert again.status_patch == {} and again.events == ()


def test_success_without_any_reported_step_is_not_a_success() -> None:
    job = make_job()
    step = failed_attempt(job, running(), ray_status("Complete", "SUCCEEDED"), reported=Reported())
    assert (step.status.phase, step.status.reason) == ("Failed", "StoppedEarly")
    assert step.status.message == (
        "KubeRay reports SUCCEEDED but the launcher reported no training step of 150 "
        "(status.progress is empty)"
    )


@pytest.mark.parametrize(
    ("reported", "phase"),
    [
        (Reported(150, 1, 145, 150), "Succeeded"),  # the last step
        (Reported(148, 1, 150, 150), "Succeeded"),  # a checkpoint of the last step (its line was lost)
        (Reported(96, 1, 95, 96), "Succeeded"),  # verl's own total (a short data set): the launcher's
        (Reported(149, 1, 145, 150), "Failed"),
        (Reported(149, 1, 145, 0), "Failed"),  # no total reported: spec.training.totalSteps (150)
    ],
)
def test_training_is_done_when_the_step_or_checkpoint_reached_the_total(
    reported: Reported, phase: str
) -> None:
    job = make_job()
    step = failed_attempt(job, running(), ray_status("Complete", "SUCCEEDED"), reported=reported)
    assert step.status.phase == phase


def test_a_final_failure_keeps_the_retry_policys_verdict_whatever_kuberay_says_later() -> None:
    """The reconcile after a final failure does not rewrite it from the RayJob: the note the retry policy
    added (the deadline has passed) stays."""
    job = make_job({"lifecycle": {"maxRestarts": 5}})
    ray = ray_status("Failed", "", reason="DeadlineExceeded", message="The RayJob ran past its deadline")
    step = failed_attempt(job, running(), ray)
    assert step.status.message.endswith("(lifecycle.activeDeadlineSeconds has passed)")
    previous = step.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    again = next_step(observe(job, previous, live=as_live(job, previous, RayJob=ray)))
    assert again.status_patch == {} and again.status.message == step.status.message


# Staging.


HF = make_job(hf=True)
CLAIMS = ("hf-cache", "rl-data")


def claim(name: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NAMESPACE, "annotations": dict(annotations or {})}}


def staging_live(job_status: Mapping[str, Any] | None) -> dict[str, Any]:
    live = as_live(HF, None, Job=job_status or {})
    del live["RayJob"]
    if job_status is None:
        del live["Job"]
    return live


def test_sources_to_stage_start_the_staging_job_and_no_rayjob() -> None:
    assert claims_to_read(HF, render(HF), {}) == CLAIMS
    step = next_step(observe(HF, live={}, claims={c: claim(c) for c in CLAIMS}))
    assert applied(step) == [*ALL_CREATED, ("Job", "create", {})]
    assert (step.status.phase, step.status.reason) == ("Staging", None)
    assert step.status.message.startswith("Downloading hf://")
    assert conditions(step)["Staged"] == ("False", "Staging")
    assert step.claim_patches == () and step.status.attempts is None
    assert [(e.type, e.reason) for e in step.events] == [("Normal", "Staging")]


def test_a_running_staging_job_shows_its_progress_and_is_left_alone() -> None:
    progress = {"files": 3, "filesTotal": 7, "bytes": 1_200_000_000, "bytesTotal": 16_400_000_000}
    previous = {"phase": "Staging", "observedGeneration": 1, "staging": progress}
    step = next_step(observe(HF, previous, live=staging_live({}), claims={c: claim(c) for c in CLAIMS}))
    assert step.apply == () and step.claim_patches == () and step.events == ()
    assert step.status.phase == "Staging" and step.status.message.endswith(": 3/7 files, 1.20/16.40 GB")


def test_a_staged_job_records_its_sources_on_the_claims_and_creates_the_rayjob() -> None:
    live = staging_live({"conditions": [{"type": "Complete", "status": "True"}]})
    previous = {"phase": "Staging", "observedGeneration": 1}
    step = next_step(observe(HF, previous, live=live, claims={c: claim(c) for c in CLAIMS}))
    assert applied(step) == [("RayJob", "create", {})]
    patches = record_patches(tuple(staging_plan(HF.spec)), NAME, NOW_S)
    assert step.claim_patches == tuple(
        Patch(PERSISTENT_VOLUME_CLAIM, NAMESPACE, c, patches[c]) for c in CLAIMS
    )
    assert conditions(step)["Staged"][0:2] == ("True", "Staged")
    assert step.status.phase == "Pending" and step.status.attempt == 1
    # A claim that is gone gets no record.
    one = next_step(observe(HF, previous, live=live, claims={"hf-cache": claim("hf-cache"), "rl-data": None}))
    assert [p.name for p in one.claim_patches] == ["hf-cache"]


def test_a_failed_staging_job_fails_the_job_with_the_stage_commands_reason() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    assert needs_staging_pods({}, {"status": failed})
    pod = {
        "status": {
            "containerStatuses": [
                {
                    "name": "stage",
                    "state": {
                        "terminated": {"message": "401: token refused", "finishedAt": "2026-03-01T11:59:00Z"}
                    },
                }
            ]
        }
    }
    previous = {"phase": "Staging", "observedGeneration": 1}
    step = next_step(observe(HF, previous, live=staging_live(failed), claims={}, staging_pods=(pod,)))
    assert step.apply == () and step.claim_patches == ()
    assert (step.status.phase, step.status.reason) == ("Failed", "StagingFailed")
    assert step.status.message == "Staging failed: 401: token refused"
    assert conditions(step)["Staged"] == ("False", "StagingFailed")
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "StagingFailed")]


def test_sources_recorded_by_an_earlier_job_need_no_staging_job() -> None:
    records = record_patches(tuple(staging_plan(HF.spec)), "earlier-job", "2026-02-01T00:00:00Z")
    claims = {c: claim(c, records[c]["metadata"]["annotations"]) for c in CLAIMS}
    step = next_step(observe(HF, live={}, claims=claims))
    assert applied(step) == [*ALL_CREATED, ("RayJob", "create", {})]
    assert conditions(step)["Staged"] == ("True", "AlreadyStaged") and step.claim_patches == ()


def test_once_staged_the_claims_are_not_read_and_the_job_not_looked_at() -> None:
    previous = {
        **running(),
        "conditions": [
            {
                "type": "Staged",
                "status": "True",
                "reason": "Staged",
                "message": "Staged",
                "lastTransitionTime": T0,
            }
        ],
    }
    assert claims_to_read(HF, render(HF), previous) == ()
    assert not needs_staging_pods(
        previous, {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    )
    live = as_live(HF, previous, RayJob=ray_status("Running", "RUNNING"))
    del live["Job"]  # cleaned up by its TTL: not recreated
    step = next_step(observe(HF, previous, live=live))
    assert (
        step.apply == ()
        and conditions(step)["Staged"] == ("True", "Staged")
        and step.status.phase == "Running"
    )


# Suspend and resume.


def test_suspend_then_resume() -> None:
    job = make_job({"lifecycle": {"suspend": True}})
    live = as_live(job, running(), RayJob=ray_status("Running", "RUNNING"))
    # The RayJob as rendered before the suspend was asked for.
    live["RayJob"]["spec"] = as_live(make_job(), running())["RayJob"]["spec"]
    asked = next_step(observe(job, running(), live=live))
    # KubeRay refuses a suspended RayJob without shutdownAfterJobFinishes, which excludes the
    # deletion rules: the same patch switches the teardown to the whole-cluster TTL.
    assert applied(asked) == [
        (
            "RayJob",
            "merge",
            {
                "spec": {
                    "suspend": True,
                    "shutdownAfterJobFinishes": True,
                    "ttlSecondsAfterFinished": 3600,
                    "deletionStrategy": None,
                }
            },
        )
    ]
    assert asked.status.phase == "Running"  # until KubeRay deletes the cluster

    suspended_live = as_live(job, running(), RayJob=ray_status("Suspended"))
    suspended = next_step(observe(job, running(), live=suspended_live))
    assert suspended.apply == ()
    assert (suspended.status.phase, suspended.status.message) == (
        "Suspended",
        "Suspended by spec.lifecycle.suspend",
    )
    assert conditions(suspended)["Suspended"] == ("True", "Suspended")
    assert conditions(suspended)["ClusterReady"] == ("False", "ClusterSuspended")
    assert suspended.events == (
        Announcement(
            "Normal", "Suspended", "Phase Running -> Suspended: Suspended by spec.lifecycle.suspend"
        ),
    )

    resumed_job = make_job()
    previous = {**running(), **suspended.status_patch}
    resumed_live = {**as_live(resumed_job, previous), "RayJob": suspended_live["RayJob"]}
    resumed = next_step(observe(resumed_job, previous, live=resumed_live))
    assert applied(resumed) == [
        (
            "RayJob",
            "merge",
            {
                "spec": {
                    "suspend": False,
                    "shutdownAfterJobFinishes": False,
                    "ttlSecondsAfterFinished": 0,
                    "deletionStrategy": {"deletionRules": deletion_rules(3600)},
                }
            },
        )
    ]
    assert resumed.status.attempt == 1 and resumed.delete == ()


def test_a_new_suspended_job_creates_a_suspended_rayjob() -> None:
    job = make_job({"lifecycle": {"suspend": True}})
    step = next_step(observe(job))
    assert applied(step)[-1] == ("RayJob", "create", {})
    assert step.apply[-1].child.body["spec"]["suspend"] is True
    assert (step.status.phase, step.status.message) == ("Suspended", "Suspended by spec.lifecycle.suspend")


# What stops a job before anything is written.


def test_an_object_under_a_childs_name_that_the_job_does_not_control_stops_everything() -> None:
    job = make_job()
    foreign = foreign_object("v1", "ConfigMap", f"{NAME}-spec")
    step = next_step(observe(job, live={"ConfigMap": foreign}))
    assert step.apply == () and step.delete == ()
    assert (step.status.phase, step.status.reason) == ("Pending", None)
    assert step.status.message.startswith(
        f"Waiting: ConfigMap {NAMESPACE}/{NAME}-spec already exists and is not this job's "
        "(it has no controller)"
    )
    assert conditions(step)["Accepted"] == ("False", "ChildConflict")
    assert step.status.attempts is None and step.status.goodput is None
    assert [(e.type, e.reason) for e in step.events] == [("Normal", "Pending"), ("Warning", "ChildConflict")]


# A new job creates first.


def observe_new(
    job: FlashRLJob,
    previous: Mapping[str, Any] | None = None,
    *,
    tried: bool = False,
    live: Mapping[str, Any] | None = None,
    **read: Any,
) -> Reads:
    """What a reconcile of a job with no ``observedGeneration`` reads: only ``children_to_read``
    (from ``live`` by kind; absent: missing), after ``creates_first`` decided whether it is new."""
    seen = observe(job, previous, **read)
    new = creates_first(seen.previous, seen.generation, seen.refused, tried=tried)
    seen = replace(seen, live={}, new=new)
    by_kind = live or {}
    return replace(seen, live={c.describe(): by_kind.get(c.resource.kind) for c in children_to_read(seen)})


def firsts(step: Step) -> list[tuple[str, str, bool]]:
    return [(a.child.resource.kind, a.mode, a.first) for a in step.apply]


KINDS = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "NetworkPolicy")


def test_a_new_job_reads_none_of_its_children_and_creates_each_first() -> None:
    job = make_job()
    seen = observe_new(job)
    assert seen.new and seen.live == {}
    step = next_step(seen)
    assert firsts(step) == [*((k, "create", True) for k in KINDS), ("RayJob", "create", True)]
    # The same outcome as reading first and finding nothing (which creates without ``first``).
    read_first = next_step(observe(job))
    assert [(k, m) for k, m, _ in firsts(step)] == [(k, m) for k, m, _ in firsts(read_first)]
    assert not any(a.first for a in read_first.apply)
    assert (step.status, step.status_patch, step.events) == (
        read_first.status,
        read_first.status_patch,
        read_first.events,
    )


def test_only_a_new_job_creates_first_and_only_once() -> None:
    job = make_job()
    assert creates_first({}, 1, None, tried=False)
    assert not creates_first({}, 1, None, tried=True)  # a reconcile of it created first already
    assert not creates_first(running(), 1, None, tried=False)  # reconciled before
    assert not creates_first({}, 1, "ConfigMap rl/qwen-spec was rejected", tried=False)
    assert not creates_first({"phase": "Succeeded"}, 1, None, tried=False)  # final: only the RayJob

    base = observe(job)
    desired = base.desired
    assert desired is not None
    assert children_to_read(replace(base, new=True)) == ()
    assert children_to_read(base) == tuple(desired.children)
    final = replace(base, previous={**running(), "phase": "Succeeded", "completionTime": NOW_S})
    assert children_to_read(final) == (desired.ray_job,)
    hf = observe(HF, claims={c: claim(c) for c in CLAIMS})
    assert hf.desired is not None and children_to_read(replace(hf, new=True)) == (hf.desired.ray_job,)


def test_a_new_job_with_sources_to_stage_looks_at_its_rayjobs_name() -> None:
    claims = {c: claim(c) for c in CLAIMS}
    seen = observe_new(HF, claims=claims)
    assert seen.desired is not None
    assert seen.new and list(seen.live) == [seen.desired.ray_job.describe()]
    step = next_step(seen)
    assert firsts(step) == [*((k, "create", True) for k in KINDS), ("Job", "create", True)]
    assert step.status.phase == "Staging"
    # Someone's RayJob under the name: nothing is created (as a job that read every child would).
    foreign = foreign_object("ray.io/v1", "RayJob", NAME)
    taken = next_step(observe_new(HF, live={"RayJob": foreign}, claims=claims))
    assert taken.apply == () and conditions(taken)["Accepted"] == ("False", "ChildConflict")


def test_after_a_new_jobs_first_reconcile_every_later_one_reads_its_children() -> None:
    # The first reconcile's ConfigMap create met a 409 (its creations were deleted again); the next
    # reconcile reads every child instead of creating first again.
    job = make_job()
    foreign = foreign_object("v1", "ConfigMap", f"{NAME}-spec")
    seen = observe_new(job, tried=True, live={"ConfigMap": foreign})
    assert not seen.new and len(seen.live) == len(render(job).children)
    step = next_step(seen)
    assert step.apply == () and step.delete == ()
    assert conditions(step)["Accepted"] == ("False", "ChildConflict")
    assert f"ConfigMap {NAMESPACE}/{NAME}-spec already exists and is not this job's" in step.status.message
    # The name was the job's own (an earlier run of the operator created it): it is kept, and the
    # missing children are created after the read, not first.
    own = as_live(job)["ConfigMap"]
    step = next_step(observe_new(job, tried=True, live={"ConfigMap": own}))
    expected = [(k, "create", False) for k in KINDS if k != "ConfigMap"]
    assert firsts(step) == [*expected, ("RayJob", "create", False)]
    assert conditions(step)["Accepted"] == ACCEPTED


def test_a_policy_violation_fails_the_job_and_creates_nothing() -> None:
    observed = Reads(
        NAMESPACE,
        NAME,
        UID,
        NOW,
        CREATED,
        1,
        job=make_job(),
        policy_problems=("spec.resources.nodes: at most 2",),
    )
    step = next_step(observed)
    assert step.apply == () and step.wake_after is None
    assert (step.status.phase, step.status.reason) == ("Failed", "PolicyViolation")
    assert step.status.message == "Refused by the cluster's policy: spec.resources.nodes: at most 2"
    assert conditions(step)["Accepted"] == ("False", "PolicyViolation")
    assert step.status.completion_time is None  # not final: a new generation is judged again
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "PolicyViolation")]


def test_an_invalid_spec_fails_the_job_and_creates_nothing() -> None:
    step = next_step(
        Reads(NAMESPACE, NAME, UID, NOW, CREATED, 3, spec_problems=("spec.resources.nodes: must be >= 1",))
    )
    assert step.apply == () and step.status.observed_generation == 3
    assert (step.status.phase, step.status.reason) == ("Failed", "InvalidSpec")
    assert step.status.message == "Invalid spec: spec.resources.nodes: must be >= 1"
    assert conditions(step)["Accepted"] == ("False", "InvalidSpec")
    assert step.status.ray_job_name is None
    assert [(e.type, e.reason) for e in step.events] == [("Warning", "InvalidSpec")]


def test_a_rejected_child_fails_the_job_until_the_spec_changes() -> None:
    job = make_job()
    why = "RayJob rl/qwen was rejected by the API server (HTTP 422 Unprocessable): spec.x: bad"
    observed = observe(job, {}, refused=why)
    assert not converging({}, 1, why)
    step = next_step(observed)
    assert step.apply == ()
    assert (step.status.phase, step.status.reason, step.status.message) == ("Failed", "ChildRejected", why)
    assert conditions(step)["Accepted"] == ("False", "ChildRejected")
    # The written status keeps it for this generation; a new generation converges again.
    previous = {**step.status_patch}
    assert not converging(previous, 1, None) and converging(previous, 2, None)
    again = next_step(observe(job, previous))
    assert again.apply == () and again.status_patch == {} and again.events == ()


def test_a_final_job_reads_only_its_rayjob_and_restores_nothing() -> None:
    previous = {**running(), "phase": "Succeeded", "completionTime": NOW_S}
    assert not converging(previous, 1, None)
    assert not may_end_attempt(previous, None)
    step = next_step(observe(make_job(), previous, live={}))
    assert step.apply == () and step.status.phase == "Succeeded"


# The mismatch guard and the read predicates.


def test_the_guard_suspends_the_job_once_when_the_mismatch_drifts() -> None:
    job = make_job({"correction": {"guard": {"action": "Suspend", "maxKL": 0.1, "consecutiveSteps": 1}}})
    metrics = [{"name": "rollout_corr/kl", "value": 0.9, "step": 5}]
    previous = running(metrics=metrics)
    step = next_step(
        observe(job, previous, live=as_live(job, previous, RayJob=ray_status("Running", "RUNNING")))
    )
    assert conditions(step)["RolloutMismatch"] == ("True", "MismatchDrift")
    assert step.spec_patch == {"spec": {"lifecycle": {"suspend": True}}}
    assert step.events[-1] == Announcement("Warning", "MismatchDrift", GUARD_SUSPEND_MESSAGE)
    previous = {**previous, **step.status_patch}
    again = next_step(
        observe(job, previous, live=as_live(job, previous, RayJob=ray_status("Running", "RUNNING")))
    )
    assert again.spec_patch is None and again.events == ()


FALLBACK = {
    "rollout": {"quantization": "blockwise-fp8", "kvCache": "fp8-e4m3"},
    "correction": {"guard": {"action": "FallbackToBF16", "maxKL": 0.1, "consecutiveSteps": 1}},
}


def test_the_guard_falls_back_to_bf16_once_from_the_newest_checkpoint() -> None:
    job = make_job(FALLBACK)
    metrics = [{"name": "rollout_corr/kl", "value": 0.9, "step": 7}]
    previous = running(
        metrics=metrics,
        progress={"step": 7, "totalSteps": 20, "attempt": 1},
        checkpoint={"step": 5, "time": T0, "path": "/checkpoints/x/global_step_5", "attempt": 1},
    )
    live = as_live(job, previous, RayJob=ray_status("Running", "RUNNING"))
    step = next_step(observe(job, previous, live=live))
    assert step.status.phase == "Starting" and step.status.reason is None
    assert step.delete == (Ref(kuberay.RAY_JOB, NAMESPACE, NAME, "uid-RayJob"),)
    assert step.spec_patch is None
    assert step.wake_after == WAKE_MARGIN_SECONDS  # no backoff: the next attempt starts now
    assert conditions(step)["RolloutFallback"] == ("True", "FellBackToBF16")
    assert (step.status.quantization, step.status.kv_cache) == ("bf16", "bf16")
    one, two = step.status.attempts or []
    assert (one.end_step, one.checkpoint_step, one.reason) == (7, 5, "FellBackToBF16")
    assert (one.quantization, one.kv_cache) == ("blockwise-fp8", "fp8-e4m3")
    assert (two.attempt, two.start_step, two.quantization, two.kv_cache) == (2, 5, "bf16", "bf16")
    assert step.status.lost_steps == 2
    warnings = [e for e in step.events if e.reason == "FellBackToBF16"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert "rollout_corr/kl = 0.9 at step 7 crossed the threshold 0.1" in warnings[0].message

    # The next reconcile renders attempt 2 from the BF16 spec; its guard only alerts (never loops).
    fp8_children = {kind: body for kind, body in live.items() if kind != "RayJob"}
    previous = {**previous, **step.status_patch}
    bf16 = step_module.with_rollout_precision(job, previous)
    assert (bf16.spec.rollout.quantization, bf16.spec.rollout.kv_cache) == ("bf16", "bf16")
    assert bf16.spec.correction.guard.action == "Alert"
    later = replace(observe(bf16, previous, live=fp8_children), now=NOW + datetime.timedelta(seconds=1))
    again = next_step(later)
    # The spec ConfigMap the launcher reads is rewritten, then attempt 2's RayJob created.
    assert [(kind, mode) for kind, mode, _ in applied(again)] == [
        ("ConfigMap", "restore"),
        ("RayJob", "create"),
    ]
    assert [a.child.name for a in again.apply if a.child.resource.kind == "RayJob"] == [
        attempt_ray_job_name(job, 2)
    ]
    assert again.delete == () and not [e for e in again.events if e.reason == "FellBackToBF16"]


def test_a_bf16_job_never_falls_back() -> None:
    job = make_job({"rollout": {"quantization": "bf16"}, "correction": {"guard": {"consecutiveSteps": 1}}})
    previous = running(metrics=[{"name": "rollout_corr/kl", "value": 0.9, "step": 7}])
    live = as_live(job, previous, RayJob=ray_status("Running", "RUNNING"))
    step = next_step(observe(job, previous, live=live))
    assert step.status.phase == "Running" and step.delete == ()
    assert "RolloutFallback" not in conditions(step)
    assert conditions(step)["RolloutMismatch"] == ("True", "MismatchDrift")


def test_the_job_is_read_again_only_when_its_attempt_may_have_ended() -> None:
    job = make_job()
    assert may_end_attempt(running(), {"status": ray_status("Complete", "FAILED")})
    assert may_end_attempt(running(), {"status": ray_status("Failed")})
    assert not may_end_attempt(running(), {"status": ray_status("Running", "RUNNING")})
    assert may_end_attempt(running(), None)  # gone while running
    assert not may_end_attempt({}, None)  # a new job
    ended = {**running(2)}
    assert release_checks(job, ended) == ((1, attempt_ray_job_name(job, 1)),)
    assert release_checks(job, running()) == ()


def test_decide_phase_runs_once_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def counted(obs: Observation) -> PhaseDecision:
        decision = decide_phase(obs)
        calls.append(decision.phase)
        return decision

    # Wherever it is called from: the step, or the status mapping (desired_status calls it).
    monkeypatch.setattr(step_module, "decide_phase", counted)
    monkeypatch.setattr(mapping_module, "decide_phase", counted)
    job = make_job({"lifecycle": {"maxRestarts": 2}})
    cases = [
        observe(job),
        observe(job, running(), live=as_live(job, running(), RayJob=ray_status("Complete", "FAILED"))),
        observe(job, running(), live=as_live(job, running(), RayJob=ray_status("Complete", "SUCCEEDED"))),
        Reads(NAMESPACE, NAME, UID, NOW, CREATED, 1, spec_problems=("spec: bad",)),
    ]
    for observed in cases:
        calls.clear()
        next_step(observed)
        assert len(calls) == 1, calls


def test_a_final_failure_keeps_its_wording_on_later_reconciles() -> None:
    """The retry policy words the end once ("(not retryable)"); a resync, or KubeRay deleting the
    workers (a RayCluster event), must not reword it from the RayJob alone."""
    job = make_job({"lifecycle": {"maxRestarts": 3}})
    line = "checkpoint directory /checkpoints/x is not writable: Read-only file system (OSError errno 30)"
    ended = ray_status(
        "Failed",
        "FAILED",
        reason="AppFailed",
        message=kuberay.entrypoint_failed_message(73, f"flashrl-launch: {line}"),
    )
    first = next_step(observe(job, running(), live=as_live(job, running(), RayJob=ended)))
    assert (first.status.phase, first.status.reason) == ("Failed", "CheckpointUnwritable")
    assert first.status.message.endswith("(not retryable)")
    previous = {**running(), **first.status_patch}
    again = next_step(observe(job, previous, live=as_live(job, previous, RayJob=ended)))
    assert (again.status.reason, again.status.message) == (first.status.reason, first.status.message)
    assert "message" not in again.status_patch and "reason" not in again.status_patch


# The history ConfigMap: a child written by the same step as the others.


def _history_reads(history: HistoryRead | None, wait: float | None = None) -> Reads:
    job = make_job()
    live = as_live(job, running(), RayJob=ray_status("Running", "RUNNING"))
    return replace(observe(job, running(), live=live), history=history, history_wait=wait)


def test_the_history_is_created_and_updated_as_a_child_of_the_job() -> None:
    data = {"history.jsonl": '{"step":1,"data":{}}\n'}
    created = next_step(_history_reads(HistoryRead(None, data)))
    assert applied(created) == [("ConfigMap", "create", {})]
    body = created.apply[0].child.body
    assert body["metadata"]["name"] == f"{NAME}-metrics" and body["data"] == data
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == (UID, True)
    live = {**copy.deepcopy(body), "metadata": {**body["metadata"], "resourceVersion": "7"}}
    more = {"history.jsonl": data["history.jsonl"] + '{"step":2,"data":{}}\n'}
    updated = next_step(_history_reads(HistoryRead(live, more)))
    assert [(a.child.name, a.mode, a.version) for a in updated.apply] == [(f"{NAME}-metrics", "restore", "7")]
    unchanged = next_step(_history_reads(HistoryRead(live, data)))
    assert unchanged.apply == ()


def test_someone_elses_history_configmap_is_announced_and_left_alone_and_the_job_goes_on() -> None:
    theirs = foreign_object("v1", "ConfigMap", f"{NAME}-metrics")
    step = next_step(_history_reads(HistoryRead(theirs, None)))
    assert step.apply == ()
    assert step.status.phase == "Running"
    (event,) = step.events
    assert (event.type, event.reason) == ("Warning", "ChildConflict")
    assert f"ConfigMap {NAMESPACE}/{NAME}-metrics" in event.message and "not recorded" in event.message


def test_a_fold_not_due_yet_is_the_steps_wake_up() -> None:
    assert next_step(_history_reads(None, wait=3.5)).wake_after == 3.5


# Kueue.

QUEUE = {"scheduling": {"queueName": "h20-training"}}


def test_a_queued_job_waits_pending_naming_its_workload_and_is_looked_at_again_until_kueue_says_why() -> None:
    job = make_job(QUEUE)
    live = as_live(job, RayJob=ray_status("Suspended"))
    live["RayJob"]["spec"]["suspend"] = True
    unsaid = next_step(observe(job, running(), live=live))
    assert (unsaid.status.phase, unsaid.status.reason) == ("Pending", "Queued")
    assert "its Kueue workload is not created yet" in (unsaid.status.message or "")
    assert unsaid.wake_after == step_module.QUEUED_RECHECK_SECONDS
    assert conditions(unsaid)["ClusterReady"] == ("False", "Queued")
    assert conditions(unsaid)["Suspended"] == ("False", "NotSuspended")
    workload = WorkloadView(
        "rayjob-qwen-1a2b3", "h20-training", False, "insufficient unused quota, 8 more needed"
    )
    said = next_step(observe(job, running(), live=live, workload=workload))
    assert "Kueue workload rayjob-qwen-1a2b3 (LocalQueue h20-training): insufficient unused quota" in (
        said.status.message or ""
    )
    assert said.wake_after is None


def test_a_queued_jobs_ended_cluster_gets_its_worker_groups_suspended() -> None:
    cluster = {
        "metadata": {"name": "qwen-abcde", "resourceVersion": "42"},
        "spec": {"workerGroupSpecs": [{"groupName": "gpu", "replicas": 1}]},
    }
    for spec, expected in ((QUEUE, 1), ({}, 0)):
        job = make_job(spec)
        step = next_step(observe(job, running(), live=as_live(job), holding=(cluster,)))
        assert len(step.suspend_workers) == expected
    job = make_job(QUEUE)
    (patch,) = next_step(observe(job, running(), live=as_live(job), holding=(cluster,))).suspend_workers
    assert (patch.resource, patch.namespace, patch.name) == (kuberay.RAY_CLUSTER, NAMESPACE, "qwen-abcde")
    assert patch.body == {
        "metadata": {"resourceVersion": "42"},
        "spec": {"workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "suspend": True}]},
    }
