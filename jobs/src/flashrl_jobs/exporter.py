"""Prometheus ``/metrics`` of one running FlashRLJob, served by the launcher on the Ray head pod.

A custom prometheus-client collector renders :class:`~flashrl_jobs.run_metrics.RunState` at scrape
time: each scrape shows the newest value of every metric verl has reported, and a metric verl has not
reported (or reported as NaN) has no series at all rather than a zero. The names are in
:mod:`flashrl_api.exported_metrics`; the port (``--metrics-port``, ``$FLASHRL_METRICS_PORT``) in
:mod:`flashrl_jobs.contract`. prometheus-client is in the trainer image through ``ray[default]`` (Ray's
dashboard depends on it); when it is missing the launcher says so once and trains without it.

``timing_s/step`` is ``flashrl_training_step_seconds`` and not also a ``phase``: the phases add up to
(nearly) the step, and a dashboard stacking them should not count the step twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flashrl_api import exported_metrics as names
from flashrl_api import verl_metrics as verl

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from flashrl_jobs.run_metrics import RunState

#: verl keys with a series of their own besides the ``timing_s/*`` and ``val-core/*`` patterns; the rest
#: go to ``flashrl_verl_metric``.
_MAPPED = frozenset({*names.DIRECT, *(key for _, key in names.RESPONSE_LENGTH_STATS)})


class RunCollector(Collector):
    """Yields the job's metric families from the run state at each scrape."""

    def __init__(
        self,
        state: RunState,
        namespace: str,
        job: str,
        gpus: int = 0,
        now: Callable[[], float] = time.time,
        separate_pools: bool = False,
    ) -> None:
        self._state = state
        self._now = now
        #: separate-async: the trainer's ``timing_s/gen`` is its wait for the rollout pool's samples.
        self._separate_pools = separate_pools
        #: The attempt's GPUs: the goodput counter's seconds × this (0: no counter).
        self._gpus = gpus
        self._ids = {names.NAMESPACE_LABEL: namespace, names.JOB_LABEL: job}

    def collect(self) -> Iterator[Metric]:
        """The families verl has values for, labelled with the job."""
        step, total, last_time, latest = self._state.snapshot()
        base = list(self._ids)
        ids = list(self._ids.values())

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*base, *extra])

        fam = gauge(names.TRAINING_STEP, "Last completed training step.")
        fam.add_metric(ids, step)
        yield fam
        fam = gauge(names.TRAINING_TOTAL_STEPS, "Training steps the run will take.")
        fam.add_metric(ids, total)
        yield fam
        if last_time is not None:
            fam = gauge(names.TRAINING_LAST_STEP_TIMESTAMP, "Unix time the last training step was seen.")
            fam.add_metric(ids, last_time)
            yield fam
        remaining = self._state.remaining_seconds()
        if remaining is not None:
            fam = gauge(names.TRAINING_REMAINING_SECONDS, "Estimated seconds until the last step.")
            fam.add_metric(ids, remaining)
            yield fam
        checkpoint = self._state.checkpoint()
        if checkpoint is not None:
            fam = gauge(
                names.CHECKPOINT_STEP,
                "Step of the newest checkpoint verl would resume from (latest_checkpointed_iteration.txt).",
            )
            fam.add_metric(ids, checkpoint)
            yield fam

        gpus = self._gpus
        spent = self._state.phases(self._now()) if gpus else None
        if spent is not None:
            counter = CounterMetricFamily(
                names.GPU_SECONDS,
                "GPU-seconds by goodput phase, as this attempt's launcher observed them.",
                labels=[*base, names.GOODPUT_PHASE_LABEL],
            )
            for phase, seconds in spent.items():
                counter.add_metric([*ids, phase], seconds * gpus)
            yield counter

        phases = gauge(
            names.PHASE_SECONDS, "Seconds of the last step per phase (verl timing_s/*).", (names.PHASE_LABEL,)
        )
        scores = gauge(
            names.VALIDATION_SCORE,
            "Validation score (verl val-core/<data_source>/<metric>).",
            (names.DATA_SOURCE_LABEL, names.METRIC_LABEL),
        )
        lengths = gauge(
            names.RESPONSE_LENGTH,
            "Response length of the last step (verl response_length/*).",
            (names.STAT_LABEL,),
        )
        other = gauge(
            names.VERL_METRIC, "Every other numeric verl metric, by its verl name.", (names.KEY_LABEL,)
        )
        for key, (value, _step) in sorted(latest.items()):
            direct = names.DIRECT.get(key)
            if direct is not None:
                fam = gauge(*direct)
                fam.add_metric(ids, value)
                yield fam
            elif key.startswith(verl.TIMING_PREFIX):
                phases.add_metric([*ids, key.removeprefix(verl.TIMING_PREFIX)], value)
            elif (core := verl.parse_val_core(key)) is not None:
                scores.add_metric([*ids, core.source, f"{core.var}/{core.metric}"], value)
            elif key not in _MAPPED:
                other.add_metric([*ids, key], value)
        for stat, key in names.RESPONSE_LENGTH_STATS:
            if key in latest:
                lengths.add_metric([*ids, stat], latest[key][0])
        wait, step_seconds = latest.get(verl.TIMING_SAMPLE_WAIT), latest.get(verl.TIMING_STEP)
        if self._separate_pools and wait is not None and step_seconds is not None and step_seconds[0] > 0:
            fam = gauge(
                names.ASYNC_SAMPLE_WAIT_FRACTION,
                "Share of the last step the trainer waited for the rollout pool's samples "
                "(verl timing_s/gen / timing_s/step, separate-async).",
            )
            fam.add_metric(ids, min(1.0, max(0.0, wait[0] / step_seconds[0])))
            yield fam
        for family in (phases, scores, lengths, other):
            if family.samples:
                yield family


class MetricsServer:
    """``/metrics`` on a port of the head pod, from prometheus-client's own HTTP server."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The port it listens on (the chosen one when asked for 0)."""
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(
    state: RunState,
    namespace: str,
    job: str,
    port: int,
    address: str = "0.0.0.0",  # noqa: S104 - Prometheus scrapes the pod IP
    gpus: int = 0,
    now: Callable[[], float] = time.time,
    separate_pools: bool = False,
) -> MetricsServer:
    """Start serving (every IPv4 interface by default); ``OSError`` if the port is taken.

    The registry is the launcher's own (not prometheus-client's global one), so ``/metrics`` holds the
    job's series only, without the launcher process's Python runtime series.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(state, namespace, job, gpus, now, separate_pools))
    server, thread = start_http_server(port, addr=address, registry=registry)
    return MetricsServer(server, thread)
