"""Thin kopf wiring: which events reach the reconciler, and the operator's startup and cleanup.

Handlers are registered on a registry built per operator run (:func:`build_registry`) rather than
kopf's global one, so an operator can be started, stopped and started again in one process (tests
restart it mid-way; the demo and the benchmark run it next to an emulated API server). Handler
bodies do nothing but find the job and call :meth:`Reconciler.reconcile`.

Only kopf's event handlers are used (no ``on.create``/``on.update``/``on.resume``): the reconcile is
level-based, so kopf's per-object bookkeeping (annotations it would patch after every handler) buys
nothing and costs a write per change. Which events reconcile is a job decision,
:func:`~flashrl_operator.job.triggers.needs_reconcile`. A job's reconcile, and an experiment's, is
handed to an :class:`~flashrl_operator.run.intake.Intake` (the one work queue: bounded, one reconcile
per object at a time, wake-ups the reconcile asks for, every failure retried) and the handler returns at
once, so a burst of events does not keep kopf's events alive while they wait, and a job's handler never
waits for its experiment. The periodic resync submits to the same intakes.
No handler needs a finalizer, so deleting a FlashRLJob never waits for the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from flashrl_api import GROUP, KIND, PLURAL, VERSION
from flashrl_api.experiment import EXPERIMENT_KIND
from flashrl_operator.client.errors import TransientError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.client.login import CredentialError, Credentials
from flashrl_operator.experiment.reconciler import (
    EXPERIMENT_PLURAL,
    ExperimentReconciler,
    experiment_of,
)
from flashrl_operator.job.history import FOLD_INTERVAL_SECONDS, History
from flashrl_operator.job.memory import StatusMemory
from flashrl_operator.job.policy import AdminPolicy
from flashrl_operator.job.reconciler import Reconciler
from flashrl_operator.job.retry_policy import jittered
from flashrl_operator.job.triggers import needs_reconcile
from flashrl_operator.job.verl_check import Checker, VerlCheck, run_checks
from flashrl_operator.render import JOB_LABEL, MANAGED_BY
from flashrl_operator.render.children import owner_name
from flashrl_operator.render.labels import MANAGED_BY_LABEL
from flashrl_operator.render.network import NetworkSettings
from flashrl_operator.run.intake import Backoff, Intake
from flashrl_operator.run.leadership import ElectionTiming, Leadership, default_identity, default_namespace
from flashrl_operator.run.metrics_server import MetricsServer
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.metrics import OperatorMetrics

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

    kubeconfig: str | None = None
    """A kubeconfig file read instead of ``$KUBECONFIG`` (``--kubeconfig``; also lets operators in one
    test process each use their own identity)."""

    request_timeout: float = 30.0
    """Seconds before an API request counts as failed (and is retried)."""

    retry_delay: float = 5.0
    """Seconds before the first retry after a transient API error; doubles per attempt."""

    max_retry_delay: float = 300.0
    """Upper bound of the retry backoff."""

    retry_backoff: float = 30.0
    """Seconds before the second attempt of a failed job; doubles per attempt (capped at 10 minutes)."""

    resync_interval: float = 60.0
    """Seconds between periodic reconciles of every job (catches missed events)."""

    max_concurrent_reconciles: int = 16
    """Job reconciles under way at once, and as many experiment reconciles (``--max-concurrent-reconciles``,
    the operator's one bound on reconciles, kept by its intakes): bounds the operator's memory when many
    jobs arrive at once (docs/benchmarks.md)."""

    scanning: bool = True
    """Let kopf scan CRDs and namespaces (off against emulators, which serve no CRD objects)."""

    check_overrides: bool = True
    """Compose spec.overrides against the verl config when hydra and verl are importable."""

    check_fit: bool = True
    """Fail a new job whose GPU pods can never fit on the cluster's nodes (``NeverFits``), whose claim
    does not exist (``ClaimNotFound``) or whose PriorityClass does not exist (``PriorityClassNotFound``)
    before anything is created (``--no-fit-check`` turns it off)."""

    check_slots: int | None = None
    """verl checks under way at once (``--verl-check-slots``; child processes, about 70 MiB each); no
    namespace holds more than all but one of them (:mod:`flashrl_operator.job.fair`). None: as many as
    the container's CPU quota and memory limit hold
    (:func:`~flashrl_operator.job.verl_check.container_slots`)."""

    verl_checker: Checker = run_checks
    """What runs verl's checks of one job, in a worker thread (tests make it slow)."""

    history_interval: float = FOLD_INTERVAL_SECONDS
    """Seconds between two folds of one job's reported metrics into its history ConfigMap."""

    default_trainer_image: str | None = None
    """The trainer image for jobs that name none (their spec holds the API's pinned default); e.g. the
    same image in a private mirror. None: the pinned one (``images.trainer`` in images/pins.yaml)."""

    leader_election: bool = False
    """Reconcile only while holding the Lease (for two or more replicas; see ``leadership.py``)."""

    lease_duration: int = 15
    """Seconds without renewal after which another replica takes the Lease."""

    lease_namespace: str | None = None
    """Namespace of the Lease (default: ``$POD_NAMESPACE``, else ``default``)."""

    identity: str | None = None
    """This replica's name in the Lease (default: ``$POD_NAME``, else host and process)."""

    policy: AdminPolicy = field(default_factory=AdminPolicy)
    """The admin's policy every job is checked against before anything is created."""

    network: NetworkSettings = field(default_factory=NetworkSettings)
    """The NetworkPolicy rendered for every job's Ray pods."""


def credentials_for(config: OperatorConfig) -> Credentials:
    """Where this run's credentials come from. An explicit ``config.kubeconfig`` wins over ``$KUBECONFIG``
    and over a pod's service account, as kubectl's ``--kubeconfig`` does."""
    if config.kubeconfig is None:
        return Credentials(config.server)
    environ = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    return Credentials(config.server, environ={**environ, "KUBECONFIG": config.kubeconfig})


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
    leadership: Leadership | None = None
    election_task: asyncio.Task[None] | None = None
    experiments: ExperimentReconciler | None = None
    history: History | None = None
    verl_check: VerlCheck | None = None
    intake: Intake | None = None
    experiment_intake: Intake | None = None
    known_experiments: set[tuple[str, str]] = field(default_factory=set)

    @property
    def may_reconcile(self) -> bool:
        """This replica reconciles: it is alone (no leader election) or holds the Lease."""
        return self.leadership is None or self.leadership.leading

    def require_intake(self) -> Intake:
        """Where job reconciles wait for their turn (set up by the startup handler)."""
        if self.intake is None:
            raise TransientError("the operator is still starting", delay=1)
        return self.intake

    def require_experiment_intake(self) -> Intake:
        """Where experiment reconciles wait for their turn (set up by the startup handler)."""
        if self.experiment_intake is None:
            raise TransientError("the operator is still starting", delay=1)
        return self.experiment_intake

    def require_reconciler(self) -> Reconciler:
        """The reconciler (set up by the startup handler)."""
        if self.reconciler is None:
            raise TransientError("the operator is still starting", delay=1)
        return self.reconciler


def backoff_delay(base: float, retry: int, cap: float, key: str = "") -> float:
    """Exponential backoff for transient errors: ``base``, 2x, 4x, ... at most ``cap`` seconds, shortened
    by the jitter ``key`` (the object's namespace/name) draws, so that the jobs an API server outage
    failed together do not all come back at the same instant."""
    return jittered(float(min(cap, base * 2 ** min(retry, 16))), key, retry)


def retry_backoff(config: OperatorConfig) -> Backoff:
    """Seconds before the next try of an object whose ``attempt``-th reconcile in a row failed:
    :func:`backoff_delay` from the operator's settings, never shorter than the server's Retry-After
    (in :attr:`TransientError.delay`)."""

    def backoff(namespace: str, name: str, attempt: int, exc: Exception) -> float:
        delay = backoff_delay(config.retry_delay, attempt, config.max_retry_delay, f"{namespace}/{name}")
        return max(exc.delay, delay) if isinstance(exc, TransientError) else delay

    return backoff


def job_intake(ctx: OperatorContext) -> Intake:
    """The operator's job :class:`Intake`: ``--max-concurrent-reconciles`` turns, the reconciler behind
    them, its wake-ups scheduled and its failures retried after :func:`retry_backoff` (a retry reads the
    job again: it may have changed). A replica that stops leading stops reconciling; the new leader
    resyncs everything when it takes over."""

    async def reconcile(namespace: str, name: str, body: Mapping[str, Any] | None) -> float | None:
        if not ctx.may_reconcile:
            return None
        return await ctx.require_reconciler().reconcile(namespace, name, body)

    return Intake(reconcile, ctx.config.max_concurrent_reconciles, retry_backoff(ctx.config), kind=KIND)


def experiment_intake(ctx: OperatorContext) -> Intake:
    """The operator's experiment :class:`Intake`, bounded and retried as the job intake. It is always
    submitted ``None``: an experiment's reconcile reads the experiment and its variants itself."""

    async def reconcile(namespace: str, name: str, _body: Mapping[str, Any] | None) -> None:
        if not ctx.may_reconcile:
            return
        if ctx.experiments is None:
            raise TransientError("the operator is still starting", delay=1)
        await ctx.experiments.reconcile(namespace, name)

    return Intake(
        reconcile, ctx.config.max_concurrent_reconciles, retry_backoff(ctx.config), kind=EXPERIMENT_KIND
    )


async def resync_forever(ctx: OperatorContext) -> None:
    """Reconcile every known job every ``resync_interval`` seconds: catches missed watch events.

    This is one operator-wide loop rather than a kopf timer per object, because kopf protects
    per-object timers with a finalizer, and a finalizer would block deleting a FlashRLJob whenever
    the operator is not running.
    """
    while True:
        await asyncio.sleep(ctx.config.resync_interval)
        resync_all(ctx)


def resync_all(ctx: OperatorContext) -> None:
    """Submit every known job, then every known experiment, to its intake (read first: the resync's
    point is what the watch may have missed); nothing when another replica leads. The intakes bound
    them like any other reconcile, run one per object at a time, and retry a failed one."""
    if not ctx.may_reconcile:
        return
    for namespace, name in sorted(ctx.known_jobs):
        ctx.require_intake().submit(namespace, name, None)
    for namespace, name in sorted(ctx.known_experiments):
        ctx.require_experiment_intake().submit(namespace, name, None)


def build_registry(ctx: OperatorContext) -> kopf.OperatorRegistry:
    """Register every handler of one operator run on a fresh registry."""
    registry = kopf.OperatorRegistry()
    config = ctx.config

    credentials = credentials_for(config)

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        # An explicit login handler also disables kopf's implicit logins: no accidental clusters.
        # kopf calls it again when the credentials expire or are refused; it gets what the
        # operator's own client uses (flashrl_operator.client.login).
        try:
            return await credentials.connection_info()
        except CredentialError as exc:
            raise kopf.LoginError(str(exc)) from exc

    @kopf.on.startup(registry=registry)
    async def startup(**_: Any) -> None:
        try:
            ctx.kube = await KubeClient.connect(
                credentials, request_timeout=config.request_timeout, retry_delay=config.retry_delay
            )
        except CredentialError as exc:
            raise kopf.PermanentError(str(exc)) from exc
        ctx.intake = job_intake(ctx)
        ctx.verl_check = VerlCheck(
            ctx.intake.submit,
            enabled=config.check_overrides,
            slots=config.check_slots,
            checker=config.verl_checker,
        )
        logger.info("verl checks: %d at once", ctx.verl_check.slots.slots)
        ctx.history = History(config.history_interval)
        memory = StatusMemory()  # the operator's status keys, shared by both reconcilers
        ctx.reconciler = Reconciler(
            ctx.kube,
            ctx.metrics,
            ctx.verl_check,
            ctx.history,
            memory,
            policy=config.policy,
            network=config.network,
            retry_backoff=config.retry_backoff,
            default_trainer_image=config.default_trainer_image,
            check_fit=config.check_fit,
        )
        ctx.experiments = ExperimentReconciler(ctx.kube, memory=memory)
        ctx.experiment_intake = experiment_intake(ctx)
        if config.metrics_port is not None:
            ctx.metrics_server = MetricsServer(ctx.metrics, config.bind_host, config.metrics_port)
            url = await ctx.metrics_server.start()
            logger.info("Serving metrics on %s", url)
        ctx.resync_task = asyncio.create_task(resync_forever(ctx), name="flashrl-resync")
        if config.leader_election:

            async def elected() -> None:
                resync_all(ctx)  # the previous leader may have left work undone

            ctx.leadership = Leadership(
                credentials,
                namespace=config.lease_namespace or default_namespace(),
                identity=config.identity or default_identity(),
                timing=ElectionTiming(config.lease_duration),
                on_elected=elected,
            )
            ctx.election_task = asyncio.create_task(ctx.leadership.run(), name="flashrl-election")

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        if ctx.election_task is not None:
            ctx.election_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ctx.election_task
        if ctx.resync_task is not None:
            ctx.resync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ctx.resync_task
        for intake in (ctx.intake, ctx.experiment_intake):
            if intake is not None:
                await intake.close()
        if ctx.verl_check is not None:
            await ctx.verl_check.close()
        if ctx.metrics_server is not None:
            await ctx.metrics_server.stop()
        if ctx.kube is not None:
            await ctx.kube.close()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def job_event(
        type: str | None, body: kopf.Body, namespace: str | None, name: str | None, uid: str | None, **_: Any
    ) -> None:
        key = (namespace or "default", str(name))
        owner = experiment_of(body)
        if type == "DELETED":
            ctx.known_jobs.discard(key)
            if ctx.reconciler is not None:
                ctx.reconciler.forget(*key, uid)
            if ctx.intake is not None:
                ctx.intake.forget(*key)
            if owner is not None:
                ctx.require_experiment_intake().submit(key[0], owner, None)
            return
        ctx.known_jobs.add(key)
        if needs_reconcile(type, body):
            ctx.require_intake().submit(*key, body)
        elif ctx.history is not None and ctx.history.wants(key, body.get("status") or {}):
            # New metrics for the history: its reconcile folds them, at most once per interval.
            wait = ctx.history.due_in(key)
            if wait > 0:
                ctx.require_intake().submit_after(*key, wait)
            else:
                ctx.require_intake().submit(*key, body)
        if owner is not None:
            # The variant's phase, step or metrics changed: the experiment's status (and, under
            # spec.parallelism, whether the next variant starts) follows.
            ctx.require_experiment_intake().submit(key[0], owner, None)

    @kopf.on.event(GROUP, VERSION, EXPERIMENT_PLURAL, registry=registry)
    async def experiment_event(type: str | None, namespace: str | None, name: str | None, **_: Any) -> None:
        key = (namespace or "default", str(name))
        if type == "DELETED":
            # Its FlashRLJobs go with it: they are owned by it (Kubernetes' garbage collector).
            ctx.known_experiments.discard(key)
            if ctx.experiment_intake is not None:
                ctx.experiment_intake.forget(*key)
            return
        ctx.known_experiments.add(key)
        ctx.require_experiment_intake().submit(*key, None)

    async def ray_object_event(body: kopf.Body, type: str | None, namespace: str | None, **_: Any) -> None:
        # A RayJob or RayCluster appearing (listed at start, or just created) brings nothing new: the
        # job's own reconcile covers it. Changes and deletions are what matter: a RayJob's states, and
        # KubeRay deleting a finished RayJob's workers (its deletion rules) without changing the RayJob,
        # which is when the job's GPUs are seen released (goodput, the experiment's next variant). The
        # job is the RayJob's controller; KubeRay copies the RayJob's labels, ours included, to its
        # RayCluster, so owner_name finds the job of either.
        if type not in ("MODIFIED", "DELETED"):
            return
        owner = owner_name(body, KIND, JOB_LABEL)
        if owner is not None and ctx.reconciler is not None:
            ctx.require_intake().submit(namespace or "default", owner, None)

    for ray_resource in (kuberay.RAY_JOB, kuberay.RAY_CLUSTER):
        kopf.on.event(
            kuberay.GROUP,
            kuberay.VERSION,
            ray_resource.plural,
            id=f"{ray_resource.plural}_event",
            labels={MANAGED_BY_LABEL: MANAGED_BY},
            registry=registry,
        )(ray_object_event)

    @kopf.on.event("batch", "v1", "jobs", labels={MANAGED_BY_LABEL: MANAGED_BY}, registry=registry)
    async def staging_job_event(body: kopf.Body, type: str | None, namespace: str | None, **_: Any) -> None:
        # The staging Job finishing is what lets the RayJob be created (or fails the job).
        if type != "MODIFIED":
            return
        owner = owner_name(body, KIND, JOB_LABEL)
        if owner is not None and ctx.reconciler is not None:
            ctx.require_intake().submit(namespace or "default", owner, None)

    return registry
