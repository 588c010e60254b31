"""A job the cluster can never hold (or whose claim or PriorityClass does not exist) fails before anything
is created; one that fits but waits says for whom (issue 41, parts 3 and 4).

On the real API server, with Node objects as an administrator's nodes look to it (the GPU product label,
allocatable ``nvidia.com/gpu``), claims as users create them, and a pod bound to a node holding its GPUs
as the kubelet would keep it. KubeRay is played (``KubeRayStandIn``). The operator runs with its fit
check on, as the chart runs it (the other integration tests' clusters have no nodes or claims, so their
operators run without it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from envtest.control_plane import OPERATOR_USER, ControlPlane
from flashrl_operator.sim import (
    BATCH_JOBS_RESOURCE,
    CLUSTER_STARTING,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    eventually,
    unschedulable,
)

GPUS = {"nvidia.com/gpu": "8"}
NODE = "fits-h20-0"
CLAIMS = ("hf-cache", "rl-data", "rl-checkpoints")
NO_GPU = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available."


def add_gpu_node(plane: ControlPlane, name: str) -> None:
    """A Node as GPU Feature Discovery and the device plugin leave it: labelled, 8 allocatable GPUs."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-H20"}
    plane.apply_json({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
    status = json.dumps({"status": {"capacity": GPUS, "allocatable": GPUS}})
    plane.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", status)


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
    }


@pytest.fixture
async def gpu_node(cluster: Cluster) -> AsyncIterator[str]:
    """One H20 node of 8 GPUs in the cluster for this test only (nodes are cluster-scoped: removed after)."""
    plane = cluster.real
    # The run's control plane is shared: a GPU node another module left would change every judgement.
    found = await asyncio.to_thread(plane.get_json, "nodes", "-l", "nvidia.com/gpu.product")
    others = [n["metadata"]["name"] for n in found["items"] if n["metadata"]["name"] != NODE]
    assert not others, f"GPU nodes left on the shared control plane by an earlier test: {others}"
    await asyncio.to_thread(add_gpu_node, plane, NODE)
    try:
        yield NODE
    finally:
        await asyncio.to_thread(plane.kubectl, "delete", "node", NODE, "--wait=false", check=False)


async def with_claims(cluster: Cluster) -> None:
    await asyncio.to_thread(cluster.real.apply_json, [claim(c) for c in CLAIMS])


#: What a job creates (none of it before the judgement).
CHILDREN = {"rayjobs", "jobs", "configmaps", "serviceaccounts", "roles", "rolebindings", "networkpolicies"}


def status_writes(cluster: Cluster, name: str) -> int:
    """The operator's status writes to FlashRLJob ``name`` that the server carried out."""
    assert cluster.audit is not None
    return sum(
        1
        for e in cluster.audit.requests(OPERATOR_USER, "flashrljobs")
        if e["verb"] == "patch"
        and e["objectRef"].get("name") == name
        and e["objectRef"].get("subresource") == "status"
        and (e.get("responseStatus") or {}).get("code", 0) < 300
    )


async def failed(cluster: Cluster, name: str) -> dict[str, Any]:
    status = await cluster.wait_phase(name, "Failed")
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, name) is None
    return status


async def test_a_job_that_can_never_fit_fails_at_once_before_anything_exists(
    cluster: Cluster, start_operator: StartOperator, gpu_node: str
) -> None:
    """16 GPUs (2 nodes x 8) on a cluster of one 8-GPU node: failed by the first reconcile, naming what
    it needs and what the cluster offers; no RayJob, no child, no GPU held."""
    await with_claims(cluster)
    await start_operator(check_fit=True)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("big", {"resources": {"nodes": 2}}))
    status = await failed(cluster, "big")
    assert status["reason"] == "NeverFits"
    assert "needs 2 nodes x 8 NVIDIA-H20; 1 node matches, with 8" in status["message"]
    assert "nodes that join later are yours to add before applying the job" in status["message"]
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "NeverFits")
    # The failure came within a reconcile or two (the first may only record that verl's check is under
    # way, on a busy machine); it created nothing.
    assert 1 <= status_writes(cluster, "big") <= 2
    assert not [key for key in cluster.creations() if key[0] in CHILDREN]

    async def warned() -> dict[str, Any] | None:
        return next((e for e in await cluster.events_for("big") if e["reason"] == "NeverFits"), None)

    event = await eventually(warned, "the NeverFits Event")
    assert event["type"] == "Warning" and "1 node matches, with 8" in event["message"]
    # The nodes were read once, narrowed to GPU nodes.
    lists = [q for verb, q in cluster.operator_requests("nodes") if verb == "list"]
    assert lists and all(q.get("labelSelector") == ["nvidia.com/gpu.product"] for q in lists)

    # The same spec that fits (one node) runs as before.
    await cluster.submit("small")


async def test_a_job_whose_claim_does_not_exist_fails_at_once_naming_it(
    cluster: Cluster, start_operator: StartOperator, gpu_node: str
) -> None:
    """Sources to stage from Hugging Face: the staging Job would mount the claims first; it is not
    created either."""
    await start_operator(check_fit=True)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("orphan", hf_sources=True))
    status = await failed(cluster, "orphan")
    assert status["reason"] == "ClaimNotFound"
    assert status["message"].startswith(f"claim hf-cache (storage.modelCache) does not exist in {NAMESPACE}")
    assert f"claim rl-checkpoints (storage.checkpoints) does not exist in {NAMESPACE}" in status["message"]
    assert await cluster.api.get(BATCH_JOBS_RESOURCE, NAMESPACE, "orphan-stage") is None
    assert status_writes(cluster, "orphan") == 1
    assert not [key for key in cluster.creations() if key[0] in CHILDREN]


#: A PriorityClass of this module's own (the shared control plane may hold the examples' ``rl-batch``).
PRIORITY_CLASS = "fits-rl-batch"
PRIORITY = {"scheduling": {"priorityClassName": PRIORITY_CLASS}}


@pytest.fixture
async def priority_class(cluster: Cluster) -> AsyncIterator[ControlPlane]:
    """The plane, with :data:`PRIORITY_CLASS` absent at the start and deleted at the end, whatever the
    test created (PriorityClasses are cluster-scoped: they outlive the test's namespace)."""
    plane = cluster.real
    found = await asyncio.to_thread(plane.get_json, "priorityclass", PRIORITY_CLASS, check=False)
    assert not found, f"PriorityClass {PRIORITY_CLASS} left on the shared control plane by an earlier test"
    try:
        yield plane
    finally:
        await asyncio.to_thread(
            plane.kubectl, "delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found", check=False
        )


async def test_a_job_naming_a_missing_priority_class_fails_at_once_and_runs_once_it_exists(
    cluster: Cluster, start_operator: StartOperator, gpu_node: str, priority_class: ControlPlane
) -> None:
    """The API server would refuse every pod of the job (Priority admission), and Kueue would create no
    Workload for it: failed by the first reconcile, naming the class and its field, with nothing created.
    The same spec once the class exists runs as before."""
    await with_claims(cluster)
    await start_operator(check_fit=True)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("unranked", PRIORITY))
    status = await failed(cluster, "unranked")
    assert status["reason"] == "PriorityClassNotFound"
    assert status["message"].startswith(
        f"PriorityClass {PRIORITY_CLASS} (spec.scheduling.priorityClassName) does not exist in the cluster"
    )
    assert "kubectl get priorityclasses" in status["message"]
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "PriorityClassNotFound")
    assert status_writes(cluster, "unranked") == 1
    assert not [key for key in cluster.creations() if key[0] in CHILDREN]

    async def warned() -> dict[str, Any] | None:
        events = await cluster.events_for("unranked")
        return next((e for e in events if e["reason"] == "PriorityClassNotFound"), None)

    event = await eventually(warned, "the PriorityClassNotFound Event")
    assert event["type"] == "Warning" and PRIORITY_CLASS in event["message"]
    # Read by name, cluster-scoped, once for the job's generation.
    gets = [verb for verb, _ in cluster.operator_requests("priorityclasses")]
    assert gets == ["get"]

    # The API server's own verdict on such a pod, which the judgement spares the job.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "unranked-probe", "namespace": NAMESPACE},
        "spec": {"priorityClassName": PRIORITY_CLASS, "containers": [{"name": "c", "image": "trainer"}]},
    }
    refused = await asyncio.to_thread(
        priority_class.kubectl, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod), check=False
    )
    assert (
        refused.returncode != 0 and f"no PriorityClass with name {PRIORITY_CLASS} was found" in refused.stderr
    )

    created = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS},
        "value": 1000,
        "preemptionPolicy": "Never",
    }
    await asyncio.to_thread(priority_class.apply_json, created)
    ray_job = await cluster.submit("ranked", PRIORITY)
    worker = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["priorityClassName"] == PRIORITY_CLASS
    assert (await cluster.status("ranked")).get("reason") != "PriorityClassNotFound"


def holder(node: str) -> dict[str, Any]:
    """Another FlashRLJob's GPU worker, bound to ``node`` and holding its 8 GPUs (no kubelet here: it
    stays as bound, not terminated)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "first-gpu-worker-abcde",
            "namespace": NAMESPACE,
            "labels": {"flashrl.dev/job": "first"},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "ray-worker", "image": "trainer", "resources": {"limits": GPUS, "requests": GPUS}}
            ],
        },
    }


async def test_a_job_that_fits_but_not_now_waits_saying_whose_pods_hold_the_gpus(
    cluster: Cluster, start_operator: StartOperator, gpu_node: str
) -> None:
    """The one node's GPUs are held by another job's worker: the job is not failed; it is Starting with
    WaitingForGPUs naming the holder, and when KubeRay's startup deadline ends the wait, the failure keeps
    that cause and points to a queue."""
    await with_claims(cluster)
    await asyncio.to_thread(cluster.real.apply_json, holder(gpu_node))
    await start_operator(check_fit=True, resync_interval=1.0)
    await cluster.submit("second")
    await cluster.kuberay.set_status(NAMESPACE, "second", CLUSTER_STARTING)
    await cluster.kuberay.cluster_pods(NAMESPACE, "second", head_ready=True, ready_workers=0)
    await cluster.kuberay.stuck_pod(NAMESPACE, "second", unschedulable(NO_GPU))

    async def waiting() -> dict[str, Any] | None:
        status = await cluster.status("second")
        return status if status.get("reason") == "WaitingForGPUs" else None

    status = await eventually(waiting, "the job to say it waits for GPUs", 120.0, 0.2)
    assert status["phase"] == "Starting"
    held = f"{gpu_node}: 8 of 8 GPUs held by FlashRLJob {NAMESPACE}/first"
    assert held in status["message"]
    assert "spec.scheduling.queueName" in status["message"]
    ready = next(c for c in status["conditions"] if c["type"] == "ClusterReady")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForGPUs") and held in ready["message"]

    deadline = "The RayJob has passed the preRunningDeadlineSeconds. PreRunningDeadlineSeconds: 1800"
    timed_out = {"jobDeploymentStatus": "Failed", "jobStatus": "", "reason": "PreRunningDeadlineExceeded"}
    await cluster.kuberay.set_status(NAMESPACE, "second", {**timed_out, "message": deadline})
    status = await cluster.wait_phase("second", "Failed")
    assert status["reason"] == "PreRunningDeadlineExceeded"
    assert "the Ray cluster had not started" in status["message"] and held in status["message"]
    assert "queue it (spec.scheduling.queueName, a Kueue LocalQueue)" in status["message"]
