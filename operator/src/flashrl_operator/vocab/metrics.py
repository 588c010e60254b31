"""Prometheus metrics of one operator instance, on a registry it owns (not the global one).

Owning the registry means two operators in one process (tests, the demo, the benchmark) never
share or double-register series, and ``/metrics`` shows exactly this operator's view. The
registry also carries prometheus-client's process and platform collectors (``process_*`` CPU,
memory, open files; ``python_info``). :mod:`flashrl_operator.run.metrics_server` serves it.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from flashrl_api import PHASES
from flashrl_api.exported_metrics import (
    GOODPUT_PHASE_LABEL,
    GPU_SECONDS,
    POOL_GPU_SECONDS,
    POOL_LABEL,
    POOL_WAITING_GPU_SECONDS,
    WAITING_FOR_LABEL,
)
from flashrl_api.goodput import OPERATOR_PHASES
from flashrl_api.times import parse_rfc3339

#: Metric family names (documented in docs/operator.md).
RECONCILE_DURATION: Final = "flashrl_operator_reconcile_duration_seconds"
RECONCILE_ERRORS: Final = "flashrl_operator_reconcile_errors_total"
JOBS: Final = "flashrl_operator_jobs"
STARTUP_LATENCY: Final = "flashrl_operator_job_startup_seconds"
#: One series per FlashRLJob, value 1, like KubeRay's ``kuberay_job_info`` (``ray-operator/pkg/metrics``):
#: join it on ``namespace`` and ``job`` with the launcher's series (docs/observability.md).
JOB_INFO: Final = "flashrl_job_info"
JOB_INFO_LABELS: Final = ("namespace", "job", "phase", "quantization")
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


def parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 timestamp as written by the API server, or ``None``."""
    return parse_rfc3339(value)


class GoodputCollector(Collector):
    """``flashrl_gpu_seconds_total{namespace, job, phase}`` for the phases the operator observes.

    The values are ``status.goodput``'s, as last computed: a restarted operator resumes each job's
    counter where its status left it rather than from zero. The launcher exports the phases it
    observes under the same name (:data:`flashrl_api.goodput.LAUNCHER_PHASES`); ``lost_steps`` is a
    re-labelling of seconds the launcher already counted, so it is in the status only.
    """

    def __init__(self) -> None:
        self._by_job: dict[tuple[str, str], dict[str, float]] = {}
        #: separate-async jobs: (pool, held GPU-s, what it waits for, waiting GPU-s) per pool.
        self._pools: dict[tuple[str, str], list[tuple[str, float, str, float]]] = {}
        self._lock = threading.Lock()

    def update(self, namespace: str, job: str, goodput: Mapping[str, Any] | None) -> None:
        """Take a job's ``status.goodput`` (wire form)."""
        if goodput is None:
            return
        values = {
            str(entry.get("phase")): float(entry.get("gpuSeconds") or 0.0)
            for entry in goodput.get("byPhase") or []
            if isinstance(entry, Mapping) and entry.get("phase") in OPERATOR_PHASES
        }
        pools = [
            (
                str(entry.get("name")),
                float(entry.get("heldGPUSeconds") or 0.0),
                str(entry.get("waitingFor")),
                float(entry.get("waitingGPUSeconds") or 0.0),
            )
            for entry in goodput.get("pools") or []
            if isinstance(entry, Mapping)
        ]
        with self._lock:
            self._by_job[(namespace, job)] = values
            self._pools[(namespace, job)] = pools

    def forget(self, namespace: str, job: str) -> None:
        """The job was deleted."""
        with self._lock:
            self._by_job.pop((namespace, job), None)
            self._pools.pop((namespace, job), None)

    def collect(self) -> Iterator[Metric]:
        """One counter family, a sample per job and operator-observed phase."""
        family = CounterMetricFamily(
            GPU_SECONDS,
            "GPU-seconds by goodput phase, as the operator observed them (docs/observability.md).",
            labels=["namespace", "job", GOODPUT_PHASE_LABEL],
        )
        with self._lock:
            items = sorted(self._by_job.items())
            pools = sorted(self._pools.items())
        for (namespace, job), values in items:
            for phase in OPERATOR_PHASES:
                family.add_metric([namespace, job, str(phase)], values.get(phase, 0.0))
        yield family
        held = CounterMetricFamily(
            POOL_GPU_SECONDS,
            "GPU-seconds each GPU pool of a separate-async job held (status.goodput.pools).",
            labels=["namespace", "job", POOL_LABEL],
        )
        waiting = CounterMetricFamily(
            POOL_WAITING_GPU_SECONDS,
            "GPU-seconds each GPU pool of a separate-async job waited for the other: the trainer for "
            "samples, the rollout pool for weights (status.goodput.pools).",
            labels=["namespace", "job", POOL_LABEL, WAITING_FOR_LABEL],
        )
        for (namespace, job), entries in pools:
            for pool, held_seconds, waiting_for, waiting_seconds in entries:
                held.add_metric([namespace, job, pool], held_seconds)
                waiting.add_metric([namespace, job, pool, waiting_for], waiting_seconds)
        yield held
        yield waiting


class OperatorMetrics:
    """Reconcile timing and errors, jobs per phase, and how long jobs take to start training."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.reconcile_duration = Histogram(
            RECONCILE_DURATION,
            "Time to reconcile one FlashRLJob (children and status).",
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self.reconcile_errors = Counter(
            RECONCILE_ERRORS,
            "Reconciles that did not complete, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.jobs = Gauge(
            JOBS, "FlashRLJobs seen by this operator, by phase.", ["phase"], registry=self.registry
        )
        for phase in PHASES:
            self.jobs.labels(phase=phase).set(0)
        self.startup_latency = Histogram(
            STARTUP_LATENCY,
            "Seconds from a FlashRLJob's creation to its first Running phase.",
            registry=self.registry,
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200),
        )
        self.job_info = Gauge(
            JOB_INFO,
            "One series per FlashRLJob with its phase and rollout quantization (value 1).",
            list(JOB_INFO_LABELS),
            registry=self.registry,
        )
        self.goodput = GoodputCollector()
        self.registry.register(self.goodput)
        self._phase_by_uid: dict[str, str] = {}
        self._info_by_uid: dict[str, tuple[str, str, str, str]] = {}
        self._started: set[str] = set()

    def observe_phase(
        self,
        uid: str,
        phase: str,
        created: datetime.datetime | None,
        job: tuple[str, str, str] | None = None,
    ) -> None:
        """Record a job's current phase; the first Running also records its startup latency.

        ``job`` is ``(namespace, name, quantization)`` for :data:`JOB_INFO`."""
        if job is not None:
            info = (job[0], job[1], phase, job[2])
            old_info = self._info_by_uid.get(uid)
            if old_info != info:
                if old_info is not None:
                    self.job_info.remove(*old_info)
                self.job_info.labels(*info).set(1)
                self._info_by_uid[uid] = info
        old = self._phase_by_uid.get(uid)
        if old != phase:
            if old is not None:
                self.jobs.labels(phase=old).dec()
            self.jobs.labels(phase=phase).inc()
            self._phase_by_uid[uid] = phase
        if phase == "Running" and uid not in self._started:
            self._started.add(uid)
            if created is not None:
                elapsed = (datetime.datetime.now(datetime.UTC) - created).total_seconds()
                self.startup_latency.observe(max(0.0, elapsed))

    def observe_goodput(self, namespace: str, job: str, goodput: Mapping[str, Any] | None) -> None:
        """A job's newest ``status.goodput`` (``None``: nothing new)."""
        self.goodput.update(namespace, job, goodput)

    def forget_goodput(self, namespace: str, job: str) -> None:
        """The job was deleted: its goodput series go."""
        self.goodput.forget(namespace, job)

    def forget(self, uid: str) -> None:
        """The job was deleted: stop counting it."""
        old = self._phase_by_uid.pop(uid, None)
        if old is not None:
            self.jobs.labels(phase=old).dec()
        info = self._info_by_uid.pop(uid, None)
        if info is not None:
            self.job_info.remove(*info)
        self._started.discard(uid)

    def exposition(self) -> bytes:
        """The text exposition format served on ``/metrics``."""
        return generate_latest(self.registry)
