"""With leader election, a replica that does not hold the Lease does nothing: no job reconcile, no
experiment reconcile (and so no metrics-history write: the job's reconcile writes it), not even in the
periodic resync. Once it holds the Lease, each of them goes through.

(Two real operator processes electing a leader: tests/integration/test_operator_replicas.py.)
"""

from __future__ import annotations

from typing import Any

from flashrl_operator.client.login import Credentials
from flashrl_operator.run.handlers import (
    OperatorConfig,
    OperatorContext,
    experiment_intake,
    job_intake,
    resync_all,
)
from flashrl_operator.run.leadership import ElectionTiming, Leadership


class Recorder:
    """Stands in for the reconciler and the experiment reconciler: it records what it is asked to do."""

    def __init__(self, calls: list[tuple[Any, ...]], what: str) -> None:
        self._calls = calls
        self._what = what

    async def reconcile(self, namespace: str, name: str, body: Any = None) -> None:
        self._calls.append((self._what, namespace, name))


async def _noop() -> None:
    return None


def _context(calls: list[tuple[Any, ...]]) -> tuple[OperatorContext, Leadership]:
    leadership = Leadership(
        Credentials("http://127.0.0.1:9"),  # never used: the election is not run here
        namespace="flashrl-system",
        identity="replica-b",
        timing=ElectionTiming(15),
        on_elected=_noop,
    )
    ctx = OperatorContext(OperatorConfig())
    ctx.leadership = leadership
    ctx.reconciler = Recorder(calls, "job")  # type: ignore[assignment]
    ctx.experiments = Recorder(calls, "experiment")  # type: ignore[assignment]
    ctx.intake = job_intake(ctx)
    ctx.experiment_intake = experiment_intake(ctx)
    ctx.known_jobs.add(("rl", "a"))
    ctx.known_experiments.add(("rl", "cmp"))
    return ctx, leadership


async def _everything(ctx: OperatorContext) -> None:
    job = {"metadata": {"namespace": "rl", "name": "a"}}
    ctx.require_intake().submit("rl", "a", job)
    await ctx.require_intake().drain()
    ctx.require_experiment_intake().submit("rl", "cmp", None)
    await ctx.require_experiment_intake().drain()
    resync_all(ctx)  # through the intakes, as every reconcile
    await ctx.require_intake().drain()
    await ctx.require_experiment_intake().drain()


async def test_a_follower_reconciles_nothing_and_writes_no_history() -> None:
    calls: list[tuple[Any, ...]] = []
    ctx, leadership = _context(calls)
    assert not leadership.leading
    await _everything(ctx)
    assert calls == []


async def test_the_leader_reconciles_jobs_and_experiments() -> None:
    calls: list[tuple[Any, ...]] = []
    ctx, leadership = _context(calls)
    leadership._leading.set()  # what the election does when this replica takes the Lease
    assert leadership.leading
    await _everything(ctx)
    assert calls == [
        ("job", "rl", "a"),
        ("experiment", "rl", "cmp"),
        ("job", "rl", "a"),  # the resync: every known job, then every known experiment
        ("experiment", "rl", "cmp"),
    ]
