"""One reconcile of one FlashRLJob: read, decide (:func:`~flashrl_operator.job.step.next_step`), act,
write, return the next wake-up. Its rules (who writes what, fewest requests, no write from a stale view,
deletion wins) are in docs/architecture.md, "One reconcile". It keeps no task, lock, bound, cache or
timer: the work queue (:mod:`flashrl_operator.run.intake`) schedules it, and its collaborators
(:mod:`~flashrl_operator.job.verl_check`, :mod:`~flashrl_operator.job.history`, and
:mod:`~flashrl_operator.job.memory`, the operator's status keys it decides from) keep their own.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from flashrl_api import KIND, SpecError, parse_job
from flashrl_api.history import history_name
from flashrl_api.pools import gpu_pools
from flashrl_api.spec import GPU_PRODUCT_LABEL, RolloutSpec
from flashrl_operator.client.errors import ApiError, ConflictError, RejectedError, TransientError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.job.attempts import Reported
from flashrl_operator.job.fits import capacity, gpu_holders, holder_nodes
from flashrl_operator.job.history import History
from flashrl_operator.job.memory import StatusMemory
from flashrl_operator.job.policy import AdminPolicy, policy_problems
from flashrl_operator.job.preflight import cluster_needs
from flashrl_operator.job.retry_policy import BACKOFF_BASE_SECONDS
from flashrl_operator.job.status.pods import PodProblem, pod_problems
from flashrl_operator.job.status.ray import is_final, should_read_cluster, should_read_pods
from flashrl_operator.job.step import (
    Apply,
    HistoryRead,
    Reads,
    Step,
    attempt_context,
    cannot_start,
    children_to_read,
    claims_to_read,
    controlled,
    converging,
    creates_first,
    distrusted,
    fit_due,
    may_end_attempt,
    needs_staging_pods,
    next_step,
    rejection,
    release_checks,
    waits_for_gpus,
    with_rollout_precision,
    with_trainer_image,
)
from flashrl_operator.job.verl_check import CheckUnderWay, VerlCheck
from flashrl_operator.render import Child, render
from flashrl_operator.render.children import VERL_CHECKED_ANNOTATION, ownership_conflict
from flashrl_operator.render.network import NetworkSettings
from flashrl_operator.render.staging import JOB_NAME_LABEL
from flashrl_operator.vocab import kuberay, kueue
from flashrl_operator.vocab.kinds import (
    CONFIG_MAP,
    FLASHRL_JOB,
    NODE,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    PRIORITY_CLASS,
)
from flashrl_operator.vocab.kuberay import CLUSTER_LABEL, RayClusterView, RayJobView
from flashrl_operator.vocab.kueue import WorkloadView
from flashrl_operator.vocab.metrics import OperatorMetrics, parse_time

#: ``spec.rollout.quantization`` when the stored object omits it (the CRD defaults it on admission).
DEFAULT_QUANTIZATION = RolloutSpec.model_fields["quantization"].default

logger = logging.getLogger(__name__)

#: How soon a reconcile whose write was refused runs again (to report or re-read what refused it).
REREAD_SECONDS: Final = 0.1

#: Versions of a job one reconcile computes its step from at most (each newer than the last) before
#: it gives its turn back as a transient failure: a job written to that often is retried later.
MAX_VIEWS: Final = 4


class Token:
    """Set when the job a reconcile works for was deleted: the reconcile stops before its next write.

    Set by :meth:`Reconciler.forget` (the job's ``DELETED`` watch event), which may come while the
    reconcile waits for a response; :meth:`check` is called before every write.
    """

    def __init__(self) -> None:
        self.uid: str | None = None
        self.cancelled = False

    def check(self) -> None:
        """Raise :class:`JobGoneError` if the job was deleted meanwhile."""
        if self.cancelled:
            raise JobGoneError("deleted while it was reconciled")


class JobGoneError(Exception):
    """The job is gone, being deleted, or replaced under its name: nothing more is written for it."""


class StaleViewError(Exception):
    """The step was computed from an older version of the job than the server holds: compute again."""

    def __init__(self, fresh: Mapping[str, Any] | None) -> None:
        self.fresh = fresh
        """The newer version, when the check read it (``None``: read it)."""
        super().__init__("the job changed since it was read")


def _writes(step: Step) -> bool:
    """Whether carrying out ``step`` writes anything (a child, a claim, a deletion, the job)."""
    return bool(step.apply or step.claim_patches or step.delete or step.status_patch or step.spec_patch)


def _with_version(body: Mapping[str, Any], version: str | None) -> dict[str, Any]:
    """``body`` carrying ``metadata.resourceVersion`` (a precondition the API server checks)."""
    out = dict(body)
    if version:
        out["metadata"] = {**dict(out.get("metadata") or {}), "resourceVersion": version}
    return out


@dataclass(frozen=True)
class Halt:
    """A child write the API server refused: the rest of the step is not carried out."""

    rejected: str | None
    """Why the API server rejected the child (reported next); ``None``: an object was created meanwhile
    under its name (read next)."""


class Reconciler:
    """Converges FlashRLJobs; one instance per operator, living in the operator's event loop. verl's
    verdicts come from ``verl_check``; the history's fold pace from ``history``; the operator's own
    status keys, as it last wrote them, from ``memory`` (shared with the experiment reconciler)."""

    def __init__(
        self,
        kube: KubeClient,
        metrics: OperatorMetrics,
        verl_check: VerlCheck,
        history: History,
        memory: StatusMemory,
        *,
        retry_backoff: float = BACKOFF_BASE_SECONDS,
        policy: AdminPolicy | None = None,
        network: NetworkSettings | None = None,
        default_trainer_image: str | None = None,
        check_fit: bool = True,
    ) -> None:
        self._kube = kube
        self._verl = verl_check
        self._history = history
        self._memory = memory
        #: Judge before anything is created whether the job can ever start (job/fits.py).
        self._check_fit = check_fit
        self._policy = policy or AdminPolicy()
        self._network = network or NetworkSettings()
        self._default_trainer_image = default_trainer_image
        self._retry_backoff = retry_backoff
        #: A child the API server rejected, by job: (the job's generation, why), until reported.
        self._rejections: dict[tuple[str, str], tuple[int | None, str]] = {}
        self._metrics = metrics
        self._first_seen: dict[str, datetime.datetime] = {}
        #: Reads the API server refused (RBAC from an older chart), each logged once.
        self._refused_reads: set[str] = set()
        #: New jobs (by UID) that created their children first once: every later reconcile reads them.
        self._created_first: set[str] = set()
        #: The cancellation tokens of the reconciles under way, by job.
        self._tokens: dict[tuple[str, str], set[Token]] = {}

    async def reconcile(
        self, namespace: str, name: str, body: Mapping[str, Any] | None = None
    ) -> float | None:
        """Reconcile the job ``namespace/name`` if it still exists; returns the seconds after which it
        wants to be reconciled again (``None``: only when something changes).

        ``body`` is the job as a watch event just delivered it (saves a read); without it the job
        is read first. The caller runs one reconcile of a job at a time (watch events for the job and
        for its RayJob may race): the operator's work queue does.
        """
        key = (namespace, name)
        started = time.perf_counter()
        token = Token()
        self._tokens.setdefault(key, set()).add(token)
        try:
            return await self._views(namespace, name, body, token)
        except CheckUnderWay:  # waits without a turn; the check's end submits it again
            return None
        except TransientError:
            self._metrics.reconcile_errors.labels(reason="Temporary").inc()
            raise
        except Exception as exc:
            self._metrics.reconcile_errors.labels(reason=type(exc).__name__).inc()
            raise
        finally:
            tokens = self._tokens.get(key)
            if tokens is not None:
                tokens.discard(token)
                if not tokens:
                    del self._tokens[key]
            self._metrics.reconcile_duration.observe(time.perf_counter() - started)

    async def _views(
        self, namespace: str, name: str, body: Mapping[str, Any] | None, token: Token
    ) -> float | None:
        """Reconcile from ``body`` (or a read), and again from each newer version a check finds."""
        for _ in range(MAX_VIEWS):
            if body is None:
                body = await self._kube.get(FLASHRL_JOB, namespace, name)
            meta = (body or {}).get("metadata") or {}
            if body is None or meta.get("deletionTimestamp"):
                return None
            token.uid = str(meta.get("uid") or "") or None
            try:
                return await self._reconcile(body, token)
            except StaleViewError as stale:
                body = stale.fresh
            except JobGoneError as gone:
                logger.info("FlashRLJob %s/%s: %s; nothing more is written for it", namespace, name, gone)
                return None
        raise TransientError(
            f"FlashRLJob {namespace}/{name} changed {MAX_VIEWS} times while it was reconciled", REREAD_SECONDS
        )

    def forget(self, namespace: str, name: str, uid: str | None) -> None:
        """Drop what is remembered about a deleted job, and stop its reconciles under way before their
        next write (their tokens; one that already read a new job of the name is left alone)."""
        for token in self._tokens.get((namespace, name), ()):
            if uid is None or token.uid in (None, uid):
                token.cancelled = True
        self._rejections.pop((namespace, name), None)
        self._history.forget((namespace, name))
        self._metrics.forget_goodput(namespace, name)
        if uid:
            self._memory.forget(uid)
            self._first_seen.pop(uid, None)
            self._created_first.discard(uid)
            self._metrics.forget(uid)

    async def _reconcile(self, body: Mapping[str, Any], token: Token) -> float | None:
        """Read, decide (once), check the job is still this version, act, write; then the Events.
        Returns the seconds until the next wake-up the step asks for (at once after a refused write).
        Raises :class:`StaleViewError` or :class:`JobGoneError` from a check."""
        observed = await self._observe(body)
        step = next_step(observed)
        key = (observed.namespace, observed.name)
        if _writes(step):
            await self._current(body, token)
        if observed.new:  # Once: whatever becomes of these creates, the next reconcile reads.
            self._created_first.add(observed.uid)
        halt = await self._converge(step.apply, body, token)
        if halt is not None:
            if halt.rejected is not None:
                self._rejections[key] = (observed.generation, halt.rejected)
            return REREAD_SECONDS
        await self._act(observed, step, token)
        await self._write(body, observed, step, token)
        if observed.history is not None:  # written, unchanged or someone else's: this report is done
            self._history.done(key, observed.previous)
        self._memory.remember(observed.uid, step.status)
        return step.wake_after

    async def _current(self, body: Mapping[str, Any], token: Token) -> None:
        """Read the job again: :class:`JobGoneError` when it is gone, being deleted or another job
        (UID) holds its name; :class:`StaleViewError` when the server holds a newer version than
        ``body``. Made after every wait (the queue, the lock, the reads), right before writing."""
        token.check()
        meta = body.get("metadata") or {}
        fresh = await self._kube.get(FLASHRL_JOB, str(meta.get("namespace") or "default"), str(meta["name"]))
        token.check()
        now = (fresh or {}).get("metadata") or {}
        if fresh is None:
            raise JobGoneError("deleted")
        if now.get("uid") != meta.get("uid"):
            raise JobGoneError(f"deleted (another job of its name has UID {now.get('uid')})")
        if now.get("deletionTimestamp"):
            raise JobGoneError("being deleted")
        if now.get("resourceVersion") != meta.get("resourceVersion"):
            raise StaleViewError(fresh)

    # Read.

    async def _observe(self, body: Mapping[str, Any]) -> Reads:
        """Everything :func:`~flashrl_operator.job.step.next_step` needs: the job as given and, for a
        valid spec the policy allows, what its children and their cluster say."""
        meta = body.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta["name"])
        uid = str(meta.get("uid") or f"{namespace}/{name}")
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        seen = Reads(
            namespace=namespace,
            name=name,
            uid=uid,
            now=now,
            created=parse_time(meta.get("creationTimestamp")) or self._first_seen.setdefault(uid, now),
            generation=meta.get("generation") if isinstance(meta.get("generation"), int) else None,
            previous=body.get("status") or {},
            retry_backoff=self._retry_backoff,
        )
        # The operator's keys as it wrote them, not as anyone with the launcher's token left them.
        remembered = self._memory.as_written(uid, seen.previous)
        if remembered != seen.previous:
            seen = replace(seen, previous=remembered, on_server=seen.previous)
        try:
            job = parse_job({k: v for k, v in body.items() if k != "status"})
        except SpecError as exc:
            return replace(seen, spec_problems=tuple(str(p) for p in exc.problems))
        # The operator's default trainer image is the job's from here on: the policy judges it, the
        # staging Job and the Ray pods run it, the RayJob's spec snapshot records it.
        job = with_trainer_image(job, self._default_trainer_image)
        # After the mismatch guard's FallbackToBF16, every attempt runs (and is rendered from) BF16 rollout.
        job = with_rollout_precision(job, seen.previous)
        desired = render(job, attempt_context(job, seen.previous, seen.created), self._network)
        # The policy judges the pods of exactly what would be applied.
        refused = tuple(str(p) for p in policy_problems(job, self._policy, desired))
        if refused:
            return replace(seen, job=job, policy_problems=refused)
        if self._memory.recall(uid) is None and is_final(seen.previous):
            # Nothing remembered (a restart): a final phase is checked against the job's RayJob once.
            ray_live = controlled(await self._kube.get(kuberay.RAY_JOB, namespace, desired.ray_job.name), uid)
            trusted = distrusted(seen.previous, ray_live)
            if trusted is not seen.previous:
                logger.warning(
                    "FlashRLJob %s/%s: status.phase %s is not what its RayJob says; judging it again",
                    namespace,
                    name,
                    seen.previous.get("phase"),
                )
                seen = replace(seen, previous=trusted, on_server=seen.server_status)
        rejected = self._rejections.pop((namespace, name), None)
        seen = replace(
            seen,
            job=job,
            desired=desired,
            refused=rejected[1] if rejected is not None and rejected[0] == seen.generation else None,
        )
        tried = uid in self._created_first
        seen = replace(seen, new=creates_first(seen.previous, seen.generation, seen.refused, tried=tried))
        seen = await self._read_children(seen, children_to_read(seen))
        converges = converging(seen.previous, seen.generation, seen.refused)
        if converges:
            # verl reads the spec only when a RayJob is created: the check gates that, never a job
            # whose RayJob runs (a suspend, a deadline, a deletion go ahead while it runs).
            ray_job = controlled(seen.live_of(desired.ray_job), uid)
            accepted = RayJobView.of(ray_job).annotation(VERL_CHECKED_ANNOTATION) if ray_job else None
            problems = self._verl.verdict(job, body, accepted=accepted, needed=ray_job is None)
            if problems:
                return replace(seen, spec_problems=tuple(problems))
        # After the verl gate: a job that waits for its verdict reads the claims and nodes once, when it
        # is reconciled with the verdict (a new job has read no child yet: nothing is created before).
        seen = await self._read_fit(seen)
        if cannot_start(seen):
            return seen  # it fails before anything is created
        if converges:
            seen = await self._read_staging(seen)
        return await self._read_history(await self._read_ray(seen))

    async def _read_history(self, seen: Reads) -> Reads:
        """The history ConfigMap and the reported status folded into it, when the status reports
        something new and the job's fold is due (else how long until it is)."""
        key = (seen.namespace, seen.name)
        if seen.job is None or seen.new or not self._history.wants(key, seen.previous):
            return seen
        wait = self._history.due_in(key)
        if wait > 0:
            return replace(seen, history_wait=wait)
        live = await self._kube.get(CONFIG_MAP, seen.namespace, history_name(seen.name))
        if live is not None and ownership_conflict("", live, seen.uid) is not None:
            return replace(seen, history=HistoryRead(live, None))
        known = {k: str(v) for k, v in ((live or {}).get("data") or {}).items()}
        total = seen.job.spec.training.total_steps
        return replace(
            seen, history=HistoryRead(live, await self._history.fold(key, known, seen.previous, total))
        )

    async def _read_fit(self, seen: Reads) -> Reads:
        """The claims the job mounts, the PriorityClasses its pods name and the GPU nodes, when
        :func:`~flashrl_operator.job.step.fit_due`: a GET per claim and per PriorityClass, and one LIST of
        the nodes carrying ``nvidia.com/gpu.product``. A refused read (RBAC: the chart's namespace-scoped
        mode may neither list nodes nor read PriorityClasses, both cluster-scoped) judges nothing on that
        side."""
        assert seen.job is not None
        if not self._check_fit or not fit_due(seen.previous, seen.generation, seen.refused):
            return seen
        needs = cluster_needs(seen.job)
        mounted: dict[str, Mapping[str, Any] | None] = {}
        for claim in needs.claims:
            try:
                mounted[claim] = await self._kube.get(PERSISTENT_VOLUME_CLAIM, seen.namespace, claim)
            except RejectedError as exc:
                self._refused_once("read claims", exc, "a missing claim shows only as pods that wait")
        classes: dict[str, Mapping[str, Any] | None] = {}
        for name in needs.priority_classes:
            try:
                classes[name] = await self._kube.get(PRIORITY_CLASS, None, name)
            except RejectedError as exc:
                self._refused_once(
                    "read PriorityClasses", exc, "a job naming a missing PriorityClass is not failed at once"
                )
        nodes: tuple[Mapping[str, Any], ...] | None = None
        try:
            nodes = tuple(await self._kube.list_objects(NODE, None, GPU_PRODUCT_LABEL))
        except RejectedError as exc:
            self._refused_once(
                "list nodes", exc, "a job whose GPU pods can never fit waits for its startup deadline"
            )
        return replace(seen, nodes=nodes, mounted=mounted, priority_classes=classes)

    async def _read_children(self, seen: Reads, children: Sequence[Child]) -> Reads:
        """Each of ``children`` by name (``None``: missing); the others are not read."""
        live = {c.describe(): await self._kube.get(c.resource, c.namespace, c.name) for c in children}
        return replace(seen, live=live)

    async def _read_staging(self, seen: Reads) -> Reads:
        """The claims whose records say whether sources are staged, and a failed staging Job's pods."""
        assert seen.job is not None and seen.desired is not None
        claims: dict[str, Mapping[str, Any] | None] = {}
        for claim in claims_to_read(seen.job, seen.desired, seen.previous):
            if claim in seen.mounted:  # read a moment ago for the fit judgement
                claims[claim] = seen.mounted[claim]
                continue
            try:
                claims[claim] = await self._kube.get(PERSISTENT_VOLUME_CLAIM, seen.namespace, claim)
            except RejectedError as exc:
                self._refused_once("read claims", exc, "sources are staged by a Job every time")
                claims[claim] = None
        stage = seen.desired.staging_job
        pods: list[dict[str, Any]] = []
        if stage is not None and needs_staging_pods(seen.previous, seen.live_of(stage)):
            try:
                pods = await self._kube.list_objects(POD, seen.namespace, f"{JOB_NAME_LABEL}={stage.name}")
            except RejectedError as exc:
                self._refused_once("list pods", exc, "a staging failure shows the Job's reason only")
        return replace(seen, claims=claims, staging_pods=tuple(pods))

    async def _read_ray(self, seen: Reads) -> Reads:
        """The RayJob's cluster and starting pods, the launcher's report after an attempt that may have
        ended, and the ended attempts whose clusters are gone."""
        assert seen.job is not None and seen.desired is not None
        ray_live = controlled(seen.live_of(seen.desired.ray_job), seen.uid)
        ray_view = RayJobView.of(ray_live) if ray_live is not None else None
        cluster = await self._ray_cluster(seen.namespace, ray_view, seen.previous)
        problems = await self._pod_problems(seen.namespace, ray_view, cluster)
        holders = await self._gpu_holders(seen, problems)
        reported = None
        if may_end_attempt(seen.previous, ray_live) and seen.desired.ray_job.describe() in seen.live:
            fresh = await self._kube.get(FLASHRL_JOB, seen.namespace, seen.name)
            reported = Reported.of(fresh.get("status") or {}) if fresh is not None else None
        rejected = rejection(seen.previous, seen.generation, seen.refused)
        released, holding = await self._released(seen) if rejected is None else ((), ())
        workload = await self._workload(seen, ray_view)
        return replace(
            seen,
            ray_cluster=cluster,
            pod_problems=problems,
            gpu_holders=holders,
            reported=reported,
            released=released,
            holding=holding,
            workload=workload,
        )

    async def _gpu_holders(self, seen: Reads, problems: tuple[PodProblem, ...]) -> str | None:
        """Whose pods hold the GPUs a starting pod waits for
        (:func:`~flashrl_operator.job.step.waits_for_gpus`), when the job fits the cluster: one LIST of
        the GPU nodes, and one of the pods bound to each of the job's matching nodes (a few at most,
        :func:`~flashrl_operator.job.fits.holder_nodes`)."""
        assert seen.job is not None and seen.desired is not None
        if not self._check_fit or not waits_for_gpus(problems):
            return None
        try:
            nodes = await self._kube.list_objects(NODE, None, GPU_PRODUCT_LABEL)
            judged = capacity(gpu_pools(seen.job.spec), nodes)
            pods: list[dict[str, Any]] = []
            for node in holder_nodes(judged) if judged.fits else ():
                pods += await self._kube.list_objects(POD, None, "", field_selector=f"spec.nodeName={node}")
        except RejectedError as exc:
            self._refused_once("list nodes and their pods", exc, "a job waiting for GPUs does not say whose")
            return None
        return gpu_holders(judged, pods, (seen.namespace, seen.job.name), queued=seen.desired.queued)

    async def _workload(self, seen: Reads, ray_job: RayJobView | None) -> WorkloadView | None:
        """The Kueue Workload of a queued RayJob Kueue has not admitted (one LIST by its UID label),
        for the status to say why the job waits; ``None`` otherwise, or when it cannot be read."""
        assert seen.desired is not None
        if not seen.desired.queued or ray_job is None or not ray_job.spec_suspend or not ray_job.uid:
            return None
        try:
            found = await self._kube.list_objects(
                kueue.WORKLOAD, seen.namespace, kueue.workload_selector(ray_job.uid)
            )
        except RejectedError as exc:
            self._refused_once("list Kueue workloads", exc, "a queued job's status does not say why it waits")
            return None
        except ApiError as exc:
            if exc.status != 404:
                raise
            return WorkloadView("", waiting=kueue.NOT_SERVED)
        return WorkloadView.of(found[0]) if found else None

    async def _released(self, seen: Reads) -> tuple[tuple[int, ...], tuple[Mapping[str, Any], ...]]:
        """Ended attempts whose GPUs are released: their Ray cluster gone, or (KubeRay's deletion rules
        keep the head for the TTL) its worker groups suspended and no worker pod left. A LIST by
        KubeRay's label each, and one of the worker pods per remaining cluster. Also the clusters whose
        worker groups are not suspended (for a queued job's:
        :func:`~flashrl_operator.job.step.suspend_worker_groups`)."""
        assert seen.job is not None
        released = []
        unsuspended: list[Mapping[str, Any]] = []
        for attempt, ray_job_name in release_checks(seen.job, seen.previous):
            selector = f"{kuberay.ORIGINATED_FROM_NAME}={ray_job_name}"
            try:
                clusters = await self._kube.list_objects(kuberay.RAY_CLUSTER, seen.namespace, selector)
                holding = [c for c in clusters if not kuberay.worker_groups_suspended(c)]
                unsuspended += holding
                for cluster in clusters if not holding else ():
                    name = str((cluster.get("metadata") or {}).get("name") or "")
                    if await self._kube.list_objects(POD, seen.namespace, kuberay.worker_selector(name)):
                        holding.append(cluster)
                        break
            except RejectedError as exc:
                self._refused_once(
                    "list RayClusters and their worker pods",
                    exc,
                    "goodput counts GPUs held after the end until the next attempt",
                )
                break
            if not holding:
                released.append(attempt)
        return tuple(released), tuple(unsuspended)

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
            live = await self._kube.get(kuberay.RAY_CLUSTER, namespace, ray_job.cluster_name)
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

    # Act.

    async def _converge(self, applies: Sequence[Apply], body: Mapping[str, Any], token: Token) -> Halt | None:
        """Write each child as the step says, in order; the first refused write stops the rest.

        A create is a ``POST``. When one is refused with 409 (the name is taken), the children this
        reconcile created first (:attr:`~flashrl_operator.job.step.Apply.first`) are deleted again.
        Before each write the job's :class:`Token` is looked at: deletion wins.
        """
        created: list[tuple[Child, str]] = []
        for action in applies:
            child = action.child
            token.check()
            try:
                if action.mode == "create":
                    made = await self._kube.create(child.body)
                    if made is None:  # 409: the name is taken
                        return await self._taken(child, created)
                    logger.info("Created %s", child.describe())
                    if action.first:
                        created.append((child, str((made.get("metadata") or {}).get("uid") or "")))
                    continue
                logger.info("Restoring %s (%s)", child.describe(), ", ".join(sorted(action.patch)))
                # Ownership proved at the write: the resourceVersion of the object read as the job's.
                if action.mode == "merge":
                    patch = _with_version(action.patch, action.version)
                    await self._kube.patch(child.resource, child.namespace, child.name, patch)
                else:
                    await self._kube.apply(_with_version(child.body, action.version), force=True)
            except RejectedError as exc:
                rejected = (
                    f"{child.describe()} was rejected by the API server "
                    f"(HTTP {exc.status} {exc.reason}): {exc.message}"
                )
                logger.error("%s", rejected)
                return Halt(rejected)
            except ConflictError:
                return await self._taken(child, created)
        return None

    async def _taken(self, child: Child, created: Sequence[tuple[Child, str]]) -> Halt:
        """``child``'s name is taken (an object created meanwhile, or before a new job's first
        reconcile): delete again what this reconcile created first, each only under the UID it was
        created with (never another object under the name since); the next reconcile reads the
        children (the object is the job's only if it names this job as its controller)."""
        logger.info("%s exists; reading the children again", child.describe())
        for made, made_uid in reversed(created):
            try:
                await self._kube.delete(made.resource, made.namespace, made.name, uid=made_uid or None)
                logger.info("Removed %s again: %s is taken", made.describe(), child.describe())
            except (ConflictError, RejectedError) as exc:
                logger.warning("Cannot remove %s again: %s", made.describe(), exc)
        return Halt(None)

    async def _act(self, observed: Reads, step: Step, token: Token) -> None:
        """Record staged sources on their claims, delete a failed attempt's RayJob."""
        for patch in step.claim_patches:
            token.check()
            try:
                await self._kube.patch(patch.resource, patch.namespace, patch.name, patch.body)
            except RejectedError as exc:
                self._refused_once("annotate claims", exc, "the next job stages its sources again")
        for patch in step.suspend_workers:
            token.check()
            try:
                await self._kube.patch(patch.resource, patch.namespace, patch.name, patch.body)
                logger.info("Suspended the worker groups of RayCluster %s/%s", patch.namespace, patch.name)
            except (ConflictError, TransientError):  # changed, or gone (404)
                logger.info(
                    "RayCluster %s changed since it was read; the next reconcile looks again", patch.name
                )
            except RejectedError as exc:
                self._refused_once(
                    "patch RayClusters", exc, "a queued job's GPU workers stay until KubeRay's TTL"
                )
        for ref in step.delete:
            token.check()
            try:
                await self._kube.delete(ref.resource, ref.namespace, ref.name, uid=ref.uid)
            except ConflictError:
                logger.warning("%s was replaced since it was read; left alone", ref.name)
            except RejectedError as exc:
                self._refused_once("delete RayJobs", exc, "a failed attempt's cluster stays until its TTL")

    # Write.

    async def _write(self, body: Mapping[str, Any], observed: Reads, step: Step, token: Token) -> None:
        """The status (only when it changed), then the spec, the metrics, and the Events the step announces.

        The status patch is made against the version of the job it was computed from (its
        ``resourceVersion`` as a precondition): a 409 means the job changed since, and the reconcile
        computes again from the newer version (:class:`StaleViewError`), which then holds whatever
        changed and, when the transition was written meanwhile, announces nothing.

        The spec after the status: its change reaches the next reconcile with the job as the watch event
        delivers it, which then already holds the status that decided it (the guard's trip, announced once).
        """
        namespace, name = observed.namespace, observed.name
        if step.status_patch:
            token.check()
            version = (body.get("metadata") or {}).get("resourceVersion")
            try:
                await self._kube.patch_status(
                    FLASHRL_JOB, namespace, name, step.status_patch, resource_version=version
                )
            except ConflictError as exc:
                logger.info("FlashRLJob %s/%s changed since it was read; computing again", namespace, name)
                raise StaleViewError(None) from exc
        if step.spec_patch is not None:
            token.check()
            await self._kube.patch(FLASHRL_JOB, namespace, name, step.spec_patch)
        quantization = observed.job.spec.rollout.quantization if observed.job else DEFAULT_QUANTIZATION
        phase = str(step.status.phase)
        self._metrics.observe_phase(observed.uid, phase, observed.created, (namespace, name, quantization))
        if step.goodput is not None:
            self._metrics.observe_goodput(namespace, name, step.goodput)
        involved = {**body, "kind": body.get("kind") or KIND}
        for event in step.events:
            log = logger.warning if event.type == "Warning" else logger.info
            log("FlashRLJob %s/%s: %s: %s", namespace, name, event.reason, event.message)
            await self._kube.create_event(involved, event.type, event.reason, event.message)

    def _refused_once(self, what: str, exc: RejectedError, consequence: str) -> None:
        """A refused optional read costs only detail: say so once per kind of read, not per job."""
        if what not in self._refused_reads:
            self._refused_reads.add(what)
            logger.warning("Cannot %s (%s); %s", what, exc, consequence)
