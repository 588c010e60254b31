"""verl's verdict on a job's configuration: the collaborator the reconciler asks (docs/architecture.md,
"The verl check").

It holds what the reconciler must not: the verdicts by check key, the checks under way, their slots
(fair between namespaces, sized by the container) and their child processes. A check gates only what
verl will read; the reconciler asks it before a RayJob is created, never for a job whose RayJob runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from flashrl_api import FlashRLJob
from flashrl_jobs.verl_args import check_key
from flashrl_operator.job import overrides
from flashrl_operator.job.fair import FairSlots

logger = logging.getLogger(__name__)

#: Verdicts remembered (by check key; a check takes seconds, a verdict a few hundred bytes).
CACHE_SIZE: Final = 256
#: Resident memory of one check's child process (measured: 67-70 MiB with verl's config loaded).
CHILD_MIB: Final = 70
#: What the operator itself keeps of its memory limit (its steady state is about 155 MiB,
#: docs/benchmarks.md), before any check child is counted.
OPERATOR_MIB: Final = 256
#: Checks at once where the container sets no CPU quota: a node's core count is not the operator's.
UNBOUNDED_SLOTS: Final = 4
#: The cgroup v2 mount, where the container's CPU quota and memory limit are read.
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")

#: verl's checks of one job (``cancel`` set: stop, killing the child), run in a worker thread.
Checker = Callable[[FlashRLJob, threading.Event], list[str]]
#: Asks for a reconcile of ``namespace/name`` from the body given (the operator's work queue).
Submit = Callable[[str, str, Mapping[str, Any] | None], None]


class CheckUnderWay(Exception):  # noqa: N818 (a signal, not an error)
    """The job's verl check runs; its end submits the job again."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu_quota(root: Path) -> float | None:
    """CPUs the container may use (cgroup v2 ``cpu.max``, else v1 ``cfs_quota_us``); None: no quota."""
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota == "max" or not period:
            return None
        return int(quota) / int(period)
    for folder in ("cpu", "cpu,cpuacct"):
        quota_us = _read(root / folder / "cpu.cfs_quota_us")
        period_us = _read(root / folder / "cpu.cfs_period_us")
        if quota_us is not None and period_us is not None:
            return None if int(quota_us) <= 0 else int(quota_us) / int(period_us)
    return None


def _memory_limit(root: Path) -> int | None:
    """Bytes the container may use (cgroup v2 ``memory.max``, else v1 ``limit_in_bytes``); None: none."""
    v2 = _read(root / "memory.max")
    if v2 is not None:
        return None if v2 == "max" else int(v2)
    v1 = _read(root / "memory" / "memory.limit_in_bytes")
    if v1 is None or int(v1) >= 2**60:  # v1 writes "no limit" as a page-rounded 2^63
        return None
    return int(v1)


def container_slots(root: Path = CGROUP_ROOT, cpus: int | None = None) -> int:
    """Checks at once that the operator's container can hold: one per CPU of its quota (at least two,
    so no tenant holds them all), no more than its memory limit leaves room for (:data:`CHILD_MIB` each,
    above :data:`OPERATOR_MIB`), and at least one. Without a quota, :data:`UNBOUNDED_SLOTS` at most."""
    try:
        quota = _cpu_quota(root)
        limit = _memory_limit(root)
    except ValueError:  # an unreadable file: as if unlimited
        quota, limit = None, None
    by_cpu = max(2, math.ceil(quota)) if quota else max(2, min(UNBOUNDED_SLOTS, cpus or os.cpu_count() or 1))
    by_memory = by_cpu if limit is None else (limit // 2**20 - OPERATOR_MIB) // CHILD_MIB
    return max(1, min(by_cpu, by_memory))


def run_checks(job: FlashRLJob, cancel: threading.Event) -> list[str]:
    """What verl would refuse in the job's configuration (:mod:`flashrl_operator.job.overrides`, the
    rules ``flashrl validate`` applies), as ``path: message`` lines. The model-dependent checks are left
    to the launcher (a model path names a directory inside the pods). Where verl's config is not
    importable (a slim image) only the unsafe-override rules run, and the launcher checks again."""
    unsafe = overrides.protected_problems(job)
    if unsafe:  # never composed, not even in a child
        return [str(p) for p in unsafe]
    report = overrides.override_problems(job, cancel=cancel)
    if report.note:  # not the user's error; the launcher rechecks
        logger.warning("verl configuration not fully checked: %s", report.note)
    return [str(p) for p in report.problems]


class VerlCheck:
    """verl's verdicts, one check per key (:func:`~flashrl_jobs.verl_args.check_key`), in the background.

    ``submit`` is how a check's end reconciles the jobs that waited for it (through the work queue, with
    the body each last asked with). ``checker`` runs in a worker thread (a test makes it slow).
    """

    def __init__(
        self,
        submit: Submit,
        *,
        enabled: bool = True,
        slots: int | None = None,
        checker: Checker = run_checks,
    ) -> None:
        self._submit = submit
        self._enabled = enabled
        self._checker = checker
        self.slots = FairSlots(slots if slots is not None else container_slots())
        self._verdicts: dict[str, list[str]] = {}
        self._failed: dict[str, BaseException] = {}
        self._waiting: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
        self._tasks: set[asyncio.Future[list[str]]] = set()

    def verdict(
        self, job: FlashRLJob, body: Mapping[str, Any], *, accepted: str | None, needed: bool
    ) -> list[str]:
        """verl's problems with ``job`` (none: accepted).

        ``accepted`` is the key its RayJob was created under: the same inputs are not checked again.
        Otherwise an unknown verdict starts a check; ``needed`` (a RayJob is to be created) raises
        :class:`CheckUnderWay` until it ends, else the job goes on meanwhile (its RayJob runs inputs
        accepted before) and the check's end reconciles it. A check that could not run raises its error
        once to a job that needs the verdict (the work queue retries it: the operator's failure, not the
        spec's).
        """
        if not self._enabled:
            return []
        key = check_key(job)
        if key == accepted:
            return []
        if key in self._verdicts:
            return self._verdicts[key]
        failed = self._failed.get(key)
        if failed is not None:  # raised to a job waiting for it (retried), never to one that runs
            if not needed:
                return []
            del self._failed[key]
            raise failed
        waiting = self._waiting.get(key)
        if waiting is None:
            waiting = self._waiting[key] = {}
            task = asyncio.ensure_future(self._check(job))
            self._tasks.add(task)
            task.add_done_callback(lambda done: self._done(key, done))
        waiting[(job.namespace, job.name)] = body
        if needed:
            raise CheckUnderWay
        return []

    def _done(self, key: str, task: asyncio.Future[list[str]]) -> None:
        self._tasks.discard(task)
        waiting = self._waiting.pop(key, {})
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._failed[key] = error
        else:
            if len(self._verdicts) >= CACHE_SIZE:
                self._verdicts.pop(next(iter(self._verdicts)))
            self._verdicts[key] = task.result()
        for (namespace, name), body in waiting.items():
            self._submit(namespace, name, body)

    async def _check(self, job: FlashRLJob) -> list[str]:
        async with self.slots.slot(job.namespace):
            started = time.perf_counter()
            cancel = threading.Event()
            try:
                problems = await asyncio.to_thread(self._checker, job, cancel)
            except asyncio.CancelledError:
                cancel.set()  # the thread's child process is killed within a poll
                raise
            logger.debug(
                "verl checks of %s/%s: %.1f s", job.namespace, job.name, time.perf_counter() - started
            )
            return problems

    async def close(self) -> None:
        """Stop the checks under way (the operator is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
