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
reconcile is level-based), so a job never queues twice. A transient failure gives the turn back and
comes again after its backoff (as client-go's rate-limited requeue), so jobs failing during an API
outage never hold every turn. kopf's own ``worker_limit`` is not used for this: its waiting workers
keep their whole events.

The operator has two intakes: one for FlashRLJobs (handed their event's body) and
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
Reconcile = Callable[[str, str, Mapping[str, Any] | None], Awaitable[None]]
#: Seconds before the next try of a job whose ``attempt``-th try failed transiently with ``error``.
Backoff = Callable[[str, str, int, TransientError], float]


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
    """Reconciles handed over by watch events, run ``limit`` at a time.

    ``submit`` never waits. ``None`` as the body means "read the object first" (an event of a child, or
    a wake-up): it is as fresh as any event body, so it replaces a waiting body like a newer event.
    ``kind`` names the objects in log lines.
    """

    def __init__(self, reconcile: Reconcile, limit: int, backoff: Backoff, *, kind: str) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._kind = kind
        self._reconcile = reconcile
        self._backoff = backoff
        self._turns = asyncio.Semaphore(limit)
        #: Jobs waiting for a turn, with what they will be reconciled from.
        self._waiting: dict[Key, str | None] = {}
        #: Transient failures in a row, by job (cleared by a success).
        self._failures: dict[Key, int] = {}
        self._retries: dict[Key, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def waiting(self) -> int:
        """Jobs waiting for a turn (not counting those reconciling)."""
        return len(self._waiting)

    def submit(self, namespace: str, name: str, body: Mapping[str, Any] | None) -> None:
        """Reconcile the job when a turn is free, from ``body`` (or, with ``None``, a fresh read)."""
        key = (namespace, name)
        already = key in self._waiting
        self._waiting[key] = pack(body)
        if already:
            return
        task = asyncio.get_running_loop().create_task(self._turn(key), name=f"reconcile {namespace}/{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _turn(self, key: Key) -> None:
        async with self._turns:
            packed = self._waiting.pop(key)
            retry = self._retries.pop(key, None)
            if retry is not None:  # this turn does what the retry would have
                retry.cancel()
            try:
                await self._reconcile(key[0], key[1], unpack(packed))
            except TransientError as exc:
                attempt = self._failures.get(key, 0)
                self._failures[key] = attempt + 1
                delay = self._backoff(key[0], key[1], attempt, exc)
                logger.warning("%s %s/%s: will retry in %.1fs: %s", self._kind, *key, delay, exc)
                loop = asyncio.get_running_loop()
                self._retries[key] = loop.call_later(delay, self._retry, key)
                return
            except ApiError as exc:  # the API server's answer says what failed: no traceback
                logger.error("%s %s/%s: reconcile failed: %s", self._kind, *key, exc)
            except Exception:
                logger.exception("%s %s/%s: reconcile failed", self._kind, *key)
            self._failures.pop(key, None)

    def _retry(self, key: Key) -> None:
        self._retries.pop(key, None)
        self.submit(*key, None)

    async def drain(self) -> None:
        """Wait until every submitted reconcile has run (retries scheduled for later excepted)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: no retry for it, and a turn it still waits for reads it first.

        The waiting body predates the deletion; reconciled from it, the job would get children
        under a UID that no longer exists (the garbage collector would remove them, after they
        were created for nothing). A read finds the job gone, or a new job of that name.
        """
        key = (namespace, name)
        retry = self._retries.pop(key, None)
        if retry is not None:
            retry.cancel()
        self._failures.pop(key, None)
        if key in self._waiting:
            self._waiting[key] = None

    async def close(self) -> None:
        """Cancel what waits or runs (the operator is stopping; the next run lists every job again)."""
        for retry in self._retries.values():
            retry.cancel()
        self._retries.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._waiting.clear()
