"""The operator's verl checks: bounded, fair between namespaces, sized, cached by content.

Ordering, never timing: which check holds a slot while which waits.
"""

from __future__ import annotations

import asyncio

import pytest

from flashrl_jobs.override_rules import MAX_OVERRIDE_ITEMS, budget_problem
from flashrl_operator.job.fair import FairSlots


async def test_one_tenants_checks_never_hold_every_slot() -> None:
    slots = FairSlots(2)
    order: list[str] = []
    release = {name: asyncio.Event() for name in ("a1", "a2", "a3", "b1")}

    async def check(namespace: str, name: str) -> None:
        async with slots.slot(namespace):
            order.append(f"start {name}")
            await release[name].wait()
            order.append(f"end {name}")

    tasks = [asyncio.create_task(check("team-a", f"a{i}")) for i in (1, 2, 3)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(check("other-team", "b1")))
    for _ in range(3):
        await asyncio.sleep(0)
    # team-a holds one slot (all but one of two); the other namespace's check started beside it.
    assert order == ["start a1", "start b1"]
    assert slots.running("team-a") == 1 and slots.running() == 2
    release["b1"].set()
    await tasks[3]
    release["a1"].set()
    await tasks[0]
    await asyncio.sleep(0)
    assert order[-1] == "start a2"  # first come, first served within the namespace
    release["a2"].set()
    release["a3"].set()
    await asyncio.gather(*tasks)
    assert slots.running() == 0


async def test_the_next_free_slot_goes_to_the_namespace_with_fewest_running() -> None:
    slots = FairSlots(3)  # two per namespace at most
    started: list[str] = []
    gate = asyncio.Event()

    async def check(namespace: str, name: str) -> None:
        async with slots.slot(namespace):
            started.append(name)
            await gate.wait()

    tasks = [asyncio.create_task(check("a", f"a{i}")) for i in range(4)]
    tasks += [asyncio.create_task(check("b", f"b{i}")) for i in range(2)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert started == ["a0", "a1", "b0"]
    gate.set()
    await asyncio.gather(*tasks)
    assert sorted(started) == ["a0", "a1", "a2", "a3", "b0", "b1"]


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    slots = FairSlots(2)
    hold = asyncio.Event()

    async def check(namespace: str) -> None:
        async with slots.slot(namespace):
            await hold.wait()

    first = asyncio.create_task(check("a"))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(check("a"))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    hold.set()
    await first
    assert slots.running() == 0


def test_the_size_budget_refuses_clearly() -> None:
    within = ["+data.x=[" + ",".join(["0"] * (MAX_OVERRIDE_ITEMS + 1)) + "]"]
    assert budget_problem(within) is None
    beyond = ["+data.x=[" + ",".join(["0"] * (MAX_OVERRIDE_ITEMS + 2)) + "]"]
    problem = budget_problem(beyond)
    assert problem is not None and f"more than the {MAX_OVERRIDE_ITEMS}" in problem
