"""Staging before any GPU: the staging Job first, the RayJob only after it succeeded; a failed staging
Job fails the job with StagingFailed and no RayJob; sources already staged on the claims skip the Job.

The real operator runs on the real control plane, where the real Job controller runs the staging Job;
the test writes the end of its pod as the kubelet would (``staging``), and the stage command's progress.
"""

from __future__ import annotations

import json
from typing import Any

from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest, on_operator

from flashrl_operator.sim import BATCH_JOBS_RESOURCE, JOBS_RESOURCE, RAY_JOBS_RESOURCE, StagingStandIn

CLAIMS_RESOURCE = "v1/persistentvolumeclaims"


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


async def make_claims(cluster: Cluster) -> None:
    for name in ("hf-cache", "rl-data", "rl-checkpoints"):
        await cluster.api.create(
            CLAIMS_RESOURCE,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
            },
        )


async def staging_started(cluster: Cluster, start_operator: StartOperator, name: str) -> tuple[Any, Any]:
    """Claims, the operator, and a job whose sources are on the Hub: returns the operator once the job's
    staging Job exists (``<name>-stage``), and the Job."""
    await make_claims(cluster)
    op = await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest(name, hf_sources=True))
    return op, await cluster.wait_for(BATCH_JOBS_RESOURCE, f"{name}-stage")


async def test_the_staging_job_runs_first_and_the_rayjob_only_after_it_succeeded(
    cluster: Cluster, start_operator: StartOperator, staging: StagingStandIn
) -> None:
    _, stage = await staging_started(cluster, start_operator, "gamma")
    status = await cluster.wait_phase("gamma", "Staging")
    assert conditions(status)["Staged"] == ("False", "Staging")
    pod = stage["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == [
        "flashrl-launch",
        "stage",
        "--spec",
        "/etc/flashrl/flashrljob.yaml",
    ]
    assert not any("nvidia.com/gpu" in str(c.get("resources")) for c in pod["containers"])
    token = next(e for e in pod["containers"][0]["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "HF_TOKEN", "optional": True}

    # Progress from the stage command shows in the message; still no RayJob.
    await staging.report_progress(NAMESPACE, "gamma", 2, 5, 3_000_000_000, 16_400_000_000)

    async def progress_shown() -> dict[str, Any] | None:
        status = await cluster.status("gamma")
        return status if "2/5 files, 3.00/16.40 GB" in (status.get("message") or "") else None

    from flashrl_operator.sim import eventually

    await eventually(progress_shown, "staging progress in the status message")
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "gamma") is None

    await staging.succeed(NAMESPACE, "gamma-stage")
    await cluster.wait_for(RAY_JOBS_RESOURCE, "gamma")
    status = await cluster.wait_phase("gamma", "Pending")
    assert conditions(status)["Staged"] == ("True", "Staged")
    # What was staged is recorded on the claims for the next job.
    claim = await cluster.api.get(CLAIMS_RESOURCE, NAMESPACE, "hf-cache")
    assert claim is not None
    records = [
        json.loads(v)
        for k, v in claim["metadata"]["annotations"].items()
        if k.startswith("staged.flashrl.dev/")
    ]
    assert [r["source"] for r in records] == ["hf://Qwen/Qwen3-8B-Base@main"]
    assert records[0]["path"] == "/models/hf/Qwen/Qwen3-8B-Base/main"


async def test_a_failed_staging_job_fails_the_job_with_its_cause_and_no_rayjob(
    cluster: Cluster, start_operator: StartOperator, staging: StagingStandIn
) -> None:
    op, _ = await staging_started(cluster, start_operator, "delta")
    cause = "GatedRepository: Qwen/Qwen3-8B-Base is gated: accept its terms on the Hub and provide a token"
    await staging.fail(NAMESPACE, "delta-stage", cause)
    status = await cluster.wait_phase("delta", "Failed")
    assert status["reason"] == "StagingFailed"
    assert cause in status["message"]
    assert conditions(status)["Staged"] == ("False", "StagingFailed")
    assert conditions(status)["Failed"][0] == "True"

    # A reconcile after the failure must not create the RayJob either: one more goes through the
    # operator's work queue, and the queue has drained (that reconcile, and any it led to, ended).
    async def reconciled_again() -> None:
        intake = op.context.require_intake()
        intake.submit(NAMESPACE, "delta", None)
        await intake.drain()

    await on_operator(op, reconciled_again())
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "delta") is None
    events = await cluster.events_for("delta")
    assert any(e["reason"] == "StagingFailed" and e["type"] == "Warning" for e in events)


async def test_sources_already_staged_on_the_claims_skip_the_job(
    cluster: Cluster, start_operator: StartOperator, staging: StagingStandIn
) -> None:
    await staging_started(cluster, start_operator, "first")
    await staging.succeed(NAMESPACE, "first-stage")
    await cluster.wait_for(RAY_JOBS_RESOURCE, "first")
    # The reconcile that creates the RayJob records the claims, then writes the status: the phase
    # says the records are there (the RayJob alone does not; a loaded machine showed the gap).
    await cluster.wait_phase("first", "Pending")

    await cluster.api.create(JOBS_RESOURCE, job_manifest("second", hf_sources=True))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "second")
    status = await cluster.wait_phase("second", "Pending")
    assert conditions(status)["Staged"] == ("True", "AlreadyStaged")
    assert await cluster.api.get(BATCH_JOBS_RESOURCE, NAMESPACE, "second-stage") is None
    assert ("jobs", NAMESPACE, "second-stage") not in cluster.creations()


async def test_paths_need_no_staging(cluster: Cluster, start_operator: StartOperator) -> None:
    await start_operator()
    await cluster.submit("paths")
    status = await cluster.wait_phase("paths", "Pending")
    assert conditions(status)["Staged"] == ("True", "NothingToStage")
    assert await cluster.api.get(BATCH_JOBS_RESOURCE, NAMESPACE, "paths-stage") is None


async def test_the_operators_default_trainer_image_serves_jobs_that_name_none(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator(default_trainer_image="registry.example/mirror/flashrl-trainer:0.1.0")
    await cluster.api.create(JOBS_RESOURCE, job_manifest("plain"))
    await cluster.api.create(JOBS_RESOURCE, job_manifest("own", {"images": {"trainer": "mine/trainer:2"}}))

    def images(rayjob: dict[str, Any]) -> set[str]:
        cluster_spec = rayjob["spec"]["rayClusterSpec"]
        pods = [
            cluster_spec["headGroupSpec"]["template"],
            *(g["template"] for g in cluster_spec["workerGroupSpecs"]),
        ]
        pods.append(rayjob["spec"]["submitterPodTemplate"])
        return {c["image"] for p in pods for c in p["spec"]["containers"]}

    assert images(await cluster.wait_for(RAY_JOBS_RESOURCE, "plain")) == {
        "registry.example/mirror/flashrl-trainer:0.1.0"
    }
    assert images(await cluster.wait_for(RAY_JOBS_RESOURCE, "own")) == {"mine/trainer:2"}
