"""Starting and stopping the operator: in the foreground (``flashrl operator``) or in a thread.

The thread form (:class:`OperatorThread`) gives kopf its own event loop, so its shutdown (which
cancels every task created in its loop) cannot touch the caller's loop; the demo, the benchmark and
the integration tests use it next to an emulated API server. Both forms build the same settings
and registry from an :class:`~flashrl_operator.run.handlers.OperatorConfig`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from types import TracebackType
from typing import Literal

import kopf

from flashrl_operator.run.handlers import OperatorConfig, OperatorContext, build_registry, credentials_for

#: Prefix of kopf's bookkeeping annotations on FlashRLJobs (progress, last handled spec).
ANNOTATION_PREFIX = "flashrl.dev"

LogFormat = Literal["plain", "json"]


def build_settings(config: OperatorConfig) -> kopf.OperatorSettings:
    """kopf settings: bookkeeping in annotations, our retry delay, scanning as configured."""
    settings = kopf.OperatorSettings()
    # The CRD is structural: the API server prunes unknown status keys, so kopf's default
    # `status.kopf` would vanish. Annotations survive.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # kopf's own Events only for problems; ours say the rest.
    settings.execution.default_backoff = config.retry_delay
    settings.networking.request_timeout = config.request_timeout
    settings.scanning.disabled = not config.scanning
    settings.peering.standalone = True
    # kopf's per-object worker keeps the object's last event while it idles; our handlers return at
    # once (run/intake.py), so a short idle lets a burst's events go within a second, not five.
    settings.queueing.idle_timeout = 1.0
    return settings


async def run(
    config: OperatorConfig,
    *,
    context: OperatorContext | None = None,
    stop_flag: threading.Event | asyncio.Event | None = None,
    ready_flag: threading.Event | asyncio.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or a signal, in the main thread)."""
    ctx = context if context is not None else OperatorContext(config)
    liveness = f"http://{config.bind_host}:{config.health_port}/healthz" if config.health_port else None
    await kopf.operator(
        registry=build_registry(ctx),
        settings=build_settings(config),
        standalone=True,
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        liveness_endpoint=liveness,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )


def run_foreground(config: OperatorConfig, log_format: LogFormat = "plain", verbose: bool = False) -> int:
    """``flashrl operator``: configure logging, run until SIGINT/SIGTERM, return the exit status."""
    kopf.configure(
        verbose=verbose, log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL
    )
    if not credentials_for(config).available():
        print(
            "flashrl operator: no Kubernetes credentials: not in a pod with a service account, and no "
            "kubeconfig ($KUBECONFIG or ~/.kube/config)",
            file=sys.stderr,
        )
        return 1
    try:
        asyncio.run(run(config))
    except Exception as exc:  # kopf has logged the details; end with one line, not a traceback.
        cause = exc.__cause__ or exc
        print(f"flashrl operator stopped: {type(cause).__name__}: {cause}", file=sys.stderr)
        return 1
    return 0


class OperatorThread:
    """The real operator in a background thread with its own loop; a context manager.

    ``with OperatorThread(config) as op:`` returns once kopf reports ready (or raises after
    ``start_timeout``), and on exit stops it and joins the thread, failing loudly if it hangs.
    """

    def __init__(
        self, config: OperatorConfig, start_timeout: float = 20.0, stop_timeout: float = 20.0
    ) -> None:
        self.config = config
        self.context = OperatorContext(config)
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="flashrl-operator", daemon=True)

    def _main(self) -> None:
        # kopf warns that it cannot install signal handlers outside the main thread; here the stop
        # flag is the way to stop it, so the warning is noise.
        logging.getLogger("kopf._core.reactor.running").setLevel(logging.ERROR)
        try:
            asyncio.run(run(self.config, context=self.context, stop_flag=self._stop, ready_flag=self._ready))
        except BaseException as exc:  # Reported to the starting thread, never lost.
            self._error = exc
            self._ready.set()

    @property
    def metrics_url(self) -> str | None:
        """Where ``/metrics`` is served (once started)."""
        server = self.context.metrics_server
        return server.url if server is not None else None

    def start(self) -> None:
        """Start the thread and wait until the operator is ready and its clients exist."""
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            if self._error is not None:
                raise RuntimeError(f"the operator failed to start: {self._error!r}") from self._error
            metrics_up = self.config.metrics_port is None or self.metrics_url is not None
            if self._ready.is_set() and self.context.reconciler is not None and metrics_up:
                return
            self._ready.wait(0.05)
        self.stop()
        raise TimeoutError(f"the operator was not ready within {self._start_timeout:.0f}s")

    def stop(self) -> None:
        """Ask the operator to stop and wait for its thread (raises if it does not exit in time)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self._stop_timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the operator did not stop within {self._stop_timeout:.0f}s")

    @property
    def alive(self) -> bool:
        """Whether the operator thread is still running."""
        return self._thread.is_alive()

    def __enter__(self) -> OperatorThread:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
