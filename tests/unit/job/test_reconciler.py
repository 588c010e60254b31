"""The reconcilers keep no task, lock, bound, cache or timer of their own: they return when they want to
run again and the operator's one work queue (``run/intake.py``) schedules it, bounds them, serialises
them per object and retries every failure, a failed wake-up's too; the verl check and the history's
pace and the memory of the operator's status keys are collaborators the reconcilers are given
(``job/verl_check.py``, ``job/history.py``, ``job/memory.py``)."""

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
from flashrl_operator.job.history import History
from flashrl_operator.job.memory import StatusMemory
from flashrl_operator.job.reconciler import Reconciler, Token
from flashrl_operator.job.verl_check import VerlCheck
from flashrl_operator.run.handlers import OperatorConfig, OperatorContext, job_intake
from flashrl_operator.vocab.metrics import OperatorMetrics

#: What keeping one's own task, lock, bound, cache or timer looks like in asyncio and the standard
#: library (and the operator's own bound, FairSlots; its own verl check, history pace and status memory,
#: VerlCheck, History and StatusMemory, are given).
HELD: frozenset[str] = frozenset(
    {
        # tasks and futures
        "ensure_future",
        "create_task",
        "create_future",
        "Task",
        "TaskGroup",
        "Future",
        "gather",
        "run_in_executor",
        "to_thread",
        "Thread",
        # locks and bounds
        "Lock",
        "RLock",
        "Semaphore",
        "BoundedSemaphore",
        "Condition",
        "Event",
        "Barrier",
        "Queue",
        "FairSlots",
        # the collaborators the job reconciler is given (their type in a signature is allowed), never
        # makes: the verl check, the history's pace, and the memory of its own status keys (a per-UID
        # record it decides from, shared with the experiment reconciler)
        "VerlCheck",
        "History",
        "StatusMemory",
        # caches
        "lru_cache",
        "cache",
        "cached_property",
        "OrderedDict",
        # timers
        "TimerHandle",
        "call_later",
        "call_at",
        "sleep",
        "wait_for",
        "timeout",
    }
)


def held(tree: ast.AST) -> list[str]:
    """The names in ``HELD`` that ``tree`` uses (as a name or an attribute) and any name that says it
    is a cache (``self._override_cache``), with their lines. Type annotations are read too: a
    collaborator's type in a signature (``verl_check: VerlCheck``) is what being given one looks like,
    so those are left out."""
    annotations = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None
        for n in ast.walk(node.annotation)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in annotations:
            continue
        name = getattr(node, "id", None) if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if name in HELD or (isinstance(name, str) and "cache" in name.lower()):
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
    came_back = (
        "from flashrl_operator.job.fair import FairSlots\n"
        "class Reconciler:\n"
        "    def __init__(self, check: VerlCheck) -> None:\n"
        "        self._checks = FairSlots(2)\n"
        "        self._override_cache: dict[str, list[str]] = {}\n"
        "        task = asyncio.ensure_future(self._compose())\n"
    )
    assert sorted(held(ast.parse(came_back))) == [
        "FairSlots (line 4)",
        "_override_cache (line 5)",
        "ensure_future (line 6)",
    ]


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
    ctx.reconciler = Reconciler(kube, metrics, VerlCheck(intake.submit), History(), StatusMemory())  # type: ignore[arg-type]
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
