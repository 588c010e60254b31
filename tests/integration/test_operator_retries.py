"""Retries that resume, against the real operator: each attempt its own RayJob, gated on checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import NAMESPACE, WAIT_S, Cluster, StartOperator, job_manifest

from flashrl_operator.client.errors import TransientError
from flashrl_operator.job.reconciler import Token
from flashrl_operator.sim import (
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUCCEEDED,
    SUSPENDED,
    TRAINING,
    eventually,
    failed,
)
from flashrl_operator.vocab.kuberay import entrypoint_failed_message

CKPT = "/checkpoints/DAPO-1/{job}/global_step_{step}"


def exited(code: int, *log_lines: str) -> dict[str, Any]:
    """KubeRay's status when the entrypoint exited with ``code`` (Ray's job message ends with its logs)."""
    return failed("AppFailed", entrypoint_failed_message(code, *log_lines))


def crash(step: int, code: int = 1) -> dict[str, Any]:
    """KubeRay's status when verl crashed (the launcher's last line, as Ray's job message carries it)."""
    return exited(
        code,
        "RuntimeError: NCCL watchdog timeout",
        f"flashrl-launch: verl exited with code {code} on its own at step {step}",
    )


async def train(cluster: Cluster, job: str, ray_job: str, attempt: int, steps: range, every: int = 5) -> None:
    """The attempt's cluster runs; the launcher reports each step and each checkpoint verl saved."""
    await cluster.kuberay.set_status(NAMESPACE, ray_job, TRAINING)
    await cluster.wait_phase(job, "Running")
    for step in steps:
        if step % every == 0:
            path = CKPT.format(job=job, step=step)
            await cluster.kuberay.report_checkpoint(NAMESPACE, job, step, path, attempt)
        await cluster.kuberay.report_progress(NAMESPACE, job, step, 20, attempt)

    async def reported() -> bool:
        return ((await cluster.status(job)).get("progress") or {}).get("step") == steps[-1]

    await eventually(reported, f"step {steps[-1]} in the status", WAIT_S)


async def first_attempt(
    cluster: Cluster, start_operator: StartOperator, job: str, last_step: int, max_restarts: int | None = None
) -> None:
    """The operator runs, ``job`` is created (``maxRestarts``, or the default), and its first attempt trains
    steps 1 to ``last_step``."""
    await start_operator(retry_backoff=0.1)
    spec = None if max_restarts is None else {"lifecycle": {"maxRestarts": max_restarts}}
    await cluster.api.create(JOBS_RESOURCE, job_manifest(job, spec))
    await cluster.wait_for(RAY_JOBS_RESOURCE, job)
    await train(cluster, job, job, 1, range(1, last_step + 1))


async def test_a_failure_after_a_checkpoint_starts_attempt_2_from_it(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator(retry_backoff=0.2)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("r1", {"lifecycle": {"maxRestarts": 2}}))
    first = await cluster.wait_for(RAY_JOBS_RESOURCE, "r1")
    assert first["spec"]["backoffLimit"] == 0
    assert first["metadata"]["labels"]["flashrl.dev/attempt"] == "1"
    await train(cluster, "r1", "r1", 1, range(1, 8))  # checkpoint at 5, fails after 7
    await cluster.kuberay.set_status(NAMESPACE, "r1", crash(7))

    second = await cluster.wait_for(RAY_JOBS_RESOURCE, "r1-2")
    assert second["metadata"]["labels"]["flashrl.dev/attempt"] == "2"
    assert second["metadata"]["ownerReferences"][0]["controller"] is True
    head = second["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {"name": "FLASHRL_ATTEMPT", "value": "2"} in head["env"]

    async def first_gone() -> bool:  # its GPUs are freed, not held until the TTL
        return await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "r1") is None

    await eventually(first_gone, "the failed attempt's RayJob to be deleted", WAIT_S)
    status = await cluster.status("r1")
    assert status["attempt"] == 2
    assert status["lostSteps"] == 2
    one, two = status["attempts"]
    assert (one["attempt"], one["startStep"], one["endStep"], one["checkpointStep"]) == (1, 0, 7, 5)
    assert one["reason"] == "TrainerFailed" and one["endTime"]
    assert (two["attempt"], two["startStep"]) == (2, 5) and "endTime" not in two
    retrying = [e for e in await cluster.events_for("r1") if e["reason"] == "Retrying"]
    assert len(retrying) == 1 and retrying[0]["type"] == "Warning"
    assert "2 step(s) since the checkpoint of step 5 lost" in retrying[0]["message"]
    assert "attempt 2 resumes from step 5" in retrying[0]["message"]

    # Attempt 2 resumes from step 5 and finishes.
    await train(cluster, "r1", "r1-2", 2, range(6, 21))
    await cluster.kuberay.set_status(NAMESPACE, "r1-2", SUCCEEDED)
    status = await cluster.wait_phase("r1", "Succeeded")
    assert status["attempt"] == 2 and status["lostSteps"] == 2
    assert status["attempts"][-1]["endStep"] == 20 and status["attempts"][-1]["endTime"]


async def test_a_wake_up_whose_reconcile_fails_transiently_is_retried(
    cluster: Cluster, start_operator: StartOperator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No resync to fall back on (it would reconcile the job anyway, a minute later at most).
    op = await start_operator(retry_backoff=5.0, retry_delay=0.2, resync_interval=3600.0)
    intake, reconciler = op.context.require_intake(), op.context.require_reconciler()
    key = (NAMESPACE, "r8")
    crashed = False
    armed: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []  # the wake-up whose reconcile failed
    retried: list[tuple[str, str]] = []  # the queue's next reconcile of the job, asked for later
    due, original = intake._due, reconciler._reconcile

    def wake_up(woken: tuple[str, str]) -> None:  # a reconcile of the job asked for later is due
        if woken == key and failed:
            retried.append(woken)
        elif crashed and woken == key:  # the wake-up the retry's backoff asked for: it fails once
            armed.append(woken)
        due(woken)

    async def reconcile(body: Any, token: Token) -> float | None:
        meta = body["metadata"]
        if (meta["namespace"], meta["name"]) in armed:
            armed.clear()
            failed.append(key)
            raise TransientError("the API server answered 503 (injected)", delay=0.2)
        return await original(body, token)

    monkeypatch.setattr(intake, "_due", wake_up)
    monkeypatch.setattr(reconciler, "_reconcile", reconcile)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("r8", {"lifecycle": {"maxRestarts": 2}}))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "r8")
    await train(cluster, "r8", "r8", 1, range(1, 6))
    crashed = True
    await cluster.kuberay.set_status(NAMESPACE, "r8", crash(5))
    second = await cluster.wait_for(RAY_JOBS_RESOURCE, "r8-2")
    assert second["metadata"]["labels"]["flashrl.dev/attempt"] == "2"
    assert failed == [key]
    assert retried  # the failed wake-up was retried: the queue reconciled the job again by itself


async def test_repeated_failure_without_a_new_checkpoint_is_no_progress(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await first_attempt(cluster, start_operator, "r2", 7, max_restarts=5)
    await cluster.kuberay.set_status(NAMESPACE, "r2", crash(7))
    # Attempts 2 and 3 resume from step 5 and crash after step 7 again, saving nothing newer.
    for attempt in (2, 3):
        await cluster.wait_for(RAY_JOBS_RESOURCE, f"r2-{attempt}")
        await train(cluster, "r2", f"r2-{attempt}", attempt, range(6, 8))
        await cluster.kuberay.set_status(NAMESPACE, f"r2-{attempt}", crash(7))
    status = await cluster.wait_phase("r2", "Failed")
    assert status["reason"] == "NoProgress"
    assert "keep failing after step 7" in status["message"]
    assert "attempts 2, 3 each resumed from step 5" in status["message"]
    assert status["attempt"] == 3 and status["lostSteps"] == 6
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "r2-4") is None


@pytest.mark.parametrize(
    ("job", "last_step", "code", "line", "reason"),
    [
        pytest.param(
            "r3",
            2,
            73,
            "checkpoint directory /checkpoints/r3 is not writable: Read-only file system (OSError errno 30)",
            "CheckpointUnwritable",
            id="checkpoint-unwritable",
        ),
        pytest.param(
            "r4",
            5,
            70,
            "verl stopped early: it exited 0 at step 5 of 20 (last step line 5, newest checkpoint 5)",
            "StoppedEarly",
            id="stopped-early-is-not-success",
        ),
    ],
)
async def test_a_non_retryable_launcher_failure_fails_the_job_without_a_retry(
    cluster: Cluster,
    start_operator: StartOperator,
    job: str,
    last_step: int,
    code: int,
    line: str,
    reason: str,
) -> None:
    await first_attempt(cluster, start_operator, job, last_step, max_restarts=3)
    await cluster.kuberay.set_status(NAMESPACE, job, exited(code, f"flashrl-launch: {line}"))
    status = await cluster.wait_phase(job, "Failed")
    assert status["reason"] == reason
    assert line in status["message"] and "not retryable" in status["message"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Succeeded"] == "False" and conditions["Failed"] == "True"
    assert status["attempt"] == 1
    assert not [e for e in await cluster.events_for(job) if e["reason"] == "Retrying"]
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, f"{job}-2") is None


async def test_kueue_preemption_resumes_the_same_attempt_and_is_not_a_failure(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator(retry_backoff=0.1, resync_interval=0.3)
    spec = {"scheduling": {"queueName": "gpu-h20"}, "lifecycle": {"maxRestarts": 0}}
    await cluster.api.create(JOBS_RESOURCE, job_manifest("r5", spec))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "r5")
    await cluster.api.patch(RAY_JOBS_RESOURCE, NAMESPACE, "r5", {"spec": {"suspend": False}})  # admitted
    await train(cluster, "r5", "r5", 1, range(1, 8))
    # Kueue preempts the running job: suspend, and KubeRay deletes the cluster.
    await cluster.api.patch(RAY_JOBS_RESOURCE, NAMESPACE, "r5", {"spec": {"suspend": True}})
    # Queued again (Pending, reason Queued), not suspended by the user.
    status = await cluster.kuberay_says("r5", SUSPENDED, "Pending")
    assert status["reason"] == "Queued"
    suspended = next(c for c in status["conditions"] if c["type"] == "Suspended")
    assert suspended["status"] == "False"
    assert status["attempt"] == 1 and status["lostSteps"] == 0
    # Re-admitted: the same RayJob (attempt 1) brings up a new cluster; verl resumes from step 5.
    await cluster.api.patch(RAY_JOBS_RESOURCE, NAMESPACE, "r5", {"spec": {"suspend": False}})
    await train(cluster, "r5", "r5", 1, range(6, 21))
    status = await cluster.kuberay_says("r5", SUCCEEDED, "Succeeded")
    assert status["attempt"] == 1 and status["lostSteps"] == 0
    assert [a["attempt"] for a in status["attempts"]] == [1]
    assert not [e for e in await cluster.events_for("r5") if e["reason"] == "Retrying"]
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "r5-2") is None


async def test_a_deleted_ray_job_of_a_running_job_is_a_failed_attempt(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await first_attempt(cluster, start_operator, "r6", 6, max_restarts=1)
    await cluster.api.delete(RAY_JOBS_RESOURCE, NAMESPACE, "r6")
    # Counted against maxRestarts 1: one retry, announced, from the checkpoint of step 5.
    await cluster.wait_for(RAY_JOBS_RESOURCE, "r6-2")
    status = await cluster.status("r6")
    assert status["attempt"] == 2 and status["attempts"][0]["reason"] == "RayJobDeleted"
    retrying = [e for e in await cluster.events_for("r6") if e["reason"] == "Retrying"]
    assert len(retrying) == 1 and "RayJobDeleted" in retrying[0]["message"]
    assert cluster.creations()[("rayjobs", NAMESPACE, "r6")] == 1  # not silently recreated
    # The budget is spent: deleting attempt 2's RayJob fails the job.
    await train(cluster, "r6", "r6-2", 2, range(6, 9))
    await cluster.api.delete(RAY_JOBS_RESOURCE, NAMESPACE, "r6-2")
    status = await cluster.wait_phase("r6", "Failed")
    assert status["reason"] == "RayJobDeleted" and "no retries left" in status["message"]
    assert cluster.creations()[("rayjobs", NAMESPACE, "r6-2")] == 1


async def test_with_no_retries_a_deleted_ray_job_fails_the_job(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await first_attempt(cluster, start_operator, "r7", 2)  # maxRestarts 0, the default
    await cluster.api.delete(RAY_JOBS_RESOURCE, NAMESPACE, "r7")
    status = await cluster.wait_phase("r7", "Failed")
    assert status["reason"] == "RayJobDeleted"

    async def announced() -> bool:  # Events are posted after the status is written
        warnings = [e for e in await cluster.events_for("r7") if e["type"] == "Warning"]
        return any(e["reason"] == "RayJobDeleted" for e in warnings)

    await eventually(announced, "the RayJobDeleted Warning", WAIT_S)
    assert cluster.creations()[("rayjobs", NAMESPACE, "r7")] == 1
