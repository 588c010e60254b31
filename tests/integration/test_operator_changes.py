"""Spec edits on a live job: suspend/resume, refused immutable edits, Kueue-owned suspension."""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_operator.sim import JOBS_RESOURCE, RAY_JOBS_RESOURCE, SUSPENDED, TRAINING, eventually


async def ray_job_spec(cluster: Cluster, name: str) -> dict[str, Any]:
    obj = await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, name)
    assert obj is not None
    return dict(obj["spec"])


async def wait_ray_job_field(cluster: Cluster, name: str, key: str, value: object) -> None:
    async def probe() -> bool:
        return (await ray_job_spec(cluster, name)).get(key) == value

    await eventually(probe, f"RayJob {name} spec.{key} == {value!r}")


async def test_suspend_and_resume(cluster: Cluster, start_operator: StartOperator) -> None:
    await start_operator()
    await cluster.submit("sus")
    assert (await ray_job_spec(cluster, "sus"))["suspend"] is False
    await cluster.kuberay_says("sus", TRAINING, "Running")

    await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "sus", {"spec": {"lifecycle": {"suspend": True}}})
    await wait_ray_job_field(cluster, "sus", "suspend", True)
    status = await cluster.kuberay_says("sus", SUSPENDED, "Suspended")
    suspended = next(c for c in status["conditions"] if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "Suspended")
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert accepted["status"] == "True"  # suspend is a mutable field

    await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "sus", {"spec": {"lifecycle": {"suspend": False}}})
    await wait_ray_job_field(cluster, "sus", "suspend", False)
    await cluster.kuberay_says("sus", TRAINING, "Running")
    assert cluster.creations()[("rayjobs", NAMESPACE, "sus")] == 1


async def test_the_server_refuses_an_immutable_edit_and_a_mutable_one_reaches_the_rayjob(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """On a cluster with this CRD, the API server's CEL rule refuses an edit of an immutable field
    with its path (nothing reaches the operator); an edit of spec.lifecycle goes through to the RayJob."""
    await start_operator()
    await cluster.submit("imm")
    await cluster.kuberay_says("imm", TRAINING, "Running")
    before = await ray_job_spec(cluster, "imm")

    with pytest.raises(RuntimeError, match=r"HTTP 422") as refused:
        await cluster.api.patch(
            JOBS_RESOURCE, NAMESPACE, "imm", {"spec": {"rollout": {"samplesPerPrompt": 8}}}
        )
    assert "spec.rollout: cannot change once the job exists" in str(refused.value)
    assert (await cluster.job("imm"))["metadata"]["generation"] == 1

    mutable = {"spec": {"lifecycle": {"activeDeadlineSeconds": 7200}}}
    await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "imm", mutable)
    await wait_ray_job_field(cluster, "imm", "activeDeadlineSeconds", 7200)
    after = await ray_job_spec(cluster, "imm")
    assert after["entrypoint"] == before["entrypoint"]
    assert after["rayClusterSpec"] == before["rayClusterSpec"]

    async def observed() -> dict[str, Any] | None:  # the status is written after the RayJob
        status = await cluster.status("imm")
        return status if status.get("observedGeneration") == 2 else None

    status = await eventually(observed, "observedGeneration 2")
    assert status["phase"] == "Running" and status["observedGeneration"] == 2


@pytest.mark.kmock(
    reason="an edit of an immutable field, which this CRD's CEL rule refuses at admission: as on a "
    "cluster whose CRD is older than the operator"
)
async def test_immutable_edit_is_refused_and_mutable_ones_applied(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator()
    await cluster.submit("imm")
    await cluster.kuberay_says("imm", TRAINING, "Running")
    before = await ray_job_spec(cluster, "imm")

    await cluster.api.patch(
        JOBS_RESOURCE,
        NAMESPACE,
        "imm",
        {"spec": {"rollout": {"samplesPerPrompt": 8}, "lifecycle": {"activeDeadlineSeconds": 7200}}},
    )

    async def refused() -> dict[str, Any] | None:
        status = await cluster.status("imm")
        accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
        return status if accepted["reason"] == "ImmutableFieldChanged" else None

    status = await eventually(refused, "Accepted=False/ImmutableFieldChanged")
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert accepted["status"] == "False"
    assert "spec.rollout.samplesPerPrompt" in accepted["message"]
    assert "activeDeadlineSeconds" not in accepted["message"]
    assert status["phase"] == "Running"  # the running job is kept
    assert status["observedGeneration"] == 2
    await wait_ray_job_field(cluster, "imm", "activeDeadlineSeconds", 7200)
    after = await ray_job_spec(cluster, "imm")
    assert after["entrypoint"] == before["entrypoint"]
    assert after["rayClusterSpec"] == before["rayClusterSpec"]

    async def warned() -> bool:
        return any(e["reason"] == "ImmutableFieldChanged" for e in await cluster.events_for("imm"))

    await eventually(warned, "a Warning event naming the refused edit")

    # Reverting the edit makes the job Accepted again.
    await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "imm", {"spec": {"rollout": {"samplesPerPrompt": 16}}})

    async def accepted_again() -> bool:
        status = await cluster.status("imm")
        return any(c["type"] == "Accepted" and c["status"] == "True" for c in status["conditions"])

    await eventually(accepted_again, "Accepted=True after reverting")


async def test_kueue_owns_suspend_when_a_queue_is_set(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    op = await start_operator(resync_interval=0.3)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("queued", {"scheduling": {"queueName": "gpu-h20"}}))
    ray_job = await cluster.wait_for(RAY_JOBS_RESOURCE, "queued")
    assert ray_job["spec"]["suspend"] is True
    assert ray_job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-h20"
    status = await cluster.wait_phase("queued", "Pending")
    assert status["reason"] == "Queued"
    assert "Waiting for Kueue to admit the job (holding no GPU)" in status["message"]

    # Kueue admits the job by clearing suspend; resyncs must not put it back.
    await cluster.api.patch(RAY_JOBS_RESOURCE, NAMESPACE, "queued", {"spec": {"suspend": False}})
    await cluster.kuberay_says("queued", TRAINING, "Running")
    registry = op.context.metrics.registry

    def reconciles() -> float:
        return registry.get_sample_value("flashrl_operator_reconcile_duration_seconds_count") or 0.0

    seen = reconciles()

    async def resynced_twice() -> bool:
        return reconciles() >= seen + 2

    await eventually(resynced_twice, "two more resyncs of the job")
    assert (await ray_job_spec(cluster, "queued"))["suspend"] is False
