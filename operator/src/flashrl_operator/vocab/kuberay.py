"""KubeRay's vocabulary, in one place: kinds, labels, states, condition names, and typed views.

Everything the operator knows about KubeRay v1.7.0 (``ray-operator/apis/ray/v1/rayjob_types.go``,
``raycluster_types.go``, ``ray-operator/controllers/ray/utils/constant.go``) is spelled here and only
here: the renderer, the status mapping, the handlers and the emulated KubeRay in
:mod:`flashrl_operator.sim` import these names. :class:`RayJobView` and :class:`RayClusterView` are
the parts of the two objects the status depends on, read once and normalised, so the rest of the
operator never walks KubeRay's JSON. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from flashrl_operator.vocab.resource import Resource

GROUP: Final = "ray.io"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
RAY_JOB: Final = Resource(API_VERSION, "RayJob", "rayjobs")
#: Created by KubeRay for a RayJob; the operator only reads it.
RAY_CLUSTER: Final = Resource(API_VERSION, "RayCluster", "rayclusters")

# Labels KubeRay puts on what it creates (``utils/constant.go``).
#: On every pod of a RayCluster: the cluster's name.
CLUSTER_LABEL: Final = "ray.io/cluster"
#: On every pod: ``head`` or ``worker``.
NODE_TYPE_LABEL: Final = "ray.io/node-type"
#: On every pod: the worker group's name (``headgroup`` for the head).
GROUP_LABEL: Final = "ray.io/group"
HEAD_GROUP: Final = "headgroup"
#: On the RayCluster KubeRay creates for a RayJob: the RayJob's name and kind.
ORIGINATED_FROM_NAME: Final = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD: Final = "ray.io/originated-from-crd"

# How KubeRay's own operator can be seen running (``flashrl preflight``).
#: The label KubeRay's Helm chart puts on the operator's Deployment and pods.
OPERATOR_LABEL: Final = "app.kubernetes.io/name=kuberay-operator"
#: The Lease KubeRay's operator holds while it runs with leader election (its default;
#: ``LeaderElectionID`` in ``ray-operator/main.go``), wherever and however it was started.
OPERATOR_LEASE: Final = "ray-operator-leader"


class NodeType(StrEnum):
    """``ray.io/node-type`` values."""

    HEAD = "head"
    WORKER = "worker"


class DeploymentStatus(StrEnum):
    """RayJob ``status.jobDeploymentStatus``: the cluster and submission state machine."""

    NEW = ""
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"
    VALIDATION_FAILED = "ValidationFailed"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    RETRYING = "Retrying"
    WAITING = "Waiting"


class JobStatus(StrEnum):
    """RayJob ``status.jobStatus``: Ray's view of the entrypoint."""

    NEW = ""
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class KubeRayReason(StrEnum):
    """RayJob ``status.reason`` values (``JobFailedReason``); copied into the FlashRLJob verbatim."""

    SUBMISSION_FAILED = "SubmissionFailed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    PRE_RUNNING_DEADLINE_EXCEEDED = "PreRunningDeadlineExceeded"
    APP_FAILED = "AppFailed"
    TRANSITION_GRACE_PERIOD_EXCEEDED = "JobDeploymentStatusTransitionGracePeriodExceeded"
    STATUS_CHECK_TIMEOUT_EXCEEDED = "JobStatusCheckTimeoutExceeded"
    VALIDATION_FAILED = "ValidationFailed"


class DeletionPolicy(StrEnum):
    """RayJob ``spec.deletionStrategy.deletionRules[].policy`` values (gate ``RayJobDeletionPolicy``)."""

    DELETE_WORKERS = "DeleteWorkers"
    """Suspend every worker group: the worker pods (and their GPUs) go, the head stays."""
    DELETE_CLUSTER = "DeleteCluster"
    DELETE_SELF = "DeleteSelf"
    DELETE_NONE = "DeleteNone"


#: ``deletionRules[].condition.jobStatus`` values KubeRay's CRD accepts (its enum has no ``STOPPED``).
DELETION_JOB_STATUSES: Final = (JobStatus.SUCCEEDED, JobStatus.FAILED)
#: ``deletionRules[].condition.jobDeploymentStatus`` values KubeRay's CRD accepts. A RayJob that fails
#: before its Ray job runs (``PreRunningDeadlineExceeded``, a submission failure) has no ``jobStatus``:
#: only a rule on this catches it.
DELETION_DEPLOYMENT_STATUSES: Final = (DeploymentStatus.FAILED,)


class ClusterConditionType(StrEnum):
    """RayCluster condition types."""

    PROVISIONED = "RayClusterProvisioned"
    HEAD_POD_READY = "HeadPodReady"
    REPLICA_FAILURE = "ReplicaFailure"
    SUSPENDING = "RayClusterSuspending"
    SUSPENDED = "RayClusterSuspended"


class ClusterConditionReason(StrEnum):
    """RayCluster condition reasons the operator reads or the emulated KubeRay writes."""

    ALL_PODS_READY_FIRST_TIME = "AllPodRunningAndReadyFirstTime"
    PODS_PROVISIONING = "RayClusterPodsProvisioning"
    HEAD_POD_RUNNING_AND_READY = "HeadPodRunningAndReady"
    HEAD_POD_NOT_FOUND = "HeadPodNotFound"
    UNKNOWN = "Unknown"


#: RayCluster ``status.state`` when every pod is running and ready (deprecated, still written).
CLUSTER_STATE_READY: Final = "ready"

#: RayJob deployment states in which its RayCluster exists and can tell more than the RayJob does.
CLUSTER_DEPLOYMENTS: Final = frozenset(
    {
        DeploymentStatus.INITIALIZING,
        DeploymentStatus.WAITING,
        DeploymentStatus.RETRYING,
        DeploymentStatus.RUNNING,
    }
)


#: How Ray's job supervisor (``ray/dashboard/modules/job/job_supervisor.py``) says that the entrypoint
#: (the launcher) exited non-zero, as the Ray job's message; KubeRay copies it into the RayJob's
#: ``status.message`` (reason ``AppFailed``). The code follows it.
ENTRYPOINT_FAILED: Final = "entrypoint command failed with exit code"
#: Ray's cap on the log tail it appends to that message.
ENTRYPOINT_LOG_LIMIT: Final = "20,000 chars"


def entrypoint_failed_message(exit_code: int, *log_lines: str) -> str:
    """The Ray job's message when its entrypoint exited with ``exit_code``: the last lines of its output
    appended, or that there are none (as the emulated KubeRay and the tests write it)."""
    message = f"Job {ENTRYPOINT_FAILED} {exit_code}"
    if not log_lines:
        return f"{message}. No logs available."
    return f"{message}, last available logs (truncated to {ENTRYPOINT_LOG_LIMIT}):\n" + "\n".join(log_lines)


def as_text(value: Any) -> str:
    """A string field of an API object as written, or ``""`` when absent or not a string."""
    return value if isinstance(value, str) else ""


#: Terminal escape sequences: CSI (``ESC [``, parameters, intermediates, a final byte) and the others
#: (``ESC``, intermediates, a final byte: ``ESC ( B`` selects a character set).
_ESCAPES: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[ -/]*[0-~]")


def as_message(value: Any) -> str:
    """A message field as :func:`as_text` reads it, without terminal escape sequences: a Ray job's
    message ends with the driver's log tail, colour codes included, which mean nothing in a status,
    a condition or an Event."""
    return _ESCAPES.sub("", as_text(value))


def as_int(value: Any) -> int | None:
    """An integer field of an API object as written, or ``None`` when absent or not an integer (JSON's
    ``true`` is not one, though Python's bool is an int)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def worker_groups_suspended(ray_cluster: Mapping[str, Any]) -> bool:
    """Whether every worker group of a RayCluster is suspended (``workerGroupSpecs[].suspend``): what
    KubeRay's ``DeleteWorkers`` deletion policy sets, after which it deletes the worker pods."""
    groups = (ray_cluster.get("spec") or {}).get("workerGroupSpecs") or []
    return all(isinstance(g, Mapping) and g.get("suspend") is True for g in groups)


def worker_selector(cluster_name: str) -> str:
    """The label selector of a RayCluster's worker pods (the ones that hold GPUs)."""
    return f"{CLUSTER_LABEL}={cluster_name},{NODE_TYPE_LABEL}={NodeType.WORKER}"


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
    annotations: Mapping[str, str] | None = None
    #: The UID it was read with: deleting it is conditional on that UID (never another object since).
    uid: str = ""

    @classmethod
    def of(cls, ray_job: Mapping[str, Any]) -> RayJobView:
        """Read a RayJob object as returned by the API server."""
        status = ray_job.get("status") or {}
        spec = ray_job.get("spec") or {}
        cluster_status = status.get("rayClusterStatus") or {}
        annotations = (ray_job.get("metadata") or {}).get("annotations") or {}
        return cls(
            deployment=as_text(status.get("jobDeploymentStatus")),
            job_status=as_text(status.get("jobStatus")),
            reason=as_text(status.get("reason")),
            message=as_message(status.get("message")),
            cluster_name=as_text(status.get("rayClusterName")),
            dashboard_url=as_text(status.get("dashboardURL")),
            start_time=as_text(status.get("startTime")),
            end_time=as_text(status.get("endTime")),
            cluster_state=as_text(cluster_status.get("state")) if isinstance(cluster_status, Mapping) else "",
            spec_suspend=spec.get("suspend") is True,
            annotations={k: v for k, v in annotations.items() if isinstance(v, str)}
            if isinstance(annotations, Mapping)
            else None,
            uid=as_text((ray_job.get("metadata") or {}).get("uid")),
        )

    def annotation(self, key: str) -> str | None:
        """One of the RayJob's annotations, or ``None``."""
        return (self.annotations or {}).get(key)


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

        return cls(
            name=as_text(meta.get("name")),
            state=as_text(status.get("state")),
            provisioned=by_type.get(ClusterConditionType.PROVISIONED, ClusterCondition()),
            head_ready=by_type.get(ClusterConditionType.HEAD_POD_READY, ClusterCondition()),
            replica_failure=by_type.get(ClusterConditionType.REPLICA_FAILURE, ClusterCondition()),
            suspending=by_type.get(ClusterConditionType.SUSPENDING, ClusterCondition()),
            suspended=by_type.get(ClusterConditionType.SUSPENDED, ClusterCondition()),
            ready_workers=as_int(status.get("readyWorkerReplicas")) or 0,
            desired_workers=as_int(status.get("desiredWorkerReplicas")),
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


def desired_worker_replicas(ray_job: Mapping[str, Any]) -> int:
    """KubeRay's ``desiredWorkerReplicas``: the sum of replicas x numOfHosts over worker groups."""
    cluster_spec = (ray_job.get("spec") or {}).get("rayClusterSpec") or {}
    return sum(
        int(group.get("replicas") or 0) * int(group.get("numOfHosts") or 1)
        for group in cluster_spec.get("workerGroupSpecs") or []
    )
