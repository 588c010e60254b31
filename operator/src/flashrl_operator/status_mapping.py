"""From what the operator observed (the job, its RayJob) to the FlashRLJob status. Pure.

KubeRay's RayJob has no conditions: it reports ``jobDeploymentStatus`` (the cluster/submission
state machine), ``jobStatus`` (Ray's view of the entrypoint), and ``reason``/``message`` on
failure. This module folds those, plus the operator's own findings (an invalid spec, a child the API
server rejected, an immutable field edited on a running job), into one phase, the conditions and the
user-facing fields. Every decision is a small function so each can be tested from a table.

The operator writes only the keys in :data:`OWNED_KEYS`; ``status.progress`` belongs to the
launcher inside the job and is never part of a patch computed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashrl_api import TERMINAL_PHASES, Phase
from flashrl_operator.conditions import Verdict, merge_conditions, truncate

#: KubeRay ``jobDeploymentStatus`` values (``rayjob_types.go``).
DEPLOYMENT_INITIALIZING = "Initializing"
DEPLOYMENT_RUNNING = "Running"
DEPLOYMENT_COMPLETE = "Complete"
DEPLOYMENT_FAILED = "Failed"
DEPLOYMENT_VALIDATION_FAILED = "ValidationFailed"
DEPLOYMENT_SUSPENDING = "Suspending"
DEPLOYMENT_SUSPENDED = "Suspended"
DEPLOYMENT_RETRYING = "Retrying"
DEPLOYMENT_WAITING = "Waiting"

#: KubeRay ``jobStatus`` values (Ray's job states).
JOB_PENDING = "PENDING"
JOB_RUNNING = "RUNNING"
JOB_STOPPED = "STOPPED"
JOB_SUCCEEDED = "SUCCEEDED"
JOB_FAILED = "FAILED"

#: Our own reasons (KubeRay's are copied verbatim).
REASON_INVALID_SPEC = "InvalidSpec"
REASON_CHILD_REJECTED = "ChildRejected"
REASON_IMMUTABLE = "ImmutableFieldChanged"
REASON_QUEUED = "Queued"
REASON_SUSPENDED = "Suspended"

#: Failures the user can fix by editing the spec: they do not make the job final.
RECOVERABLE_FAILURE_REASONS = frozenset({REASON_INVALID_SPEC, REASON_CHILD_REJECTED})

#: The status keys the operator owns. ``progress`` is deliberately absent.
OWNED_KEYS: tuple[str, ...] = (
    "phase",
    "conditions",
    "observedGeneration",
    "rayJobName",
    "rayClusterName",
    "dashboardUrl",
    "startTime",
    "completionTime",
    "reason",
    "message",
)

#: Status ``message`` is for people; keep it readable in ``kubectl describe``.
MAX_STATUS_MESSAGE = 1024


@dataclass(frozen=True)
class RayJobView:
    """The parts of a RayJob the status depends on, normalised ("" for absent strings)."""

    deployment: str = ""
    job_status: str = ""
    reason: str = ""
    message: str = ""
    cluster_name: str = ""
    dashboard_url: str = ""
    start_time: str = ""
    end_time: str = ""
    cluster_state: str = ""
    spec_suspend: bool = False

    @classmethod
    def of(cls, ray_job: Mapping[str, Any]) -> RayJobView:
        """Read a RayJob object as returned by the API server."""
        status = ray_job.get("status") or {}
        spec = ray_job.get("spec") or {}
        cluster_status = status.get("rayClusterStatus") or {}

        def text(value: Any) -> str:
            return value if isinstance(value, str) else ""

        return cls(
            deployment=text(status.get("jobDeploymentStatus")),
            job_status=text(status.get("jobStatus")),
            reason=text(status.get("reason")),
            message=text(status.get("message")),
            cluster_name=text(status.get("rayClusterName")),
            dashboard_url=text(status.get("dashboardURL")),
            start_time=text(status.get("startTime")),
            end_time=text(status.get("endTime")),
            cluster_state=text(cluster_status.get("state")) if isinstance(cluster_status, Mapping) else "",
            spec_suspend=spec.get("suspend") is True,
        )


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile learned that the status depends on."""

    generation: int | None = None
    """``metadata.generation`` of the FlashRLJob."""

    spec_problems: tuple[str, ...] = ()
    """``field.path: message`` for an invalid spec (nothing is created then)."""

    rejected: str | None = None
    """The API server refused a child object (which one and why)."""

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

    previous: Mapping[str, Any] = field(default_factory=dict)
    """The status as last written (any keys; only owned ones are read)."""


@dataclass(frozen=True)
class PhaseDecision:
    """The phase with the reason and message that explain it."""

    phase: Phase
    reason: str
    message: str

    @property
    def is_failure(self) -> bool:
        """The job failed (the reason is then a failure reason)."""
        return self.phase == "Failed"


def is_final(previous: Mapping[str, Any]) -> bool:
    """Whether a written status says the job finished for good.

    Succeeded or Failed from the RayJob is final: children are not restored afterwards (KubeRay may
    delete the cluster, a TTL may delete more). A failure the user can fix by editing the spec
    (invalid spec, a rejected child) is not.
    """
    phase = previous.get("phase")
    if phase not in TERMINAL_PHASES:
        return False
    return previous.get("reason") not in RECOVERABLE_FAILURE_REASONS


def decide_phase(obs: Observation) -> PhaseDecision:
    """Pick the phase. Our own findings win over KubeRay's, and a final phase never regresses."""
    if obs.spec_problems:
        return PhaseDecision("Failed", REASON_INVALID_SPEC, "Invalid spec: " + "; ".join(obs.spec_problems))
    if obs.rejected:
        return PhaseDecision("Failed", REASON_CHILD_REJECTED, obs.rejected)
    prev = obs.previous
    if is_final(prev) and (obs.ray_job is None or _ray_phase(obs, obs.ray_job).phase not in TERMINAL_PHASES):
        prev_phase: Phase = prev["phase"]
        return PhaseDecision(
            prev_phase, str(prev.get("reason") or prev_phase), str(prev.get("message") or "")
        )
    if obs.ray_job is None:
        if obs.suspend_requested:
            return PhaseDecision("Suspended", REASON_SUSPENDED, "Suspended by spec.lifecycle.suspend")
        return PhaseDecision("Pending", "Creating", f"Creating RayJob {obs.ray_job_name or ''}".rstrip())
    return _ray_phase(obs, obs.ray_job)


def _suspended(obs: Observation) -> PhaseDecision:
    if obs.queued and not obs.suspend_requested:
        return PhaseDecision("Suspended", REASON_QUEUED, "Waiting for Kueue to admit the job")
    return PhaseDecision("Suspended", REASON_SUSPENDED, "Suspended by spec.lifecycle.suspend")


def _ray_phase(obs: Observation, rj: RayJobView) -> PhaseDecision:
    """Phase from KubeRay's two status fields."""
    dep = rj.deployment
    if dep == DEPLOYMENT_COMPLETE:
        if rj.job_status == JOB_SUCCEEDED:
            return PhaseDecision("Succeeded", "Succeeded", rj.message or "Training finished")
        reason = rj.reason or ("Stopped" if rj.job_status == JOB_STOPPED else "AppFailed")
        return PhaseDecision("Failed", reason, rj.message or f"Ray job ended as {rj.job_status or 'unknown'}")
    if dep == DEPLOYMENT_FAILED:
        return PhaseDecision("Failed", rj.reason or "Failed", rj.message or "KubeRay reported the job failed")
    if dep == DEPLOYMENT_VALIDATION_FAILED:
        return PhaseDecision(
            "Failed", rj.reason or "ValidationFailed", rj.message or "KubeRay rejected the RayJob"
        )
    if dep in (DEPLOYMENT_SUSPENDING, DEPLOYMENT_SUSPENDED):
        return _suspended(obs)
    if dep == DEPLOYMENT_RUNNING:
        if rj.job_status in (JOB_RUNNING, JOB_SUCCEEDED, JOB_FAILED, JOB_STOPPED):
            return PhaseDecision("Running", "Running", "verl is training on the Ray cluster")
        return PhaseDecision("Starting", "Submitted", "Ray cluster is ready; the job was submitted")
    if dep == DEPLOYMENT_RETRYING:
        return PhaseDecision(
            "Starting", "Retrying", rj.message or "Retrying after a failure with a new Ray cluster"
        )
    if dep in (DEPLOYMENT_INITIALIZING, DEPLOYMENT_WAITING):
        return PhaseDecision("Starting", "ClusterStarting", "Creating the Ray cluster")
    # No deployment status yet: KubeRay has not seen the RayJob (or is not installed).
    if rj.spec_suspend and (obs.suspend_requested or obs.queued):
        return _suspended(obs)
    return PhaseDecision("Pending", "WaitingForKubeRay", "RayJob created; waiting for KubeRay to act on it")


def accepted_check(obs: Observation) -> Verdict:
    """Accepted: the spec is valid, its children were admitted, and no refused edit is pending."""
    if obs.spec_problems:
        return Verdict("False", REASON_INVALID_SPEC, "; ".join(obs.spec_problems))
    if obs.rejected:
        return Verdict("False", REASON_CHILD_REJECTED, obs.rejected)
    if obs.immutable_changes:
        return Verdict(
            "False",
            REASON_IMMUTABLE,
            "These fields cannot change on an existing job and were not applied: "
            + ", ".join(obs.immutable_changes)
            + ". Revert them, or delete and recreate the FlashRLJob",
        )
    return Verdict("True", "Accepted", "Spec is valid and its objects are in place")


def cluster_ready_check(obs: Observation, decision: PhaseDecision) -> Verdict:
    """ClusterReady: the Ray cluster is up (KubeRay only submits once every pod is ready)."""
    rj = obs.ray_job
    if decision.phase in TERMINAL_PHASES and (rj is None or rj.deployment != DEPLOYMENT_RUNNING):
        return Verdict("False", "JobFinished", "The job finished")
    if rj is None:
        return Verdict("False", "ClusterNotCreated", "The RayJob does not exist yet")
    if rj.deployment == DEPLOYMENT_RUNNING or (
        rj.cluster_state == "ready" and decision.phase in ("Starting", "Running")
    ):
        name = rj.cluster_name or "the Ray cluster"
        return Verdict("True", "ClusterReady", f"{name} is ready")
    if decision.phase == "Suspended":
        return Verdict("False", "ClusterSuspended", "The Ray cluster is deleted while the job is suspended")
    return Verdict("False", "ClusterStarting", "Waiting for the Ray cluster's pods to be ready")


def running_check(decision: PhaseDecision) -> Verdict:
    """Running: verl is training."""
    if decision.phase == "Running":
        return Verdict("True", "JobRunning", decision.message)
    if decision.phase in TERMINAL_PHASES:
        return Verdict("False", "JobFinished", f"The job {decision.phase.lower()}")
    return Verdict("False", "NotRunning", f"The job is {decision.phase.lower()}")


def succeeded_check(decision: PhaseDecision) -> Verdict:
    """Succeeded: training finished."""
    if decision.phase == "Succeeded":
        return Verdict("True", "JobSucceeded", decision.message)
    return Verdict("False", "NotSucceeded", f"The job is {decision.phase.lower()}")


def failed_check(decision: PhaseDecision) -> Verdict:
    """Failed: carries the failure reason (KubeRay's, or ours)."""
    if decision.phase == "Failed":
        return Verdict("True", decision.reason, decision.message)
    return Verdict("False", "NotFailed", f"The job is {decision.phase.lower()}")


def suspended_check(decision: PhaseDecision) -> Verdict:
    """Suspended: by the user (spec.lifecycle.suspend) or by Kueue while queued."""
    if decision.phase == "Suspended":
        return Verdict("True", decision.reason, decision.message)
    return Verdict("False", "NotSuspended", f"The job is {decision.phase.lower()}")


def desired_status(obs: Observation, now: str) -> dict[str, Any]:
    """The operator-owned status keys for this observation (``None`` values mean "remove")."""
    decision = decide_phase(obs)
    verdicts = {
        "Accepted": accepted_check(obs),
        "ClusterReady": cluster_ready_check(obs, decision),
        "Running": running_check(decision),
        "Succeeded": succeeded_check(decision),
        "Failed": failed_check(decision),
        "Suspended": suspended_check(decision),
    }
    prev = obs.previous
    previous_conditions = prev.get("conditions") or []
    rj = obs.ray_job
    terminal = decision.phase in TERMINAL_PHASES

    def keep(key: str, fresh: str | None) -> str | None:
        """Prefer what KubeRay reports now; keep what we knew once the RayJob is gone."""
        if fresh:
            return fresh
        old = prev.get(key)
        return str(old) if old and (rj is None or terminal) else None

    completion = None
    if terminal and decision.reason not in RECOVERABLE_FAILURE_REASONS:
        completion = (rj.end_time if rj else "") or str(prev.get("completionTime") or "") or now
    status: dict[str, Any] = {
        "phase": decision.phase,
        "conditions": merge_conditions(
            previous_conditions if isinstance(previous_conditions, list) else [], verdicts, now
        ),
        "observedGeneration": obs.generation,
        "rayJobName": obs.ray_job_name if (rj is not None or not obs.spec_problems) else None,
        "rayClusterName": keep("rayClusterName", rj.cluster_name if rj else None),
        "dashboardUrl": keep("dashboardUrl", rj.dashboard_url if rj else None),
        "startTime": keep("startTime", rj.start_time if rj else None),
        "completionTime": completion,
        "reason": decision.reason if decision.is_failure else None,
        "message": truncate(decision.message, MAX_STATUS_MESSAGE),
    }
    return status


def status_patch(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch turning ``previous`` into ``desired`` over the owned keys only.

    Empty when nothing changed, so the caller can skip the write. Keys that should disappear are
    sent as ``null``. ``progress`` and any key the operator does not own are never included.
    """
    patch: dict[str, Any] = {}
    for key in OWNED_KEYS:
        new = desired.get(key)
        old = previous.get(key)
        if new is None:
            if old is not None:
                patch[key] = None
        elif new != old:
            patch[key] = new
    return patch


def phase_changed(previous: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether this status update moves the job to another phase (an Event is due)."""
    return previous.get("phase") != desired.get("phase")


def condition_changes(
    previous: Sequence[Mapping[str, Any]], desired: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The conditions whose status or reason differ from before (for the timeline and logs)."""
    old = {c.get("type"): (c.get("status"), c.get("reason")) for c in previous}
    return [c for c in desired if old.get(c.get("type")) != (c.get("status"), c.get("reason"))]
