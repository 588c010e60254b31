"""One tenant's slow verl checks against another tenant's plain job: one slot vs fair slots.

Three jobs at the size budget of one job's checks (:data:`flashrl_jobs.override_rules.MAX_OVERRIDE_ITEMS`
list items) are queued in one namespace, then a plain job in another. Each check is the operator's
own (:func:`flashrl_operator.job.verl_check.run_checks`: the spelling rules in process, then
verl's checks in a sandboxed child), scheduled "before" as the operator did (one at a time, first come
first served: ``asyncio.Semaphore(1)``) and "after" as it does (:class:`~flashrl_operator.job.fair.
FairSlots` with two slots). The figure is how long the plain job waits for its verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from flashrl_api import FlashRLJob, parse_job
from flashrl_jobs.override_rules import MAX_OVERRIDE_ITEMS
from flashrl_operator.job.fair import FairSlots
from flashrl_operator.job.verl_check import run_checks

SLOTS = 2


def _job(namespace: str, name: str, overrides: list[str]) -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "model": {"source": "/models/qwen"},
                "data": {"train": "/data/t.parquet", "validation": "/data/v.parquet"},
                "overrides": overrides,
            },
        }
    )


def _largest() -> list[str]:
    per = 400
    return [
        f"+data.bench_{i}=[" + ",".join(["0"] * per) + "]" for i in range(MAX_OVERRIDE_ITEMS // (per - 1))
    ]


async def _scenario(slot: Callable[[str], Any]) -> dict[str, float]:
    """Seconds from submission to verdict, per job."""
    start = time.perf_counter()
    done: dict[str, float] = {}

    async def check(job: FlashRLJob) -> None:
        async with slot(job.namespace or ""):
            await asyncio.to_thread(run_checks, job, threading.Event())
        done[job.name] = time.perf_counter() - start

    jobs = [_job("team-a", f"slow-{i}", _largest()) for i in range(3)]
    jobs.append(_job("other-team", "plain", ["trainer.test_freq=3"]))
    tasks = []
    for job in jobs:
        tasks.append(asyncio.create_task(check(job)))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    return done


def _one_at_a_time() -> Callable[[str], Any]:
    lock = asyncio.Semaphore(1)

    @contextlib.asynccontextmanager
    async def slot(_namespace: str) -> AsyncIterator[None]:
        async with lock:
            yield

    return slot


async def _both() -> tuple[dict[str, float], dict[str, float], float]:
    plain_alone = await _scenario_alone()
    before = await _scenario(_one_at_a_time())
    fair = FairSlots(SLOTS)
    after = await _scenario(fair.slot)
    return before, after, plain_alone


async def _scenario_alone() -> float:
    start = time.perf_counter()
    await asyncio.to_thread(
        run_checks, _job("other-team", "plain", ["trainer.test_freq=3"]), threading.Event()
    )
    return time.perf_counter() - start


def run() -> str:
    """The markdown section."""
    before, after, alone = asyncio.run(_both())
    slow_before = max(v for k, v in before.items() if k != "plain")
    slow_after = max(v for k, v in after.items() if k != "plain")
    return (
        "## One tenant's slow checks vs another tenant's plain job\n\n"
        f"Three jobs at the check's size budget ({MAX_OVERRIDE_ITEMS} list items) in one namespace, then a "
        "plain job in another; each check is the operator's own (spelling rules, then verl's checks in a "
        "sandboxed child). Before: one check at a time, first come first served. After: "
        f"`FairSlots({SLOTS})` (no namespace holds every slot). `bench/fair_bench.py`.\n\n"
        "| scheduling | plain job's verdict after | last slow job's verdict after |\n|---|---|---|\n"
        f"| plain job alone | {alone:.1f} s | |\n"
        f"| one at a time (before) | {before['plain']:.1f} s | {slow_before:.1f} s |\n"
        f"| fair slots (after) | {after['plain']:.1f} s | {slow_after:.1f} s |\n\n"
        "The order is the point, the seconds depend on the machine's load: one at a time, the plain job "
        "waits for all three slow checks; with fair slots it runs beside the first one (sharing its cores, "
        "hence slower than alone) and the slow ones queue behind each other in their own namespace.\n"
    )


if __name__ == "__main__":
    print(run())
