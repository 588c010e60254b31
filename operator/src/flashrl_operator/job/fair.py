"""Slots for the operator's verl checks, shared fairly between namespaces.

A check composes the job's Hydra config and runs verl's start-up code in a child process
(:mod:`flashrl_jobs.verl_child`): CPU-bound Python, seconds for a plain spec and tens of seconds for
one at the size budget. Run one at a time, one tenant's slow specs held every other tenant's jobs
behind them; run without a bound, a burst of specs takes every core from the event loop and the API
server. So checks run in child processes (no GIL shared with the event loop: the parent thread only
waits on a pipe), at most ``slots`` at once, and no namespace may hold more than ``slots - 1`` of
them, so a namespace with nothing running always finds a slot free, or the next one to free up. The
slots come from the operator's container, never the node
(:func:`~flashrl_operator.job.verl_check.container_slots`).
Among waiting namespaces the next free slot goes to the one with the fewest checks running, first
come first served within a namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import AsyncIterator


class FairSlots:
    """At most ``slots`` holders at once, at most ``slots - 1`` (at least one) per namespace."""

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self.per_namespace = max(1, self.slots - 1)
        self._running: Counter[str] = Counter()
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def running(self, namespace: str | None = None) -> int:
        """Holders now, in one namespace or in all."""
        return sum(self._running.values()) if namespace is None else self._running[namespace]

    def _may_run(self, namespace: str) -> bool:
        return self.running() < self.slots and self._running[namespace] < self.per_namespace

    @contextlib.asynccontextmanager
    async def slot(self, namespace: str) -> AsyncIterator[None]:
        """Hold one slot for ``namespace`` while the block runs."""
        if self._may_run(namespace) and not self._waiting.get(namespace):
            self._running[namespace] += 1
        else:
            granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(namespace, deque()).append(granted)
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():
                    self._release(namespace)  # granted just as it was cancelled: hand it on
                else:
                    queue = self._waiting.get(namespace)
                    if queue is not None and granted in queue:
                        queue.remove(granted)
                raise
        try:
            yield
        finally:
            self._release(namespace)

    def _release(self, namespace: str) -> None:
        self._running[namespace] -= 1
        if self._running[namespace] <= 0:
            del self._running[namespace]
        self._grant()

    def _grant(self) -> None:
        while self.running() < self.slots:
            candidates = [ns for ns, queue in self._waiting.items() if queue and self._may_run(ns)]
            if not candidates:
                break
            namespace = min(candidates, key=lambda ns: self._running[ns])
            queue = self._waiting[namespace]
            granted = queue.popleft()
            if not queue:
                del self._waiting[namespace]
            if granted.cancelled():
                continue
            self._running[namespace] += 1
            granted.set_result(None)
