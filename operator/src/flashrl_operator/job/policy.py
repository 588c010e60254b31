"""The cluster admin's policy for FlashRLJobs (pure): what a namespace user may not ask for.

Creating a FlashRLJob lets a user run an image of their choice with the namespace's Secrets and claims
on GPU nodes, as creating a pod does (docs/install.md). Kubernetes' own admission cannot see inside a
FlashRLJob before the operator turns it into pods, so the operator checks the admin's policy (chart
values ``policy.*`` -> operator flags ``--allowed-registry`` ...) on every job, before it creates
anything, and refuses a violating job with reason ``PolicyViolation`` and the field path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from flashrl_api import FlashRLJob, Problem
from flashrl_api.spec import Toleration

#: Docker Hub, where a reference without a registry host points.
DEFAULT_REGISTRY: Final = "docker.io"


@dataclass(frozen=True)
class AdminPolicy:
    """Each tuple empty means "no restriction" (the default: the policy is opt-in)."""

    #: Registries (``ghcr.io``), or registry paths (``ghcr.io/my-org``), images may come from.
    allowed_registries: tuple[str, ...] = ()
    #: PriorityClass names a job may use (a job without one is always allowed).
    allowed_priority_classes: tuple[str, ...] = ()
    #: Extended resource names ``resources.rdma.resourceName`` may request.
    allowed_rdma_resources: tuple[str, ...] = ()
    #: Refuse tolerations with operator Exists and no key (they tolerate every taint of every node).
    forbid_keyless_exists_tolerations: bool = False

    @property
    def restricts_anything(self) -> bool:
        """Whether any rule is set."""
        return bool(
            self.allowed_registries
            or self.allowed_priority_classes
            or self.allowed_rdma_resources
            or self.forbid_keyless_exists_tolerations
        )


def normalized_image(image: str) -> str:
    """The image reference with its registry spelled out, as container runtimes resolve it.

    The distribution reference grammar (``github.com/distribution/reference``, ``normalize.go``): the
    first path component is a registry host when it contains ``.`` or ``:`` or is ``localhost``;
    otherwise the image is on Docker Hub, under ``library/`` when it has a single component. Written
    here because the grammar is Go's; the policy needs only this much of it.
    """
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"{DEFAULT_REGISTRY}/{image}" if sep else f"{DEFAULT_REGISTRY}/library/{image}"


def image_allowed(image: str, allowed: Iterable[str]) -> bool:
    """Whether ``image`` is under one of the ``allowed`` registries or registry paths (whole segments:
    ``ghcr.io/org`` admits ``ghcr.io/org/x:1``, not ``ghcr.io/organisation/x`` or ``ghcr.io.evil.com/x``)."""
    full = normalized_image(image)
    return any(full.startswith(entry.rstrip("/") + "/") for entry in allowed)


def _keyless_exists(tolerations: Iterable[Toleration]) -> list[int]:
    return [i for i, t in enumerate(tolerations) if t.operator == "Exists" and not t.key]


def policy_problems(job: FlashRLJob, policy: AdminPolicy) -> list[Problem]:
    """Every way ``job`` breaks ``policy``, each at its field path (empty when it complies)."""
    spec = job.spec
    problems: list[Problem] = []
    if policy.allowed_registries and not image_allowed(spec.images.trainer, policy.allowed_registries):
        problems.append(
            Problem(
                "spec.images.trainer",
                f"image {spec.images.trainer!r} is not from an allowed registry "
                f"({', '.join(policy.allowed_registries)})",
            )
        )
    priority = spec.scheduling.priority_class_name
    if (
        policy.allowed_priority_classes
        and priority is not None
        and priority not in policy.allowed_priority_classes
    ):
        problems.append(
            Problem(
                "spec.scheduling.priorityClassName",
                f"PriorityClass {priority!r} is not allowed ({', '.join(policy.allowed_priority_classes)})",
            )
        )
    rdma = spec.resources.rdma
    if (
        policy.allowed_rdma_resources
        and rdma is not None
        and rdma.resource_name not in policy.allowed_rdma_resources
    ):
        problems.append(
            Problem(
                "spec.resources.rdma.resourceName",
                f"RDMA resource {rdma.resource_name!r} is not allowed "
                f"({', '.join(policy.allowed_rdma_resources)})",
            )
        )
    if policy.forbid_keyless_exists_tolerations:
        for path, tolerations in (
            ("spec.resources.tolerations", spec.resources.tolerations),
            ("spec.resources.head.tolerations", spec.resources.head.tolerations),
        ):
            problems.extend(
                Problem(
                    f"{path}[{i}]",
                    "a toleration with operator Exists and no key tolerates "
                    "every "
                    "taint of every node; name the taint's key",
                )
                for i in _keyless_exists(tolerations)
            )
    return problems
