"""``--max-concurrent-reconciles``: however many jobs arrive at once, no more reconciles than the bound
are under way together (the operator's memory under a burst depends on it), and each job still gets
its reconcile. The bound is the work queue's (``run/intake.py``): the reconciler keeps none."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from flashrl_operator.job.history import History
from flashrl_operator.job.memory import StatusMemory
from flashrl_operator.job.reconciler import Reconciler, Token
from flashrl_operator.job.verl_check import VerlCheck
from flashrl_operator.run.handlers import OperatorConfig, OperatorContext, job_intake
from flashrl_operator.vocab.metrics import OperatorMetrics


@pytest.mark.parametrize("bound", [1, 3])
async def test_no_more_reconciles_than_the_bound_run_at_once(
    monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    running: list[str] = []
    most = 0
    done: list[str] = []

    async def work(self: Reconciler, body: Mapping[str, Any], _token: Token) -> float | None:
        nonlocal most
        name = body["metadata"]["name"]
        running.append(name)
        most = max(most, len(running))
        await asyncio.sleep(0)  # hand the loop to the others while "talking to the API server"
        await asyncio.sleep(0)
        running.remove(name)
        done.append(name)
        return None

    monkeypatch.setattr(Reconciler, "_reconcile", work)
    ctx = OperatorContext(OperatorConfig(max_concurrent_reconciles=bound))
    intake = ctx.intake = job_intake(ctx)
    ctx.reconciler = Reconciler(
        object(),  # type: ignore[arg-type]
        OperatorMetrics(),
        VerlCheck(intake.submit),
        History(),
        StatusMemory(),
    )
    jobs = [f"job-{i}" for i in range(10)]
    for j in jobs:
        intake.submit("team-a", j, {"metadata": {"name": j, "namespace": "team-a"}})
    await intake.drain()
    assert sorted(done) == sorted(jobs)
    assert most == bound
