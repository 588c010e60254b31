"""Security contexts of the Ray pods (pure): the restricted Pod Security Standard, where it can be met.

Kubernetes' restricted profile (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
asks every container for ``allowPrivilegeEscalation: false``, ``capabilities.drop: [ALL]`` (adding back
only ``NET_BIND_SERVICE``), a ``RuntimeDefault`` (or ``Localhost``) seccomp profile and
``runAsNonRoot: true``. Ray and verl need none of the dropped capabilities; NCCL over RDMA needs
``IPC_LOCK`` to pin memory, so a job that requests RDMA devices adds it to its GPU workers, which
leaves them at the baseline level (IPC_LOCK is not among baseline's allowed additions either: such a
job needs a namespace that is privileged, or admits it by exemption).

KubeRay copies container 0's security context into the ``wait-gcs-ready`` init container it injects
(``ray-operator/controllers/ray/common/pod.go`` at v1.7.0), so these settings cover that container too.
"""

from __future__ import annotations

from typing import Any, Final

from flashrl_api import FlashRLJobSpec

#: Seccomp profile of every Ray pod and container.
RUNTIME_DEFAULT: Final = {"type": "RuntimeDefault"}
#: The capability NCCL needs to register RDMA memory (it pins pages).
RDMA_CAPABILITY: Final = "IPC_LOCK"


def container_security_context(rdma: bool = False) -> dict[str, Any]:
    """No privilege escalation, no capabilities (IPC_LOCK only with RDMA), the runtime's seccomp profile."""
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if rdma:
        capabilities["add"] = [RDMA_CAPABILITY]
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": capabilities,
        "seccompProfile": dict(RUNTIME_DEFAULT),
    }


def pod_security_context(spec: FlashRLJobSpec) -> dict[str, Any]:
    """Non-root with the image's user (``images.runAsUser``) and volumes writable to its group.

    ``fsGroupChangePolicy: OnRootMismatch`` keeps the kubelet from re-owning every file of a model
    cache or checkpoint volume (hundreds of GB) at each pod start: it changes ownership only when the
    volume's root is not already the group's.
    """
    context: dict[str, Any] = {"seccompProfile": dict(RUNTIME_DEFAULT)}
    uid = spec.images.run_as_user
    if uid > 0:
        context.update(
            {
                "runAsNonRoot": True,
                "runAsUser": uid,
                "runAsGroup": uid,
                "fsGroup": uid,
                "fsGroupChangePolicy": "OnRootMismatch",
            }
        )
    return context
