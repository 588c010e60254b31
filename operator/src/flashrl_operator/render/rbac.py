"""The launcher's identity: a ServiceAccount allowed to patch only its own job's status (pure).

The launcher runs as the Ray driver inside the head pod and reports training progress by patching
``status.progress`` of its FlashRLJob. The Role is scoped to that single object (``resourceNames``)
and to the status subresource, so a compromised pod cannot change any spec.
"""

from __future__ import annotations

from typing import Any, Final

from flashrl_api import GROUP, PLURAL, FlashRLJob
from flashrl_operator.render.labels import object_meta
from flashrl_operator.render.names import child_names

_COMPONENT: Final = "launcher-rbac"


def service_account(job: FlashRLJob) -> dict[str, Any]:
    """The ServiceAccount the Ray head pod runs as."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(job, child_names(job).service_account, _COMPONENT),
    }


def role(job: FlashRLJob) -> dict[str, Any]:
    """Read and patch the status of this one FlashRLJob, nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(job, child_names(job).role, _COMPONENT),
        "rules": [
            {
                "apiGroups": [GROUP],
                "resources": [f"{PLURAL}/status"],
                "resourceNames": [job.name],
                "verbs": ["get", "patch"],
            }
        ],
    }


def role_binding(job: FlashRLJob) -> dict[str, Any]:
    """Grant :func:`role` to :func:`service_account`."""
    names = child_names(job)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(job, names.role_binding, _COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.role},
        "subjects": [{"kind": "ServiceAccount", "name": names.service_account, "namespace": job.namespace}],
    }
