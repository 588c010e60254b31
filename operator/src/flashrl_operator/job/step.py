"""The whole outcome of one FlashRLJob reconcile, from what it read: :func:`next_step` (pure).

Each rule has one named function here, over the pure modules that hold the details; how they fit
(what is read, which child is written and how, staging, retries, goodput, the guard, the status) is in
docs/architecture.md, "The decision". Every case is plain data in and a whole Step out
(``tests/unit/job/test_step.py``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from flashrl_api import FlashRLJob, FlashRLJobStatus
from flashrl_api.pins import default_trainer_image
from flashrl_api.pools import gpu_pools
from flashrl_api.precision import BF16_KV_CACHE, BF16_QUANTIZATION, fallback_spec, spec_uses_fp8
from flashrl_api.staging import staging_plan
from flashrl_api.status import MAX_ATTEMPTS, RECOVERABLE_FAILURES, ConditionType, Reason, RolloutFallback
from flashrl_api.times import rfc3339
from flashrl_operator.job.attempts import Attempt, Attempts, Reported, on_failure
from flashrl_operator.job.fits import (
    capacity,
    claims_message,
    missing_claims,
    missing_priority_classes,
    priority_classes_message,
)
from flashrl_operator.job.goodput import fold_attempts, goodput, unreleased, within_life
from flashrl_operator.job.preflight import cluster_needs
from flashrl_operator.job.retry_policy import BACKOFF_BASE_SECONDS
from flashrl_operator.job.staging import record_patches, recorded
from flashrl_operator.job.status.conditions import find_condition
from flashrl_operator.job.status.mapping import (
    Announcement,
    Decided,
    Observation,
    decide_phase,
    fallback_message,
    guard_observation,
    guard_tripped_now,
    status_events,
    status_of,
    status_patch,
)
from flashrl_operator.job.status.pods import PodProblem
from flashrl_operator.job.status.ray import PhaseDecision, is_final
from flashrl_operator.job.status.staging import (
    JobOutcome,
    StagingObservation,
    is_staged,
    job_outcome,
    termination_message,
)
from flashrl_operator.render import (
    AttemptContext,
    Child,
    DesiredState,
    attempt_ray_job_name,
    history_config_map,
)
from flashrl_operator.render.children import (
    SPEC_ANNOTATION,
    drift_patch,
    immutable_changes,
    ownership_conflict,
)
from flashrl_operator.render.staging import STAGE_CONTAINER
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.kinds import PERSISTENT_VOLUME_CLAIM
from flashrl_operator.vocab.kuberay import DeploymentStatus, RayClusterView, RayJobView
from flashrl_operator.vocab.kueue import WorkloadView
from flashrl_operator.vocab.metrics import parse_time
from flashrl_operator.vocab.resource import Resource

#: Phases in which the current attempt's RayJob is in KubeRay's hands: its disappearance is a failure.
RUNNING_PHASES: Final = frozenset({"Starting", "Running"})

#: RayJob deployment states in which the attempt has ended (its outcome is KubeRay's to report).
ENDED_DEPLOYMENTS: Final = frozenset(
    {DeploymentStatus.COMPLETE, DeploymentStatus.FAILED, DeploymentStatus.VALIDATION_FAILED}
)

#: A wake-up lands this long after the backoff ends, so the reconcile finds it over.
WAKE_MARGIN_SECONDS: Final = 0.05

#: How soon a queued job is looked at again while its Kueue workload does not say why it waits.
QUEUED_RECHECK_SECONDS: Final = 5.0

#: The Event the mismatch guard's ``Suspend`` action posts.
GUARD_SUSPEND_MESSAGE: Final = (
    "Suspended by spec.correction.guard (action Suspend): the rollout/trainer mismatch drifted; "
    "set spec.lifecycle.suspend to false to resume from the newest checkpoint"
)


@dataclass(frozen=True)
class Reads:
    """Everything one reconcile read about one job, and what it was read with."""

    namespace: str
    name: str
    uid: str
    """The job's UID: only objects whose controller ownerReference carries it are the job's."""
    now: datetime.datetime
    created: datetime.datetime
    """``metadata.creationTimestamp`` (when the operator first saw it, if absent)."""
    generation: int | None = None
    previous: Mapping[str, Any] = field(default_factory=dict)
    """The status the reconcile decides from: the launcher's keys as read, the operator's own keys as
    the operator last wrote them (:class:`~flashrl_operator.job.memory.StatusMemory`)."""
    on_server: Mapping[str, Any] | None = None
    """The status as read, when someone else wrote the operator's keys since (``None``: ``previous``):
    what the status patch is computed against, so their values are written over."""
    spec_problems: tuple[str, ...] = ()
    """An invalid spec, or what verl would refuse in it (nothing else is read then)."""
    policy_problems: tuple[str, ...] = ()
    """What the cluster admin's policy refuses (nothing else is read then)."""
    job: FlashRLJob | None = None
    """The parsed job with the operator's default trainer image; ``None`` when the spec is invalid."""
    desired: DesiredState | None = None
    """Every child as rendered for the current attempt (``None`` when nothing is created)."""
    live: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    """The children read, by :meth:`Child.describe`; ``None``: it does not exist. A child that was not
    read (only the RayJob is, for a final or rejected job) has no key."""
    refused: str | None = None
    """The API server rejected a child of this generation in the previous reconcile (which, why)."""
    claims: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    """The staging claims read (:func:`claims_to_read`); ``None``: missing or not readable."""
    staging_pods: tuple[Mapping[str, Any], ...] = ()
    """The failed staging Job's pods (:func:`needs_staging_pods`)."""
    ray_cluster: RayClusterView | None = None
    pod_problems: tuple[PodProblem, ...] = ()
    reported: Reported | None = None
    """What the launcher reported, read again after the RayJob (:func:`may_end_attempt`); ``None``:
    the status as read is new enough."""
    released: tuple[int, ...] = ()
    """Ended attempts whose Ray cluster is gone (:func:`release_checks`)."""
    holding: tuple[Mapping[str, Any], ...] = ()
    """Ended attempts' RayClusters whose worker groups are not suspended (:func:`release_checks`)."""
    workload: WorkloadView | None = None
    """The Kueue Workload of the queued RayJob, while Kueue has not admitted it."""
    retry_backoff: float = BACKOFF_BASE_SECONDS
    new: bool = False
    """A new job (:func:`creates_first`): only :func:`children_to_read` were read, and each child not
    read is created first, with no read before (a taken name is the server's 409)."""
    history: HistoryRead | None = None
    """The history ConfigMap and the reported status folded into it (``None``: nothing to fold now)."""
    history_wait: float | None = None
    """Seconds until the history may be folded again, when the status reports something not folded."""
    nodes: tuple[Mapping[str, Any], ...] | None = None
    """The GPU nodes, read when :func:`fit_due` (``None``: not read, or not readable)."""
    mounted: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    """The claims the job mounts, read when :func:`fit_due` (``None``: missing; a claim whose read was
    refused has no key)."""
    priority_classes: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    """The PriorityClasses the job's pods name, read when :func:`fit_due` (``None``: missing; a class
    whose read was refused has no key)."""
    gpu_holders: str | None = None
    """Whose pods hold the GPUs the job's unschedulable pods wait for (:func:`waits_for_gpus`)."""

    @property
    def server_status(self) -> Mapping[str, Any]:
        """The status as the server holds it (what a patch changes)."""
        return self.previous if self.on_server is None else self.on_server

    def live_of(self, child: Child) -> Mapping[str, Any] | None:
        """``child`` as read (``None`` when missing or not read)."""
        return self.live.get(child.describe())


@dataclass(frozen=True)
class HistoryRead:
    """The ``<job>-metrics`` ConfigMap as read, and its data with the reported status folded in."""

    live: Mapping[str, Any] | None
    data: Mapping[str, str] | None
    """``None``: the object under the name is not the job's (it is never written)."""


ApplyMode = Literal["create", "restore", "merge"]


@dataclass(frozen=True)
class Apply:
    """One child to write: ``create`` a missing one (a ``POST``, which the server refuses with 409 when
    the name is taken), ``restore`` a drifted one (a forced apply: the operator owns those fields), or
    ``merge`` ``patch`` into a drifted RayJob (KubeRay cannot reshape a live one; Kueue owns a queued
    one's ``spec.suspend``)."""

    child: Child
    mode: ApplyMode
    patch: Mapping[str, Any] = field(default_factory=dict)
    """What drifted (the merge patch that restores it); empty for ``create``."""
    version: str | None = None
    """The ``resourceVersion`` of the object read as this job's (``restore`` and ``merge``): the write
    carries it as a precondition, so ownership is proved at the write, not remembered from the read
    (an object deleted and re-created under the name since, or changed, makes the write a 409)."""
    first: bool = False
    """A ``create`` of a child that was not read (a new job, :attr:`Reads.new`): a 409 is the only
    sign that its name is taken, and then the children this reconcile created first are deleted
    again (each under the UID its create returned) and the next reconcile reads them all."""


@dataclass(frozen=True)
class Ref:
    """An object to delete."""

    resource: Resource
    namespace: str
    name: str
    uid: str | None = None
    """The UID it was read with: the delete's precondition (another object under the name since stays)."""


@dataclass(frozen=True)
class Patch:
    """A merge patch to send to one object."""

    resource: Resource
    namespace: str
    name: str
    body: Mapping[str, Any]


@dataclass(frozen=True)
class Step:
    """The whole outcome of one reconcile, in the order the reconciler carries it out."""

    status: FlashRLJobStatus
    """The operator-owned status."""
    status_patch: Mapping[str, Any] = field(default_factory=dict)
    """The merge patch from the status as read; empty: nothing to write."""
    events: tuple[Announcement, ...] = ()
    """Posted once the status is written, in this order."""
    apply: tuple[Apply, ...] = ()
    """Children to write, in render order."""
    claim_patches: tuple[Patch, ...] = ()
    """Records of staged sources on their claims."""
    delete: tuple[Ref, ...] = ()
    """The failed attempt's RayJob on a retry (its GPUs are freed now, not at KubeRay's TTL)."""
    suspend_workers: tuple[Patch, ...] = ()
    """A queued job's ended Ray clusters whose GPU workers still run: their worker groups suspended
    (:func:`suspend_worker_groups`), as KubeRay's deletion rules do for a job without a queue."""
    spec_patch: Mapping[str, Any] | None = None
    """A merge patch to the job's spec (the mismatch guard's Suspend), sent after the status: the
    reconcile its change triggers gets the job from the watch event, which must already hold the
    status that decided it, or the guard's trip would be announced twice."""
    wake_after: float | None = None
    """Reconcile again after this many seconds (a retry's backoff); ``None``: events and resync only."""
    goodput: Mapping[str, Any] | None = None
    """``status.goodput`` as computed now, for the metrics (``None``: not computed)."""


def with_trainer_image(job: FlashRLJob, image: str | None) -> FlashRLJob:
    """The job with the operator's default trainer image when it names none of its own.

    The CRD defaults ``spec.images.trainer`` to the pinned image, so "names none" is "holds the pinned
    default"; a job naming any other image keeps it. A vLLM job's pinned default is the vLLM trainer image
    (:class:`flashrl_api.spec.FlashRLJobSpec`), so the operator's default, an SGLang image, is not for it.
    """
    if not image or job.spec.images.trainer != default_trainer_image():
        return job
    images = job.spec.images.model_copy(update={"trainer": image})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"images": images})})


def with_rollout_precision(job: FlashRLJob, previous: Mapping[str, Any]) -> FlashRLJob:
    """The job as its current attempt runs it: after the guard's FallbackToBF16 (``status.rolloutFallback``)
    with BF16 rollout weights and KV cache and a guard that only alerts (:func:`flashrl_api.precision.
    fallback_spec`). Everything is rendered from it (the spec ConfigMap the launcher reads, the verl
    overrides, the RayJob and its spec snapshot), so the launcher recomputes the same overrides."""
    if not isinstance(previous.get("rolloutFallback"), Mapping):
        return job
    return job.model_copy(update={"spec": fallback_spec(job.spec)})


def fallbacks(previous: Mapping[str, Any]) -> int:
    """Attempts the guard's FallbackToBF16 ended (0 or 1): they are not counted against maxRestarts."""
    return 1 if isinstance(previous.get("rolloutFallback"), Mapping) else 0


def attempt_context(
    job: FlashRLJob, previous: Mapping[str, Any], created: datetime.datetime
) -> AttemptContext:
    """The current attempt's number, the job's start, and what is left of its deadline (to render).

    Attempt ``k > 1`` gets the deadline left when attempt ``k - 1`` ended (stored, so every
    reconcile renders the same RayJob); the first attempt gets the whole deadline.
    """
    attempts = Attempts.of(previous)
    deadline = job.spec.lifecycle.active_deadline_seconds
    left: int | None = None
    if deadline is not None and attempts.attempt > 1:
        ends = [t for e in attempts.history if (t := parse_time(e.end_time)) is not None]
        ended = max(ends, default=None)
        used = (ended - created).total_seconds() if ended is not None else 0.0
        left = max(1, int(deadline - used))
    return AttemptContext(attempts.attempt, rfc3339(created), left)


# What is read.


#: The keys a final phase is: dropped together when an observation contradicts it.
FINAL_KEYS: Final = ("phase", "reason", "message", "completionTime")


def distrusted(previous: Mapping[str, Any], ray_job: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``previous`` without a ``Succeeded`` the job's own RayJob contradicts (pure).

    For a status the operator has no memory of writing (it restarted): ``Succeeded`` comes only from the
    RayJob's ``jobStatus: SUCCEEDED``, so while the job's RayJob exists and says anything else the
    phase was written by someone else, and the job is judged again from what is observed. A missing
    RayJob contradicts nothing (a finished job's may be deleted), so the phase stands then.
    """
    if previous.get("phase") != "Succeeded" or ray_job is None:
        return previous
    if RayJobView.of(ray_job).job_status == kuberay.JobStatus.SUCCEEDED:
        return previous
    return {k: v for k, v in previous.items() if k not in FINAL_KEYS}


def rejection(previous: Mapping[str, Any], generation: int | None, refused: str | None) -> str | None:
    """Why a child of this generation was rejected, if one was: retrying cannot help until the spec
    changes (a new generation), so a ``ChildRejected`` status stands for its generation."""
    if refused:
        return refused
    if previous.get("reason") == Reason.CHILD_REJECTED and previous.get("observedGeneration") == generation:
        return str(previous.get("message") or "A child object was rejected")
    return None


def converging(previous: Mapping[str, Any], generation: int | None, refused: str | None) -> bool:
    """Whether the children are read and converged; otherwise (a final job, a rejected child) only the
    RayJob is read, for its status, and nothing is restored: a cleaned-up RayJob of a finished job does
    not start training again."""
    return not is_final(previous) and rejection(previous, generation, refused) is None


def creates_first(
    previous: Mapping[str, Any], generation: int | None, refused: str | None, *, tried: bool
) -> bool:
    """Whether the reconcile creates the children first instead of reading them: a new job (no
    ``observedGeneration`` yet) whose children are converged, and only once (``tried``: a reconcile of
    it created first already). Every later reconcile reads: if the first stopped at a 409, the object
    under that name is then read and judged like any other, not created against again and again."""
    fresh = previous.get("observedGeneration") is None
    return fresh and not tried and converging(previous, generation, refused)


def children_to_read(o: Reads) -> tuple[Child, ...]:
    """The children read before :func:`next_step`: all of them while they are converged; none of a new
    job's (:attr:`Reads.new`: each is created first) but the RayJob when a staging Job comes
    first (the RayJob is not created before the sources are staged, so its name is looked at now);
    only the RayJob of a final or rejected job."""
    assert o.desired is not None
    ray_job = o.desired.ray_job
    if not converging(o.previous, o.generation, o.refused):
        return (ray_job,)
    if o.new:
        return (ray_job,) if o.desired.staging_job is not None else ()
    return tuple(o.desired.children)


#: Phases in which a job has not created its RayJob yet (``None``: a new job).
BEFORE_RAY_JOB: Final = frozenset({None, "Pending", "Staging"})


def fit_due(previous: Mapping[str, Any], generation: int | None, refused: str | None) -> bool:
    """Whether the reconcile judges if the job can ever start (:mod:`~flashrl_operator.job.fits`): before
    its first RayJob, for each generation of its spec (a new job, an edit), so a job that never fits
    fails before anything is created. One LIST of the GPU nodes, a GET per claim and one per
    PriorityClass the pods name; none afterwards."""
    return (
        converging(previous, generation, refused)
        and previous.get("phase") in BEFORE_RAY_JOB
        and previous.get("observedGeneration") != generation
        and not Attempts.of(previous).created
    )


@dataclass(frozen=True)
class CannotStart:
    """Why a job can never start, from what :func:`fit_due` read (each ``None``: not that)."""

    missing_claims: str | None = None
    """The ``ClaimNotFound`` message."""
    missing_priority_classes: str | None = None
    """The ``PriorityClassNotFound`` message."""
    never_fits: str | None = None
    """The ``NeverFits`` message."""

    def __bool__(self) -> bool:
        return any((self.missing_claims, self.missing_priority_classes, self.never_fits))


def cannot_start(o: Reads) -> CannotStart:
    """The ``ClaimNotFound``, ``PriorityClassNotFound`` and ``NeverFits`` messages from what
    :func:`fit_due` read."""
    assert o.job is not None
    needs = cluster_needs(o.job)
    return CannotStart(
        claims_message(missing_claims(needs.claims, o.mounted, o.namespace)),
        priority_classes_message(missing_priority_classes(needs.priority_classes, o.priority_classes)),
        capacity(gpu_pools(o.job.spec), o.nodes).message() if o.nodes is not None else None,
    )


#: What the scheduler says of a pod that no node has the free GPUs for.
INSUFFICIENT_GPUS: Final = "Insufficient nvidia.com/gpu"


def waits_for_gpus(problems: tuple[PodProblem, ...]) -> bool:
    """Whether a pod of the starting cluster waits for GPUs (the scheduler found none free): then the
    GPU nodes and their pods are read to name whose pods hold them (``WaitingForGPUs``)."""
    return any(p.reason == Reason.POD_UNSCHEDULABLE and INSUFFICIENT_GPUS in p.detail for p in problems)


def _staged_held(previous: Mapping[str, Any]) -> Mapping[str, Any] | None:
    held = find_condition(previous.get("conditions") or [], ConditionType.STAGED)
    return held if held is not None and held.get("status") == "True" else None


def claims_to_read(job: FlashRLJob, desired: DesiredState, previous: Mapping[str, Any]) -> tuple[str, ...]:
    """The claims whose staging records decide whether the staging Job runs: none when there is
    nothing to stage or the ``Staged`` condition already holds."""
    if desired.staging_job is None or _staged_held(previous) is not None:
        return ()
    return tuple(sorted({item.claim_name for item in staging_plan(job.spec) if item.claim_name}))


def needs_staging_pods(previous: Mapping[str, Any], live_job: Mapping[str, Any] | None) -> bool:
    """Whether the staging Job's pods are worth a LIST: it failed, and the stage command's
    termination message says why."""
    outcome = job_outcome(live_job)
    return _staged_held(previous) is None and outcome is not None and outcome.failed


def may_end_attempt(previous: Mapping[str, Any], ray_job: Mapping[str, Any] | None) -> bool:
    """Whether the current attempt may end now (its RayJob finished, or vanished while running): what
    it achieved decides the retry, and the launcher may have reported a later step or checkpoint since
    the job was read, so the job's status is read again after the RayJob."""
    if is_final(previous):
        return False
    if ray_job is None:
        return Attempts.of(previous).created and previous.get("phase") in RUNNING_PHASES
    return RayJobView.of(ray_job).deployment in ENDED_DEPLOYMENTS


def release_checks(job: FlashRLJob, previous: Mapping[str, Any]) -> tuple[tuple[int, str], ...]:
    """The ended attempts (the newest two) whose Ray cluster has not been seen gone, each with the
    RayJob it originated from: one LIST by KubeRay's label each, none once they all are released."""
    return tuple(
        (e.attempt, attempt_ray_job_name(job, e.attempt)) for e in unreleased(Attempts.of(previous))[-2:]
    )


# Which child is written and how.


def controlled(live: Mapping[str, Any] | None, uid: str) -> Mapping[str, Any] | None:
    """``live`` when this job controls it; someone else's object under the name is not its state."""
    if live is None or ownership_conflict("", live, uid) is not None:
        return None
    return live


def _merged(live: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``live`` after the JSON merge patch ``patch`` (RFC 7386)."""
    out = dict(live)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            base = out.get(key)
            out[key] = _merged(base if isinstance(base, Mapping) else {}, value)
        else:
            out[key] = value
    return out


def converge(
    child: Child, live: Mapping[str, Any] | None, *, queued: bool, first: bool = False
) -> Apply | None:
    """How to bring ``child`` from ``live`` (as read, this job's) to its rendered state; ``None``: it is.
    ``first``: ``child`` was not read (a new job's), and is created first."""
    if live is None:
        return Apply(child, "create", first=first)
    patch = drift_patch(child.body, live, queued=queued)
    if not patch:
        return None
    version = str((live.get("metadata") or {}).get("resourceVersion") or "") or None
    return Apply(child, "merge" if child.resource == kuberay.RAY_JOB else "restore", patch, version)


def _after(child: Child, live: Mapping[str, Any] | None, action: Apply | None) -> Mapping[str, Any]:
    """The object as ``action`` leaves it: a created one as rendered, a drifted one as patched."""
    if live is None:
        return child.body
    if action is None:
        return live
    return _merged(live, action.patch)


def staging_step(
    o: Reads, child: Child, live: Mapping[str, Any] | None
) -> tuple[StagingObservation, tuple[Apply, ...], tuple[Patch, ...]]:
    """Where the job's sources stand, the staging Job to write, and the claims to record.

    Staged before (the ``Staged`` condition holds): nothing. Recorded on every claim (an earlier job
    staged them): no Job. Otherwise the Job runs; its success is recorded on the claims, its failure
    explained by its pod's termination message.
    """
    assert o.job is not None
    plan = tuple(staging_plan(o.job.spec))
    held = _staged_held(o.previous)
    if held is not None:
        already = held.get("reason") == Reason.ALREADY_STAGED
        return StagingObservation(plan, already=already, outcome=JobOutcome(succeeded=not already)), (), ()
    if recorded(plan, o.claims):
        return StagingObservation(plan, already=True), (), ()
    action = converge(child, live, queued=False, first=_unread(o, child))
    outcome = job_outcome(_after(child, live, action))
    failure = termination_message(o.staging_pods, STAGE_CONTAINER) if outcome and outcome.failed else ""
    patches: tuple[Patch, ...] = ()
    if outcome is not None and outcome.succeeded:
        patches = tuple(
            Patch(PERSISTENT_VOLUME_CLAIM, o.namespace, claim, body)
            for claim, body in record_patches(plan, o.job.name, rfc3339(o.now)).items()
            if o.claims.get(claim) is not None
        )
    progress = o.previous.get("staging") or None
    observation = StagingObservation(plan, outcome=outcome, failure=failure, progress=progress)
    return observation, (action,) if action is not None else (), patches


def _unread(o: Reads, child: Child) -> bool:
    """A new job's child that was not read: created first."""
    return o.new and child.describe() not in o.live


@dataclass(frozen=True)
class ChildPlan:
    """What :func:`child_plan` decided about the children."""

    apply: tuple[Apply, ...] = ()
    claim_patches: tuple[Patch, ...] = ()
    conflicts: tuple[str, ...] = ()
    """Objects under the children's names that the job does not control (nothing is written)."""
    staging: StagingObservation | None = None
    ray_job: Mapping[str, Any] | None = None
    """The RayJob as this step leaves it (``None``: absent, or not written yet)."""
    deleted: bool = False
    """The attempt's RayJob existed and is gone while the job ran: someone deleted it."""


def child_plan(o: Reads, attempts: Attempts, *, waiting: bool) -> ChildPlan:
    """Which children to write, in render order, and what that leaves.

    An object under a child's name that this job does not control is never patched, adopted or
    deleted: the job then creates nothing and waits. A new job's children that were not read are
    created first (:attr:`Apply.first`): the server's 409 says whether a name is taken. No GPU is
    requested until the sources are staged; the next attempt's RayJob is created when its backoff
    ends; the attempt's RayJob gone while the job ran is a failed attempt (counted, announced), never
    a silent restart.
    """
    desired = o.desired
    assert desired is not None
    staging = StagingObservation() if desired.staging_job is None else None
    conflicts = tuple(
        found
        for child in desired.children
        if (known := o.live_of(child)) is not None
        and (found := ownership_conflict(child.describe(), known, o.uid)) is not None
    )
    if conflicts:
        return ChildPlan(conflicts=conflicts, staging=staging)
    fresh = o.previous.get("observedGeneration") is None
    applies: list[Apply] = []
    patches: tuple[Patch, ...] = ()
    ray_job: Mapping[str, Any] | None = None
    deleted = False
    for child in desired.children:
        live = o.live_of(child)
        if child is desired.staging_job:
            staging, staging_apply, patches = staging_step(o, child, live)
            applies.extend(staging_apply)
            continue
        if child is desired.ray_job:
            if staging is not None and not is_staged(staging):
                break
            if waiting:
                continue
            if attempts.created and not fresh and live is None and o.previous.get("phase") in RUNNING_PHASES:
                deleted = True
                continue
        action = converge(child, live, queued=desired.queued, first=_unread(o, child))
        if action is not None:
            applies.append(action)
        if child is desired.ray_job:
            ray_job = _after(child, live, action)
    return ChildPlan(tuple(applies), patches, (), staging, ray_job, deleted)


def history_step(o: Reads) -> tuple[tuple[Apply, ...], tuple[Announcement, ...]]:
    """The history ConfigMap to write, under the rules of every child; someone else's object under its
    name is announced (for each new report) and left alone, and does not stop the job: the history is
    the one child the job does not need to run."""
    if o.job is None or o.history is None:
        return (), ()
    child = Child.of(history_config_map(o.job, o.history.data or {}))
    live = o.history.live
    if o.history.data is None:
        why = ownership_conflict(child.describe(), live, o.uid) if live is not None else None
        if why is None:
            return (), ()
        return (), (
            Announcement("Warning", Reason.CHILD_CONFLICT, f"{why}; the metrics history is not recorded"),
        )
    action = converge(child, live, queued=False)
    return ((action,) if action is not None else ()), ()


# Retries.


def backoff_pending(attempts: Attempts, now: datetime.datetime) -> bool:
    """Whether the next attempt is still waiting out its backoff."""
    when = parse_time(attempts.next_attempt_time)
    return when is not None and now < when and not attempts.created


@dataclass(frozen=True)
class AttemptOutcome:
    """What the attempt rules made of the verdict."""

    decided: Decided
    """The phase that stands (a retry is ``Starting``/``Retrying``) and the attempt keys; after a
    retry, the next attempt's RayJob (not created yet). Handed forward to the status."""
    delete: tuple[Ref, ...] = ()
    events: tuple[Announcement, ...] = ()
    wake_at: str | None = None
    """When the backoff ends (``None``: no wake-up)."""


def _retrying(message: str) -> PhaseDecision:
    return PhaseDecision("Starting", Reason.RETRYING, message)


def training_verdict(verdict: PhaseDecision, reported: Reported, total_steps: int) -> PhaseDecision:
    """Succeeded only when training reached its last step (:meth:`Reported.stopped_early`); otherwise
    ``Failed``/``StoppedEarly``, whatever KubeRay says. Like the launcher's exit 70, it is not
    retryable (the launcher failure table): the same spec and checkpoint would stop the same way."""
    why = reported.stopped_early(total_steps)
    if why is None:
        return verdict
    return PhaseDecision("Failed", Reason.STOPPED_EARLY, f"KubeRay reports SUCCEEDED but {why}")


def attempt_outcome(
    o: Reads,
    obs: Observation,
    verdict: PhaseDecision,
    attempts: Attempts,
    *,
    deleted: bool,
    waiting: bool,
) -> AttemptOutcome:
    """Apply the retry policy to the current attempt (:mod:`flashrl_operator.job.attempts`).

    While the backoff runs the job is a retry that starts later. An attempt whose RayJob exists has
    started; one that succeeded is closed with its last step (a success short of the last step is
    ``StoppedEarly``, :func:`training_verdict`); a non-recoverable failure is judged by
    the retry policy: a final failure, or a retry that frees the failed attempt's Ray cluster now,
    announces what the failure cost and wakes up when the backoff ends.
    """
    assert o.job is not None
    job, previous, now = o.job, obs.previous, rfc3339(o.now)
    if waiting:
        message = str(previous.get("message") or f"Attempt {attempts.attempt} starts after its backoff")
        return AttemptOutcome(
            Decided(_retrying(message), attempts.to_status()), wake_at=attempts.next_attempt_time
        )
    if obs.ray_job is not None:
        attempts = attempts.started(now, Reported.of(previous).checkpoint_step)
    if deleted:
        verdict = PhaseDecision(
            "Failed",
            Reason.RAY_JOB_DELETED,
            f"RayJob {obs.ray_job_name} of attempt {attempts.attempt} was deleted while the job "
            f"was {previous.get('phase')}",
        )
    reported = o.reported or Reported.of(previous)
    if verdict.phase == "Succeeded":
        verdict = training_verdict(verdict, reported, job.spec.training.total_steps)
    if verdict.phase == "Succeeded":
        return AttemptOutcome(Decided(verdict, attempts.finished(now, reported, None).to_status()))
    if verdict.phase == "Pending" and attempts.attempt > 1:
        # A retry's RayJob waiting for KubeRay: still the retry, not a new job.
        decision = _retrying(f"Attempt {attempts.attempt}: {verdict.message}")
        return AttemptOutcome(Decided(decision, attempts.to_status()))
    if verdict.phase != "Failed" or verdict.reason in RECOVERABLE_FAILURES:
        return AttemptOutcome(Decided(verdict, attempts.to_status()))
    deadline = job.spec.lifecycle.active_deadline_seconds
    left = None if deadline is None else deadline - (o.now - o.created).total_seconds()
    failure = on_failure(
        attempts,
        reported,
        verdict.reason,
        verdict.message,
        # The guard's FallbackToBF16 ended one attempt without a failure: it spends no retry.
        job.spec.lifecycle.max_restarts + fallbacks(previous),
        o.now,
        deadline_left_seconds=left,
        backoff_base=o.retry_backoff,
        jitter_key=job.uid or f"{o.namespace}/{o.name}",
    )
    if failure.decision.action == "fail":
        message = failure.decision.message
        if failure.decision.reason == verdict.reason and job.spec.lifecycle.max_restarts == 0:
            message = verdict.message  # no retries configured: the failure speaks for itself
        decision = PhaseDecision("Failed", failure.decision.reason, message)
        return AttemptOutcome(Decided(decision, failure.attempts.to_status()))
    delete: tuple[Ref, ...] = ()
    if obs.ray_job is not None and obs.ray_job_name:
        delete = (Ref(kuberay.RAY_JOB, o.namespace, obs.ray_job_name, obs.ray_job.uid or None),)
    # The failed attempt's RayJob and cluster are gone; the status speaks of the next one.
    retried = Decided(
        _retrying(failure.event_message),
        failure.attempts.to_status(),
        next_ray_job=attempt_ray_job_name(job, failure.attempts.attempt),
    )
    return AttemptOutcome(
        retried,
        delete=delete,
        events=(Announcement("Warning", str(failure.event_reason), failure.event_message),),
        wake_at=failure.attempts.next_attempt_time,
    )


# Goodput and the guard.


def with_goodput(o: Reads, obs: Observation, decided: Decided) -> Decided:
    """Fold the launcher's phases and the released clusters into the attempts; ``status.goodput``."""
    assert o.job is not None
    attempts = Attempts.of(decided.attempts if decided.attempts is not None else obs.previous)
    ray_job = decided.ray_job(obs)  # none after a retry: the next attempt's is not created yet
    admitted = ray_job is not None and not ray_job.spec_suspend  # Kueue admitted it
    pools = gpu_pools(o.job.spec)  # both pools' GPUs are held from the RayJob's creation (separate-async)
    gpus = sum(pool.gpus for pool in pools)
    launcher = obs.previous.get("launcherPhases")
    now = rfc3339(o.now)
    folded = fold_attempts(attempts, launcher, gpus, o.released, now, admitted)
    folded = within_life(folded, rfc3339(o.created), now, gpus)
    split = [(pool.name, pool.gpus) for pool in pools]
    ledger = goodput(folded, obs.previous.get("conditions"), rfc3339(o.created), split)
    # Unchanged attempts stay as the attempt rules left them (a final job's are not rewritten).
    return replace(
        decided, attempts=folded.to_status() if folded != attempts else decided.attempts, goodput=ledger
    )


def guard_suspend(
    job: FlashRLJob, previous: Mapping[str, Any], status: FlashRLJobStatus
) -> tuple[Mapping[str, Any] | None, tuple[Announcement, ...]]:
    """spec.correction.guard.action ``Suspend``: set ``spec.lifecycle.suspend`` once, when the guard
    trips (the normal suspend path then deletes the Ray cluster; checkpoints stay)."""
    if (
        job.spec.correction.guard.action != "Suspend"
        or job.spec.lifecycle.suspend
        or not guard_tripped_now(previous, status)
    ):
        return None, ()
    patch = {"spec": {"lifecycle": {"suspend": True}}}
    return patch, (Announcement("Warning", Reason.MISMATCH_DRIFT, GUARD_SUSPEND_MESSAGE),)


def suspend_worker_groups(o: Reads) -> tuple[Patch, ...]:
    """The merge patches that suspend every worker group of the ended attempts' RayClusters in
    :attr:`Reads.holding` (KubeRay then deletes their worker pods; the head stays for the TTL).

    A queued RayJob is rendered with ``shutdownAfterJobFinishes`` (Kueue and KubeRay require it of a
    suspendable RayJob, and KubeRay refuses deletion rules beside it), so KubeRay would keep the GPU
    workers until the TTL while Kueue, seeing the job finished, admits the next one onto those GPUs.
    The operator does what KubeRay's ``DeleteWorkers`` rule does. Each patch carries the cluster's
    ``resourceVersion``: a cluster changed since it was read is left to the next reconcile.
    """
    patches = []
    for cluster in o.holding:
        meta = cluster.get("metadata") or {}
        groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
        body = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "spec": {"workerGroupSpecs": [{**group, "suspend": True} for group in groups]},
        }
        patches.append(Patch(kuberay.RAY_CLUSTER, o.namespace, str(meta.get("name") or ""), body))
    return tuple(patches)


def guard_fallback(o: Reads, obs: Observation, outcome: AttemptOutcome) -> AttemptOutcome | None:
    """spec.correction.guard.action ``FallbackToBF16``: when the guard has tripped on a live FP8
    attempt, end it (its RayJob is deleted now) and open the next one, from the newest checkpoint, with
    BF16 rollout; once per job (``status.rolloutFallback``; the BF16 job's guard only alerts). ``None``:
    the guard does not act."""
    assert o.job is not None
    job, previous = o.job, obs.previous
    guard = obs.guard
    if (
        job.spec.correction.guard.action != "FallbackToBF16"
        or not spec_uses_fp8(job.spec)
        or fallbacks(previous)
        or guard is None
        or not guard.tripped
        or obs.ray_job is None
        or outcome.decided.phase.phase not in RUNNING_PHASES
        or job.spec.lifecycle.suspend
    ):
        return None
    now = rfc3339(o.now)
    attempts = Attempts.of(outcome.decided.attempts if outcome.decided.attempts is not None else previous)
    reported = o.reported or Reported.of(previous)
    current = attempts.current
    step = reported.step_of(current)
    resume_from = max(reported.checkpoint_step, current.start_step)
    closed = current.closed(step, reported.checkpoint_step, Reason.FELL_BACK_TO_BF16, now)
    if closed.quantization is None:  # recorded by an operator before the precision was
        closed = closed.model_copy(
            update={"quantization": job.spec.rollout.quantization, "kv_cache": job.spec.rollout.kv_cache}
        )
    nxt = Attempt(
        attempt=current.attempt + 1,
        start_step=resume_from,
        quantization=BF16_QUANTIZATION,
        kv_cache=BF16_KV_CACHE,
    )
    after = replace(
        attempts,
        attempt=nxt.attempt,
        history=tuple([*attempts._with_current(closed), nxt][-MAX_ATTEMPTS:]),
        lost_steps=attempts.lost_steps + max(0, step - resume_from),
        next_attempt_time=now,
    )
    breach = guard.breaches[0]
    record = RolloutFallback(
        attempt=nxt.attempt,
        step=breach.step,
        checkpoint_step=resume_from,
        metric=breach.check.metric,
        value=breach.value,
        threshold=breach.check.threshold,
        from_quantization=job.spec.rollout.quantization,
        from_kv_cache=job.spec.rollout.kv_cache,
        time=now,
    )
    message = fallback_message(record)
    delete: tuple[Ref, ...] = ()
    if obs.ray_job_name:
        delete = (Ref(kuberay.RAY_JOB, o.namespace, obs.ray_job_name, obs.ray_job.uid or None),)
    decided = Decided(
        PhaseDecision("Starting", Reason.FELL_BACK_TO_BF16, message),
        after.to_status(),
        next_ray_job=attempt_ray_job_name(job, nxt.attempt),
        fallback=record.to_wire(),
    )
    return AttemptOutcome(decided, delete=delete, wake_at=now)


def with_precision(job: FlashRLJob, previous: Mapping[str, Any], decided: Decided) -> Decided:
    """Record the rollout precision on the current attempt's entry (once; a fallback's BF16 attempt
    already carries its own)."""
    attempts = Attempts.of(decided.attempts if decided.attempts is not None else previous)
    current = attempts.current
    if current.quantization is not None or not any(e.attempt == current.attempt for e in attempts.history):
        return decided
    entry = current.model_copy(
        update={"quantization": job.spec.rollout.quantization, "kv_cache": job.spec.rollout.kv_cache}
    )
    return replace(decided, attempts=replace(attempts, history=attempts._with_current(entry)).to_status())


# The step.


def _wake_after(when: str | None, now: datetime.datetime) -> float | None:
    moment = parse_time(when)
    if moment is None:
        return None
    return max(0.0, (moment - now).total_seconds()) + WAKE_MARGIN_SECONDS


def _queued_wake(decision: PhaseDecision, workload: WorkloadView | None, wake: float | None) -> float | None:
    """A queued job whose Kueue workload does not say yet why it waits is looked at again in
    :data:`QUEUED_RECHECK_SECONDS` (nothing of the Workload's is watched); afterwards the resync
    refreshes the reason."""
    if decision.reason != Reason.QUEUED or (workload is not None and workload.waiting):
        return wake
    return QUEUED_RECHECK_SECONDS if wake is None else min(wake, QUEUED_RECHECK_SECONDS)


def _refused(o: Reads) -> Step:
    """An invalid spec or a policy violation: the status says why, nothing is created."""
    obs = Observation(
        generation=o.generation,
        spec_problems=o.spec_problems,
        policy_problems=() if o.spec_problems else o.policy_problems,
        previous=o.previous,
    )
    status = status_of(obs, Decided(decide_phase(obs)), rfc3339(o.now))
    return Step(status, status_patch(o.server_status, status), tuple(status_events(o.previous, status)))


def _never_starts(o: Reads, why: CannotStart) -> Step:
    """A job the cluster can never hold, or whose claim or PriorityClass does not exist: Failed, nothing
    created."""
    obs = Observation(
        generation=o.generation,
        missing_claims=why.missing_claims,
        missing_priority_classes=why.missing_priority_classes,
        never_fits=why.never_fits,
        previous=o.previous,
    )
    status = status_of(obs, Decided(decide_phase(obs)), rfc3339(o.now))
    return Step(status, status_patch(o.server_status, status), tuple(status_events(o.previous, status)))


def next_step(o: Reads) -> Step:
    """Everything one reconcile does, decided from what it read."""
    if o.job is None or o.desired is None or o.spec_problems or o.policy_problems:
        return _refused(o)
    why = cannot_start(o)
    if why:
        return _never_starts(o, why)
    job, desired, previous = o.job, o.desired, o.previous
    attempts = Attempts.of(previous)
    final = is_final(previous)
    waiting = not final and backoff_pending(attempts, o.now)
    rejected = rejection(previous, o.generation, o.refused)
    if converging(previous, o.generation, o.refused):
        plan = child_plan(o, attempts, waiting=waiting)
    else:
        staging = StagingObservation() if desired.staging_job is None else None
        plan = ChildPlan(staging=staging, ray_job=controlled(o.live_of(desired.ray_job), o.uid))
    ray_view = RayJobView.of(plan.ray_job) if plan.ray_job is not None else None
    immutable = (
        immutable_changes(ray_view.annotation(SPEC_ANNOTATION), job.spec.to_wire()) if ray_view else []
    )
    obs = Observation(
        generation=o.generation,
        rejected=rejected,
        conflicts=plan.conflicts,
        immutable_changes=tuple(immutable),
        suspend_requested=job.spec.lifecycle.suspend,
        queued=desired.queued,
        ray_job_name=desired.ray_job.name,
        ray_job=ray_view,
        ray_cluster=o.ray_cluster,
        workload=o.workload,
        pod_problems=o.pod_problems,
        gpu_holders=o.gpu_holders,
        staging=plan.staging,
        previous=previous,
        guard=guard_observation(job.spec.correction.guard, previous),
        quantization=job.spec.rollout.quantization,
        kv_cache=job.spec.rollout.kv_cache,
    )
    verdict = decide_phase(obs)
    if final and verdict.phase == previous.get("phase") and previous.get("reason"):
        # The end was judged when the job ended (the retry policy's verdict: NoProgress, "(not
        # retryable)"); later reconciles (a resync, KubeRay deleting the workers) read only the RayJob
        # and must not re-judge it.
        verdict = replace(
            verdict,
            reason=str(previous["reason"]),
            message=str(previous.get("message") or verdict.message),
        )
    outcome = AttemptOutcome(Decided(verdict))
    if not final and rejected is None and not plan.conflicts:
        outcome = attempt_outcome(o, obs, verdict, attempts, deleted=plan.deleted, waiting=waiting)
        fallback = guard_fallback(o, obs, outcome)
        if fallback is not None:
            # The status says at once what the next attempt runs.
            outcome = fallback
            obs = replace(obs, quantization=BF16_QUANTIZATION, kv_cache=BF16_KV_CACHE)
    decided = outcome.decided
    if rejected is None and not plan.conflicts:
        decided = with_goodput(o, obs, with_precision(job, previous, decided))
    status = status_of(obs, decided, rfc3339(o.now))
    spec_patch, guard_events = guard_suspend(job, previous, status)
    history, history_events = history_step(o)
    wakes = [w for w in (_wake_after(outcome.wake_at, o.now), o.history_wait) if w is not None]
    return Step(
        status=status,
        status_patch=status_patch(o.server_status, status),
        events=(*outcome.events, *status_events(previous, status), *guard_events, *history_events),
        apply=(*plan.apply, *history),
        claim_patches=plan.claim_patches,
        delete=outcome.delete,
        suspend_workers=suspend_worker_groups(o) if desired.queued else (),
        spec_patch=spec_patch,
        wake_after=_queued_wake(decided.phase, o.workload, min(wakes, default=None)),
        goodput=decided.goodput,
    )
