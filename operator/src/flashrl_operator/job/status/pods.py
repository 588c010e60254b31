"""Why the Ray cluster's pods are not starting, read from the pods themselves (pure).

KubeRay's RayCluster status says how many pods are ready, not why the others are not: a GPU worker
that no node can take, or an image that cannot be pulled, looks the same as one that is still
starting until ``lifecycle.startupTimeoutSeconds`` runs out. The scheduler and the kubelet do say
why, on the pod (``PodScheduled=False/Unschedulable``, a container ``waiting`` reason). This module
turns those into one reason and a message naming the pod, so ``kubectl get flashrljobs -o wide``
shows ``PodUnschedulable`` with the scheduler's words while the job is still Starting.

None of these is terminal: a node may be added, a Secret created, a registry may recover. The job
keeps Starting; KubeRay's startup deadline decides when it has waited long enough.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api.status import POD_PROBLEMS, Reason
from flashrl_operator.vocab.kuberay import NODE_TYPE_LABEL, NodeType, as_text

#: Kubelet ``waiting`` reasons and what they mean for the job, most actionable first.
_WAITING_REASONS: Final[dict[str, Reason]] = {
    "ErrImagePull": Reason.IMAGE_PULL_FAILED,
    "ImagePullBackOff": Reason.IMAGE_PULL_FAILED,
    "InvalidImageName": Reason.IMAGE_PULL_FAILED,
    "ErrImageNeverPull": Reason.IMAGE_PULL_FAILED,
    # A missing Secret (secretRefs) or ConfigMap key, a bad volume or security context.
    "CreateContainerConfigError": Reason.CONTAINER_CONFIG_ERROR,
    "CreateContainerError": Reason.CONTAINER_CONFIG_ERROR,
    "RunContainerError": Reason.CONTAINER_CONFIG_ERROR,
    "CrashLoopBackOff": Reason.CONTAINER_CRASH_LOOPING,
}

#: When pods have different problems, the reason shown is the first of these that occurs.
_PRIORITY: Final = (
    Reason.CONTAINER_CONFIG_ERROR,
    Reason.IMAGE_PULL_FAILED,
    Reason.CONTAINER_CRASH_LOOPING,
    Reason.POD_UNSCHEDULABLE,
)

#: Every reason this module reports (shown as the job's ``status.reason`` while it is Starting).
POD_PROBLEM_REASONS: Final = POD_PROBLEMS
assert frozenset(_PRIORITY) == POD_PROBLEMS, "every pod problem needs a priority"

#: Pods named in a message; the rest are counted (a 64-node job must not produce a 64-line status).
MAX_PODS_NAMED: Final = 3
#: Longest detail quoted from the scheduler or kubelet per pod.
MAX_DETAIL: Final = 300


@dataclass(frozen=True)
class PodProblem:
    """One pod that cannot get going, and the scheduler's or kubelet's explanation."""

    pod: str
    role: str
    """``head`` or ``GPU worker``."""
    reason: Reason
    """One of :data:`~flashrl_api.status.POD_PROBLEMS`."""
    detail: str

    def describe(self) -> str:
        """E.g. ``GPU worker pod job-gpu-worker-x7k2p: PodUnschedulable: 0/4 nodes are available: ...``."""
        return f"{self.role} pod {self.pod}: {self.reason}: {self.detail}"


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _container_problem(statuses: Any) -> tuple[Reason, str] | None:
    """The first container (init containers included) stuck in a known ``waiting`` reason."""
    for status in statuses if isinstance(statuses, list) else []:
        if not isinstance(status, Mapping):
            continue
        waiting = (status.get("state") or {}).get("waiting") or {}
        kubelet_reason = as_text(waiting.get("reason"))
        reason = _WAITING_REASONS.get(kubelet_reason)
        if reason is None:
            continue
        name = as_text(status.get("name")) or "container"
        detail = as_text(waiting.get("message"))
        if reason == Reason.CONTAINER_CRASH_LOOPING:
            last = ((status.get("lastState") or {}).get("terminated")) or {}
            exit_code = last.get("exitCode")
            detail = f"restarted {status.get('restartCount', 0)} time(s), last exit code {exit_code}"
        return reason, _clip(f"{name}: {kubelet_reason}" + (f" ({detail})" if detail else ""))
    return None


def pod_problem(pod: Mapping[str, Any]) -> PodProblem | None:
    """What keeps one pod from starting, or ``None`` (fine, or simply not there yet)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    name = as_text(meta.get("name")) or "?"
    role = "head" if (meta.get("labels") or {}).get(NODE_TYPE_LABEL) == NodeType.HEAD else "GPU worker"
    found = _container_problem(status.get("initContainerStatuses")) or _container_problem(
        status.get("containerStatuses")
    )
    if found is not None:
        return PodProblem(name, role, found[0], found[1])
    for cond in status.get("conditions") or []:
        if (
            isinstance(cond, Mapping)
            and cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return PodProblem(
                name, role, Reason.POD_UNSCHEDULABLE, _clip(as_text(cond.get("message")) or "no node fits")
            )
    return None


def pod_problems(pods: Iterable[Mapping[str, Any]]) -> tuple[PodProblem, ...]:
    """Every pod's problem, most actionable reason first, then by pod name (stable messages)."""
    found = [p for p in (pod_problem(pod) for pod in pods) if p is not None]
    return tuple(sorted(found, key=lambda p: (_PRIORITY.index(p.reason), p.role != "head", p.pod)))


def problems_summary(problems: tuple[PodProblem, ...]) -> str:
    """One line naming up to :data:`MAX_PODS_NAMED` pods, e.g. for a condition message."""
    named = "; ".join(p.describe() for p in problems[:MAX_PODS_NAMED])
    rest = len(problems) - MAX_PODS_NAMED
    return named + (f"; and {rest} more pod(s)" if rest > 0 else "")
