"""Thin kopf wiring: which events reach the reconciler, and the operator's startup and cleanup.

Handlers are registered on a registry built per operator run (:func:`build_registry`) rather than
kopf's global one, so an operator can be started, stopped and started again in one process (tests
restart it mid-way; the demo and the benchmark run it next to an emulated API server). Handler
bodies do nothing but find the job and call :meth:`Reconciler.reconcile`; they return ``None`` so
kopf stores no handler results in the (structural, pruned) status. No handler needs a finalizer,
so deleting a FlashRLJob never waits for the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from flashrl_api import GROUP, KIND, PLURAL, VERSION
from flashrl_operator.children import owner_name
from flashrl_operator.credentials import CredentialError
from flashrl_operator.kube import KubeClient, resolve_credentials
from flashrl_operator.metrics import MetricsServer, OperatorMetrics
from flashrl_operator.reconciler import Reconciler
from flashrl_operator.render import JOB_LABEL, MANAGED_BY

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorConfig:
    """Everything that shapes one operator run (CLI flags, or test and demo settings)."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all (cluster-wide)."""

    metrics_port: int | None = 8080
    """Port for ``/metrics``; ``0`` picks a free port, ``None`` disables it."""

    health_port: int | None = 8081
    """Port for kopf's liveness endpoint ``/healthz``; ``None`` disables it."""

    bind_host: str = "0.0.0.0"  # noqa: S104  (a pod must be reachable by its probes and Prometheus)
    """Address the metrics and health endpoints listen on."""

    server: str | None = None
    """Explicit API server URL (tests, demo); otherwise service account, then kubeconfig."""

    request_timeout: float = 30.0
    """Seconds before an API request counts as failed (and is retried)."""

    retry_delay: float = 5.0
    """Seconds before the first retry after a transient API error; doubles per attempt."""

    max_retry_delay: float = 300.0
    """Upper bound of the retry backoff."""

    resync_interval: float = 60.0
    """Seconds between periodic reconciles of every job (catches missed events)."""

    scanning: bool = True
    """Let kopf scan CRDs and namespaces (off against emulators, which serve no CRD objects)."""

    check_overrides: bool = True
    """Compose spec.overrides against the verl config when hydra and verl are importable."""


@dataclass
class OperatorContext:
    """State of one operator run, shared by its handlers; clients live in the operator's loop."""

    config: OperatorConfig
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    kube: KubeClient | None = None
    reconciler: Reconciler | None = None
    metrics_server: MetricsServer | None = None
    known_jobs: set[tuple[str, str]] = field(default_factory=set)
    resync_task: asyncio.Task[None] | None = None

    def require_reconciler(self) -> Reconciler:
        """The reconciler (set up by the startup handler)."""
        if self.reconciler is None:
            raise kopf.TemporaryError("the operator is still starting", delay=1)
        return self.reconciler


def backoff_delay(base: float, retry: int, cap: float) -> float:
    """Exponential backoff for transient errors: ``base``, 2x, 4x, ... at most ``cap`` seconds."""
    return float(min(cap, base * 2 ** min(retry, 16)))


async def resync_forever(ctx: OperatorContext) -> None:
    """Reconcile every known job every ``resync_interval`` seconds: catches missed watch events.

    This is one operator-wide loop rather than a kopf timer per object, because kopf protects
    per-object timers with a finalizer, and a finalizer would block deleting a FlashRLJob whenever
    the operator is not running.
    """
    limit = asyncio.Semaphore(8)

    async def one(namespace: str, name: str) -> None:
        async with limit:
            try:
                await ctx.require_reconciler().reconcile(namespace, name)
            except Exception as exc:  # One job's trouble must not stop the others' resync.
                logger.warning("Resync of FlashRLJob %s/%s failed: %s", namespace, name, exc)

    while True:
        await asyncio.sleep(ctx.config.resync_interval)
        await asyncio.gather(*(one(ns, name) for ns, name in sorted(ctx.known_jobs)))


def build_registry(ctx: OperatorContext) -> kopf.OperatorRegistry:
    """Register every handler of one operator run on a fresh registry."""
    registry = kopf.OperatorRegistry()
    config = ctx.config

    def credentials(settings: kopf.OperatorSettings) -> kopf.ConnectionInfo | None:
        return resolve_credentials(settings, config.server)

    @kopf.on.login(registry=registry)
    async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo | None:
        # An explicit login handler also disables kopf's implicit logins: no accidental clusters.
        # kopf calls it again when the credentials expire or are refused.
        try:
            return await asyncio.to_thread(credentials, settings)
        except CredentialError as exc:
            raise kopf.LoginError(str(exc)) from exc

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        try:
            info = await asyncio.to_thread(credentials, settings)
        except CredentialError as exc:
            raise kopf.PermanentError(f"cannot get Kubernetes credentials: {exc}") from exc
        if info is None:
            raise kopf.PermanentError(
                "no Kubernetes credentials: not in a pod with a service account, and no kubeconfig"
            )
        ctx.kube = KubeClient.connect(
            info,
            config.request_timeout,
            config.retry_delay,
            credentials=functools.partial(credentials, settings),
        )
        ctx.reconciler = Reconciler(ctx.kube, ctx.metrics, check_overrides=config.check_overrides)
        if config.metrics_port is not None:
            ctx.metrics_server = MetricsServer(ctx.metrics, config.bind_host, config.metrics_port)
            url = await ctx.metrics_server.start()
            logger.info("Serving metrics on %s", url)
        ctx.resync_task = asyncio.create_task(resync_forever(ctx), name="flashrl-resync")

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        if ctx.resync_task is not None:
            ctx.resync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ctx.resync_task
        if ctx.metrics_server is not None:
            await ctx.metrics_server.stop()
        if ctx.kube is not None:
            await ctx.kube.close()

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, field="spec", registry=registry)
    async def reconcile_job(namespace: str | None, name: str | None, retry: int = 0, **_: Any) -> None:
        try:
            await ctx.require_reconciler().reconcile(namespace or "default", str(name))
        except kopf.TemporaryError as exc:
            # kopf retries after `delay`; grow it per attempt so a struggling API server gets air.
            # A server's Retry-After (already in exc.delay) is a floor, never shortened.
            delay = max(exc.delay or 0.0, backoff_delay(config.retry_delay, retry, config.max_retry_delay))
            raise kopf.TemporaryError(str(exc), delay=delay) from exc

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def job_event(
        type: str | None, namespace: str | None, name: str | None, uid: str | None, **_: Any
    ) -> None:
        key = (namespace or "default", str(name))
        if type == "DELETED":
            ctx.known_jobs.discard(key)
            if ctx.reconciler is not None:
                ctx.reconciler.forget(*key, uid)
        else:
            ctx.known_jobs.add(key)

    @kopf.on.event(
        "ray.io", "v1", "rayjobs", labels={"app.kubernetes.io/managed-by": MANAGED_BY}, registry=registry
    )
    async def ray_job_event(body: kopf.Body, type: str | None, namespace: str | None, **_: Any) -> None:
        # A RayJob appearing (listed at start, or just created by a reconcile) brings nothing new:
        # the job's own resume/create reconcile covers it. Changes and deletions are what matter.
        if type not in ("MODIFIED", "DELETED"):
            return
        owner = owner_name(body, KIND, JOB_LABEL)
        if owner is not None and ctx.reconciler is not None:
            await ctx.reconciler.reconcile(namespace or "default", owner)

    return registry
