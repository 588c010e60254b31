"""From what one reconcile observed to the FlashRLJob status, and the Events it announces. Pure.

The operator's own findings (an invalid spec, a child the API server rejected, an immutable field
edited on a running job) win over KubeRay's; KubeRay's state is translated by
:mod:`flashrl_operator.job.status.ray`. :func:`desired_status` returns the typed
:class:`~flashrl_api.FlashRLJobStatus`; :func:`status_patch` turns it into the merge patch of the
keys the operator owns, and :func:`status_events` is the one rule that turns a status transition
into Events. Every decision is a small function so each can be tested from a table. What the
reconcile decided over the observation (the retry policy's phase, the attempts, the goodput:
:class:`Decided`) is handed forward to :func:`status_of` as an argument; nothing here feeds back into
the observation or the decisions, and this folder imports nothing else of ``job/`` (a contract).

The operator writes only the keys in :data:`OWNED_KEYS`, the status fields marked as its own on the
model (:class:`flashrl_api.status.WrittenBy`); ``status.progress``, ``status.checkpoint``,
``status.metrics`` and the launcher's other keys belong to the launcher inside the job and are never
part of a patch computed here. The operator reads ``status.metrics`` for the mismatch guard
(:func:`guard_observation`, over the pure :func:`flashrl_api.guard.evaluate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from flashrl_api import TERMINAL_PHASES, FlashRLJobStatus
from flashrl_api.guard import GuardResult, evaluate
from flashrl_api.spec import MismatchGuardSpec
from flashrl_api.status import (
    POD_PROBLEMS,
    RECOVERABLE_FAILURES,
    WARNING_REASONS,
    ConditionType,
    GuardStreak,
    MetricValue,
    Reason,
    RolloutFallback,
)
from flashrl_operator.job.status.conditions import Verdict, find_condition, merge_conditions, truncate
from flashrl_operator.job.status.pods import PodProblem, problems_summary
from flashrl_operator.job.status.ray import (
    PhaseDecision,
    cluster_status_check,
    is_final,
    ray_phase,
    should_read_cluster,
    should_read_pods,
    suspended_decision,
)
from flashrl_operator.job.status.staging import StagingObservation, staged_verdict
from flashrl_operator.vocab.kuberay import (
    CLUSTER_STATE_READY,
    DeploymentStatus,
    KubeRayReason,
    RayClusterView,
    RayJobView,
)
from flashrl_operator.vocab.kueue import WorkloadView

_M = TypeVar("_M", bound=BaseModel)

__all__ = [
    "OWNED_KEYS",
    "Announcement",
    "Decided",
    "Observation",
    "PhaseDecision",
    "RayClusterView",
    "RayJobView",
    "decide_phase",
    "desired_status",
    "is_final",
    "operator_keys",
    "phase_changed",
    "should_read_cluster",
    "should_read_pods",
    "status_events",
    "status_of",
    "status_patch",
]

#: The status keys the operator owns: the fields of :class:`~flashrl_api.FlashRLJobStatus` marked
#: ``OPERATOR`` (:class:`flashrl_api.status.WrittenBy`). The launcher's keys (``progress``,
#: ``checkpoint``, ``metrics``, ...) are marked ``LAUNCHER`` and never part of a patch computed here.
OWNED_KEYS: Final[tuple[str, ...]] = FlashRLJobStatus.keys_written_by("operator")
#: The attempt keys: kept as they were when a reconcile does not decide them.
ATTEMPT_KEYS: Final = ("attempt", "attempts", "lostSteps", "nextAttemptTime")

#: Status ``message`` is for people; keep it readable in ``kubectl describe``.
MAX_STATUS_MESSAGE: Final = 1024


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile learned that the status depends on."""

    generation: int | None = None
    """``metadata.generation`` of the FlashRLJob."""

    spec_problems: tuple[str, ...] = ()
    """``field.path: message`` for an invalid spec (nothing is created then)."""

    rejected: str | None = None
    """The API server refused a child object (which one and why)."""

    policy_problems: tuple[str, ...] = ()
    """``field.path: message`` for each rule of the admin's policy the spec breaks (nothing is created)."""

    conflicts: tuple[str, ...] = ()
    """Objects under a child's name that this job does not own (the job waits; nothing is written)."""

    immutable_changes: tuple[str, ...] = ()
    """Spec paths edited on a running job that cannot be applied to it."""

    suspend_requested: bool = False
    """``spec.lifecycle.suspend``."""

    queued: bool = False
    """``spec.scheduling.queueName`` is set: Kueue admits the job by clearing the RayJob's suspend."""

    ray_job_name: str | None = None
    """The RayJob the job runs as (known even before it exists)."""

    ray_job: RayJobView | None = None
    """The live RayJob, or ``None`` when it does not exist."""

    ray_cluster: RayClusterView | None = None
    """The RayCluster the RayJob names, or ``None`` (not named yet, not read, or gone)."""

    workload: WorkloadView | None = None
    """The Kueue Workload of a queued RayJob Kueue has not admitted (read only then)."""

    pod_problems: tuple[PodProblem, ...] = ()
    """Why some of the cluster's pods are not starting (read only while the cluster starts)."""

    missing_claims: str | None = None
    """Claims the job mounts that do not exist (``ClaimNotFound``; judged before anything is created)."""

    missing_priority_classes: str | None = None
    """PriorityClasses the job's pods name that do not exist (``PriorityClassNotFound``; judged before
    anything is created)."""

    never_fits: str | None = None
    """What the job needs and the cluster can never offer (``NeverFits``; judged before anything is
    created)."""

    gpu_holders: str | None = None
    """Whose pods hold the GPUs the job's unschedulable pods wait for, when the job fits the cluster
    (``WaitingForGPUs``)."""

    staging: StagingObservation | None = None
    """The staging Job's progress and outcome; ``None`` when not looked at (the previous Staged
    condition stands)."""

    previous: Mapping[str, Any] = field(default_factory=dict)
    """The status as last written (any keys; only owned ones are read)."""

    guard: GuardResult | None = None
    """spec.correction.guard evaluated on the launcher's status.metrics (None: no metrics yet)."""

    quantization: str | None = None
    """The rollout weight precision the current attempt runs (after FallbackToBF16: bf16)."""

    kv_cache: str | None = None
    """The rollout KV-cache precision the current attempt runs."""


@dataclass(frozen=True)
class Decided:
    """What the reconcile decided from its :class:`Observation`, handed forward to :func:`status_of`.

    The observation stays what was read; the decisions made over it (the retry policy's, the
    attempts', the goodput's: :mod:`flashrl_operator.job.step`) arrive here as this one value, so
    nothing in the status floor reaches back into them.
    """

    phase: PhaseDecision
    """The phase that stands: :func:`decide_phase`'s, or the retry policy's over it (a retry is
    ``Starting``/``Retrying``, a spent budget fails with the policy's reason)."""

    attempts: Mapping[str, Any] | None = None
    """The attempt keys (``attempt``, ``attempts``, ``lostSteps``, ``nextAttemptTime``) in wire form;
    ``None`` keeps the previous ones."""

    goodput: Mapping[str, Any] | None = None
    """``status.goodput`` in wire form (:mod:`flashrl_operator.job.goodput`); ``None`` keeps the
    previous one."""

    fallback: Mapping[str, Any] | None = None
    """``status.rolloutFallback`` (wire form) when the guard's FallbackToBF16 acts now; ``None`` keeps
    the previous one."""

    next_ray_job: str | None = None
    """A retry: the next attempt's RayJob (not created yet), which the status names. The failed
    attempt's RayJob, cluster and pods, as observed, are then not reported."""

    def ray_job(self, obs: Observation) -> RayJobView | None:
        """The RayJob the status reports: the observed one; none after a retry (the next attempt's
        does not exist yet)."""
        return None if self.next_ray_job is not None else obs.ray_job

    def ray_job_name(self, obs: Observation) -> str | None:
        """The name of the RayJob the status reports."""
        return self.next_ray_job or obs.ray_job_name


def _kuberay_phase(obs: Observation, rj: RayJobView) -> PhaseDecision:
    decision = ray_phase(
        rj,
        queued=obs.queued,
        suspend_requested=obs.suspend_requested,
        workload=obs.workload,
        cluster=obs.ray_cluster,
        pod_problems=obs.pod_problems,
    )
    return with_startup_cause(waiting_for_gpus(decision, obs), obs)


def waiting_for_gpus(decision: PhaseDecision, obs: Observation) -> PhaseDecision:
    """A start held up by GPUs other pods hold, when the job fits the cluster: ``WaitingForGPUs``, naming
    whose pods hold them, instead of the scheduler's ``PodUnschedulable``."""
    if decision.reason != Reason.POD_UNSCHEDULABLE or not obs.gpu_holders:
        return decision
    head = decision.message.split("; ")[0]
    return PhaseDecision(decision.phase, Reason.WAITING_FOR_GPUS, f"{head}; {obs.gpu_holders}")


#: KubeRay's deadlines. When one ends a start that never finished, KubeRay's sentence says only that
#: time ran out; the cause the start waited on is kept beside it (:func:`with_startup_cause`).
DEADLINE_REASONS: Final = frozenset(
    {KubeRayReason.PRE_RUNNING_DEADLINE_EXCEEDED, KubeRayReason.DEADLINE_EXCEEDED}
)
#: ClusterReady reasons that say why the Ray cluster is not up yet (the scheduler's, the kubelet's or
#: KubeRay's words, or how far the pods got).
STARTUP_CAUSES: Final = frozenset(
    {*POD_PROBLEMS, Reason.REPLICA_FAILURE, Reason.CLUSTER_STARTING, Reason.WAITING_FOR_GPUS}
)


def last_startup_cause(obs: Observation) -> str | None:
    """Why the Ray cluster was not up, as last observed: the pods read now, else the ClusterReady
    condition as last written (KubeRay's Failed RayJob gets no pod reads, and its cluster may be gone).
    ``None`` when the cluster was up (a deadline that ended a running job) or nothing was known."""
    if obs.gpu_holders:
        return obs.gpu_holders
    if obs.pod_problems:
        return problems_summary(obs.pod_problems)
    ready = find_condition(obs.previous.get("conditions") or [], ConditionType.CLUSTER_READY)
    if ready is None or ready.get("status") != "False" or ready.get("reason") not in STARTUP_CAUSES:
        return None
    return str(ready.get("message") or ready.get("reason"))


def with_startup_cause(decision: PhaseDecision, obs: Observation) -> PhaseDecision:
    """A deadline that ended a start keeps what the start waited on: e.g. KubeRay's
    ``PreRunningDeadlineExceeded`` sentence, then ``the Ray cluster had not started: ... PodUnschedulable:
    0/2 nodes are available: 2 Insufficient nvidia.com/gpu``. The reason stays KubeRay's."""
    if decision.phase != "Failed" or decision.reason not in DEADLINE_REASONS:
        return decision
    cause = last_startup_cause(obs)
    if cause is None:
        return decision
    return replace(
        decision, message=f"{decision.message.rstrip('. ')}; the Ray cluster had not started: {cause}"
    )


def decide_phase(obs: Observation) -> PhaseDecision:
    """Pick the phase. Our own findings win over KubeRay's, and a final phase never regresses."""
    if obs.spec_problems:
        return PhaseDecision("Failed", Reason.INVALID_SPEC, "Invalid spec: " + "; ".join(obs.spec_problems))
    if obs.policy_problems:
        return PhaseDecision(
            "Failed",
            Reason.POLICY_VIOLATION,
            "Refused by the cluster's policy: " + "; ".join(obs.policy_problems),
        )
    if obs.rejected:
        return PhaseDecision("Failed", Reason.CHILD_REJECTED, obs.rejected)
    if obs.conflicts and not is_final(obs.previous):
        return PhaseDecision("Pending", Reason.CHILD_CONFLICT, _conflict_message(obs.conflicts))
    never = never_starts(obs)
    if never is not None:
        return PhaseDecision("Failed", *never)
    prev = obs.previous
    if is_final(prev):
        # Final is final: its phase, reason and message stay as the reconcile that ended the job decided
        # them (the retry policy's reason, what the launcher reported, the cause a start waited on),
        # whatever KubeRay's RayJob says afterwards, or whether it is still there.
        return PhaseDecision(
            prev["phase"], str(prev.get("reason") or prev["phase"]), str(prev.get("message") or "")
        )
    if obs.staging is not None and obs.ray_job is None:
        staged = staged_verdict(obs.staging)
        if staged.reason == Reason.STAGING_FAILED:
            return PhaseDecision("Failed", Reason.STAGING_FAILED, f"Staging failed: {staged.message}")
        if staged.status != "True" and not obs.suspend_requested:
            return PhaseDecision("Staging", Reason.STAGING, staged.message)
    if obs.ray_job is None:
        if obs.suspend_requested:
            return suspended_decision(queued=False, suspend_requested=True)
        return PhaseDecision("Pending", Reason.CREATING, f"Creating RayJob {obs.ray_job_name or ''}".rstrip())
    return _kuberay_phase(obs, obs.ray_job)


def never_starts(obs: Observation) -> tuple[Reason, str] | None:
    """The reason and message of a job judged never to start before anything was created: the first of
    ``ClaimNotFound``, ``PriorityClassNotFound`` and ``NeverFits`` that holds, the message saying every
    one that does (the user fixes them all before applying again); ``None`` when none holds."""
    found = [
        (reason, message)
        for reason, message in (
            (Reason.CLAIM_NOT_FOUND, obs.missing_claims),
            (Reason.PRIORITY_CLASS_NOT_FOUND, obs.missing_priority_classes),
            (Reason.NEVER_FITS, obs.never_fits),
        )
        if message
    ]
    if not found:
        return None
    return found[0][0], ". ".join(message for _, message in found)


def _conflict_message(conflicts: tuple[str, ...]) -> str:
    return (
        "Waiting: " + "; ".join(conflicts) + ". The operator never changes, adopts or deletes an object it "
        "does not own: delete or rename it, or rename this FlashRLJob"
    )


def accepted_check(obs: Observation) -> Verdict:
    """Accepted: the spec is valid, its children were admitted, and no refused edit is pending."""
    if obs.spec_problems:
        return Verdict("False", Reason.INVALID_SPEC, "; ".join(obs.spec_problems))
    if obs.policy_problems:
        return Verdict("False", Reason.POLICY_VIOLATION, "; ".join(obs.policy_problems))
    if obs.rejected:
        return Verdict("False", Reason.CHILD_REJECTED, obs.rejected)
    if obs.conflicts:
        return Verdict("False", Reason.CHILD_CONFLICT, _conflict_message(obs.conflicts))
    never = never_starts(obs)
    if never is not None:
        return Verdict("False", never[0], never[1])
    if obs.immutable_changes:
        return Verdict(
            "False",
            Reason.IMMUTABLE_FIELD_CHANGED,
            "These fields cannot change on an existing job and were not applied: "
            + ", ".join(obs.immutable_changes)
            + ". Revert them, or delete and recreate the FlashRLJob",
        )
    return Verdict("True", Reason.ACCEPTED, "Spec is valid and its objects are in place")


def creating(obs: Observation, decided: Decided) -> bool:
    """Whether this reconcile creates the RayJob (it applies what it decided ``Creating``), so the status
    may name it: never while staging, suspended, or before a retry's next attempt."""
    return (
        decided.ray_job(obs) is None
        and decided.next_ray_job is None
        and decided.phase.reason == Reason.CREATING
    )


def cluster_ready_check(obs: Observation, decided: Decided) -> Verdict:
    """ClusterReady: the Ray cluster is up, every pod ready (KubeRay only submits then).

    The RayCluster's own status decides when it is known; otherwise the RayJob's.
    """
    rj, decision = decided.ray_job(obs), decided.phase
    if decision.phase in TERMINAL_PHASES and (rj is None or rj.deployment != DeploymentStatus.RUNNING):
        return Verdict("False", Reason.JOB_FINISHED, "The job finished")
    if rj is None:
        if creating(obs, decided):
            return Verdict("False", Reason.CLUSTER_NOT_CREATED, "The RayJob is being created")
        return Verdict("False", Reason.CLUSTER_NOT_CREATED, "The RayJob does not exist yet")
    if decision.phase == "Suspended":
        return Verdict(
            "False", Reason.CLUSTER_SUSPENDED, "The Ray cluster is deleted while the job is suspended"
        )
    if decision.reason == Reason.QUEUED:
        return Verdict("False", Reason.QUEUED, "No Ray cluster until Kueue admits the job")
    if obs.ray_cluster is not None:
        verdict = cluster_status_check(obs.ray_cluster, rj, obs.pod_problems)
        if verdict is not None and verdict.reason == Reason.POD_UNSCHEDULABLE and obs.gpu_holders:
            return Verdict(
                "False", Reason.WAITING_FOR_GPUS, f"RayCluster {obs.ray_cluster.name}: {obs.gpu_holders}"
            )
        if verdict is not None:
            return verdict
    if rj.deployment == DeploymentStatus.RUNNING or (
        rj.cluster_state == CLUSTER_STATE_READY and decision.phase in ("Starting", "Running")
    ):
        name = rj.cluster_name or "the Ray cluster"
        return Verdict("True", Reason.CLUSTER_READY, f"{name} is ready")
    return Verdict("False", Reason.CLUSTER_STARTING, "Waiting for the Ray cluster's pods to be ready")


def staged_check(obs: Observation) -> Verdict | None:
    """Staged: the model and data are on the job's volumes. Without a look at staging this reconcile
    (a final job, an invalid spec), the previous condition stands."""
    if obs.staging is not None:
        return staged_verdict(obs.staging)
    old = find_condition(obs.previous.get("conditions") or [], ConditionType.STAGED)
    if old is None or obs.spec_problems:
        return None
    return Verdict(
        old.get("status", "Unknown"), str(old.get("reason") or Reason.STAGING), str(old.get("message") or "")
    )


#: The conditions that restate the phase: which phase makes each hold, and its reason when it holds
#: (``None``: the phase's own reason, e.g. the failure reason) and when it does not.
_PHASE_CONDITIONS: Final[dict[ConditionType, tuple[str, Reason | None, Reason]]] = {
    ConditionType.RUNNING: ("Running", Reason.JOB_RUNNING, Reason.NOT_RUNNING),
    ConditionType.SUCCEEDED: ("Succeeded", Reason.JOB_SUCCEEDED, Reason.NOT_SUCCEEDED),
    ConditionType.FAILED: ("Failed", None, Reason.NOT_FAILED),
    ConditionType.SUSPENDED: ("Suspended", None, Reason.NOT_SUSPENDED),
}


def phase_conditions(decision: PhaseDecision) -> dict[str, Verdict]:
    """Running, Succeeded, Failed, Suspended: each holds exactly when the phase is its own (one rule).

    ``Running`` turns to ``JobFinished`` (not ``NotRunning``) once the job ended, so a finished job
    says so on every condition a tool might wait on.
    """
    verdicts: dict[str, Verdict] = {}
    lower = decision.phase.lower()
    for ctype, (phase, held, not_held) in _PHASE_CONDITIONS.items():
        if decision.phase == phase:
            verdicts[ctype] = Verdict("True", held or decision.reason, decision.message)
        elif ctype == ConditionType.RUNNING and decision.phase in TERMINAL_PHASES:
            verdicts[ctype] = Verdict("False", Reason.JOB_FINISHED, f"The job {lower}")
        else:
            verdicts[ctype] = Verdict("False", not_held, f"The job is {lower}")
    return verdicts


def desired_status(obs: Observation, now: str) -> FlashRLJobStatus:
    """The operator-owned status for this observation (the launcher's keys are left unset)."""
    return status_of(obs, Decided(decide_phase(obs)), now)


def status_of(obs: Observation, decided: Decided, now: str) -> FlashRLJobStatus:
    """The operator-owned status for this observation and what was already decided over it."""
    decision = decided.phase
    verdicts = {
        ConditionType.ACCEPTED: accepted_check(obs),
        ConditionType.CLUSTER_READY: cluster_ready_check(obs, decided),
        **phase_conditions(decision),
        **guard_conditions(obs.guard),
        **fallback_conditions(decided.fallback or obs.previous.get("rolloutFallback")),
    }
    staged = staged_check(obs)
    if staged is not None:
        verdicts[ConditionType.STAGED] = staged
    prev = obs.previous
    previous_conditions = prev.get("conditions") or []
    rj = decided.ray_job(obs)
    terminal = decision.phase in TERMINAL_PHASES

    def keep(key: str, fresh: str | None) -> str | None:
        """Prefer what KubeRay reports now; keep what we knew once the RayJob is gone."""
        if fresh:
            return fresh
        old = prev.get(key)
        return str(old) if old and (rj is None or terminal) else None

    completion = None
    if terminal and decision.reason not in RECOVERABLE_FAILURES:
        completion = (rj.end_time if rj else "") or str(prev.get("completionTime") or "") or now
    shown_reason = decision.is_failure or decision.reason in (
        *POD_PROBLEMS,
        Reason.WAITING_FOR_GPUS,
        Reason.QUEUED,
    )
    return FlashRLJobStatus(
        phase=decision.phase,
        conditions=merge_conditions(  # dicts, validated into Condition models
            previous_conditions if isinstance(previous_conditions, list) else [], verdicts, now
        ),
        observed_generation=obs.generation,
        # Named once it exists or this reconcile creates it (ClusterReady says "The RayJob does not exist
        # yet" until then: staging, a retry's next attempt), and kept once the finished job's is gone.
        ray_job_name=decided.ray_job_name(obs)
        if rj is not None or creating(obs, decided)
        else (str(prev.get("rayJobName") or "") or None if terminal else None),
        ray_cluster_name=keep("rayClusterName", rj.cluster_name if rj else None),
        dashboard_url=keep("dashboardUrl", rj.dashboard_url if rj else None),
        start_time=keep("startTime", rj.start_time if rj else None),
        completion_time=completion,
        reason=str(decision.reason) if shown_reason else None,
        message=truncate(decision.message, MAX_STATUS_MESSAGE),
        mismatch_guard=list(obs.guard.streaks) if obs.guard is not None and obs.guard.streaks else None,
        mismatch_guard_step=obs.guard.step if obs.guard is not None else None,
        goodput=decided.goodput if decided.goodput is not None else prev.get("goodput"),
        quantization=obs.quantization or prev.get("quantization"),
        kv_cache=obs.kv_cache or prev.get("kvCache"),
        rollout_fallback=decided.fallback or prev.get("rolloutFallback"),
        **{key: value for key, value in _attempt_fields(obs, decided).items() if value is not None},
    )


def guard_observation(guard: MismatchGuardSpec, previous: Mapping[str, Any]) -> GuardResult | None:
    """spec.correction.guard over the launcher's ``status.metrics`` and the stored streaks; ``None``
    before the launcher has reported any metric (the guard has nothing to judge, no condition yet).
    Malformed entries (someone else's writes) are skipped."""
    metrics = [m for raw in previous.get("metrics") or [] if (m := _model(MetricValue, raw)) is not None]
    if not metrics:
        return None
    streaks = [
        s for raw in previous.get("mismatchGuard") or [] if (s := _model(GuardStreak, raw)) is not None
    ]
    return evaluate(guard, metrics, streaks)


def _model(model: type[_M], raw: object) -> _M | None:
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def guard_conditions(result: GuardResult | None) -> dict[str, Verdict]:
    """``RolloutMismatch``: True with ``MismatchDrift`` naming each metric, value and threshold."""
    if result is None:
        return {}
    if result.tripped:
        message = "; ".join(b.message() for b in result.breaches)
        return {ConditionType.ROLLOUT_MISMATCH: Verdict("True", Reason.MISMATCH_DRIFT, message)}
    watching = ", ".join(s.metric for s in result.streaks)
    message = "Every guarded mismatch metric is within spec.correction.guard's bounds"
    if watching:
        message += f" or not yet out of them for consecutiveSteps steps ({watching} out of bounds)"
    return {ConditionType.ROLLOUT_MISMATCH: Verdict("False", Reason.MISMATCH_WITHIN_BOUNDS, message)}


def fallback_message(record: RolloutFallback) -> str:
    """The RolloutFallback condition's (and its Warning Event's) message: metric, value, threshold, step."""
    resume = f"checkpoint step {record.checkpoint_step}" if record.checkpoint_step else "the start"
    return (
        f"spec.correction.guard (action FallbackToBF16): {record.metric} = {record.value:.6g} at step "
        f"{record.step} crossed the threshold {record.threshold:g}; attempt {record.attempt - 1} "
        f"({record.from_quantization}, kvCache {record.from_kv_cache}) was ended and attempt "
        f"{record.attempt} resumes from {resume} with BF16 rollout (weights and KV cache)"
    )


def fallback_conditions(raw: object) -> dict[str, Verdict]:
    """``RolloutFallback``: True with ``FellBackToBF16`` once the guard's FallbackToBF16 acted."""
    record = _model(RolloutFallback, raw)
    if record is None:
        return {}
    return {
        ConditionType.ROLLOUT_FALLBACK: Verdict("True", Reason.FELL_BACK_TO_BF16, fallback_message(record))
    }


def guard_tripped_now(previous: Mapping[str, Any], desired: FlashRLJobStatus) -> bool:
    """Whether this update turns ``RolloutMismatch`` to ``MismatchDrift`` (the moment to act once)."""
    now = next((c for c in desired.conditions if c.type == ConditionType.ROLLOUT_MISMATCH), None)
    if now is None or now.reason != Reason.MISMATCH_DRIFT:
        return False
    before = find_condition(previous.get("conditions") or [], ConditionType.ROLLOUT_MISMATCH) or {}
    return before.get("reason") != Reason.MISMATCH_DRIFT


def _attempt_fields(obs: Observation, decided: Decided) -> dict[str, Any]:
    """The attempt keys for the model (by alias): as decided, else the previous status's."""
    source = decided.attempts if decided.attempts is not None else obs.previous
    return {key: source.get(key) for key in ATTEMPT_KEYS}


def operator_keys(status: FlashRLJobStatus | Mapping[str, Any]) -> dict[str, Any]:
    """The operator-owned keys of ``status`` in wire form (``None`` for absent ones)."""
    wire = (
        status.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(status, FlashRLJobStatus)
        else status
    )
    return {key: wire.get(key) for key in OWNED_KEYS}


def status_patch(
    previous: Mapping[str, Any], desired: FlashRLJobStatus | Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON merge patch turning ``previous`` into ``desired`` over the owned keys only.

    Empty when nothing changed, so the caller can skip the write. Keys that should disappear are
    sent as ``null``. ``progress``, ``checkpoint`` and any key the operator does not own are never
    included.
    """
    patch: dict[str, Any] = {}
    for key, new in operator_keys(desired).items():
        old = previous.get(key)
        if new is None:
            if old is not None:
                patch[key] = None
        elif new != old:
            patch[key] = new
    return patch


def phase_changed(previous: Mapping[str, Any], desired: FlashRLJobStatus | Mapping[str, Any]) -> bool:
    """Whether this status update moves the job to another phase."""
    return bool(previous.get("phase") != operator_keys(desired)["phase"])


@dataclass(frozen=True)
class Announcement:
    """One Event to post about the job."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def status_events(previous: Mapping[str, Any], desired: FlashRLJobStatus) -> list[Announcement]:
    """The Events a status transition announces: the one rule (as JobSet's ``setCondition`` does).

    * A phase change is announced once: reason the new phase (the failure reason when Failed, then
      a Warning), message ``Phase <old> -> <new>: <why>``.
    * A condition that turns (from another status or reason) to a reason in
      :data:`~flashrl_api.status.WARNING_REASONS` is announced as a Warning with that reason and
      the condition's message, unless the phase's Event of the same transition carries that reason.

    A repeated reconcile of an unchanged job changes nothing, so it announces nothing.
    """
    events: list[Announcement] = []
    if phase_changed(previous, desired):
        old, new = previous.get("phase") or "New", str(desired.phase)
        failed = new == "Failed"
        reason = str(desired.reason or new) if failed else new
        message = f"Phase {old} -> {new}: {desired.message or ''}".rstrip(": ")
        events.append(Announcement("Warning" if failed else "Normal", reason, message))
    old_conditions = previous.get("conditions") or []
    for cond in desired.conditions:
        if cond.reason not in WARNING_REASONS or any(e.reason == cond.reason for e in events):
            continue
        before = find_condition(old_conditions, cond.type) or {}
        if (before.get("status"), before.get("reason")) != (cond.status, cond.reason):
            events.append(Announcement("Warning", cond.reason, cond.message))
    return events


def condition_changes(
    previous: Sequence[Mapping[str, Any]], desired: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The conditions whose status or reason differ from before (for the timeline and logs)."""
    old = {c.get("type"): (c.get("status"), c.get("reason")) for c in previous}
    return [c for c in desired if old.get(c.get("type")) != (c.get("status"), c.get("reason"))]
