"""Reconciles waiting for their turn, at most one per object, each holding its object as compact JSON.

Why this exists: a burst of new jobs (1,000 applied at once) reaches the operator as 1,000 watch
events within seconds, while ``--max-concurrent-reconciles`` lets only a few reconcile at a time.
If kopf's handler itself waited for its turn, each waiting job would keep kopf's decoded event (about
46 KiB of Python objects for one FlashRLJob, half of it ``managedFields``) and kopf's per-event
state alive until its reconcile ran; CPython keeps the memory arenas of such a peak for the life of
the process (docs/benchmarks.md). So the handler hands the job over here and returns, and kopf drops
its event. What waits is one small task per job and the job as compact JSON without
``managedFields`` (about 4 KB), decoded only when its turn comes.

A later event for a job that is still waiting replaces what it waits with (the newest wins: the
reconcile is level-based), so a job never queues twice; an event for a job being reconciled marks it
to run once more after that reconcile (as a workqueue's dirty and processing sets), so no two
reconciles of one object ever run at once.

This is the operator's one work queue, in controller-runtime's shape: the reconcile returns the
seconds after which it wants to run again (``ctrl.Result{RequeueAfter}``: the retry backoff of a failed
attempt ending, a refused write to re-read), and the intake schedules that exactly as it schedules a
failed reconcile's retry. Every failure is retried, after a backoff that grows per failure in a row and
is jittered per object (as client-go's rate-limited requeue), and gives its turn back meanwhile, so
jobs failing during an API outage never hold every turn. The periodic resync and the end of a verl
check come in through :meth:`Intake.submit` too: the reconcilers keep no locks, bounds or timers of
their own. kopf's own ``worker_limit`` is not used for this: its waiting workers keep their whole
events.

The operator has two intakes, each bounded by ``--max-concurrent-reconciles`` (one per controller, as
controller-runtime's ``MaxConcurrentReconciles``): one for FlashRLJobs (handed their event's body) and
one for FlashRLExperiments (always read first: an experiment's reconcile reads its variants too), so
both kinds are bounded and retried the same way, and no kopf handler ever waits for a reconcile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from flashrl_operator.client.errors import ApiError, TransientError

logger = logging.getLogger(__name__)

Key = tuple[str, str]
#: One reconcile of ``namespace/name`` from the body (``None``: read it first); returns the seconds
#: after which it wants to run again (``None``: only when something changes).
Reconcile = Callable[[str, str, Mapping[str, Any] | None], Awaitable[float | None]]
#: Seconds before the next try of an object whose ``attempt``-th try in a row failed with ``error``.
Backoff = Callable[[str, str, int, Exception], float]


def pack(body: Mapping[str, Any] | None) -> str | None:
    """The job as compact JSON, without ``metadata.managedFields`` (the reconcile never reads them)."""
    if body is None:
        return None
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return json.dumps({**body, "metadata": meta}, separators=(",", ":"))


def unpack(packed: str | None) -> dict[str, Any] | None:
    """The job :func:`pack` kept (``None``: read it)."""
    return None if packed is None else dict(json.loads(packed))


class Intake:
    """Reconciles handed over by watch events, run ``limit`` at a time, one at a time per object.

    ``submit`` never waits. ``None`` as the body means "read the object first" (an event of a child, a
    resync, a wake-up or a retry): it is as fresh as any event body, so it replaces a waiting body like
    a newer event. ``kind`` names the objects in log lines.
    """

    def __init__(self, reconcile: Reconcile, limit: int, backoff: Backoff, *, kind: str) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._kind = kind
        self._reconcile = reconcile
        self._backoff = backoff
        self._turns = asyncio.Semaphore(limit)
        #: Objects waiting for a turn, with what they will be reconciled from (a workqueue's dirty set).
        self._waiting: dict[Key, str | None] = {}
        #: Objects being reconciled (a workqueue's processing set): one submitted meanwhile waits for it.
        self._running: set[Key] = set()
        #: Failures in a row, by object (cleared by a success).
        self._failures: dict[Key, int] = {}
        #: The next reconcile asked for later, by object: a retry's backoff or a requested wake-up.
        self._later: dict[Key, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def waiting(self) -> int:
        """Objects waiting for a turn (not counting those reconciling, nor those scheduled for later)."""
        return len(self._waiting)

    def scheduled(self, namespace: str, name: str) -> bool:
        """Whether a reconcile of the object is scheduled for later (a retry or a wake-up)."""
        return (namespace, name) in self._later

    def submit(self, namespace: str, name: str, body: Mapping[str, Any] | None) -> None:
        """Reconcile the object when a turn is free and no reconcile of it runs, from ``body`` (or, with
        ``None``, a fresh read)."""
        key = (namespace, name)
        already = key in self._waiting
        self._waiting[key] = pack(body)
        if not already and key not in self._running:
            self._start(key)

    def submit_after(self, namespace: str, name: str, delay: float) -> None:
        """Reconcile the object (from a fresh read) after ``delay`` seconds, unless sooner is asked."""
        key = (namespace, name)
        timer = self._later.get(key)
        if timer is None or timer.when() > asyncio.get_running_loop().time() + delay:
            self._later_in(key, delay)

    def _start(self, key: Key) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._turn(key), name=f"reconcile {key[0]}/{key[1]}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _turn(self, key: Key) -> None:
        async with self._turns:
            packed = self._waiting.pop(key)
            self._running.add(key)
            self._cancel_later(key)  # this turn does what the retry or wake-up would have
            try:
                await self._run(key, packed)
            finally:
                self._running.discard(key)
                if key in self._waiting:  # submitted while it ran: once more, from the newest
                    self._start(key)

    async def _run(self, key: Key, packed: str | None) -> None:
        """One reconcile; what it asks for (a wake-up) or its failure (a retry) is scheduled."""
        try:
            again = await self._reconcile(key[0], key[1], unpack(packed))
        except Exception as exc:
            attempt = self._failures.get(key, 0)
            self._failures[key] = attempt + 1
            delay = self._backoff(key[0], key[1], attempt, exc)
            if isinstance(exc, TransientError):
                logger.warning("%s %s/%s: will retry in %.1fs: %s", self._kind, *key, delay, exc)
            elif isinstance(exc, ApiError):  # the API server's answer says what failed: no traceback
                logger.error("%s %s/%s: reconcile failed (retry in %.1fs): %s", self._kind, *key, delay, exc)
            else:
                logger.exception("%s %s/%s: reconcile failed (retry in %.1fs)", self._kind, *key, delay)
            self._later_in(key, delay)
            return
        self._failures.pop(key, None)
        if again is not None:
            self._later_in(key, again)

    def _later_in(self, key: Key, delay: float) -> None:
        """Reconcile the object again (from a fresh read) after ``delay`` seconds."""
        self._cancel_later(key)
        self._later[key] = asyncio.get_running_loop().call_later(max(0.0, delay), self._due, key)

    def _due(self, key: Key) -> None:
        self._later.pop(key, None)
        self.submit(*key, None)

    def _cancel_later(self, key: Key) -> None:
        timer = self._later.pop(key, None)
        if timer is not None:
            timer.cancel()

    async def drain(self) -> None:
        """Wait until every submitted reconcile has run (retries and wake-ups scheduled for later
        excepted)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: no retry or wake-up for it, and a turn it still waits for reads it first.

        The waiting body predates the deletion; reconciled from it, the job would get children
        under a UID that no longer exists (the garbage collector would remove them, after they
        were created for nothing). A read finds the job gone, or a new job of that name.
        """
        key = (namespace, name)
        self._cancel_later(key)
        self._failures.pop(key, None)
        if key in self._waiting:
            self._waiting[key] = None

    async def close(self) -> None:
        """Cancel what waits or runs (the operator is stopping; the next run lists every job again)."""
        self._closed = True
        for timer in self._later.values():
            timer.cancel()
        self._later.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._waiting.clear()
        self._running.clear()
