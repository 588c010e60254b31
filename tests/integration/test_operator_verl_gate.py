"""verl's checks gate only what verl reads: a spec's first RayJob. A suspend of a running job is never
held behind them, not even right after an operator restart (the RayJob carries the key of the verl
inputs checked and accepted, so a restarted operator checks nothing that already runs).

The checks are made slow through the operator's test seam (``OperatorConfig.verl_checker``): a checker
that does not return until the test lets it, so "held" is an order of events, never a duration.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_api import FlashRLJob
from flashrl_operator.render.children import VERL_CHECKED_ANNOTATION
from flashrl_operator.sim import JOBS_RESOURCE, RAY_JOBS_RESOURCE, SUSPENDED, TRAINING, eventually


class SlowChecks:
    """verl's checks, played: the first ``free`` pass at once; every later one waits until
    :attr:`release` is set (or the operator cancels it while stopping)."""

    def __init__(self, free: int = 0) -> None:
        self.free = free
        self.calls: list[str] = []
        self.release = threading.Event()

    def __call__(self, job: FlashRLJob, cancel: threading.Event) -> list[str]:
        self.calls.append(job.name)
        if len(self.calls) <= self.free:
            return []
        while not self.release.wait(0.05):
            if cancel.is_set():
                raise RuntimeError("the operator stopped the check")
        return []


async def _ray_job(cluster: Cluster, name: str) -> dict[str, Any]:
    obj = await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, name)
    assert obj is not None
    return obj


async def _suspended(cluster: Cluster, name: str) -> None:
    async def probe() -> bool:
        return (await _ray_job(cluster, name))["spec"].get("suspend") is True

    await eventually(probe, f"RayJob {name} suspended", 120.0)


async def _running(cluster: Cluster, name: str, spec: dict[str, Any]) -> None:
    await cluster.api.create(JOBS_RESOURCE, job_manifest(name, spec))
    await cluster.wait_for(RAY_JOBS_RESOURCE, name)
    await cluster.kuberay_says(name, TRAINING, "Running")


async def test_a_suspend_is_not_held_behind_slow_verl_checks(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    checks = SlowChecks(free=1)
    try:
        await start_operator(check_overrides=True, check_slots=2, verl_checker=checks)
        await _running(cluster, "gate", {"overrides": ["trainer.test_freq=3"]})
        assert (await _ray_job(cluster, "gate"))["metadata"]["annotations"][VERL_CHECKED_ANNOTATION]
        # Another job's check now holds the namespace's one check slot and does not end.
        await cluster.api.create(JOBS_RESOURCE, job_manifest("waits", {"overrides": ["trainer.test_freq=4"]}))

        async def stuck() -> bool:
            return checks.calls == ["gate", "waits"]

        await eventually(stuck, "the second job's check to start", 60.0)

        await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "gate", {"spec": {"lifecycle": {"suspend": True}}})
        await _suspended(cluster, "gate")
        status = await cluster.kuberay_says("gate", SUSPENDED, "Suspended")
        assert status["phase"] == "Suspended"
        # All of it while the checks were held: the waiting job has no RayJob, nothing more was checked.
        assert not checks.release.is_set()
        assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "waits") is None
        assert checks.calls == ["gate", "waits"]
    finally:
        checks.release.set()


async def test_a_suspend_right_after_an_operator_restart_checks_nothing_that_runs(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    first = await start_operator(check_overrides=True, verl_checker=SlowChecks(free=1))
    await _running(cluster, "kept", {"overrides": ["trainer.test_freq=3"]})
    await asyncio.to_thread(first.stop)

    checks = SlowChecks(free=0)  # every check the restarted operator asks for waits
    try:
        await start_operator(check_overrides=True, verl_checker=checks)
        await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "kept", {"spec": {"lifecycle": {"suspend": True}}})
        await _suspended(cluster, "kept")
        status = await cluster.kuberay_says("kept", SUSPENDED, "Suspended")
        assert status["phase"] == "Suspended"
        assert checks.calls == []  # the RayJob said its verl inputs were checked and accepted
        assert cluster.creations()[("rayjobs", NAMESPACE, "kept")] == 1
    finally:
        checks.release.set()
