"""From what the operator observed (the job, its RayJob, its RayCluster) to the FlashRLJob status. Pure.

KubeRay's RayJob has no conditions: it reports ``jobDeploymentStatus`` (the cluster/submission
state machine), ``jobStatus`` (Ray's view of the entrypoint), and ``reason``/``message`` on
failure. The RayCluster KubeRay creates for it does have conditions (``RayClusterProvisioned``,
``HeadPodReady``, ``ReplicaFailure``) and replica counts, which say how far the pods got while the
RayJob still just says ``Initializing``. This module folds those, plus the operator's own findings
(an invalid spec, a child the API server rejected, an immutable field edited on a running job), into
one phase, the conditions and the user-facing fields. Every decision is a small function so each
can be tested from a table.

The operator writes only the keys in :data:`OWNED_KEYS`; ``status.progress`` belongs to the
launcher inside the job and is never part of a patch computed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashrl_api import TERMINAL_PHASES, Phase
from flashrl_operator.conditions import Verdict, merge_conditions, truncate
from flashrl_operator.launcher_failure import launcher_failure
from flashrl_operator.pod_diagnosis import POD_PROBLEM_REASONS, PodProblem, as_text, problems_summary

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

#: KubeRay RayCluster condition types and reasons (``raycluster_types.go``).
CLUSTER_PROVISIONED = "RayClusterProvisioned"
CLUSTER_HEAD_POD_READY = "HeadPodReady"
CLUSTER_REPLICA_FAILURE = "ReplicaFailure"
CLUSTER_SUSPENDING = "RayClusterSuspending"
CLUSTER_SUSPENDED = "RayClusterSuspended"
HEAD_POD_NOT_FOUND = "HeadPodNotFound"
UNKNOWN_REASON = "Unknown"
#: RayCluster ``status.state`` when every pod is running and ready (deprecated, still written).
CLUSTER_STATE_READY = "ready"

#: RayJob deployment states in which its RayCluster exists and can tell more than the RayJob does.
CLUSTER_DEPLOYMENTS = frozenset(
    {DEPLOYMENT_INITIALIZING, DEPLOYMENT_WAITING, DEPLOYMENT_RETRYING, DEPLOYMENT_RUNNING}
)

#: Our own reasons (KubeRay's are copied verbatim).
REASON_INVALID_SPEC = "InvalidSpec"
REASON_CHILD_REJECTED = "ChildRejected"
REASON_IMMUTABLE = "ImmutableFieldChanged"
REASON_QUEUED = "Queued"
REASON_SUSPENDED = "Suspended"
REASON_ALL_PODS_READY = "AllPodsReady"
REASON_CLUSTER_STARTING = "ClusterStarting"
REASON_REPLICA_FAILURE = "ReplicaFailure"

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
class ClusterCondition:
    """One RayCluster condition; ``status`` is ``""`` when KubeRay did not write it."""

    status: str = ""
    reason: str = ""
    message: str = ""

    @property
    def true(self) -> bool:
        """``status == "True"``."""
        return self.status == "True"


@dataclass(frozen=True)
class RayClusterView:
    """The parts of a RayCluster the status depends on, normalised.

    KubeRay omits zero counts (``omitempty``), so an absent ``readyWorkerReplicas`` is 0; an absent
    ``desiredWorkerReplicas`` is unknown (``None``).
    """

    name: str = ""
    state: str = ""
    provisioned: ClusterCondition = ClusterCondition()
    head_ready: ClusterCondition = ClusterCondition()
    replica_failure: ClusterCondition = ClusterCondition()
    suspending: ClusterCondition = ClusterCondition()
    suspended: ClusterCondition = ClusterCondition()
    ready_workers: int = 0
    desired_workers: int | None = None

    @classmethod
    def of(cls, ray_cluster: Mapping[str, Any]) -> RayClusterView:
        """Read a RayCluster object as returned by the API server."""
        meta = ray_cluster.get("metadata") or {}
        status = ray_cluster.get("status") or {}
        by_type: dict[str, ClusterCondition] = {}
        for cond in status.get("conditions") or []:
            if isinstance(cond, Mapping) and isinstance(cond.get("type"), str):
                by_type[cond["type"]] = ClusterCondition(
                    as_text(cond.get("status")), as_text(cond.get("reason")), as_text(cond.get("message"))
                )

        def count(key: str) -> int | None:
            value = status.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(
            name=as_text(meta.get("name")),
            state=as_text(status.get("state")),
            provisioned=by_type.get(CLUSTER_PROVISIONED, ClusterCondition()),
            head_ready=by_type.get(CLUSTER_HEAD_POD_READY, ClusterCondition()),
            replica_failure=by_type.get(CLUSTER_REPLICA_FAILURE, ClusterCondition()),
            suspending=by_type.get(CLUSTER_SUSPENDING, ClusterCondition()),
            suspended=by_type.get(CLUSTER_SUSPENDED, ClusterCondition()),
            ready_workers=count("readyWorkerReplicas") or 0,
            desired_workers=count("desiredWorkerReplicas"),
        )

    @property
    def all_pods_ready(self) -> bool:
        """KubeRay saw every pod running and ready (``RayClusterProvisioned`` never flips back)."""
        return self.provisioned.true or self.state == CLUSTER_STATE_READY

    @property
    def reports_pods(self) -> bool:
        """KubeRay has written anything about the pods yet (else the RayJob is all there is)."""
        return bool(
            self.provisioned.status
            or self.head_ready.status
            or self.state
            or self.desired_workers is not None
        )


def cluster_progress(rc: RayClusterView) -> str:
    """How far the pods got, e.g. ``head pod ready, 0/1 GPU workers ready``."""
    parts: list[str] = []
    head = rc.head_ready
    if head.true:
        parts.append("head pod ready")
    elif head.reason == HEAD_POD_NOT_FOUND:
        parts.append("head pod not created yet")
    elif head.status:
        # KubeRay copies the pod's Ready condition; without one (unscheduled) the reason is "Unknown".
        detail = head.message or ("" if head.reason == UNKNOWN_REASON else head.reason)
        parts.append(f"head pod not ready ({detail})" if detail else "head pod not ready")
    if rc.desired_workers is not None:
        parts.append(f"{rc.ready_workers}/{rc.desired_workers} GPU workers ready")
    return ", ".join(parts) or "no pod status yet"


def replica_failure_message(rc: RayClusterView) -> str:
    """KubeRay's ReplicaFailure (it could not create or delete a pod: quota, admission, ...)."""
    failure = rc.replica_failure
    detail = ": ".join(part for part in (failure.reason, failure.message) if part)
    return f"KubeRay cannot create or delete pods of RayCluster {rc.name}: {detail or 'no details given'}"


def _ready_message(rc: RayClusterView) -> str:
    """All pods were ready; say so, or what is missing now (the condition never flips back)."""
    degraded = rc.head_ready.status == "False" or (
        rc.desired_workers is not None and rc.ready_workers < rc.desired_workers
    )
    if degraded:
        return f"RayCluster {rc.name} was provisioned; now {cluster_progress(rc)}"
    return f"RayCluster {rc.name}: all pods ready"


def should_read_cluster(rj: RayJobView | None, previous: Mapping[str, Any]) -> bool:
    """Whether the RayCluster is worth a GET: the RayJob names one, and it can still change.

    Not once the job is final or KubeRay is done with the cluster (finished, suspended).
    """
    return (
        rj is not None
        and bool(rj.cluster_name)
        and rj.deployment in CLUSTER_DEPLOYMENTS
        and not is_final(previous)
    )


def should_read_pods(rj: RayJobView | None, rc: RayClusterView | None) -> bool:
    """Whether the cluster's pods are worth a LIST: it is starting and not every pod is ready yet.

    Once KubeRay has seen every pod ready (or submitted the job) pod problems no longer decide the
    status, so a running job costs no pod reads.
    """
    return (
        rj is not None
        and rc is not None
        and rj.deployment in (DEPLOYMENT_INITIALIZING, DEPLOYMENT_WAITING)
        and not rc.all_pods_ready
        and not rc.suspending.true
        and not rc.suspended.true
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

    ray_cluster: RayClusterView | None = None
    """The RayCluster the RayJob names, or ``None`` (not named yet, not read, or gone)."""

    pod_problems: tuple[PodProblem, ...] = ()
    """Why some of the cluster's pods are not starting (read only while the cluster starts)."""

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
        if (launcher := _launcher_failure(rj)) is not None:
            return launcher
        reason = rj.reason or ("Stopped" if rj.job_status == JOB_STOPPED else "AppFailed")
        return PhaseDecision("Failed", reason, rj.message or f"Ray job ended as {rj.job_status or 'unknown'}")
    if dep == DEPLOYMENT_FAILED:
        if (launcher := _launcher_failure(rj)) is not None:
            return launcher
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
        failure = launcher_failure(rj.message)
        if failure is not None:
            return PhaseDecision(
                "Starting", "Retrying", f"Retrying with a new Ray cluster after: {failure.describe()}"
            )
        return PhaseDecision(
            "Starting", "Retrying", rj.message or "Retrying after a failure with a new Ray cluster"
        )
    if dep in (DEPLOYMENT_INITIALIZING, DEPLOYMENT_WAITING):
        if obs.pod_problems and obs.ray_cluster is not None and not obs.ray_cluster.replica_failure.true:
            return PhaseDecision(
                "Starting", obs.pod_problems[0].reason, _pods_message(obs.ray_cluster, obs.pod_problems)
            )
        return PhaseDecision("Starting", REASON_CLUSTER_STARTING, _starting_message(obs.ray_cluster))
    # No deployment status yet: KubeRay has not seen the RayJob (or is not installed).
    if rj.spec_suspend and (obs.suspend_requested or obs.queued):
        return _suspended(obs)
    return PhaseDecision("Pending", "WaitingForKubeRay", "RayJob created; waiting for KubeRay to act on it")


def _pods_message(rc: RayClusterView, problems: tuple[PodProblem, ...]) -> str:
    """Progress and what blocks it.

    E.g. ``Creating the Ray cluster: head pod ready, 0/1 GPU workers ready; GPU worker pod x: ...``.
    """
    return f"Creating the Ray cluster: {cluster_progress(rc)}; {problems_summary(problems)}"


def _launcher_failure(rj: RayJobView) -> PhaseDecision | None:
    """Failed with the launcher's reason, when the Ray job failed in the launcher (or in verl).

    Only for application failures: a deadline or a submission failure is KubeRay's to explain.
    """
    if rj.reason not in ("", "AppFailed") or rj.job_status not in ("", JOB_FAILED):
        return None
    failure = launcher_failure(rj.message)
    if failure is None:
        return None
    return PhaseDecision("Failed", failure.reason, failure.describe())


def _starting_message(rc: RayClusterView | None) -> str:
    """The Starting message: the pod progress once KubeRay reports it."""
    if rc is None or not rc.reports_pods:
        return "Creating the Ray cluster"
    if rc.replica_failure.true:
        return "Creating the Ray cluster: " + replica_failure_message(rc)
    if rc.all_pods_ready:
        return f"Ray cluster {rc.name} is ready; waiting for KubeRay to submit the job"
    return f"Creating the Ray cluster: {cluster_progress(rc)}"


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
    """ClusterReady: the Ray cluster is up, every pod ready (KubeRay only submits then).

    The RayCluster's own status decides when it is known; otherwise the RayJob's.
    """
    rj = obs.ray_job
    if decision.phase in TERMINAL_PHASES and (rj is None or rj.deployment != DEPLOYMENT_RUNNING):
        return Verdict("False", "JobFinished", "The job finished")
    if rj is None:
        return Verdict("False", "ClusterNotCreated", "The RayJob does not exist yet")
    if decision.phase == "Suspended":
        return Verdict("False", "ClusterSuspended", "The Ray cluster is deleted while the job is suspended")
    if obs.ray_cluster is not None:
        verdict = cluster_status_check(obs.ray_cluster, rj, obs.pod_problems)
        if verdict is not None:
            return verdict
    if rj.deployment == DEPLOYMENT_RUNNING or (
        rj.cluster_state == CLUSTER_STATE_READY and decision.phase in ("Starting", "Running")
    ):
        name = rj.cluster_name or "the Ray cluster"
        return Verdict("True", "ClusterReady", f"{name} is ready")
    return Verdict("False", REASON_CLUSTER_STARTING, "Waiting for the Ray cluster's pods to be ready")


def cluster_status_check(
    rc: RayClusterView, rj: RayJobView, problems: tuple[PodProblem, ...] = ()
) -> Verdict | None:
    """ClusterReady from the RayCluster's conditions and its pods; ``None`` when they do not decide it.

    A ReplicaFailure wins (the cluster is not whole, whatever it was before). Once the RayJob runs,
    KubeRay already judged the cluster ready, so missing pod information cannot undo that. Before
    that, a pod problem (unschedulable, image pull, container config) names the pod and the cause.
    """
    if rc.replica_failure.true:
        return Verdict("False", REASON_REPLICA_FAILURE, replica_failure_message(rc))
    if rc.suspending.true or rc.suspended.true:
        return Verdict("False", "ClusterSuspended", f"RayCluster {rc.name} is suspended")
    if rc.all_pods_ready:
        return Verdict("True", REASON_ALL_PODS_READY, _ready_message(rc))
    if problems and rj.deployment != DEPLOYMENT_RUNNING:
        return Verdict("False", problems[0].reason, f"RayCluster {rc.name}: {problems_summary(problems)}")
    if rj.deployment == DEPLOYMENT_RUNNING or not rc.reports_pods:
        return None
    return Verdict("False", REASON_CLUSTER_STARTING, f"RayCluster {rc.name}: {cluster_progress(rc)}")


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
        "reason": decision.reason if decision.is_failure or decision.reason in POD_PROBLEM_REASONS else None,
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
