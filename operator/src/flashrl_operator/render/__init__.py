"""FlashRLJob -> the Kubernetes objects that run it (pure: no I/O, deterministic).

:func:`render` is the whole desired state of one job; the operator applies the list in order, the
CLI prints it (``flashrl render``), and the tests validate it against the real KubeRay schema.
"""

from __future__ import annotations

from typing import Any

from flashrl_api import FlashRLJob
from flashrl_operator.render.configmap import config_map
from flashrl_operator.render.labels import JOB_LABEL, KUEUE_QUEUE_LABEL, MANAGED_BY, labels, owner_reference
from flashrl_operator.render.names import ChildNames, child_names
from flashrl_operator.render.pod import HEAD_CONTAINER, WORKER_CONTAINER
from flashrl_operator.render.rayjob import DRY_RUN_ENTRYPOINT, ENTRYPOINT, WORKER_GROUP, entrypoint, ray_job
from flashrl_operator.render.rbac import role, role_binding, service_account

__all__ = [
    "DRY_RUN_ENTRYPOINT",
    "ENTRYPOINT",
    "HEAD_CONTAINER",
    "JOB_LABEL",
    "KUEUE_QUEUE_LABEL",
    "MANAGED_BY",
    "WORKER_CONTAINER",
    "WORKER_GROUP",
    "ChildNames",
    "child_names",
    "entrypoint",
    "labels",
    "owner_reference",
    "render",
]


def render(job: FlashRLJob) -> list[dict[str, Any]]:
    """Every child of ``job`` in apply order: ServiceAccount, Role, RoleBinding, ConfigMap, RayJob.

    The RBAC and the ConfigMap come first so the head pod's ServiceAccount and spec volume exist
    before KubeRay creates it.
    """
    return [service_account(job), role(job), role_binding(job), config_map(job), ray_job(job)]
