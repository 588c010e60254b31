"""Faults without side effects, on the real API server: a job deleted while its reconcile is under way
gets no new child, and a reconcile computed from an old copy of a job overwrites no newer status and
announces no transition twice.

The moment that matters is made, not waited for: the test holds the operator's reconcile of one job
at a point (its own thread and loop; :class:`Hold`), changes the job as a user, KubeRay or the launcher
would in that moment, and lets the reconcile go on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from operator_harness import NAMESPACE, WAIT_S, Cluster, StartOperator, on_operator

from envtest.control_plane import OPERATOR_USER
from flashrl_api.times import now_rfc3339
from flashrl_operator.job.reconciler import Reconciler, Token
from flashrl_operator.sim import JOBS_RESOURCE, RAY_JOBS_RESOURCE, SUCCEEDED, TRAINING, eventually

#: A job's children and the name each gets (``job_manifest``: local sources, no staging Job).
CHILDREN = (
    ("v1/serviceaccounts", "{}-launcher"),
    ("v1/configmaps", "{}-spec"),
    (RAY_JOBS_RESOURCE, "{}"),
)


class Hold:
    """Holds one reconcile of the operator where :meth:`here` is awaited, until :meth:`release`."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.released = threading.Event()
        self.finished = threading.Event()

    async def here(self) -> None:
        """In the operator's loop: say so, and wait (in a thread: the loop goes on) for the test."""
        self.reached.set()
        await asyncio.to_thread(self.released.wait, WAIT_S)

    async def reached_it(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, WAIT_S), "the reconcile never got there"

    async def release(self) -> None:
        """Let the reconcile go on, and wait until it has ended."""
        self.released.set()
        assert await asyncio.to_thread(self.finished.wait, WAIT_S), "the held reconcile never ended"


def hold_reconcile(
    monkeypatch: pytest.MonkeyPatch,
    reconciler: Reconciler,
    name: str,
    point: str,
    when: Callable[[Any], bool] = lambda _result: True,
) -> Hold:
    """Hold the next reconcile of job ``name`` right after ``point`` (one of the reconciler's steps)
    returned a result ``when`` accepts."""
    hold = Hold()
    original_step: Callable[..., Awaitable[Any]] = getattr(reconciler, point)
    original_reconcile = reconciler._reconcile

    async def step(body: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original_step(body, *args, **kwargs)
        if body["metadata"]["name"] == name and not hold.reached.is_set() and when(result):
            await hold.here()
        return result

    async def reconcile(body: Any, token: Token) -> float | None:
        try:
            return await original_reconcile(body, token)
        finally:
            if hold.reached.is_set():
                hold.finished.set()

    monkeypatch.setattr(reconciler, point, step)
    monkeypatch.setattr(reconciler, "_reconcile", reconcile)
    return hold


async def events(cluster: Cluster, name: str, reason: str) -> int:
    return sum(e["reason"] == reason for e in await cluster.events_for(name))


async def test_a_job_deleted_during_its_reconcile_gets_no_new_child(
    cluster: Cluster, start_operator: StartOperator, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = await start_operator()
    await cluster.submit("doomed")
    await cluster.wait_phase("doomed", "Pending")
    assert op.context.reconciler is not None
    ray_job = f"RayJob {NAMESPACE}/doomed"
    hold = hold_reconcile(
        monkeypatch,
        op.context.reconciler,
        "doomed",
        "_observe",
        when=lambda seen: ray_job in seen.live and seen.live[ray_job] is None,
    )

    # Its RayJob is deleted: the reconcile that event brings reads the children, finds the RayJob
    # missing and decides to create it again; it is held there, before any write.
    await cluster.api.delete(RAY_JOBS_RESOURCE, NAMESPACE, "doomed")
    await hold.reached_it()
    # Meanwhile the user deletes the job.
    await cluster.api.delete(JOBS_RESOURCE, NAMESPACE, "doomed")
    await cluster.gone(JOBS_RESOURCE, "doomed")
    await hold.release()

    for resource, name in CHILDREN:
        await cluster.gone(resource, name.format("doomed"))
    assert cluster.creations()[("rayjobs", NAMESPACE, "doomed")] == 1, "a RayJob for a deleted job"


async def test_a_reconcile_from_an_old_copy_overwrites_nothing_and_creates_nothing(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    op = await start_operator()
    await cluster.submit("stale")
    await cluster.kuberay_says("stale", TRAINING, "Running")
    await cluster.kuberay.report_progress(NAMESPACE, "stale", step=150, total=150)
    old = await cluster.job("stale")  # what a reconcile queued now would hold
    status = await cluster.kuberay_says("stale", SUCCEEDED, "Succeeded")
    ended = status["attempts"][-1]["endTime"]

    async def announced() -> bool:
        return await events(cluster, "stale", "Succeeded") == 1

    await eventually(announced, "the Succeeded Event")

    async def later() -> bool:  # a status computed now would show another endTime
        return now_rfc3339() > ended

    await eventually(later, "the clock to pass the attempt's end", WAIT_S, 0.1)

    assert op.context.reconciler is not None
    await on_operator(op, op.context.reconciler.reconcile(NAMESPACE, "stale", old))
    after = await cluster.status("stale")
    assert after["attempts"][-1]["endTime"] == ended
    assert after["completionTime"] == status["completionTime"]
    assert await events(cluster, "stale", "Succeeded") == 1

    # Deleted, its children collected: the old copy creates none of them again.
    await cluster.api.delete(JOBS_RESOURCE, NAMESPACE, "stale")
    for resource, name in CHILDREN:
        await cluster.gone(resource, name.format("stale"))
    await on_operator(op, op.context.reconciler.reconcile(NAMESPACE, "stale", old))
    for resource, name in CHILDREN:
        assert await cluster.api.get(resource, NAMESPACE, name.format("stale")) is None
    assert cluster.creations()[("configmaps", NAMESPACE, "stale-spec")] == 1


async def test_a_status_write_is_made_against_the_version_it_was_computed_from(
    cluster: Cluster, start_operator: StartOperator, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = await start_operator()
    await cluster.submit("racer")
    await cluster.kuberay_says("racer", TRAINING, "Running")
    assert op.context.reconciler is not None
    hold = hold_reconcile(monkeypatch, op.context.reconciler, "racer", "_current")

    # KubeRay says it succeeded; the operator's reconcile checked the job's version and is held
    # before writing the status; the launcher writes its progress in that moment.
    await cluster.kuberay.set_status(NAMESPACE, "racer", SUCCEEDED)
    await hold.reached_it()
    await cluster.kuberay.report_progress(NAMESPACE, "racer", step=150, total=150)
    await hold.release()

    status = await cluster.wait_phase("racer", "Succeeded")
    assert status["progress"]["step"] == 150
    assert cluster.audit is not None
    status_patches = [
        (e.get("responseStatus") or {}).get("code")
        for e in cluster.audit.requests(OPERATOR_USER, "flashrljobs")
        if e["verb"] == "patch"
        and e["objectRef"].get("name") == "racer"
        and e["objectRef"].get("subresource") == "status"
    ]
    assert 409 in status_patches, "the status was written over a version it was not computed from"

    async def announced() -> bool:
        return await events(cluster, "racer", "Succeeded") >= 1

    await eventually(announced, "the Succeeded Event")
    assert await events(cluster, "racer", "Succeeded") == 1
