"""The operator's status keys are the operator's: what someone else writes there (with the launcher's
token, which anyone with ``edit`` can mint) is written over from the operator's own observations at
the next reconcile, also by an operator that restarted meanwhile; an experiment counts its variants by
what the operator decided, so a variant claiming ``Succeeded`` frees no parallelism slot."""

from __future__ import annotations

import asyncio
from typing import Any

from operator_harness import NAMESPACE, WAIT_S, Cluster, StartOperator
from test_operator_experiment import experiment_manifest, experiment_status, wait_experiment

from flashrl_operator.sim import (
    CLUSTER_STARTING,
    EXPERIMENTS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    TRAINING,
    eventually,
)

#: What a tenant writes: the job finished (it has not), in their words, with an absurd goodput.
FORGED: dict[str, Any] = {
    "phase": "Succeeded",
    "reason": "Forged",
    "message": "nothing to see here",
    "completionTime": "2026-01-01T00:00:00Z",
    "goodput": {"heldGPUSeconds": 1e308, "trainingGPUSeconds": 1e308, "goodput": 1.0},
}


async def forge(cluster: Cluster, name: str, status: dict[str, Any]) -> None:
    await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, name, {"status": status}, subresource="status")
    written = await cluster.status(name)
    assert written["phase"] == status["phase"]  # the server took it: only the operator can undo it


async def replaced(cluster: Cluster, name: str) -> dict[str, Any]:
    """Until the job's status is the operator's again (its phase, reason, message and goodput)."""

    async def probe() -> dict[str, Any] | None:
        status = await cluster.status(name)
        return status if status.get("reason") != "Forged" else None

    return await eventually(probe, f"{name}'s forged status to be written over", WAIT_S, 0.2)


def assert_the_operators(status: dict[str, Any]) -> None:
    assert status["phase"] == "Starting", status
    assert status["message"] != FORGED["message"]
    assert "completionTime" not in status
    assert status["goodput"]["heldGPUSeconds"] < 1e6
    assert status["goodput"]["trainingGPUSeconds"] == 0


async def test_a_forged_succeeded_and_goodput_are_written_over(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    operator = await start_operator(resync_interval=1.0)
    await cluster.submit("forged")
    await cluster.kuberay_says("forged", CLUSTER_STARTING, "Starting")
    await forge(cluster, "forged", FORGED)
    # The next reconcile (the resync here) decides from what the operator wrote and observes.
    assert_the_operators(await replaced(cluster, "forged"))

    # An operator that never wrote this status (a restart) checks the final phase against the RayJob,
    # which is still starting.
    await asyncio.to_thread(operator.stop)
    await forge(cluster, "forged", FORGED)
    await start_operator(resync_interval=1.0)
    assert_the_operators(await replaced(cluster, "forged"))


async def test_a_variant_claiming_succeeded_frees_no_parallelism_slot(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator()
    await cluster.api.create(EXPERIMENTS_RESOURCE, experiment_manifest("par", parallelism=1))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "par-fp8")
    await cluster.kuberay_says("par-fp8", TRAINING, "Running")
    # The variant's status claims it ended and its GPUs were released (attempts ledger included).
    ended = {"attempt": 1, "startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:01Z"}
    await forge(
        cluster,
        "par-fp8",
        {**FORGED, "attempts": [{**ended, "releaseTime": "2026-01-01T00:00:02Z"}]},
    )
    # A later report of the launcher: once the experiment shows it, it has read the forged status too.
    await cluster.kuberay.report_progress(NAMESPACE, "par-fp8", 3, 12)
    status = await wait_experiment(
        cluster, "par", lambda s: (s.get("variants") or [{}])[0].get("step") == 3, "fp8 at step 3"
    )
    assert status["variants"][0]["phase"] == "Running"
    assert status["finished"] == "0/2"
    assert status["variants"][1]["phase"] == "Waiting"
    assert await cluster.api.get(JOBS_RESOURCE, NAMESPACE, "par-bf16") is None
    assert (await experiment_status(cluster, "par"))["variants"][1]["reason"] == "WaitingForSlot"
