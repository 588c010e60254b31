"""The reconcilers keep no lock, bound or timer of their own: they return when they want to run again
and the operator's one work queue (``run/intake.py``) schedules it, bounds them, serialises them per
object and retries every failure, a failed wake-up's too."""

from __future__ import annotations

import ast
import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

import pytest

from flashrl_operator.client.errors import TransientError
from flashrl_operator.experiment import reconciler as experiment_reconciler
from flashrl_operator.job import reconciler as job_reconciler
from flashrl_operator.job.reconciler import Reconciler, Token
from flashrl_operator.run.handlers import OperatorConfig, OperatorContext, job_intake
from flashrl_operator.vocab.metrics import OperatorMetrics

#: What keeping one's own lock, bound or timer looks like in asyncio.
HELD: frozenset[str] = frozenset(
    {
        "Lock",
        "Semaphore",
        "BoundedSemaphore",
        "Condition",
        "TimerHandle",
        "call_later",
        "call_at",
        "sleep",
        "create_task",
    }
)


def held(tree: ast.AST) -> list[str]:
    """The names in ``HELD`` that ``tree`` uses (as a name or an attribute), with their lines."""
    found = []
    for node in ast.walk(tree):
        name = getattr(node, "id", None) if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if name in HELD:
            found.append(f"{name} (line {getattr(node, 'lineno', '?')})")
    return found


def test_the_job_reconciler_module_holds_no_lock_semaphore_or_timer() -> None:
    assert held(ast.parse(inspect.getsource(job_reconciler))) == []


def test_the_experiment_reconciler_holds_no_lock_semaphore_or_timer() -> None:
    source = inspect.getsource(experiment_reconciler.ExperimentReconciler)
    assert held(ast.parse(source)) == []


def test_the_guard_sees_what_it_guards_against() -> None:
    tree = ast.parse("import asyncio\nlock = asyncio.Lock()\nasyncio.get_running_loop().call_later(1, f)\n")
    assert held(tree) == ["Lock (line 2)", "call_later (line 3)"]


class FlakyKube:
    """Answers the job's read, except the first one after ``flaky`` is set: a 503."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.flaky = False
        self.reads = 0

    async def get(self, resource: Any, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads += 1
        if self.flaky:
            self.flaky = False
            raise TransientError("the API server answered 503", delay=0.01)
        return self.body


async def test_a_wake_up_whose_read_fails_transiently_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"metadata": {"name": "waking", "namespace": "team-a", "uid": "u-1"}}
    kube = FlakyKube(body)
    steps: list[str] = []

    async def step(self: Reconciler, seen: Mapping[str, Any], _token: Token) -> float | None:
        steps.append(seen["metadata"]["name"])
        if len(steps) == 1:
            kube.flaky = True  # the wake-up's read will fail
            return 0.01  # e.g. a failed attempt's retry backoff ending: wake me then
        return None

    monkeypatch.setattr(Reconciler, "_reconcile", step)
    ctx = OperatorContext(OperatorConfig(retry_delay=0.01, max_retry_delay=0.01))
    intake = ctx.intake = job_intake(ctx)
    metrics = OperatorMetrics()
    ctx.reconciler = Reconciler(kube, metrics, intake.submit)  # type: ignore[arg-type]
    intake.submit("team-a", "waking", body)
    await intake.drain()
    assert intake.scheduled("team-a", "waking")  # the wake-up the reconcile returned
    while len(steps) < 2:
        await asyncio.sleep(0.01)
        await intake.drain()
    # The first reconcile (from the event's body) did not read; the wake-up's read failed; its retry read.
    assert kube.reads == 2
    assert steps == ["waking", "waking"]
    failed = {"reason": "Temporary"}
    assert metrics.registry.get_sample_value("flashrl_operator_reconcile_errors_total", failed) == 1
    assert not intake.scheduled("team-a", "waking")
    await intake.close()
