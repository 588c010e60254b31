"""ClusterReady follows the RayCluster KubeRay creates for the RayJob: pod progress, then ready.

On the real API server; KubeRay is played (``KubeRayStandIn``): it creates the RayCluster, reports its
pods' startup in the RayCluster's status and mirrors that into the RayJob, as KubeRay does; the
operator only reads the RayCluster.
"""

from __future__ import annotations

import re
from typing import Any

import kmock
import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator

from flashrl_operator.sim import (
    CLUSTER_STARTING,
    RAY_CLUSTERS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUBMITTED,
    eventually,
    image_pull_backoff,
    unschedulable,
)

QUOTA_ERROR = (
    'pods "{name}-gpu-worker-7xk2p" is forbidden: exceeded quota: gpu-quota, requested: '
    "nvidia.com/gpu=8, used: nvidia.com/gpu=8, limited: nvidia.com/gpu=8"
)


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c["type"] == ctype)


async def wait_cluster_ready(
    cluster: Cluster, name: str, state: str, reason: str, message_part: str
) -> dict[str, Any]:
    """Wait for ClusterReady with this status and reason and a message containing ``message_part``."""

    async def probe() -> dict[str, Any] | None:
        status = await cluster.status(name)
        if not status.get("conditions"):
            return None
        ready = condition(status, "ClusterReady")
        matches = (ready["status"], ready["reason"]) == (state, reason) and message_part in ready["message"]
        return status if matches else None

    return await eventually(probe, f"ClusterReady={state} ({reason}) saying {message_part!r}")


async def cluster_starting(cluster: Cluster, start_operator: StartOperator, name: str) -> None:
    """The operator runs and ``name`` is submitted; KubeRay says its Ray cluster is being created."""
    await start_operator()
    await cluster.submit(name)
    await cluster.kuberay.set_status(NAMESPACE, name, CLUSTER_STARTING)


async def test_cluster_ready_shows_pod_progress_then_turns_true(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await cluster_starting(cluster, start_operator, "kappa")
    status = await wait_cluster_ready(
        cluster, "kappa", "False", "ClusterStarting", "head pod not created yet, 0/1 GPU workers ready"
    )
    assert status["phase"] == "Starting"
    ray_job = await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "kappa")
    assert ray_job is not None
    cluster_name = ray_job["status"]["rayClusterName"]
    assert re.fullmatch(r"kappa-[a-z0-9]{5}", cluster_name)
    assert status["rayClusterName"] == cluster_name
    ray_cluster = await cluster.api.get(RAY_CLUSTERS_RESOURCE, NAMESPACE, cluster_name)
    assert ray_cluster is not None
    assert ray_cluster["metadata"]["labels"]["ray.io/originated-from-cr-name"] == "kappa"
    assert ray_cluster["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"

    await cluster.kuberay.cluster_pods(NAMESPACE, "kappa", head_ready=True, ready_workers=0)
    status = await wait_cluster_ready(
        cluster, "kappa", "False", "ClusterStarting", "head pod ready, 0/1 GPU workers ready"
    )
    assert status["phase"] == "Starting"
    assert status["message"] == "Creating the Ray cluster: head pod ready, 0/1 GPU workers ready"
    not_ready_since = condition(status, "ClusterReady")["lastTransitionTime"]

    await cluster.kuberay.cluster_pods(NAMESPACE, "kappa", head_ready=True, ready_workers=1)
    status = await wait_cluster_ready(cluster, "kappa", "True", "AllPodsReady", "all pods ready")
    # The RayJob still says Initializing: the cluster is what tells the pods are ready.
    assert status["phase"] == "Starting"
    assert "waiting for KubeRay to submit" in status["message"]
    ready_since = condition(status, "ClusterReady")["lastTransitionTime"]
    assert ready_since >= not_ready_since

    await cluster.kuberay.set_status(NAMESPACE, "kappa", SUBMITTED)

    async def submitted() -> dict[str, Any] | None:
        status = await cluster.status("kappa")
        return status if status["message"] == "Ray cluster is ready; the job was submitted" else None

    status = await eventually(submitted, "the Submitted message")
    ready = condition(status, "ClusterReady")
    assert (ready["status"], ready["reason"]) == ("True", "AllPodsReady")
    assert ready["lastTransitionTime"] == ready_since  # no flip on the way
    # The operator only reads RayClusters: one by name, and kopf's watch (a list, then a watch) of the
    # ones KubeRay makes for our RayJobs (kopf keeps those with our labels, which KubeRay copies to them);
    # KubeRay (the stand-in) made the one there is.
    by_operator = {verb for verb, _ in cluster.operator_requests("rayclusters")}
    assert by_operator == {"get", "list"}
    assert cluster.creations()[("rayclusters", NAMESPACE, cluster_name)] == 1


async def test_replica_failure_shows_kuberays_message_until_the_pods_come_up(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await cluster_starting(cluster, start_operator, "lambda")
    await cluster.kuberay.cluster_pods(NAMESPACE, "lambda", head_ready=True, ready_workers=0)
    await wait_cluster_ready(cluster, "lambda", "False", "ClusterStarting", "head pod ready")

    await cluster.kuberay.replica_failure(
        NAMESPACE, "lambda", "FailedCreateWorkerPod", QUOTA_ERROR.format(name="lambda")
    )
    status = await wait_cluster_ready(
        cluster, "lambda", "False", "ReplicaFailure", "exceeded quota: gpu-quota"
    )
    message = condition(status, "ClusterReady")["message"]
    assert "FailedCreateWorkerPod" in message
    # KubeRay keeps the RayJob Initializing (until preRunningDeadlineSeconds): still Starting, saying why.
    assert status["phase"] == "Starting"
    assert "exceeded quota: gpu-quota" in status["message"]

    # The quota frees up: KubeRay creates the pod and drops ReplicaFailure.
    await cluster.kuberay.cluster_pods(NAMESPACE, "lambda", head_ready=True, ready_workers=1)
    status = await wait_cluster_ready(cluster, "lambda", "True", "AllPodsReady", "all pods ready")
    assert "quota" not in status["message"]


@pytest.mark.kmock(
    reason="RBAC that refuses RayCluster reads and nothing else (an older chart): a 403 injected on "
    "that one request rather than a second chart"
)
async def test_a_refused_cluster_read_falls_back_to_the_ray_job(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """RBAC without RayCluster reads (an older chart): ClusterReady still follows the RayJob."""
    (
        cluster.emulator[kmock.action.FETCH][kmock.resource(RAY_CLUSTERS_RESOURCE)]
        << 403
        << {
            "kind": "Status",
            "reason": "Forbidden",
            "message": 'rayclusters.ray.io is forbidden: cannot get resource "rayclusters"',
        }
    )
    await start_operator()
    await cluster.submit("mu")
    status = await cluster.kuberay_says("mu", CLUSTER_STARTING, "Starting")
    assert status["message"] == "Creating the Ray cluster"
    ready = condition(status, "ClusterReady")
    assert (ready["status"], ready["reason"]) == ("False", "ClusterStarting")
    assert ready["message"] == "Waiting for the Ray cluster's pods to be ready"
    await cluster.kuberay.set_status(NAMESPACE, "mu", SUBMITTED)
    await wait_cluster_ready(cluster, "mu", "True", "ClusterReady", "is ready")
    tried = [
        r
        for r in cluster.emulator[kmock.resource(RAY_CLUSTERS_RESOURCE)]
        if r.headers.get("User-Agent") == "flashrl-operator"
    ]
    assert tried, "the operator never tried to read the RayCluster"


NO_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available."


async def test_pods_that_cannot_start_are_named_with_the_cause(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """The scheduler and kubelet explain on the pods; the job says which pod and why while Starting.

    The KubeRay stand-in also plays the scheduler and kubelet for these pods (``stuck_pod``; the real
    scheduler is told to leave them alone). Pods are not watched: the detail arrives with the periodic
    resync, shortened for the test.
    """
    await start_operator(resync_interval=1.0)
    await cluster.submit("nu")
    await cluster.kuberay.set_status(NAMESPACE, "nu", CLUSTER_STARTING)
    await cluster.kuberay.cluster_pods(NAMESPACE, "nu", head_ready=True, ready_workers=0)
    await wait_cluster_ready(
        cluster, "nu", "False", "ClusterStarting", "head pod ready, 0/1 GPU workers ready"
    )

    worker = await cluster.kuberay.stuck_pod(NAMESPACE, "nu", unschedulable(NO_GPU))
    status = await wait_cluster_ready(cluster, "nu", "False", "PodUnschedulable", NO_GPU)
    assert (status["phase"], status["reason"]) == ("Starting", "PodUnschedulable")
    assert status["message"] == (
        "Creating the Ray cluster: head pod ready, 0/1 GPU workers ready; "
        f"GPU worker pod {worker}: PodUnschedulable: {NO_GPU}"
    )

    # A second cause: the more actionable one leads, both pods are named.
    other = await cluster.kuberay.stuck_pod(NAMESPACE, "nu", image_pull_backoff("ray-worker", "trainer:typo"))
    status = await wait_cluster_ready(
        cluster, "nu", "False", "ImagePullFailed", 'Back-off pulling image "trainer:typo"'
    )
    assert status["reason"] == "ImagePullFailed"
    assert status["message"].index(other) < status["message"].index(worker)

    async def warned() -> list[str] | None:
        reasons = [e["reason"] for e in await cluster.events_for("nu") if e.get("type") == "Warning"]
        return reasons if {"PodUnschedulable", "ImagePullFailed"} <= set(reasons) else None

    reasons = await eventually(warned, "a Warning Event per new cause")
    assert reasons.count("PodUnschedulable") == 1  # once per new cause, not on every resync

    # Fixed: KubeRay recreates the pods and they come up; nothing is left of the diagnosis.
    await cluster.kuberay.delete_pods(NAMESPACE, "nu")
    await cluster.kuberay.cluster_pods(NAMESPACE, "nu", head_ready=True, ready_workers=1)
    status = await wait_cluster_ready(cluster, "nu", "True", "AllPodsReady", "all pods ready")
    assert status.get("reason") is None
    assert "PodUnschedulable" not in status["message"] and "ImagePullFailed" not in status["message"]

    # The operator only lists pods, always narrowed to this cluster's label.
    ray_job = await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "nu")
    assert ray_job is not None
    by_operator = cluster.operator_requests("pods")
    assert by_operator
    assert {verb for verb, _ in by_operator} == {"list"}
    assert {tuple(query.get("labelSelector", [])) for _, query in by_operator} == {
        (f"ray.io/cluster={ray_job['status']['rayClusterName']}",)
    }


async def test_a_start_that_runs_out_of_time_keeps_the_schedulers_cause(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """While the job waits for GPUs the status names the scheduler's cause; when KubeRay's pre-running
    deadline ends the wait, the failure message still does (KubeRay's sentence alone would not)."""
    await start_operator(resync_interval=1.0)
    await cluster.submit("xi")
    await cluster.kuberay.set_status(NAMESPACE, "xi", CLUSTER_STARTING)
    await cluster.kuberay.cluster_pods(NAMESPACE, "xi", head_ready=True, ready_workers=0)
    worker = await cluster.kuberay.stuck_pod(NAMESPACE, "xi", unschedulable(NO_GPU))
    status = await wait_cluster_ready(cluster, "xi", "False", "PodUnschedulable", NO_GPU)
    assert (status["phase"], status["reason"]) == ("Starting", "PodUnschedulable")

    deadline = (
        "The RayJob has passed the preRunningDeadlineSeconds. StartTime: 2026-12-06 10:22:32 +0000 UTC. "
        "PreRunningDeadlineSeconds: 60"
    )
    # KubeRay's verdict: Failed, no Ray job status (nothing was submitted), its own sentence.
    timed_out = {"jobDeploymentStatus": "Failed", "jobStatus": "", "reason": "PreRunningDeadlineExceeded"}
    await cluster.kuberay.set_status(NAMESPACE, "xi", {**timed_out, "message": deadline})
    status = await cluster.wait_phase("xi", "Failed")
    assert status["reason"] == "PreRunningDeadlineExceeded"
    assert status["message"].startswith(deadline.rstrip("."))
    assert f"the Ray cluster had not started: RayCluster {status['rayClusterName']}: " in status["message"]
    assert f"GPU worker pod {worker}: PodUnschedulable: {NO_GPU}" in status["message"]
    failed = condition(status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "PreRunningDeadlineExceeded")
    assert NO_GPU in failed["message"]

    async def warned() -> dict[str, Any] | None:
        events = await cluster.events_for("xi")
        return next((e for e in events if e["reason"] == "PreRunningDeadlineExceeded"), None)

    event = await eventually(warned, "the Warning Event of the failure")
    assert event["type"] == "Warning" and NO_GPU in event["message"]
