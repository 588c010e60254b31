"""Create, run to the end, fail, reject: the operator's main paths on the real API server."""

from __future__ import annotations

import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_operator.sim import (
    CLUSTER_STARTING,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUBMITTED,
    SUCCEEDED,
    TRAINING,
    eventually,
    failed,
)
from flashrl_operator.vocab.kuberay import entrypoint_failed_message

CHILDREN = {
    ("serviceaccounts", "v1/serviceaccounts"),
    ("roles", "rbac.authorization.k8s.io/v1/roles"),
    ("rolebindings", "rbac.authorization.k8s.io/v1/rolebindings"),
    ("configmaps", "v1/configmaps"),
    ("rayjobs", RAY_JOBS_RESOURCE),
}


def conditions(status: dict[str, object]) -> dict[str, tuple[object, object]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}  # type: ignore[index,union-attr,attr-defined]


async def test_create_makes_every_child_once_owned_by_the_job(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator()
    job = await cluster.api.create(JOBS_RESOURCE, job_manifest("alpha"))
    status = await cluster.wait_ray_job_named("alpha", "Pending")
    assert status["rayJobName"] == "alpha"
    assert status["observedGeneration"] == 1
    assert conditions(status)["Accepted"] == ("True", "Accepted")

    made = {
        (plural, name)
        for (plural, ns, name) in cluster.creations()
        if ns == NAMESPACE and name.startswith("alpha")
    }
    assert {plural for plural, _ in made} >= {p for p, _ in CHILDREN}
    for plural, resource in CHILDREN:
        names = [name for p, name in made if p == plural]
        assert len(names) == 1, f"{plural}: {names}"
        assert cluster.creations()[(plural, NAMESPACE, names[0])] == 1
        child = await cluster.api.get(resource, NAMESPACE, names[0])
        assert child is not None
        owners = child["metadata"]["ownerReferences"]
        assert owners == [
            {
                "apiVersion": "flashrl.dev/v1alpha1",
                "kind": "FlashRLJob",
                "name": "alpha",
                "uid": job["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "flashrl-operator"
        assert child["metadata"]["labels"]["flashrl.dev/job"] == "alpha"
    # The job carries no bookkeeping of kopf's (status.observedGeneration is all the operator keeps).
    metadata = (await cluster.job("alpha"))["metadata"]
    assert not any("kopf" in key or "last-handled" in key for key in metadata.get("annotations") or {})
    assert "kopf" not in status
    assert "finalizers" not in metadata


async def test_kuberay_transitions_drive_phase_conditions_and_events(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator()
    await cluster.submit("beta")

    status = await cluster.kuberay_says("beta", CLUSTER_STARTING, "Starting")
    assert conditions(status)["ClusterReady"] == ("False", "ClusterStarting")
    accepted_since = next(c for c in status["conditions"] if c["type"] == "Accepted")["lastTransitionTime"]

    await cluster.kuberay.set_status(NAMESPACE, "beta", SUBMITTED)

    async def cluster_ready() -> bool:
        return conditions(await cluster.status("beta"))["ClusterReady"] == ("True", "AllPodsReady")

    await eventually(cluster_ready, "ClusterReady=True")
    status = await cluster.kuberay_says("beta", TRAINING, "Running")
    assert conditions(status)["Running"] == ("True", "JobRunning")
    ray_job = await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "beta")
    assert ray_job is not None
    assert status["rayClusterName"] == ray_job["status"]["rayClusterName"]
    assert status["rayClusterName"].startswith("beta-")
    assert status["dashboardUrl"].endswith(":8265")
    assert status["startTime"]

    # The launcher reports progress (the last step); the operator must leave it alone.
    await cluster.kuberay.report_progress(NAMESPACE, "beta", step=150, total=150)
    status = await cluster.kuberay_says("beta", SUCCEEDED, "Succeeded")
    assert status["progress"]["step"] == 150 and status["progress"]["totalSteps"] == 150
    assert status["completionTime"]
    assert conditions(status)["Succeeded"] == ("True", "JobSucceeded")
    assert conditions(status)["Running"] == ("False", "JobFinished")
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert accepted["lastTransitionTime"] == accepted_since  # status never flipped

    async def all_phase_events() -> list[str] | None:
        reasons = [e["reason"] for e in await cluster.events_for("beta")]
        return reasons if {"Pending", "Starting", "Running", "Succeeded"} <= set(reasons) else None

    reasons = await eventually(all_phase_events, "an Event for every phase change")
    assert reasons.count("Succeeded") == 1
    events = await cluster.events_for("beta")
    assert all(e["type"] == "Normal" for e in events)
    assert any("Running -> Succeeded" in e["message"] for e in events)


async def test_success_short_of_the_last_step_is_stopped_early(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """KubeRay says SUCCEEDED while the launcher's progress says step 40 of 150: not a success."""
    await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("epsilon", {"lifecycle": {"maxRestarts": 2}}))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "epsilon")
    await cluster.kuberay_says("epsilon", TRAINING, "Running")
    await cluster.kuberay.report_progress(NAMESPACE, "epsilon", step=40, total=150, attempt=1)

    async def reported() -> bool:
        return ((await cluster.status("epsilon")).get("progress") or {}).get("step") == 40

    await eventually(reported, "step 40 in the status")
    await cluster.kuberay.set_status(
        NAMESPACE, "epsilon", {**SUCCEEDED, "message": "Job finished successfully."}
    )
    status = await cluster.wait_phase("epsilon", "Failed")
    assert status["reason"] == "StoppedEarly"
    assert status["message"].startswith("KubeRay reports SUCCEEDED but training stopped at step 40 of 150")
    assert conditions(status)["Succeeded"] == ("False", "NotSucceeded")
    assert conditions(status)["Failed"] == ("True", "StoppedEarly")
    # Not retried (as the launcher's own exit 70): no second attempt, the RayJob is not deleted.
    assert status["attempt"] == 1
    assert [(a["attempt"], a["endStep"], a["reason"]) for a in status["attempts"]] == [
        (1, 40, "StoppedEarly")
    ]
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "epsilon-2") is None

    async def warning() -> list[str] | None:
        found = [e["reason"] for e in await cluster.events_for("epsilon") if e["type"] == "Warning"]
        return found or None

    assert await eventually(warning, "a Warning Event for the failure") == ["StoppedEarly"]


async def test_kuberay_failure_reason_is_copied(cluster: Cluster, start_operator: StartOperator) -> None:
    await start_operator()
    await cluster.submit("gamma")
    await cluster.kuberay_says("gamma", TRAINING, "Running")
    await cluster.kuberay.set_status(
        NAMESPACE, "gamma", failed("DeadlineExceeded", "The RayJob exceeded activeDeadlineSeconds")
    )
    status = await cluster.wait_phase("gamma", "Failed")
    assert status["reason"] == "DeadlineExceeded"
    assert status["message"] == "The RayJob exceeded activeDeadlineSeconds"
    assert conditions(status)["Failed"] == ("True", "DeadlineExceeded")

    async def warning() -> list[dict[str, object]] | None:
        found = [e for e in await cluster.events_for("gamma") if e["type"] == "Warning"]
        return found or None

    warnings = await eventually(warning, "a Warning event for the failure")
    assert warnings[0]["reason"] == "DeadlineExceeded"

    # A finished job is final: deleting its RayJob does not start training again.
    await cluster.api.delete(RAY_JOBS_RESOURCE, NAMESPACE, "gamma")
    await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "gamma", {"metadata": {"labels": {"poke": "1"}}})
    status = await cluster.wait_phase("gamma", "Failed")
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "gamma") is None
    assert cluster.creations()[("rayjobs", NAMESPACE, "gamma")] == 1


async def test_a_launcher_failure_is_named_by_its_exit_code(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """KubeRay says AppFailed with Ray's log tail; the job says GPUWaitTimeout and the launcher's words."""
    await start_operator()
    await cluster.submit("delta")
    await cluster.kuberay_says("delta", SUBMITTED, "Starting")
    reason = (
        "timed out after 600s waiting for 8 available GPU(s): 0/8 GPUs registered on 0 node(s) (0 available)"
    )
    ray_message = entrypoint_failed_message(
        75, "flashrl-launch: Connecting to the Ray head at delta-head-svc:6379", f"flashrl-launch: {reason}"
    )
    await cluster.kuberay.set_status(NAMESPACE, "delta", failed("AppFailed", ray_message))
    status = await cluster.wait_phase("delta", "Failed")
    assert status["reason"] == "GPUWaitTimeout"
    assert status["message"] == f"flashrl-launch exited with 75: {reason}"
    assert conditions(status)["Failed"] == ("True", "GPUWaitTimeout")

    async def warning() -> list[dict[str, object]] | None:
        found = [e for e in await cluster.events_for("delta") if e["type"] == "Warning"]
        return found or None

    assert (await eventually(warning, "a Warning event for the failure"))[0]["reason"] == "GPUWaitTimeout"


@pytest.mark.kmock(
    reason="a spec the CRD's schema and CEL refuse at admission, as from a cluster whose CRD is older "
    "than the operator; the real server cannot be made to store it"
)
async def test_invalid_spec_fails_with_the_field_path_and_creates_nothing(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator()
    await cluster.api.create(
        JOBS_RESOURCE, job_manifest("delta", {"rollout": {"samplesPerPrompt": 0}, "trainng": {}})
    )
    status = await cluster.wait_phase("delta", "Failed")
    assert status["reason"] == "InvalidSpec"
    assert "spec.rollout.samplesPerPrompt" in status["message"]
    assert "spec.trainng: unknown field; did you mean spec.training?" in status["message"]
    assert conditions(status)["Accepted"] == ("False", "InvalidSpec")
    assert "rayJobName" not in status
    created = {plural for (plural, _, name) in cluster.creations() if plural not in ("events", "flashrljobs")}
    assert created == set()

    # Fixing the spec (a new generation) recovers the job.
    await cluster.api.patch(
        JOBS_RESOURCE, NAMESPACE, "delta", {"spec": {"rollout": {"samplesPerPrompt": 8}, "trainng": None}}
    )
    status = await cluster.wait_phase("delta", "Pending")
    assert status["observedGeneration"] == 2
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "delta") is not None
