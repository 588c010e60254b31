"""One reconcile of one FlashRLJob: parse, render, converge the children, then write the status.

Every trigger (a new job or a spec change, the operator starting, the periodic resync, a change to a
RayJob the operator owns) ends here, so there is one path to test. It is level-based and
idempotent: it renders the full desired state (:func:`~flashrl_operator.render.render`), converges
each child on it, and writes the status only when it differs, so repeated or duplicated events
change nothing. Decisions are delegated to pure modules (``render``, ``children``,
``status_mapping``); the I/O goes through :class:`~flashrl_operator.client.kube.KubeClient`.

Requests, fewest first:

* An object under a child's name that this job does not control (no controller ownerReference with
  the job's UID) is never patched, adopted or deleted. The job then reports ``ChildConflict`` naming
  each such object, keeps none of its own children, and waits (the resync looks again). Hence no
  child is written by a bare server-side apply while it may be absent: an apply cannot be told
  "only if it does not exist", and an unforced apply onto someone else's object with no conflicting
  field would merge into it and adopt it.
* A new job (no ``observedGeneration`` yet) creates first: one ``POST`` per child, which the server
  refuses atomically (409 AlreadyExists) when the name is taken; only then is the object read, and
  it is the job's only under its controller reference. So a new job costs one request per child,
  not a read and a write. If some child is taken, the children this reconcile created are deleted
  again, each under a UID precondition (the one its create returned), so nothing else can be
  deleted; the rest are only read, to name every conflict. (Not ownership from a watch cache: to see
  someone else's object under a child's name, which carries none of the job's labels, it would have
  to watch and hold every ServiceAccount, Role, ConfigMap... of the watched namespaces, and a cache
  may lag, so a create would still need the server's 409 as the last word.)
* A known job reads each child first (they exist; creating first would cost a refused create and
  a read each): a missing child is created as above, a drifted one restored (by a forced apply: the
  operator owns those fields, and the read showed it is the job's), and an unchanged one costs
  nothing more: a resync of an unchanged job is reads only.
* Before any of that, the spec is checked against the cluster admin's policy
  (:mod:`~flashrl_operator.job.policy`); a violation is ``PolicyViolation`` with the field paths, and
  nothing is created.
* The RayJob is the exception to the forced apply once it exists: KubeRay cannot reshape a live
  RayJob, and Kueue owns ``spec.suspend`` of a queued one, so only its labels, ownership and the
  lifecycle fields that may change are merge-patched (:func:`~flashrl_operator.render.children.drift_patch`);
  other spec edits are reported (``ImmutableFieldChanged``), not applied.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from flashrl_api import KIND, FlashRLJob, FlashRLJobStatus, SpecError, parse_job
from flashrl_api.pins import default_trainer_image
from flashrl_api.spec import RolloutSpec
from flashrl_api.staging import staging_plan
from flashrl_api.status import RECOVERABLE_FAILURES, ConditionType, Reason
from flashrl_operator.client.errors import ConflictError, RejectedError, TransientError
from flashrl_operator.client.kube import KubeClient, now_rfc3339
from flashrl_operator.job import overrides
from flashrl_operator.job.attempts import Attempts, Reported, on_failure
from flashrl_operator.job.policy import AdminPolicy, policy_problems
from flashrl_operator.job.retry_policy import BACKOFF_BASE_SECONDS
from flashrl_operator.job.staging import (
    JobOutcome,
    StagingObservation,
    is_staged,
    job_outcome,
    record_patches,
    recorded,
    termination_message,
)
from flashrl_operator.job.status.conditions import find_condition
from flashrl_operator.job.status.goodput import fold_attempts, goodput, unreleased
from flashrl_operator.job.status.mapping import (
    Observation,
    decide_phase,
    desired_status,
    guard_observation,
    guard_tripped_now,
    status_events,
    status_patch,
)
from flashrl_operator.job.status.pods import PodProblem, pod_problems
from flashrl_operator.job.status.ray import PhaseDecision, is_final, should_read_cluster, should_read_pods
from flashrl_operator.render import AttemptContext, Child, attempt_ray_job_name, render
from flashrl_operator.render.children import (
    SPEC_ANNOTATION,
    drift_patch,
    immutable_changes,
    ownership_conflict,
)
from flashrl_operator.render.network import NetworkSettings
from flashrl_operator.render.staging import JOB_NAME_LABEL, STAGE_CONTAINER
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.kinds import FLASHRL_JOB, PERSISTENT_VOLUME_CLAIM, POD
from flashrl_operator.vocab.kuberay import CLUSTER_LABEL, RayClusterView, RayJobView
from flashrl_operator.vocab.metrics import OperatorMetrics, parse_time

#: ``spec.rollout.quantization`` when the stored object omits it (the CRD defaults it on admission).
DEFAULT_QUANTIZATION = RolloutSpec.model_fields["quantization"].default

logger = logging.getLogger(__name__)

#: Specs whose verl check results are remembered (a check takes about a second).
_CONFIG_CACHE_SIZE = 256

#: Phases in which the current attempt's RayJob is in KubeRay's hands: its disappearance is a failure.
RUNNING_PHASES: Final = frozenset({"Starting", "Running"})


def _waiting(attempts: Attempts, now: datetime.datetime) -> bool:
    """Whether the next attempt is still waiting out its backoff."""
    when = parse_time(attempts.next_attempt_time)
    return when is not None and now < when and not attempts.created


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("A scheduled reconcile failed: %s", task.exception())


def override_problems(job: FlashRLJob) -> list[str]:
    """What verl would refuse in the job's configuration (:mod:`flashrl_operator.job.overrides`, the
    rules ``flashrl validate`` applies), as ``path: message`` lines for the status. The model-dependent
    checks are left to the launcher: a model path names a directory inside the pods, not on the
    operator's filesystem. Where verl's config is not importable (a slim image), the unsafe-override
    rules are all there is here, and the launcher checks again before verl starts."""
    protected = overrides.protected_problems(job)
    if protected:  # The operator composes nothing in its own process: the checks below run in a child.
        return [str(p) for p in protected]
    report = overrides.override_problems(job)
    if report.note:  # Not the user's error; the launcher rechecks.
        logger.warning("verl configuration not fully checked: %s", report.note)
    return [str(p) for p in report.problems]


def with_trainer_image(job: FlashRLJob, image: str | None) -> FlashRLJob:
    """The job with the operator's default trainer image when it names none of its own (pure).

    The CRD defaults ``spec.images.trainer`` to the pinned image, so "names none" is "holds the pinned
    default"; a job naming any other image keeps it.
    """
    if not image or job.spec.images.trainer != default_trainer_image():
        return job
    images = job.spec.images.model_copy(update={"trainer": image})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"images": images})})


class Reconciler:
    """Converges FlashRLJobs; one instance per operator, living in the operator's event loop."""

    def __init__(
        self,
        kube: KubeClient,
        metrics: OperatorMetrics,
        *,
        check_overrides: bool = True,
        retry_backoff: float = BACKOFF_BASE_SECONDS,
        policy: AdminPolicy | None = None,
        network: NetworkSettings | None = None,
        default_trainer_image: str | None = None,
    ) -> None:
        self._kube = kube
        self._policy = policy or AdminPolicy()
        self._network = network or NetworkSettings()
        self._default_trainer_image = default_trainer_image
        self._retry_backoff = retry_backoff
        #: Reconciles scheduled for when a retry's backoff ends, one per job.
        self._wakeups: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._metrics = metrics
        self._check_overrides = check_overrides
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._first_seen: dict[str, datetime.datetime] = {}
        self._override_cache: dict[str, list[str]] = {}
        #: Compositions under way, by spec: concurrent reconciles of the same spec wait for one.
        self._override_pending: dict[str, asyncio.Future[list[str]]] = {}
        self._compose_limit = asyncio.Semaphore(1)
        #: Reads the API server refused (RBAC from an older chart), each logged once.
        self._refused_reads: set[str] = set()

    async def reconcile(self, namespace: str, name: str, body: Mapping[str, Any] | None = None) -> None:
        """Reconcile the job ``namespace/name`` if it still exists.

        ``body`` is the job as a watch event just delivered it (saves a read); without it the job
        is read first. Serialised per job: watch events for the job and for its RayJob may race.
        """
        lock = self._locks.setdefault((namespace, name), asyncio.Lock())
        async with lock:
            started = time.perf_counter()
            try:
                if body is None:
                    body = await self._kube.get(FLASHRL_JOB, namespace, name)
                if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                    return
                await self._reconcile(body)
            except TransientError:
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
        wakeup = self._wakeups.pop((namespace, name), None)
        if wakeup is not None:
            wakeup.cancel()
        self._metrics.forget_goodput(namespace, name)
        if uid:
            self._first_seen.pop(uid, None)
            self._metrics.forget(uid)

    async def _spec_problems(self, body: Mapping[str, Any]) -> tuple[FlashRLJob | None, list[str]]:
        try:
            job = parse_job({k: v for k, v in body.items() if k != "status"})
        except SpecError as exc:
            return None, [str(p) for p in exc.problems]
        if not self._check_overrides:
            return job, []
        # verl's checks read the whole configuration the spec renders, not only the overrides.
        key = json.dumps(job.spec.to_wire(), sort_keys=True)
        if key in self._override_cache:
            return job, self._override_cache[key]
        # One composition per distinct spec, however many reconciles ask at once (a restarted
        # operator lists every job; an experiment's variants share most of a spec), and one at a
        # time: a composition holds the GIL for about a second, and a thousand of them side by side
        # in the default executor starved the event loop until every API request timed out.
        pending = self._override_pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._compose(job))
            self._override_pending[key] = pending
            pending.add_done_callback(lambda _done: self._override_pending.pop(key, None))
        problems = await asyncio.shield(pending)
        if key not in self._override_cache:
            if len(self._override_cache) >= _CONFIG_CACHE_SIZE:
                self._override_cache.pop(next(iter(self._override_cache)))
            self._override_cache[key] = problems
        return job, problems

    async def _compose(self, job: FlashRLJob) -> list[str]:
        async with self._compose_limit:
            return await asyncio.to_thread(override_problems, job)

    async def _converge(
        self,
        child: Child,
        live: dict[str, Any] | None,
        *,
        uid: str,
        queued: bool,
        created: list[tuple[Child, str]] | None = None,
    ) -> dict[str, Any]:
        """Bring ``child`` into the cluster as rendered, from ``live`` as just read (``None``: absent, or
        not read); returns it live. What it creates is appended to ``created`` with its UID."""
        if live is None:
            made = await self._kube.create(child.body)
            if made is not None:
                logger.info("Created %s", child.describe())
                if created is not None:
                    created.append((child, str((made.get("metadata") or {}).get("uid") or "")))
                return made
            # It exists (made meanwhile, or not read): it is ours only if it names this job.
            live = await self._kube.get(child.resource, child.namespace, child.name)
            if live is None:
                raise TransientError(f"{child.describe()} conflicted and vanished; retrying") from None
            conflict = ownership_conflict(child.describe(), live, uid)
            if conflict is not None:
                raise _ConflictError((conflict,)) from None
        patch = drift_patch(child.body, live, queued=queued)
        if not patch:
            return live
        logger.info("Restoring %s (%s)", child.describe(), ", ".join(sorted(patch)))
        if child.resource == kuberay.RAY_JOB:
            return await self._kube.patch(child.resource, child.namespace, child.name, patch)
        return await self._kube.apply(child.body, force=True)

    async def _conflicts_among(self, children: tuple[Child, ...], uid: str) -> tuple[str, ...]:
        """Which of ``children`` exist and are not this job's (read each: nothing is written)."""
        found = []
        for child in children:
            live = await self._kube.get(child.resource, child.namespace, child.name)
            if live is not None and (conflict := ownership_conflict(child.describe(), live, uid)):
                found.append(conflict)
        return tuple(found)

    async def _undo(self, created: list[tuple[Child, str]]) -> None:
        """Delete what this reconcile created before it met a conflict, each only under the UID it
        was created with (never another object under the name since)."""
        for child, made_uid in reversed(created):
            try:
                await self._kube.delete(child.resource, child.namespace, child.name, uid=made_uid or None)
                logger.info("Removed %s again: another child of the job conflicts", child.describe())
            except (ConflictError, RejectedError) as exc:
                logger.warning("Cannot remove %s again: %s", child.describe(), exc)

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
        # The operator's default trainer image is the job's from here on: the policy judges it, the
        # staging Job and the Ray pods run it, the RayJob's spec snapshot records it.
        job = with_trainer_image(job, self._default_trainer_image)
        refused = tuple(str(p) for p in policy_problems(job, self._policy))
        if refused:
            obs = Observation(generation=generation, policy_problems=refused, previous=previous)
            await self._write_status(body, previous, desired_status(obs, now), uid, created)
            return

        attempts = Attempts.of(previous)
        reported = Reported.of(previous)
        final = is_final(previous)
        now_dt = parse_time(now) or datetime.datetime.now(datetime.UTC)
        desired = render(job, self._attempt_context(job, attempts, created), self._network)
        ray_job = desired.ray_job
        staging: StagingObservation | None = None
        if desired.staging_job is None:
            staging = StagingObservation()
        rejected: str | None = None
        conflicts: tuple[str, ...] = ()
        immutable: list[str] = []
        ray_live: dict[str, Any] | None = None
        deleted = False
        waiting = not final and _waiting(attempts, now_dt)
        same_generation = previous.get("observedGeneration") == generation
        if previous.get("reason") == Reason.CHILD_REJECTED and same_generation:
            # Retrying cannot help until the spec changes (a new generation).
            rejected = str(previous.get("message") or "A child object was rejected")
            ray_live = self._own(await self._kube.get(ray_job.resource, namespace, ray_job.name), uid)
        elif final:
            ray_live = self._own(await self._kube.get(ray_job.resource, namespace, ray_job.name), uid)
        else:
            fresh = previous.get("observedGeneration") is None
            # A new job creates first (one request per child; a name taken is the 409's read); a known
            # job reads first (its children exist: an unchanged resync is reads only).
            lives: list[dict[str, Any] | None] = [None] * len(desired.children)
            if not fresh:
                lives = [await self._kube.get(c.resource, c.namespace, c.name) for c in desired.children]
            conflicts = tuple(
                found
                for child, known in zip(desired.children, lives, strict=True)
                if known is not None
                and (found := ownership_conflict(child.describe(), known, uid)) is not None
            )
            made: list[tuple[Child, str]] = []
            for index, (child, known) in enumerate(
                zip(desired.children, lives if not conflicts else [], strict=False)
            ):
                if child is ray_job and staging is not None and not is_staged(staging):
                    # No GPU is requested until the sources are on the volumes. A new job still
                    # looks at the RayJob's name, so a taken one keeps nothing (as reading first would).
                    if fresh and (conflicts := await self._conflicts_among((child,), uid)):
                        await self._undo(made)
                    break
                if child is ray_job and waiting:
                    continue  # the next attempt's RayJob is created when its backoff ends
                # The attempt's RayJob existed: gone now while the job ran means someone deleted it.
                # That is a failed attempt (counted, announced), never a silent restart.
                if (
                    child is ray_job
                    and attempts.created
                    and not fresh
                    and known is None
                    and previous.get("phase") in RUNNING_PHASES
                ):
                    deleted = True
                    continue
                try:
                    if child is desired.staging_job:
                        staging = await self._staging(job, child, known, previous, uid=uid, created=made)
                        continue
                    live = await self._converge(child, known, uid=uid, queued=desired.queued, created=made)
                except RejectedError as exc:
                    rejected = (
                        f"{child.describe()} was rejected by the API server "
                        f"(HTTP {exc.status} {exc.reason}): {exc.message}"
                    )
                    logger.error("%s", rejected)
                    break
                except _ConflictError as exc:
                    # Name every conflict, and leave nothing of this job behind (as a job that read
                    # first would have created nothing).
                    later = desired.children[index + 1 :]
                    conflicts = exc.conflicts + await self._conflicts_among(later, uid)
                    await self._undo(made)
                    break
                if child is ray_job:
                    ray_live = live
            for conflict in conflicts:
                logger.warning("FlashRLJob %s/%s waits: %s", namespace, name, conflict)
        ray_view = RayJobView.of(ray_live) if ray_live is not None else None
        if ray_view is not None:
            immutable = immutable_changes(ray_view.annotation(SPEC_ANNOTATION), job.spec.to_wire())

        cluster_view = await self._ray_cluster(namespace, ray_view, previous)
        obs = Observation(
            generation=generation,
            rejected=rejected,
            conflicts=conflicts,
            immutable_changes=tuple(immutable),
            suspend_requested=job.spec.lifecycle.suspend,
            queued=desired.queued,
            ray_job_name=ray_job.name,
            ray_job=ray_view,
            ray_cluster=cluster_view,
            pod_problems=await self._pod_problems(namespace, ray_view, cluster_view),
            staging=staging,
            previous=previous,
            guard=guard_observation(job.spec.correction.guard, previous),
        )
        if not final and rejected is None and not conflicts:
            obs = await self._attempts(
                body, job, obs, attempts, reported, now_dt, created, deleted=deleted, waiting=waiting
            )
        if rejected is None and not conflicts:
            obs = await self._goodput(job, obs, created, now)
        status = desired_status(obs, now)
        await self._write_status(body, previous, status, uid, created)
        if (
            job.spec.correction.guard.action == "Suspend"
            and not job.spec.lifecycle.suspend
            and guard_tripped_now(previous, status)
        ):
            await self._suspend_for_mismatch(body)

    async def _staging(
        self,
        job: FlashRLJob,
        child: Child,
        known: dict[str, Any] | None,
        previous: Mapping[str, Any],
        *,
        uid: str,
        created: list[tuple[Child, str]] | None = None,
    ) -> StagingObservation:
        """Where the job's sources stand; runs the staging Job when they are not staged yet.

        Staged before this generation (the Staged condition holds): nothing is read. Recorded on
        every claim (an earlier job staged them): no Job. Otherwise the Job is created or converged
        (from ``known``, as read, which the caller checked is this job's own; ``None``: created first,
        as for any child), and what is created goes to ``created``; its
        success is recorded on the claims, its failure explained by its pod's termination message.
        """
        plan = tuple(staging_plan(job.spec))
        held = find_condition(previous.get("conditions") or [], ConditionType.STAGED)
        if held is not None and held.get("status") == "True":
            already = held.get("reason") == Reason.ALREADY_STAGED
            return StagingObservation(plan, already=already, outcome=JobOutcome(succeeded=not already))
        namespace = job.namespace or "default"
        claims = {}
        for claim in sorted({item.claim_name for item in plan if item.claim_name}):
            try:
                claims[claim] = await self._kube.get(PERSISTENT_VOLUME_CLAIM, namespace, claim)
            except RejectedError as exc:
                self._refused_once("read claims", exc, "sources are staged by a Job every time")
                claims[claim] = None
        if recorded(plan, claims):
            logger.info(
                "FlashRLJob %s/%s: sources already staged on %s", namespace, job.name, ", ".join(claims)
            )
            return StagingObservation(plan, already=True)
        live = await self._converge(child, known, uid=uid, queued=False, created=created)
        outcome = job_outcome(live)
        failure = ""
        if outcome is not None and outcome.failed:
            try:
                pods = await self._kube.list_objects(POD, namespace, f"{JOB_NAME_LABEL}={child.name}")
            except RejectedError as exc:
                self._refused_once("list pods", exc, "a staging failure shows the Job's reason only")
                pods = []
            failure = termination_message(pods, STAGE_CONTAINER)
        elif outcome is not None and outcome.succeeded:
            for claim, patch in record_patches(plan, job.name, now_rfc3339()).items():
                if claims.get(claim) is None:
                    continue
                try:
                    await self._kube.patch(PERSISTENT_VOLUME_CLAIM, namespace, claim, patch)
                except RejectedError as exc:
                    self._refused_once("annotate claims", exc, "the next job stages its sources again")
        return StagingObservation(
            plan, outcome=outcome, failure=failure, progress=previous.get("staging") or None
        )

    def _attempt_context(
        self, job: FlashRLJob, attempts: Attempts, created: datetime.datetime
    ) -> AttemptContext:
        """The current attempt's number, the job's start, and what is left of its deadline.

        Attempt ``k > 1`` gets the deadline left when attempt ``k - 1`` ended (stored, so every
        reconcile renders the same RayJob); the first attempt gets the whole deadline.
        """
        deadline = job.spec.lifecycle.active_deadline_seconds
        left: int | None = None
        if deadline is not None and attempts.attempt > 1:
            ends = [t for e in attempts.history if (t := parse_time(e.end_time)) is not None]
            ended = max(ends, default=None)
            used = (ended - created).total_seconds() if ended is not None else 0.0
            left = max(1, int(deadline - used))
        start = created.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return AttemptContext(attempts.attempt, start, left)

    async def _attempts(
        self,
        body: Mapping[str, Any],
        job: FlashRLJob,
        obs: Observation,
        attempts: Attempts,
        reported: Reported,
        now: datetime.datetime,
        created: datetime.datetime,
        *,
        deleted: bool,
        waiting: bool,
    ) -> Observation:
        """Apply the retry policy to the current attempt (:mod:`flashrl_operator.job.attempts`)."""
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta["name"])
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        previous = obs.previous
        if waiting:
            self._wake_at(namespace, name, attempts, now)
            message = str(previous.get("message") or f"Attempt {attempts.attempt} starts after its backoff")
            decision = PhaseDecision("Starting", Reason.RETRYING, message)
            return replace(obs, attempt_decision=decision, attempts=attempts.to_status())
        if obs.ray_job is not None:
            attempts = attempts.started(stamp, reported.checkpoint_step)
        if deleted:
            phase = previous.get("phase")
            verdict = PhaseDecision(
                "Failed",
                Reason.RAY_JOB_DELETED,
                f"RayJob {obs.ray_job_name} of attempt {attempts.attempt} was deleted while the job "
                f"was {phase}",
            )
        else:
            verdict = decide_phase(obs)
        if verdict.phase == "Succeeded":
            if attempts.current.end_time is None:
                # Closing the attempt records its last step: read what the launcher reported last
                # (the job was read before the RayJob, as for a failure below).
                fresh = await self._kube.get(FLASHRL_JOB, namespace, name)
                if fresh is not None:
                    reported = Reported.of(fresh.get("status") or {})
            return replace(obs, attempts=attempts.finished(stamp, reported, None).to_status())
        if verdict.phase == "Pending" and attempts.attempt > 1:
            # A retry's RayJob waiting for KubeRay: still the retry, not a new job.
            message = f"Attempt {attempts.attempt}: {verdict.message}"
            decision = PhaseDecision("Starting", Reason.RETRYING, message)
            return replace(obs, attempt_decision=decision, attempts=attempts.to_status())
        if verdict.phase != "Failed" or verdict.reason in RECOVERABLE_FAILURES:
            return replace(obs, attempts=attempts.to_status())
        # The job was read before the RayJob: the launcher may have reported a later step or
        # checkpoint in between. What the attempt achieved decides the retry, so read it again.
        fresh = await self._kube.get(FLASHRL_JOB, namespace, name)
        if fresh is not None:
            reported = Reported.of(fresh.get("status") or {})
        deadline = job.spec.lifecycle.active_deadline_seconds
        left = None if deadline is None else deadline - (now - created).total_seconds()
        failure = on_failure(
            attempts,
            reported,
            verdict.reason,
            verdict.message,
            job.spec.lifecycle.max_restarts,
            now,
            deadline_left_seconds=left,
            backoff_base=self._retry_backoff,
            jitter_key=job.uid or f"{namespace}/{name}",
        )
        involved = {**body, "kind": body.get("kind") or KIND}
        if failure.decision.action == "fail":
            message = failure.decision.message
            if failure.decision.reason == verdict.reason and job.spec.lifecycle.max_restarts == 0:
                message = verdict.message  # no retries configured: the failure speaks for itself
            decision = PhaseDecision("Failed", failure.decision.reason, message)
            return replace(obs, attempt_decision=decision, attempts=failure.attempts.to_status())
        # A retry: free the failed attempt's GPUs now (KubeRay would keep its cluster until the TTL),
        # announce what the failure cost, and wake up when the backoff ends.
        if obs.ray_job is not None and obs.ray_job_name:
            try:
                await self._kube.delete(kuberay.RAY_JOB, namespace, obs.ray_job_name)
            except RejectedError as exc:
                self._refused_once("delete RayJobs", exc, "a failed attempt's cluster stays until its TTL")
        logger.warning("FlashRLJob %s/%s: %s", namespace, name, failure.event_message)
        await self._kube.create_event(involved, "Warning", failure.event_reason, failure.event_message)
        self._wake_at(namespace, name, failure.attempts, now)
        decision = PhaseDecision("Starting", Reason.RETRYING, failure.event_message)
        # The failed attempt's RayJob and cluster are gone; the status speaks of the next one.
        return replace(
            obs,
            attempt_decision=decision,
            attempts=failure.attempts.to_status(),
            ray_job_name=attempt_ray_job_name(job, failure.attempts.attempt),
            ray_job=None,
            ray_cluster=None,
            pod_problems=(),
        )

    async def _goodput(
        self, job: FlashRLJob, obs: Observation, created: datetime.datetime, now: str
    ) -> Observation:
        """Fold the launcher's phases and the released clusters into the attempts; ``status.goodput``.

        An ended attempt's GPUs are released when its Ray cluster is gone: one LIST by KubeRay's label
        for each such attempt not yet seen released (none once they all are).
        """
        namespace = job.namespace or "default"
        attempts = Attempts.of(obs.attempts if obs.attempts is not None else obs.previous)
        released = []
        for entry in unreleased(attempts)[-2:]:
            selector = f"{kuberay.ORIGINATED_FROM_NAME}={attempt_ray_job_name(job, entry.attempt)}"
            try:
                clusters = await self._kube.list_objects(kuberay.RAY_CLUSTER, namespace, selector)
            except RejectedError as exc:
                self._refused_once("list RayClusters", exc, "goodput counts teardown until the next attempt")
                break
            if not clusters:
                released.append(entry.attempt)
        resources = job.spec.resources
        admitted = obs.ray_job is not None and not obs.ray_job.spec_suspend  # Kueue admitted it
        gpus = resources.nodes * resources.gpus_per_node
        folded = fold_attempts(attempts, obs.previous.get("launcherPhases"), gpus, released, now, admitted)
        stamp = created.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ledger = goodput(folded, obs.previous.get("conditions"), stamp)
        self._metrics.observe_goodput(job.namespace or "default", job.name, ledger)
        # Unchanged attempts stay as the attempt policy left them (a final job's are not rewritten).
        return replace(
            obs, attempts=folded.to_status() if folded != attempts else obs.attempts, goodput=ledger
        )

    def _wake_at(self, namespace: str, name: str, attempts: Attempts, now: datetime.datetime) -> None:
        """Reconcile the job again when its backoff ends (the resync would, later)."""
        when = parse_time(attempts.next_attempt_time)
        if when is None:
            return
        key = (namespace, name)
        old = self._wakeups.pop(key, None)
        if old is not None:
            old.cancel()
        delay = max(0.0, (when - now).total_seconds()) + 0.05
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._wakeups.pop(key, None)
            task = loop.create_task(self.reconcile(namespace, name))
            task.add_done_callback(_log_failure)

        self._wakeups[key] = loop.call_later(delay, fire)

    @staticmethod
    def _own(live: dict[str, Any] | None, uid: str) -> dict[str, Any] | None:
        """``live`` when this job controls it; someone else's object under the name is not its state."""
        if live is None or ownership_conflict("", live, uid) is not None:
            return None
        return live

    async def _suspend_for_mismatch(self, body: Mapping[str, Any]) -> None:
        """spec.correction.guard.action Suspend: set spec.lifecycle.suspend (the normal suspend path
        then deletes the Ray cluster; checkpoints stay). Done once, when the guard trips."""
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta["name"])
        patch = {"spec": {"lifecycle": {"suspend": True}}}
        await self._kube.patch(FLASHRL_JOB, namespace, name, patch)
        message = (
            "Suspended by spec.correction.guard (action Suspend): the rollout/trainer mismatch drifted; "
            "set spec.lifecycle.suspend to false to resume from the newest checkpoint"
        )
        logger.warning("FlashRLJob %s/%s: %s", namespace, name, message)
        await self._kube.create_event(
            {**body, "kind": body.get("kind") or KIND}, "Warning", Reason.MISMATCH_DRIFT, message
        )

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

    def _refused_once(self, what: str, exc: RejectedError, consequence: str) -> None:
        """A refused optional read costs only detail: say so once per kind of read, not per job."""
        if what not in self._refused_reads:
            self._refused_reads.add(what)
            logger.warning("Cannot %s (%s); %s", what, exc, consequence)

    async def _write_status(
        self,
        body: Mapping[str, Any],
        previous: Mapping[str, Any],
        desired: FlashRLJobStatus,
        uid: str,
        created: datetime.datetime,
    ) -> None:
        meta = body.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta["name"])
        patch = status_patch(previous, desired)
        if patch:
            await self._kube.patch_status(FLASHRL_JOB, namespace, name, patch)
        rollout = (body.get("spec") or {}).get("rollout") or {}
        quantization = str(rollout.get("quantization") or DEFAULT_QUANTIZATION)
        self._metrics.observe_phase(uid, str(desired.phase), created, (namespace, name, quantization))
        involved = {**body, "kind": body.get("kind") or KIND}
        for event in status_events(previous, desired):
            log = logger.warning if event.type == "Warning" else logger.info
            log("FlashRLJob %s/%s: %s: %s", namespace, name, event.reason, event.message)
            await self._kube.create_event(involved, event.type, event.reason, event.message)


class _ConflictError(Exception):
    """Objects under children's names that the job does not control (a reconcile stops and waits)."""

    def __init__(self, conflicts: tuple[str, ...]) -> None:
        self.conflicts = conflicts
        super().__init__("; ".join(conflicts))
