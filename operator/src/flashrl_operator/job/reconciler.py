"""One reconcile of one FlashRLJob: read, decide, act, write.

Every trigger (a new job or a spec change, the operator starting, the periodic resync, a change to a
RayJob the operator owns, a retry's backoff ending) ends here, so there is one path to test. It is
level-based and idempotent: it renders the full desired state (:func:`~flashrl_operator.render.render`),
converges each child on it, and writes the status only when it differs, so repeated or duplicated
events change nothing. Each reconcile

1. **reads** once: the job (from the watch event that triggered it, else a GET), its children (none
   of a new job's: they are created first, see below), and
   only what can matter now (before the first RayJob of each generation of the spec, the claims the
   job mounts and the GPU nodes, to fail at once a job that can never start; the staging claims and
   the failed staging Job's pods, the RayCluster and its starting pods, and when one waits for GPUs,
   the GPU nodes and their pods; the job's status again after a RayJob that ended, the clusters of
   ended attempts not yet seen released), each behind a pure predicate of
   :mod:`~flashrl_operator.job.step`;
2. **decides** in one pure call, :func:`~flashrl_operator.job.step.next_step`, which returns the
   whole :class:`~flashrl_operator.job.step.Step`: the children to write, the objects to delete, the
   patches, the status, its Events and the next wake-up;
3. **acts**: writes the children (:meth:`Reconciler._converge`, the one place that does), records
   staged sources on their claims, deletes a failed attempt's RayJob;
4. **writes** the status once (only the keys the operator owns, only when changed), then the job's
   spec when the step patches it (the mismatch guard's Suspend), and then posts the Events, so an
   Event never announces a status that was not written;
5. **returns** when it wants to run again (the step's wake-up, or at once after a refused write), as
   controller-runtime's ``ctrl.Result{RequeueAfter}``: the operator's one work queue
   (:mod:`flashrl_operator.run.intake`) schedules it, bounds how many reconciles run at once, runs one
   reconcile per job at a time and retries every failure. This module keeps no lock, bound or timer.

The I/O goes through :class:`~flashrl_operator.client.kube.KubeClient`. No method here decides
anything of its own: what to read next it asks of the pure predicates, everything else of ``next_step``.

Requests, fewest first:

* An object under a child's name that this job does not control (no controller ownerReference with
  the job's UID) is never patched, adopted or deleted. The job then reports ``ChildConflict`` naming
  each such object, keeps none of the children it created, and waits (the resync looks again).
  Hence no child is written by a bare server-side apply while it may be absent: an apply cannot be
  told "only if it does not exist", and an unforced apply onto someone else's object with no
  conflicting field would merge into it and adopt it. A missing child is created by a ``POST``.
* A new job (no ``observedGeneration`` yet; :func:`~flashrl_operator.job.step.creates_first`)
  creates first: one ``POST`` per child and no read of it before, which the server refuses
  atomically (409 AlreadyExists) when the name is taken. So a new job costs one request per child,
  not a read and a write (and one read of the job itself, see "Faults without side effects"). On a
  409 the children this reconcile created are deleted again, each under a UID precondition (the
  one its create returned), so nothing else can be deleted and the job keeps nothing while a name
  is taken; the job is reconciled again at once, and that reconcile, like every
  later one of the job, reads each child first: the taken name's object is then judged by its
  controller reference (the job's own, left by an earlier run of the operator, is converged; anyone
  else's is ``ChildConflict``, naming every such object). Never creating first again after a 409 is
  what keeps the job from looping through create, 409 and delete.
  (Not ownership from a watch cache: to see someone else's object under a child's name, which
  carries none of the job's labels, the operator would have to watch and hold every ServiceAccount,
  Role, ConfigMap... of the watched namespaces, and a cache may lag, so a create would still need the
  server's 409 as the last word.)
* A known job reads each child first (they exist; creating first would cost a refused create and a
  read each): a missing child is created as above, a drifted one restored (by a forced apply: the
  operator owns those fields, and the read showed it is the job's), and an unchanged one costs
  nothing more: a resync of an unchanged job is reads only.
* Before any of that, the spec is checked against the cluster admin's policy
  (:mod:`~flashrl_operator.job.policy`); a violation is ``PolicyViolation`` with the field paths, and
  nothing is read or created.
* The RayJob is the exception to the forced apply once it exists: KubeRay cannot reshape a live
  RayJob, and Kueue owns ``spec.suspend`` of a queued one, so only its labels, ownership and the
  lifecycle fields that may change are merge-patched (:func:`~flashrl_operator.render.children.drift_patch`);
  other spec edits are reported (``ImmutableFieldChanged``), not applied.
* A write the API server refuses ends the reconcile before the status is written, and the job is
  reconciled again at once: a rejection (remembered for the job's generation) is then reported as
  ``ChildRejected``; an object someone created meanwhile under a child's name is then read like any
  other.

Faults without side effects (the reads above may be old by the time of the writes: the body waited in
the intake's queue, the reads and the verl check took their time, the API server may have restarted):

* **No write from a stale view.** Before its first write a reconcile reads the job once more
  (:meth:`Reconciler._current`). A newer version than the one the step was computed from is computed
  again from that version (at most :data:`MAX_VIEWS` versions, then the turn is given back as a
  transient failure). The status is then patched with ``metadata.resourceVersion`` of exactly that
  version: the server refuses the patch (409) when anything changed the job since, and the reconcile
  reads and computes again. The Events a step announces are posted only after its status was
  written, and they are derived from the transition between that version's status and the new one,
  so a reconcile repeated from an old copy finds the transition already written and announces nothing.
* **Deletion wins.** A job that is gone, being deleted, or replaced by another of its name (another
  UID) is never the parent of a new child. Kubernetes has no precondition across objects: an
  ownerReference names the owner's UID but the server accepts a child whose owner is gone (the garbage
  collector removes it afterwards, by which time KubeRay may have started a Ray cluster for it). What
  prevents the race is therefore two checks made after every wait: the fresh read above (it also
  compares the UID and ``deletionTimestamp``), made after the reads, right before the first write,
  and a cancellation :class:`Token` that the job's ``DELETED`` watch event sets
  (:meth:`Reconciler.forget`) and that is looked at before every write (the writes of one reconcile
  follow each other without a wait: a read before each would double a new job's requests for the
  milliseconds between them). What is left is the flight of the requests after the read; a child
  created in it names the deleted UID as its controller and is collected by the garbage collector.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from flashrl_api import KIND, FlashRLJob, SpecError, parse_job
from flashrl_api.pools import gpu_pools
from flashrl_api.spec import GPU_PRODUCT_LABEL, RolloutSpec
from flashrl_operator.client.errors import ApiError, ConflictError, RejectedError, TransientError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.job import overrides
from flashrl_operator.job.attempts import Reported
from flashrl_operator.job.fair import DEFAULT_SLOTS, FairSlots
from flashrl_operator.job.fits import capacity, gpu_holders, holder_nodes
from flashrl_operator.job.memory import StatusMemory
from flashrl_operator.job.policy import AdminPolicy, policy_problems
from flashrl_operator.job.preflight import cluster_needs
from flashrl_operator.job.retry_policy import BACKOFF_BASE_SECONDS
from flashrl_operator.job.status.pods import PodProblem, pod_problems
from flashrl_operator.job.status.ray import is_final, should_read_cluster, should_read_pods
from flashrl_operator.job.step import (
    Apply,
    Observed,
    Step,
    attempt_context,
    cannot_start,
    children_to_read,
    claims_to_read,
    converging,
    creates_first,
    distrusted,
    fit_due,
    may_end_attempt,
    needs_staging_pods,
    next_step,
    owned,
    rejection,
    release_checks,
    waits_for_gpus,
    with_trainer_image,
)
from flashrl_operator.render import Child, render
from flashrl_operator.render.network import NetworkSettings
from flashrl_operator.render.staging import JOB_NAME_LABEL
from flashrl_operator.vocab import kuberay, kueue
from flashrl_operator.vocab.kinds import FLASHRL_JOB, NODE, PERSISTENT_VOLUME_CLAIM, POD
from flashrl_operator.vocab.kuberay import CLUSTER_LABEL, RayClusterView, RayJobView
from flashrl_operator.vocab.kueue import WorkloadView
from flashrl_operator.vocab.metrics import OperatorMetrics, parse_time

#: ``spec.rollout.quantization`` when the stored object omits it (the CRD defaults it on admission).
DEFAULT_QUANTIZATION = RolloutSpec.model_fields["quantization"].default

logger = logging.getLogger(__name__)

#: Specs whose verl check results are remembered (a check takes about a second).
_CONFIG_CACHE_SIZE = 256

#: How soon a reconcile whose write was refused runs again (to report or re-read what refused it).
REREAD_SECONDS: Final = 0.1

#: Versions of a job one reconcile computes its step from at most (each newer than the last) before
#: it gives its turn back as a transient failure: a job written to that often is retried later.
MAX_VIEWS: Final = 4


def override_problems(job: FlashRLJob, cancel: threading.Event | None = None) -> list[str]:
    """What verl would refuse in the job's configuration (:mod:`flashrl_operator.job.overrides`, the
    rules ``flashrl validate`` applies), as ``path: message`` lines for the status. The model-dependent
    checks are left to the launcher: a model path names a directory inside the pods, not on the
    operator's filesystem. Where verl's config is not importable (a slim image), the unsafe-override
    rules are all there is here, and the launcher checks again before verl starts. ``cancel`` set
    meanwhile kills the check's child process (``CheckCancelledError``)."""
    protected = overrides.protected_problems(job)
    if protected:  # The operator composes nothing in its own process: the checks below run in a child.
        return [str(p) for p in protected]
    report = overrides.override_problems(job, cancel=cancel)
    if report.note:  # Not the user's error; the launcher rechecks.
        logger.warning("verl configuration not fully checked: %s", report.note)
    return [str(p) for p in report.problems]


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


class _CheckUnderWay(Exception):  # noqa: N818 (a signal, not an error)
    """The job's verl check runs in the background; its end submits the job again."""


@dataclass(frozen=True)
class Halt:
    """A child write the API server refused: the rest of the step is not carried out."""

    rejected: str | None
    """Why the API server rejected the child (reported next); ``None``: an object was created meanwhile
    under its name (read next)."""


#: Asks for a reconcile of ``namespace/name`` from the body given (``None``: read it first); the
#: operator's work queue (:meth:`flashrl_operator.run.intake.Intake.submit`).
Submit = Callable[[str, str, Mapping[str, Any] | None], None]


class Reconciler:
    """Converges FlashRLJobs; one instance per operator, living in the operator's event loop.

    ``submit`` is how the end of a verl check (which runs beside the reconciles, see :meth:`_checked`)
    asks for the reconciles of the jobs that waited for it: through the work queue, like a watch event.
    """

    def __init__(
        self,
        kube: KubeClient,
        metrics: OperatorMetrics,
        submit: Submit,
        *,
        check_overrides: bool = True,
        retry_backoff: float = BACKOFF_BASE_SECONDS,
        policy: AdminPolicy | None = None,
        network: NetworkSettings | None = None,
        default_trainer_image: str | None = None,
        check_slots: int = DEFAULT_SLOTS,
        memory: StatusMemory | None = None,
        check_fit: bool = True,
    ) -> None:
        self._kube = kube
        #: Judge before anything is created whether the job can ever start (job/fits.py).
        self._check_fit = check_fit
        self._submit = submit
        self._policy = policy or AdminPolicy()
        self._network = network or NetworkSettings()
        self._default_trainer_image = default_trainer_image
        self._retry_backoff = retry_backoff
        #: A child the API server rejected, by job: (the job's generation, why), until reported.
        self._rejections: dict[tuple[str, str], tuple[int | None, str]] = {}
        self._metrics = metrics
        self._check_overrides = check_overrides
        self._first_seen: dict[str, datetime.datetime] = {}
        self._override_cache: dict[str, list[str]] = {}
        #: verl checks under way, by spec hash: the jobs to reconcile again at its end.
        self._override_pending: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
        self._check_tasks: set[asyncio.Future[list[str]]] = set()
        self._check_failed: dict[str, BaseException] = {}
        #: verl checks under way, fairly shared between namespaces (:mod:`flashrl_operator.job.fair`).
        self._checks = FairSlots(check_slots)
        #: Reads the API server refused (RBAC from an older chart), each logged once.
        self._refused_reads: set[str] = set()
        #: New jobs (by UID) that created their children first once: every later reconcile reads them.
        self._created_first: set[str] = set()
        #: The cancellation tokens of the reconciles under way, by job.
        self._tokens: dict[tuple[str, str], set[Token]] = {}
        #: The status keys the operator last wrote, by job UID (:mod:`flashrl_operator.job.memory`).
        self._memory = memory if memory is not None else StatusMemory()

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
        except _CheckUnderWay:
            # The job waits for its verl check without holding a turn: other jobs, other namespaces'
            # among them, reconcile meanwhile. The check's end submits it again.
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

    @property
    def memory(self) -> StatusMemory:
        """What the operator wrote in each job's status (the experiments count variants by it)."""
        return self._memory

    def forget(self, namespace: str, name: str, uid: str | None) -> None:
        """Drop what is remembered about a deleted job, and stop its reconciles under way before their
        next write (their tokens; one that already read a new job of the name is left alone)."""
        for token in self._tokens.get((namespace, name), ()):
            if uid is None or token.uid in (None, uid):
                token.cancelled = True
        self._rejections.pop((namespace, name), None)
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

    async def _observe(self, body: Mapping[str, Any]) -> Observed:
        """Everything :func:`~flashrl_operator.job.step.next_step` needs: the job as given and, for a
        valid spec the policy allows, what its children and their cluster say."""
        meta = body.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta["name"])
        uid = str(meta.get("uid") or f"{namespace}/{name}")
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        seen = Observed(
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
        job, problems = await self._spec_problems(body)
        if job is None or problems:
            return replace(seen, spec_problems=tuple(problems))
        # The operator's default trainer image is the job's from here on: the policy judges it, the
        # staging Job and the Ray pods run it, the RayJob's spec snapshot records it.
        job = with_trainer_image(job, self._default_trainer_image)
        desired = render(job, attempt_context(job, seen.previous, seen.created), self._network)
        # The policy judges the pods of exactly what would be applied.
        refused = tuple(str(p) for p in policy_problems(job, self._policy, desired))
        if refused:
            return replace(seen, job=job, policy_problems=refused)
        if self._memory.recall(uid) is None and is_final(seen.previous):
            # Nothing remembered (a restart): a final phase is checked against the job's RayJob once.
            ray_live = owned(await self._kube.get(kuberay.RAY_JOB, namespace, desired.ray_job.name), uid)
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
        seen = await self._read_fit(seen)
        if any(cannot_start(seen)):
            return seen  # it fails before anything is read or created
        seen = await self._read_children(seen, children_to_read(seen))
        if converging(seen.previous, seen.generation, seen.refused):
            seen = await self._read_staging(seen)
        return await self._read_ray(seen)

    async def _read_fit(self, seen: Observed) -> Observed:
        """The claims the job mounts and the GPU nodes, when :func:`~flashrl_operator.job.step.fit_due`:
        a GET per claim and one LIST of the nodes carrying ``nvidia.com/gpu.product``. A refused read
        (RBAC: the chart's namespace-scoped mode may not list nodes) judges nothing on that side."""
        assert seen.job is not None
        if not self._check_fit or not fit_due(seen.previous, seen.generation, seen.refused):
            return seen
        mounted: dict[str, Mapping[str, Any] | None] = {}
        for claim in cluster_needs(seen.job).claims:
            try:
                mounted[claim] = await self._kube.get(PERSISTENT_VOLUME_CLAIM, seen.namespace, claim)
            except RejectedError as exc:
                self._refused_once("read claims", exc, "a missing claim shows only as pods that wait")
        nodes: tuple[Mapping[str, Any], ...] | None = None
        try:
            nodes = tuple(await self._kube.list_objects(NODE, None, GPU_PRODUCT_LABEL))
        except RejectedError as exc:
            self._refused_once(
                "list nodes", exc, "a job whose GPU pods can never fit waits for its startup deadline"
            )
        return replace(seen, nodes=nodes, mounted=mounted)

    async def _read_children(self, seen: Observed, children: Sequence[Child]) -> Observed:
        """Each of ``children`` by name (``None``: missing); the others are not read."""
        live = {c.describe(): await self._kube.get(c.resource, c.namespace, c.name) for c in children}
        return replace(seen, live=live)

    async def _read_staging(self, seen: Observed) -> Observed:
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

    async def _read_ray(self, seen: Observed) -> Observed:
        """The RayJob's cluster and starting pods, the launcher's report after an attempt that may have
        ended, and the ended attempts whose clusters are gone."""
        assert seen.job is not None and seen.desired is not None
        ray_live = owned(seen.live_of(seen.desired.ray_job), seen.uid)
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

    async def _gpu_holders(self, seen: Observed, problems: tuple[PodProblem, ...]) -> str | None:
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

    async def _workload(self, seen: Observed, ray_job: RayJobView | None) -> WorkloadView | None:
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

    async def _released(self, seen: Observed) -> tuple[tuple[int, ...], tuple[Mapping[str, Any], ...]]:
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

    async def _spec_problems(self, body: Mapping[str, Any]) -> tuple[FlashRLJob | None, list[str]]:
        try:
            job = parse_job({k: v for k, v in body.items() if k != "status"})
        except SpecError as exc:
            return None, [str(p) for p in exc.problems]
        if not self._check_overrides:
            return job, []
        return job, self._checked(job, body)

    def _checked(self, job: FlashRLJob, body: Mapping[str, Any]) -> list[str]:
        """verl's verdict on the job's configuration, checked once per distinct spec; raises
        :class:`_CheckUnderWay` while the check runs.

        Keyed by the content hash of the whole spec (verl's checks read every field the spec renders,
        not only the overrides): a spec checked before is not checked again, however many reconciles
        and resyncs ask, and asks during the check join the one under way (a restarted operator lists
        every job; an experiment's variants share most of a spec). The check runs in the background,
        in a child process, bounded and fair between namespaces
        (:class:`~flashrl_operator.job.fair.FairSlots`); its end submits every job that asked to the work
        queue, with the body it last asked with (as a watch event would hand it: no read).
        """
        wire = json.dumps(job.spec.to_wire(), sort_keys=True, separators=(",", ":"))
        key = hashlib.sha256(wire.encode()).hexdigest()
        if key in self._override_cache:
            return self._override_cache[key]
        failed = self._check_failed.pop(key, None)
        if failed is not None:
            raise failed
        waiting = self._override_pending.get(key)
        if waiting is None:
            waiting = self._override_pending[key] = {}
            task = asyncio.ensure_future(self._compose(job, job.namespace or ""))
            self._check_tasks.add(task)
            task.add_done_callback(lambda done: self._check_done(key, done))
        waiting[(job.namespace or "", job.name)] = body
        raise _CheckUnderWay

    def _check_done(self, key: str, task: asyncio.Future[list[str]]) -> None:
        """Remember the verdict and submit the jobs that wait for it."""
        self._check_tasks.discard(task)
        waiting = self._override_pending.pop(key, {})
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            # Raised once to the next reconcile of each waiting job, which fails and is retried with
            # the intake's backoff (a check that cannot run is the operator's failure, not the spec's).
            self._check_failed[key] = error
        else:
            if len(self._override_cache) >= _CONFIG_CACHE_SIZE:
                self._override_cache.pop(next(iter(self._override_cache)))
            self._override_cache[key] = task.result()
        for (namespace, name), body in waiting.items():
            self._submit(namespace, name, body)

    async def _compose(self, job: FlashRLJob, namespace: str) -> list[str]:
        async with self._checks.slot(namespace):
            started = time.perf_counter()
            cancel = threading.Event()
            try:
                problems = await asyncio.to_thread(override_problems, job, cancel)
            except asyncio.CancelledError:
                cancel.set()  # the thread's child process is killed within a poll
                raise
            logger.debug(
                "verl checks of FlashRLJob %s/%s: %.1f s", namespace, job.name, time.perf_counter() - started
            )
            return problems

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

    async def _act(self, observed: Observed, step: Step, token: Token) -> None:
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

    async def _write(self, body: Mapping[str, Any], observed: Observed, step: Step, token: Token) -> None:
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
        rollout = (body.get("spec") or {}).get("rollout") or {}
        quantization = str(rollout.get("quantization") or DEFAULT_QUANTIZATION)
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
