"""ClusterReady and the Starting message from the RayCluster's conditions and replica counts."""

from __future__ import annotations

from typing import Any

import pytest
from status_wire import NOW, desired_status

from flashrl_operator.job.status.conditions import find_condition
from flashrl_operator.job.status.mapping import (
    Decided,
    Observation,
    RayClusterView,
    RayJobView,
    cluster_ready_check,
    decide_phase,
    should_read_cluster,
)
from flashrl_operator.job.status.ray import cluster_progress

QUOTA = 'pods "j-abcde-gpu-worker-xk2p7" is forbidden: exceeded quota: gpu-quota'


def cond(ctype: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": ctype, "status": status, "reason": reason, "message": message}


HEAD_MISSING = cond("HeadPodReady", "False", "HeadPodNotFound", "Head Pod not found")
HEAD_UNREADY = cond(
    "HeadPodReady", "False", "ContainersNotReady", "containers with unready status: [ray-head]"
)
HEAD_READY = cond("HeadPodReady", "True", "HeadPodRunningAndReady")
PROVISIONING = cond("RayClusterProvisioned", "False", "RayClusterPodsProvisioning")
PROVISIONED = cond("RayClusterProvisioned", "True", "AllPodRunningAndReadyFirstTime")
QUOTA_FAILURE = cond("ReplicaFailure", "True", "FailedCreateWorkerPod", QUOTA)


def ray_cluster(*conditions: dict[str, str], **status: Any) -> RayClusterView:
    """A RayCluster named ``j-abcde``; ``status`` keys as KubeRay writes them (zeros omitted)."""
    body = {"conditions": list(conditions), **status} if conditions else dict(status)
    return RayClusterView.of({"metadata": {"name": "j-abcde"}, "status": body})


def ray_job(deployment: str, job: str = "") -> RayJobView:
    return RayJobView.of(
        {"status": {"jobDeploymentStatus": deployment, "jobStatus": job, "rayClusterName": "j-abcde"}}
    )


def test_view_reads_kubernetes_omissions() -> None:
    view = ray_cluster(HEAD_READY, {"type": 7}, "junk", desiredWorkerReplicas=2)  # type: ignore[arg-type]
    assert view.ready_workers == 0  # omitted when zero
    assert view.desired_workers == 2
    assert view.head_ready.true and view.provisioned.status == ""
    assert RayClusterView.of({}).desired_workers is None
    assert not RayClusterView.of({}).reports_pods
    assert RayClusterView.of({"status": {"readyWorkerReplicas": True}}).ready_workers == 0


@pytest.mark.parametrize(
    ("view", "progress"),
    [
        (ray_cluster(), "no pod status yet"),
        (ray_cluster(desiredWorkerReplicas=1), "0/1 GPU workers ready"),
        (
            ray_cluster(HEAD_MISSING, desiredWorkerReplicas=1),
            "head pod not created yet, 0/1 GPU workers ready",
        ),
        (
            ray_cluster(HEAD_UNREADY, desiredWorkerReplicas=2),
            "head pod not ready (containers with unready status: [ray-head]), 0/2 GPU workers ready",
        ),
        (
            ray_cluster(cond("HeadPodReady", "False", "Unknown"), desiredWorkerReplicas=2),
            "head pod not ready, 0/2 GPU workers ready",
        ),
        (
            ray_cluster(cond("HeadPodReady", "False", "PodCompleted"), desiredWorkerReplicas=2),
            "head pod not ready (PodCompleted), 0/2 GPU workers ready",
        ),
        (
            ray_cluster(HEAD_READY, desiredWorkerReplicas=2, readyWorkerReplicas=1),
            "head pod ready, 1/2 GPU workers ready",
        ),
    ],
)
def test_progress_message(view: RayClusterView, progress: str) -> None:
    assert cluster_progress(view) == progress


@pytest.mark.parametrize(
    ("deployment", "view", "status", "reason", "message"),
    [
        # No RayCluster known: the RayJob alone decides.
        ("Initializing", None, "False", "ClusterStarting", "Waiting for the Ray cluster's pods to be ready"),
        ("Initializing", ray_cluster(), "False", "ClusterStarting", "Waiting for the Ray cluster's pods"),
        ("Running", None, "True", "ClusterReady", "j-abcde is ready"),
        # Starting: the message shows how far the pods got.
        (
            "Initializing",
            ray_cluster(HEAD_MISSING, PROVISIONING, desiredWorkerReplicas=1),
            "False",
            "ClusterStarting",
            "RayCluster j-abcde: head pod not created yet, 0/1 GPU workers ready",
        ),
        (
            "Initializing",
            ray_cluster(HEAD_READY, PROVISIONING, desiredWorkerReplicas=1),
            "False",
            "ClusterStarting",
            "RayCluster j-abcde: head pod ready, 0/1 GPU workers ready",
        ),
        (
            "Retrying",
            ray_cluster(HEAD_READY, PROVISIONING, desiredWorkerReplicas=4, readyWorkerReplicas=3),
            "False",
            "ClusterStarting",
            "RayCluster j-abcde: head pod ready, 3/4 GPU workers ready",
        ),
        # All pods ready, before KubeRay even submitted.
        (
            "Initializing",
            ray_cluster(HEAD_READY, PROVISIONED, desiredWorkerReplicas=1, readyWorkerReplicas=1),
            "True",
            "AllPodsReady",
            "RayCluster j-abcde: all pods ready",
        ),
        # Conditions switched off in KubeRay (feature gate): the deprecated state still says ready.
        ("Initializing", ray_cluster(state="ready"), "True", "AllPodsReady", "all pods ready"),
        (
            "Running",
            ray_cluster(HEAD_READY, PROVISIONED, desiredWorkerReplicas=1, readyWorkerReplicas=1),
            "True",
            "AllPodsReady",
            "RayCluster j-abcde: all pods ready",
        ),
        # Provisioned never flips back: a worker lost later is said, the condition stays True.
        (
            "Running",
            ray_cluster(HEAD_READY, PROVISIONED, desiredWorkerReplicas=2, readyWorkerReplicas=1),
            "True",
            "AllPodsReady",
            "RayCluster j-abcde was provisioned; now head pod ready, 1/2 GPU workers ready",
        ),
        # Once the RayJob runs, KubeRay already judged the cluster ready; no pod info cannot undo it.
        (
            "Running",
            ray_cluster(HEAD_READY, PROVISIONING, desiredWorkerReplicas=1),
            "True",
            "ClusterReady",
            "j-abcde is ready",
        ),
        # ReplicaFailure wins: KubeRay could not create a pod (quota, admission, ...).
        (
            "Initializing",
            ray_cluster(HEAD_READY, PROVISIONING, QUOTA_FAILURE, desiredWorkerReplicas=1),
            "False",
            "ReplicaFailure",
            "KubeRay cannot create or delete pods of RayCluster j-abcde: FailedCreateWorkerPod: " + QUOTA,
        ),
        (
            "Running",
            ray_cluster(HEAD_READY, PROVISIONED, QUOTA_FAILURE, desiredWorkerReplicas=1),
            "False",
            "ReplicaFailure",
            "exceeded quota: gpu-quota",
        ),
        (
            "Initializing",
            ray_cluster(cond("ReplicaFailure", "True")),
            "False",
            "ReplicaFailure",
            "RayCluster j-abcde: no details given",
        ),
        (
            "Initializing",
            ray_cluster(cond("ReplicaFailure", "False", "Fine"), HEAD_READY, desiredWorkerReplicas=1),
            "False",
            "ClusterStarting",
            "head pod ready, 0/1 GPU workers ready",
        ),
        (
            "Initializing",
            ray_cluster(cond("RayClusterSuspending", "True"), HEAD_READY),
            "False",
            "ClusterSuspended",
            "RayCluster j-abcde is suspended",
        ),
        # The job's own state comes first.
        ("Suspended", ray_cluster(HEAD_READY, PROVISIONED), "False", "ClusterSuspended", "suspended"),
        ("Complete", ray_cluster(HEAD_READY, PROVISIONED), "False", "JobFinished", "The job finished"),
        ("Failed", ray_cluster(QUOTA_FAILURE), "False", "JobFinished", "The job finished"),
    ],
)
def test_cluster_ready(
    deployment: str, view: RayClusterView | None, status: str, reason: str, message: str
) -> None:
    job = "SUCCEEDED" if deployment == "Complete" else ("RUNNING" if deployment == "Running" else "")
    obs = Observation(
        ray_job=ray_job(deployment, job),
        ray_cluster=view,
        ray_job_name="j",
        suspend_requested=deployment == "Suspended",
    )
    verdict = cluster_ready_check(obs, Decided(decide_phase(obs)))
    assert (verdict.status, verdict.reason) == (status, reason)
    assert message in verdict.message


@pytest.mark.parametrize(
    ("view", "message"),
    [
        (None, "Creating the Ray cluster"),
        (ray_cluster(), "Creating the Ray cluster"),
        (
            ray_cluster(HEAD_READY, PROVISIONING, desiredWorkerReplicas=1),
            "Creating the Ray cluster: head pod ready, 0/1 GPU workers ready",
        ),
        (
            ray_cluster(HEAD_READY, PROVISIONING, QUOTA_FAILURE, desiredWorkerReplicas=1),
            "Creating the Ray cluster: KubeRay cannot create or delete pods of RayCluster j-abcde: "
            "FailedCreateWorkerPod: " + QUOTA,
        ),
        (
            ray_cluster(HEAD_READY, PROVISIONED, desiredWorkerReplicas=1, readyWorkerReplicas=1),
            "Ray cluster j-abcde is ready; waiting for KubeRay to submit the job",
        ),
    ],
)
def test_starting_message_shows_pod_progress(view: RayClusterView | None, message: str) -> None:
    decision = decide_phase(Observation(ray_job=ray_job("Initializing"), ray_cluster=view, ray_job_name="j"))
    assert (decision.phase, decision.reason, decision.message) == ("Starting", "ClusterStarting", message)


def test_progress_updates_the_message_but_not_the_transition_time() -> None:
    def status(view: RayClusterView, previous: dict[str, Any], now: str) -> dict[str, Any]:
        obs = Observation(
            ray_job=ray_job("Initializing"), ray_cluster=view, ray_job_name="j", previous=previous
        )
        return desired_status(obs, now)

    first = status(ray_cluster(HEAD_MISSING, PROVISIONING, desiredWorkerReplicas=1), {}, NOW)
    second = status(ray_cluster(HEAD_READY, PROVISIONING, desiredWorkerReplicas=1), first, "later")
    ready = status(
        ray_cluster(HEAD_READY, PROVISIONED, desiredWorkerReplicas=1, readyWorkerReplicas=1), second, "latest"
    )
    before = find_condition(first["conditions"], "ClusterReady")
    during = find_condition(second["conditions"], "ClusterReady")
    after = find_condition(ready["conditions"], "ClusterReady")
    assert before is not None and during is not None and after is not None
    assert during["message"] == "RayCluster j-abcde: head pod ready, 0/1 GPU workers ready"
    assert during["lastTransitionTime"] == before["lastTransitionTime"] == NOW
    assert (after["status"], after["reason"], after["lastTransitionTime"]) == (
        "True",
        "AllPodsReady",
        "latest",
    )
    assert ready["phase"] == second["phase"] == "Starting"
    assert ready["rayClusterName"] == "j-abcde"


@pytest.mark.parametrize(
    ("view", "previous", "read"),
    [
        (None, {}, False),
        (RayJobView.of({"status": {"jobDeploymentStatus": "Initializing"}}), {}, False),  # not named yet
        (ray_job("Initializing"), {}, True),
        (ray_job("Waiting"), {}, True),
        (ray_job("Retrying"), {}, True),
        (ray_job("Running", "RUNNING"), {}, True),
        (ray_job("Complete", "SUCCEEDED"), {}, False),
        (ray_job("Failed", "FAILED"), {}, False),
        (ray_job("Suspended"), {}, False),  # KubeRay deleted the cluster
        (ray_job("Running", "RUNNING"), {"phase": "Succeeded", "reason": "Succeeded"}, False),
        (ray_job("Initializing"), {"phase": "Failed", "reason": "InvalidSpec"}, True),  # fixable
    ],
)
def test_when_the_cluster_is_read(view: RayJobView | None, previous: dict[str, Any], read: bool) -> None:
    assert should_read_cluster(view, previous) is read
