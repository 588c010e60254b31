"""The job intake, the operator's one work queue: handlers hand a job over and return; at most ``limit``
reconciles run at once, never two of one job; a job waits at most once, from its newest event; what
waits is compact (no managedFields); the wake-up a reconcile returns is scheduled; every failure gives
its turn back and comes again after its backoff (a failed wake-up too); a deleted job's retry is
dropped, and a deleted job that still waits is read first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from flashrl_operator.client.errors import RejectedError, TransientError
from flashrl_operator.run.intake import Intake, pack, unpack


def job(name: str, generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "generation": generation,
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:model": {}}}}],
        },
        "spec": {"model": {"name": "Qwen/Qwen3-8B-Base"}},
    }


def no_backoff(namespace: str, name: str, attempt: int, exc: Exception) -> float:
    return 0.0


def long_backoff(namespace: str, name: str, attempt: int, exc: Exception) -> float:
    return 3600.0  # a retry the test sees scheduled, and never waits for


class Calls:
    """Stands in for the reconciler: records each call, how many run at once, and can be held."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Mapping[str, Any] | None]] = []
        self.running = 0
        self.most = 0
        self.release = asyncio.Event()
        self.release.set()
        self.fail: dict[str, int] = {}
        #: Per job, the wake-ups its next reconciles return (then ``None``).
        self.again: dict[str, list[float]] = {}
        self.running_jobs: list[str] = []
        self.overlapped = False

    async def __call__(self, namespace: str, name: str, body: Mapping[str, Any] | None) -> float | None:
        self.calls.append((name, body))
        self.running += 1
        self.most = max(self.most, self.running)
        self.overlapped |= name in self.running_jobs
        self.running_jobs.append(name)
        try:
            await self.release.wait()
            await asyncio.sleep(0)
            if self.fail.get(name, 0) > 0:
                self.fail[name] -= 1
                raise TransientError("the API server answered 503")
            wakeups = self.again.get(name)
            return wakeups.pop(0) if wakeups else None
        finally:
            self.running -= 1
            self.running_jobs.remove(name)


def test_pack_drops_managed_fields_and_keeps_the_rest() -> None:
    body = job("a")
    packed = pack(body)
    assert packed is not None and "managedFields" not in packed
    assert unpack(packed) == {
        **body,
        "metadata": {k: v for k, v in body["metadata"].items() if k != "managedFields"},
    }
    assert pack(None) is None and unpack(None) is None
    assert len(packed) < len(json.dumps(body))


@pytest.mark.parametrize("limit", [1, 3])
async def test_no_more_than_limit_reconciles_run_at_once_and_every_job_gets_one(limit: int) -> None:
    calls = Calls()
    intake = Intake(calls, limit, no_backoff, kind="FlashRLJob")
    for i in range(10):
        intake.submit("team-a", f"job-{i}", job(f"job-{i}"))
    assert intake.waiting == 10  # submit never waits
    await intake.drain()
    assert sorted(name for name, _ in calls.calls) == sorted(f"job-{i}" for i in range(10))
    assert calls.most == limit


async def test_a_waiting_job_is_reconciled_once_from_its_newest_event() -> None:
    calls = Calls()
    calls.release.clear()
    intake = Intake(calls, 1, no_backoff, kind="FlashRLJob")
    intake.submit("team-a", "busy", job("busy"))
    await asyncio.sleep(0)  # "busy" takes the only turn and is held there
    for generation in (1, 2, 3):
        intake.submit("team-a", "a", job("a", generation))
    intake.submit("team-a", "b", job("b"))
    intake.submit("team-a", "b", None)  # a child's event: read the job
    assert intake.waiting == 2
    calls.release.set()
    await intake.drain()
    assert [name for name, _ in calls.calls] == ["busy", "a", "b"]
    bodies = {name: body for name, body in calls.calls}
    assert bodies["a"] is not None and bodies["a"]["metadata"]["generation"] == 3
    assert "managedFields" not in bodies["a"]["metadata"]
    assert bodies["b"] is None


async def test_an_event_while_reconciling_brings_one_more_reconcile() -> None:
    calls = Calls()
    calls.release.clear()
    intake = Intake(calls, 2, no_backoff, kind="FlashRLJob")
    intake.submit("team-a", "a", job("a", 1))
    await asyncio.sleep(0)
    intake.submit("team-a", "a", job("a", 2))  # arrives while the first reconcile runs
    calls.release.set()
    await intake.drain()
    assert [body["metadata"]["generation"] for _, body in calls.calls if body] == [1, 2]


async def test_two_reconciles_of_one_job_never_run_at_once_though_turns_are_free() -> None:
    calls = Calls()
    calls.release.clear()
    intake = Intake(calls, 4, no_backoff, kind="FlashRLJob")
    intake.submit("team-a", "a", job("a", 1))
    intake.submit("team-a", "b", job("b"))
    await asyncio.sleep(0)  # "a" and "b" both hold a turn
    for generation in (2, 3):  # while "a" runs: it waits for it, once, from the newest
        intake.submit("team-a", "a", job("a", generation))
        await asyncio.sleep(0)
    assert calls.running == 2
    calls.release.set()
    await intake.drain()
    assert not calls.overlapped
    assert [body["metadata"]["generation"] for name, body in calls.calls if name == "a" and body] == [1, 3]


async def test_the_wake_up_a_reconcile_returns_is_scheduled_and_reads_the_job() -> None:
    calls = Calls()
    calls.again["a"] = [0.01]
    intake = Intake(calls, 1, long_backoff, kind="FlashRLJob")
    intake.submit("team-a", "a", job("a"))
    await intake.drain()
    assert intake.scheduled("team-a", "a")
    while len(calls.calls) < 2:
        await asyncio.sleep(0.01)
        await intake.drain()
    assert calls.calls[1] == ("a", None)
    assert not intake.scheduled("team-a", "a")  # the second reconcile asked for nothing more


async def test_a_wake_up_whose_reconcile_fails_transiently_is_retried_after_the_backoff() -> None:
    calls = Calls()
    calls.again["waking"] = [0.01]  # e.g. a failed attempt's retry backoff ending
    asked: list[tuple[int, str]] = []

    def backoff(namespace: str, name: str, attempt: int, exc: Exception) -> float:
        asked.append((attempt, str(exc)))
        return 0.01

    intake = Intake(calls, 1, backoff, kind="FlashRLJob")
    intake.submit("team-a", "waking", job("waking"))
    await intake.drain()
    calls.fail["waking"] = 1  # the API server answers 503 to the wake-up's reconcile
    while len(calls.calls) < 3:
        await asyncio.sleep(0.01)
        await intake.drain()
    assert [name for name, _ in calls.calls] == ["waking"] * 3
    assert asked == [(0, "the API server answered 503")]  # the wake-up failed and was retried
    assert calls.fail["waking"] == 0 and not intake.scheduled("team-a", "waking")
    await intake.close()


async def test_an_event_does_what_a_scheduled_wake_up_would_have() -> None:
    calls = Calls()
    calls.again["a"] = [3600.0]
    intake = Intake(calls, 1, long_backoff, kind="FlashRLJob")
    intake.submit("team-a", "a", job("a", 1))
    await intake.drain()
    assert intake.scheduled("team-a", "a")
    intake.submit("team-a", "a", job("a", 2))
    await intake.drain()
    # The event's reconcile asked for no wake-up: the one before is not kept for it.
    assert not intake.scheduled("team-a", "a")
    assert len(calls.calls) == 2


async def test_a_transient_failure_gives_the_turn_back_and_retries_after_the_backoff() -> None:
    calls = Calls()
    calls.fail["flaky"] = 2
    asked: list[int] = []

    def backoff(namespace: str, name: str, attempt: int, exc: Exception) -> float:
        asked.append(attempt)
        return 0.01

    intake = Intake(calls, 1, backoff, kind="FlashRLJob")
    intake.submit("team-a", "flaky", job("flaky"))
    intake.submit("team-a", "steady", job("steady"))
    await intake.drain()
    # "steady" ran while "flaky" waited for its retry: the failure did not keep the only turn.
    assert [name for name, _ in calls.calls][:2] == ["flaky", "steady"]
    while len(calls.calls) < 4:
        await asyncio.sleep(0.01)
        await intake.drain()
    assert [name for name, _ in calls.calls] == ["flaky", "steady", "flaky", "flaky"]
    assert asked == [0, 1]  # the backoff grows per failure in a row
    assert calls.calls[2][1] is None  # a retry reads the job again
    await intake.close()


async def test_a_deleted_job_is_not_retried() -> None:
    calls = Calls()
    calls.fail["gone"] = 1

    def backoff(namespace: str, name: str, attempt: int, exc: Exception) -> float:
        return 0.05

    intake = Intake(calls, 1, backoff, kind="FlashRLJob")
    intake.submit("team-a", "gone", job("gone"))
    await intake.drain()
    intake.forget("team-a", "gone")
    await asyncio.sleep(0.1)
    await intake.drain()
    assert [name for name, _ in calls.calls] == ["gone"]


async def test_a_job_deleted_while_waiting_is_read_first_not_reconciled_from_its_old_body() -> None:
    calls = Calls()
    calls.release.clear()
    intake = Intake(calls, 1, no_backoff, kind="FlashRLJob")
    intake.submit("team-a", "busy", job("busy"))
    await asyncio.sleep(0)  # "busy" holds the only turn
    intake.submit("team-a", "doomed", job("doomed"))
    intake.forget("team-a", "doomed")  # its DELETED event arrives while it waits
    calls.release.set()
    await intake.drain()
    assert calls.calls[1] == ("doomed", None)  # the reconcile reads the job (and finds it gone)


async def test_other_failures_are_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(namespace: str, name: str, body: Mapping[str, Any] | None) -> None:
        raise KeyError("spec")

    intake = Intake(broken, 1, long_backoff, kind="FlashRLJob")
    intake.submit("team-a", "bug", job("bug"))
    await intake.drain()
    assert "FlashRLJob team-a/bug: reconcile failed" in caplog.text
    assert intake.waiting == 0
    assert intake.scheduled("team-a", "bug")  # every failure is retried, after the backoff
    await intake.close()


async def test_an_api_refusal_is_one_line_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def refused(namespace: str, name: str, body: Mapping[str, Any] | None) -> None:
        raise RejectedError("get RayJob team-a/j", 403, "Forbidden", "rayjobs is forbidden")

    intake = Intake(refused, 1, long_backoff, kind="FlashRLJob")
    intake.submit("team-a", "j", job("j"))
    await intake.drain()
    (record,) = [r for r in caplog.records if "reconcile failed" in r.getMessage()]
    assert "HTTP 403 Forbidden: rayjobs is forbidden" in record.getMessage()
    assert record.exc_info is None
    assert intake.scheduled("team-a", "j")
    await intake.close()


def test_a_limit_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Intake(Calls(), 0, no_backoff, kind="FlashRLJob")
