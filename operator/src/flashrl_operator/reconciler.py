"""One reconcile of one FlashRLJob: parse, render, converge the children, then write the status.

Every trigger (a create or spec update, the operator resuming after a restart, the periodic resync,
a change to a RayJob the operator owns) ends here, so there is one path to test. It is level-based
and idempotent: it reads the current job, renders the full desired state, creates what is missing,
patches what drifted and writes the status only when it differs, so repeated or duplicated events
change nothing. Decisions are delegated to pure modules (``render``, ``children``,
``status_mapping``); the I/O goes through :class:`~flashrl_operator.kube.KubeClient`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from flashrl_api import KIND, FlashRLJob, SpecError, parse_job
from flashrl_operator.children import SPEC_ANNOTATION, drift_patch, immutable_changes, spec_snapshot
from flashrl_operator.conditions import find_condition
from flashrl_operator.kube import (
    FLASHRL_JOB,
    POD,
    RAY_CLUSTER,
    RAY_JOB,
    ConflictError,
    KubeClient,
    RejectedError,
    describe,
    now_rfc3339,
    resource_of,
)
from flashrl_operator.metrics import OperatorMetrics, parse_time
from flashrl_operator.pod_diagnosis import CLUSTER_LABEL, POD_PROBLEM_REASONS, PodProblem, pod_problems
from flashrl_operator.render import render
from flashrl_operator.status_mapping import (
    REASON_CHILD_REJECTED,
    REASON_IMMUTABLE,
    Observation,
    RayClusterView,
    RayJobView,
    desired_status,
    is_final,
    phase_changed,
    should_read_cluster,
    should_read_pods,
    status_patch,
)

logger = logging.getLogger(__name__)


def override_problems(job: FlashRLJob) -> list[str]:
    """verl overrides that do not compose against the pinned verl config (when it is importable).

    The check needs hydra and verl's config files; where they are missing (a slim operator image),
    the API's own syntax checks are all there is, and the launcher checks again before verl starts.
    """
    if not job.spec.overrides:
        return []
    try:
        from flashrl_jobs.verl_config import check_user_overrides
    except ImportError:
        return []
    try:
        return [str(p) for p in check_user_overrides(job)]
    except Exception as exc:  # Unavailable config is not the user's error; the launcher rechecks.
        logger.warning("verl overrides not checked: %s", exc)
        return []


class Reconciler:
    """Converges FlashRLJobs; one instance per operator, living in the operator's event loop."""

    def __init__(self, kube: KubeClient, metrics: OperatorMetrics, *, check_overrides: bool = True) -> None:
        self._kube = kube
        self._metrics = metrics
        self._check_overrides = check_overrides
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._first_seen: dict[str, datetime.datetime] = {}
        self._override_cache: dict[tuple[str, ...], list[str]] = {}
        #: Reads the API server refused (RBAC from an older chart), each logged once.
        self._refused_reads: set[str] = set()

    async def reconcile(self, namespace: str, name: str) -> None:
        """Reconcile the job ``namespace/name`` if it still exists.

        Serialised per job: watch events for the job and for its RayJob may race.
        """
        lock = self._locks.setdefault((namespace, name), asyncio.Lock())
        async with lock:
            started = time.perf_counter()
            try:
                body = await self._kube.get(FLASHRL_JOB, namespace, name)
                if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                    return
                await self._reconcile(body)
            except kopf.TemporaryError:
                self._metrics.reconcile_errors.labels(reason="Temporary").inc()
                raise
            except Exception as exc:
                self._metrics.reconcile_errors.labels(reason=type(exc).__name__).inc()
                raise
            finally:
                self._metrics.reconcile_duration.observe(time.perf_counter() - started)

    def forget(self, namespace: str, name: str, uid: str | None) -> None:
        """Drop what is remembered about a deleted job."""
        self._locks.pop((namespace, name), None)
        if uid:
            self._first_seen.pop(uid, None)
            self._metrics.forget(uid)

    async def _spec_problems(self, body: Mapping[str, Any]) -> tuple[FlashRLJob | None, list[str]]:
        try:
            job = parse_job({k: v for k, v in body.items() if k != "status"})
        except SpecError as exc:
            return None, [str(p) for p in exc.problems]
        if not self._check_overrides or not job.spec.overrides:
            return job, []
        key = tuple(job.spec.overrides)
        if key not in self._override_cache:
            self._override_cache[key] = await asyncio.to_thread(override_problems, job)
        return job, self._override_cache[key]

    async def _ensure(self, desired: Mapping[str, Any], *, queued: bool) -> dict[str, Any]:
        """Create ``desired`` or bring the live object back to it; returns the live object."""
        resource = resource_of(desired)
        meta = desired["metadata"]
        live = await self._kube.get(resource, meta["namespace"], meta["name"])
        if live is None:
            try:
                created = await self._kube.create(desired)
                logger.info("Created %s", describe(desired))
                return created
            except ConflictError:
                # Created meanwhile (a lost response, another event): converge on what is there.
                live = await self._kube.get(resource, meta["namespace"], meta["name"])
                if live is None:
                    raise kopf.TemporaryError(
                        f"{describe(desired)} exists and vanished; retrying", delay=1
                    ) from None
        patch = drift_patch(desired, live, queued=queued)
        if not patch:
            return live
        logger.info("Restoring %s (%s)", describe(desired), ", ".join(sorted(patch)))
        return await self._kube.patch(resource, meta["namespace"], meta["name"], patch)

    async def _reconcile(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta["name"])
        uid = str(meta.get("uid") or f"{namespace}/{name}")
        generation = meta.get("generation") if isinstance(meta.get("generation"), int) else None
        previous: Mapping[str, Any] = body.get("status") or {}
        now = now_rfc3339()
        created = parse_time(meta.get("creationTimestamp")) or self._first_seen.setdefault(
            uid, datetime.datetime.now(datetime.UTC)
        )

        job, problems = await self._spec_problems(body)
        if job is None or problems:
            obs = Observation(generation=generation, spec_problems=tuple(problems), previous=previous)
            await self._write_status(body, previous, desired_status(obs, now), uid, created)
            return

        desired = render(job)
        snapshot = spec_snapshot(job.spec.to_wire())
        for obj in desired:
            if obj.get("kind") == "RayJob":
                obj["metadata"].setdefault("annotations", {})[SPEC_ANNOTATION] = snapshot
        ray_job_name = next(str(o["metadata"]["name"]) for o in desired if o.get("kind") == "RayJob")
        queued = job.spec.scheduling.queue_name is not None

        rejected: str | None = None
        immutable: list[str] = []
        ray_live: dict[str, Any] | None = None
        same_generation = previous.get("observedGeneration") == generation
        if previous.get("reason") == REASON_CHILD_REJECTED and same_generation:
            # Retrying cannot help until the spec changes (a new generation).
            rejected = str(previous.get("message") or "A child object was rejected")
            ray_live = await self._kube.get(RAY_JOB, namespace, ray_job_name)
        elif is_final(previous):
            ray_live = await self._kube.get(RAY_JOB, namespace, ray_job_name)
        else:
            for obj in desired:
                try:
                    live = await self._ensure(obj, queued=queued)
                except RejectedError as exc:
                    rejected = (
                        f"{describe(obj)} was rejected by the API server "
                        f"(HTTP {exc.status} {exc.reason}): {exc.message}"
                    )
                    logger.error("%s", rejected)
                    break
                if obj.get("kind") == "RayJob":
                    ray_live = live
        if ray_live is not None:
            recorded = ((ray_live.get("metadata") or {}).get("annotations") or {}).get(SPEC_ANNOTATION)
            immutable = immutable_changes(recorded if isinstance(recorded, str) else None, job.spec.to_wire())

        ray_view = RayJobView.of(ray_live) if ray_live is not None else None
        cluster_view = await self._ray_cluster(namespace, ray_view, previous)
        obs = Observation(
            generation=generation,
            rejected=rejected,
            immutable_changes=tuple(immutable),
            suspend_requested=job.spec.lifecycle.suspend,
            queued=queued,
            ray_job_name=ray_job_name,
            ray_job=ray_view,
            ray_cluster=cluster_view,
            pod_problems=await self._pod_problems(namespace, ray_view, cluster_view),
            previous=previous,
        )
        await self._write_status(body, previous, desired_status(obs, now), uid, created)

    async def _ray_cluster(
        self, namespace: str, ray_job: RayJobView | None, previous: Mapping[str, Any]
    ) -> RayClusterView | None:
        """The RayCluster the RayJob names, when it can still change ClusterReady.

        A missing cluster is normal (KubeRay has not created it yet, or deleted it). A refused read
        (RBAC from an older chart) is not worth failing the reconcile for: ClusterReady then comes
        from the RayJob alone, and the operator says so once.
        """
        if ray_job is None or not should_read_cluster(ray_job, previous):
            return None
        try:
            live = await self._kube.get(RAY_CLUSTER, namespace, ray_job.cluster_name)
        except RejectedError as exc:
            self._refused_once("read RayClusters", exc, "ClusterReady comes from the RayJob alone")
            return None
        return RayClusterView.of(live) if live is not None else None

    async def _pod_problems(
        self, namespace: str, ray_job: RayJobView | None, cluster: RayClusterView | None
    ) -> tuple[PodProblem, ...]:
        """Why the starting cluster's pods are not ready (one LIST by label), or nothing.

        Like the RayCluster read, a refused LIST (RBAC from an older chart) only costs the detail.
        """
        if cluster is None or not cluster.name or not should_read_pods(ray_job, cluster):
            return ()
        try:
            pods = await self._kube.list_objects(POD, namespace, f"{CLUSTER_LABEL}={cluster.name}")
        except RejectedError as exc:
            self._refused_once("list pods", exc, "ClusterReady will not say why pods are not starting")
            return ()
        return pod_problems(pods)

    def _refused_once(self, what: str, exc: RejectedError, consequence: str) -> None:
        """A refused optional read costs only detail: say so once per kind of read, not per job."""
        if what not in self._refused_reads:
            self._refused_reads.add(what)
            logger.warning("Cannot %s (%s); %s", what, exc, consequence)

    async def _write_status(
        self,
        body: Mapping[str, Any],
        previous: Mapping[str, Any],
        desired: Mapping[str, Any],
        uid: str,
        created: datetime.datetime,
    ) -> None:
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta["name"])
        patch = status_patch(previous, desired)
        if patch:
            await self._kube.patch_job_status(namespace, name, patch)
        self._metrics.observe_phase(uid, str(desired["phase"]), created)
        involved = {**body, "kind": body.get("kind") or KIND}
        if phase_changed(previous, desired):
            old, new = previous.get("phase") or "New", str(desired["phase"])
            failed = new == "Failed"
            reason = str(desired.get("reason") or new) if failed else new
            message = f"Phase {old} -> {new}: {desired.get('message') or ''}".rstrip(": ")
            logger.info("FlashRLJob %s/%s: %s", namespace, name, message)
            await self._kube.post_event(involved, "Warning" if failed else "Normal", reason, message)
        old_accepted = find_condition(previous.get("conditions") or [], "Accepted") or {}
        new_accepted = find_condition(desired.get("conditions") or [], "Accepted") or {}
        if new_accepted.get("reason") == REASON_IMMUTABLE and old_accepted.get("reason") != REASON_IMMUTABLE:
            await self._kube.post_event(
                involved, "Warning", REASON_IMMUTABLE, str(new_accepted.get("message"))
            )
        blocked = desired.get("reason")
        if blocked in POD_PROBLEM_REASONS and previous.get("reason") != blocked:
            # Still Starting (no phase Event), but a pod cannot start: say so once per new cause.
            logger.warning("FlashRLJob %s/%s: %s", namespace, name, desired.get("message"))
            await self._kube.post_event(involved, "Warning", str(blocked), str(desired.get("message") or ""))
