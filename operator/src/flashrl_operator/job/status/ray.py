"""KubeRay's state, translated: what a RayJob and its RayCluster say about a FlashRLJob. Pure.

KubeRay's RayJob has no conditions: it reports ``jobDeploymentStatus`` (the cluster/submission
state machine), ``jobStatus`` (Ray's view of the entrypoint), and ``reason``/``message`` on
failure. The RayCluster KubeRay creates for it does have conditions (``RayClusterProvisioned``,
``HeadPodReady``, ``ReplicaFailure``) and replica counts, which say how far the pods got while the
RayJob still just says ``Initializing``. This module reads those (through the typed views of
:mod:`flashrl_operator.vocab.kuberay`) into a :class:`PhaseDecision` and the ClusterReady verdict; the
operator's own findings and the final status are :mod:`flashrl_operator.job.status.mapping`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flashrl_api import TERMINAL_PHASES, Phase
from flashrl_api.status import RECOVERABLE_FAILURES, Reason
from flashrl_operator.job.status.conditions import Verdict
from flashrl_operator.job.status.launcher_failure import launcher_failure
from flashrl_operator.job.status.pods import PodProblem, problems_summary
from flashrl_operator.vocab.kuberay import (
    CLUSTER_DEPLOYMENTS,
    ClusterConditionReason,
    DeploymentStatus,
    JobStatus,
    KubeRayReason,
    RayClusterView,
    RayJobView,
)
from flashrl_operator.vocab.kueue import WorkloadView


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
    return previous.get("reason") not in RECOVERABLE_FAILURES


def cluster_progress(rc: RayClusterView) -> str:
    """How far the pods got, e.g. ``head pod ready, 0/1 GPU workers ready``."""
    parts: list[str] = []
    head = rc.head_ready
    if head.true:
        parts.append("head pod ready")
    elif head.reason == ClusterConditionReason.HEAD_POD_NOT_FOUND:
        parts.append("head pod not created yet")
    elif head.status:
        # KubeRay copies the pod's Ready condition; without one (unscheduled) the reason is "Unknown".
        detail = head.message or ("" if head.reason == ClusterConditionReason.UNKNOWN else head.reason)
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
        and rj.deployment in (DeploymentStatus.INITIALIZING, DeploymentStatus.WAITING)
        and not rc.all_pods_ready
        and not rc.suspending.true
        and not rc.suspended.true
    )


def suspended_decision(
    *, queued: bool, suspend_requested: bool, workload: WorkloadView | None = None
) -> PhaseDecision:
    """Suspended by the user; or, for a queued job, ``Pending``/``Queued`` while Kueue has not admitted
    it: it holds no pod and no GPU, and its Kueue workload says why it waits."""
    if queued and not suspend_requested:
        why = workload.describe() if workload is not None else "its Kueue workload is not created yet"
        return PhaseDecision(
            "Pending", Reason.QUEUED, f"Waiting for Kueue to admit the job (holding no GPU): {why}"
        )
    return PhaseDecision("Suspended", Reason.SUSPENDED, "Suspended by spec.lifecycle.suspend")


def ray_phase(
    rj: RayJobView,
    *,
    queued: bool = False,
    suspend_requested: bool = False,
    workload: WorkloadView | None = None,
    cluster: RayClusterView | None = None,
    pod_problems: tuple[PodProblem, ...] = (),
) -> PhaseDecision:
    """The phase KubeRay's two status fields (and, while starting, the pods) say."""
    dep = rj.deployment
    if dep == DeploymentStatus.COMPLETE:
        if rj.job_status == JobStatus.SUCCEEDED:
            return PhaseDecision("Succeeded", Reason.SUCCEEDED, rj.message or "Training finished")
        if (launcher := _launcher_failure(rj)) is not None:
            return launcher
        reason = rj.reason or (
            Reason.STOPPED if rj.job_status == JobStatus.STOPPED else KubeRayReason.APP_FAILED
        )
        return PhaseDecision("Failed", reason, rj.message or f"Ray job ended as {rj.job_status or 'unknown'}")
    if dep == DeploymentStatus.FAILED:
        if (launcher := _launcher_failure(rj)) is not None:
            return launcher
        return PhaseDecision("Failed", rj.reason or "Failed", rj.message or "KubeRay reported the job failed")
    if dep == DeploymentStatus.VALIDATION_FAILED:
        return PhaseDecision(
            "Failed",
            rj.reason or KubeRayReason.VALIDATION_FAILED,
            rj.message or "KubeRay rejected the RayJob",
        )
    if dep in (DeploymentStatus.SUSPENDING, DeploymentStatus.SUSPENDED):
        return suspended_decision(queued=queued, suspend_requested=suspend_requested, workload=workload)
    if dep == DeploymentStatus.RUNNING:
        if rj.job_status in (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return PhaseDecision("Running", Reason.RUNNING, "verl is training on the Ray cluster")
        return PhaseDecision("Starting", Reason.SUBMITTED, "Ray cluster is ready; the job was submitted")
    if dep == DeploymentStatus.RETRYING:
        failure = launcher_failure(rj.message)
        if failure is not None:
            return PhaseDecision(
                "Starting", Reason.RETRYING, f"Retrying with a new Ray cluster after: {failure.describe()}"
            )
        return PhaseDecision(
            "Starting", Reason.RETRYING, rj.message or "Retrying after a failure with a new Ray cluster"
        )
    if dep in (DeploymentStatus.INITIALIZING, DeploymentStatus.WAITING):
        if pod_problems and cluster is not None and not cluster.replica_failure.true:
            return PhaseDecision(
                "Starting",
                pod_problems[0].reason,
                f"Creating the Ray cluster: {cluster_progress(cluster)}; {problems_summary(pod_problems)}",
            )
        return PhaseDecision("Starting", Reason.CLUSTER_STARTING, _starting_message(cluster))
    # No deployment status yet: KubeRay has not seen the RayJob (or is not installed).
    if rj.spec_suspend and (suspend_requested or queued):
        return suspended_decision(queued=queued, suspend_requested=suspend_requested, workload=workload)
    return PhaseDecision(
        "Pending", Reason.WAITING_FOR_KUBERAY, "RayJob created; waiting for KubeRay to act on it"
    )


def _launcher_failure(rj: RayJobView) -> PhaseDecision | None:
    """Failed with the launcher's reason, when the Ray job failed in the launcher (or in verl).

    Only for application failures: a deadline or a submission failure is KubeRay's to explain.
    """
    if rj.reason not in ("", KubeRayReason.APP_FAILED) or rj.job_status not in ("", JobStatus.FAILED):
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


def cluster_status_check(
    rc: RayClusterView, rj: RayJobView, problems: tuple[PodProblem, ...] = ()
) -> Verdict | None:
    """ClusterReady from the RayCluster's conditions and its pods; ``None`` when they do not decide it.

    A ReplicaFailure wins (the cluster is not whole, whatever it was before). Once the RayJob runs,
    KubeRay already judged the cluster ready, so missing pod information cannot undo that. Before
    that, a pod problem (unschedulable, image pull, container config) names the pod and the cause.
    """
    if rc.replica_failure.true:
        return Verdict("False", Reason.REPLICA_FAILURE, replica_failure_message(rc))
    if rc.suspending.true or rc.suspended.true:
        return Verdict("False", Reason.CLUSTER_SUSPENDED, f"RayCluster {rc.name} is suspended")
    if rc.all_pods_ready:
        return Verdict("True", Reason.ALL_PODS_READY, _ready_message(rc))
    if problems and rj.deployment != DeploymentStatus.RUNNING:
        return Verdict("False", problems[0].reason, f"RayCluster {rc.name}: {problems_summary(problems)}")
    if rj.deployment == DeploymentStatus.RUNNING or not rc.reports_pods:
        return None
    return Verdict("False", Reason.CLUSTER_STARTING, f"RayCluster {rc.name}: {cluster_progress(rc)}")
