"""Labels, ownership and metadata shared by every rendered object (pure).

The ownerReference is what makes deleting a FlashRLJob garbage-collect its RayJob, ConfigMap and
RBAC objects; the labels are how the operator, ``kubectl get -l`` and dashboards find them.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from flashrl_api import API_VERSION, KIND, FlashRLJob
from flashrl_operator.render.names import label_value

#: The label naming who manages an object, and its value on everything the operator creates.
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "flashrl-operator"
#: Label carrying the owning FlashRLJob's name on every child.
JOB_LABEL: Final = "flashrl.dev/job"
#: Label carrying the attempt number (from 1) on each attempt's RayJob.
ATTEMPT_LABEL: Final = "flashrl.dev/attempt"
#: Kueue's LocalQueue label; its presence hands admission (``spec.suspend``) to Kueue.
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"

Component = Literal["ray-job", "spec", "launcher-rbac", "network", "staging", "history"]


def labels(job: FlashRLJob, component: Component) -> dict[str, str]:
    """The recommended ``app.kubernetes.io/*`` labels plus :data:`JOB_LABEL` for one child."""
    instance = label_value(job.name)
    return {
        "app.kubernetes.io/name": "flashrl",
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/component": component,
        MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/part-of": "flashrl",
        JOB_LABEL: instance,
    }


def owner_reference(job: FlashRLJob) -> dict[str, Any] | None:
    """The controller ownerReference to the job, or None before the API server has assigned a uid."""
    if job.uid is None:
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(
    job: FlashRLJob, name: str, component: Component, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """``metadata`` for a child: name, the job's namespace, labels and (when known) the owner."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": job.namespace,
        "labels": {**labels(job, component), **(extra_labels or {})},
    }
    owner = owner_reference(job)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta
