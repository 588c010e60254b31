"""The cluster admin's policy for FlashRLJobs (pure): what a namespace user may not ask for.

Creating a FlashRLJob lets a user run an image of their choice with the namespace's Secrets and claims
on GPU nodes, as creating a pod does (docs/install.md). Kubernetes' own admission cannot see inside a
FlashRLJob before the operator turns it into pods, so the operator checks the admin's policy (chart
values ``policy.*`` -> operator flags ``--allowed-registry`` ...) on every job, before it creates
anything, and refuses a violating job with reason ``PolicyViolation`` and the field path.

The rules about pods (images, priority, tolerations) judge the pods the job renders, every pod template
of every child (:func:`rendered_pods`: the Ray head, every worker group of :mod:`flashrl_api.pools`, the
submitter, the staging Job), not the spec fields that feed them: a field added later that reaches a pod
is judged without anyone remembering to list it here. A problem is named at the spec field the value
came from when the renderer's sources say which (:func:`_toleration_sources`), else at the rendered
pod's own path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api import FlashRLJob, Problem
from flashrl_api.pools import gpu_pools
from flashrl_api.spec import Toleration
from flashrl_operator.render import DesiredState, render
from flashrl_operator.vocab import kuberay

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


#: The group of a RayJob's head pod and of its submitter pod (worker groups go by their ``groupName``).
HEAD_GROUP: Final = "head"
SUBMITTER_GROUP: Final = "submitter"


@dataclass(frozen=True)
class RenderedPod:
    """One pod template among a job's children."""

    where: str
    """``<Kind> <name> <path of the pod spec>``: where a value no spec field explains is named."""
    group: str
    """The RayJob's ``head``, ``submitter`` or worker group name; another child's kind (``Job``)."""
    spec: Mapping[str, Any]


def _pod_specs(node: object, path: str, group: str) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """Every pod spec under ``node`` (a mapping with a ``containers`` list), with its path and group."""
    if isinstance(node, Mapping):
        if isinstance(node.get("containers"), list):
            yield path, group, node
            return
        if isinstance(node.get("groupName"), str):
            group = node["groupName"]
        for key, value in node.items():
            inner = {"headGroupSpec": HEAD_GROUP, "submitterPodTemplate": SUBMITTER_GROUP}.get(key, group)
            yield from _pod_specs(value, f"{path}.{key}" if path else str(key), inner)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _pod_specs(value, f"{path}[{i}]", group)


def rendered_pods(desired: DesiredState) -> list[RenderedPod]:
    """Every pod template of every child in ``desired``, found by shape (a ``containers`` list), so a
    group or child added to the renderer is judged without being listed here."""
    pods: list[RenderedPod] = []
    for child in desired.children:
        kind = child.resource.kind
        group = "" if child.resource == kuberay.RAY_JOB else kind
        for path, found, spec in _pod_specs(child.body.get("spec"), "spec", group):
            pods.append(RenderedPod(f"{kind} {child.name} {path}", found, spec))
    return pods


def _toleration_sources(job: FlashRLJob) -> dict[str, tuple[str, tuple[Toleration, ...]]]:
    """Each pod group's tolerations as the spec gives them, and the field they are written in: the head
    placement for the head, the submitter and the staging Job; each pool's for its worker group."""
    head = ("spec.resources.head.tolerations", tuple(job.spec.resources.head.tolerations))
    sources = {HEAD_GROUP: head, SUBMITTER_GROUP: head, "Job": head}
    for pool in gpu_pools(job.spec):
        sources[pool.worker_group] = (f"{pool.spec_path}.tolerations", pool.tolerations)
    return sources


def _keyless_exists(toleration: object) -> bool:
    return (
        isinstance(toleration, Mapping)
        and toleration.get("operator") == "Exists"
        and not toleration.get("key")
    )


def _toleration_problems(job: FlashRLJob, pods: Iterable[RenderedPod]) -> list[Problem]:
    sources = _toleration_sources(job)
    problems: dict[str, Problem] = {}
    for pod in pods:
        field, given = sources.get(pod.group, ("", ()))
        wire = [t.to_wire() for t in given]
        rendered = pod.spec.get("tolerations") or []
        for i, toleration in enumerate(rendered if isinstance(rendered, list) else []):
            if not _keyless_exists(toleration):
                continue
            at = next((f"{field}[{j}]" for j, w in enumerate(wire) if w == toleration), None)
            path = at or f"{pod.where}.tolerations[{i}]"
            problems.setdefault(
                path,
                Problem(
                    path,
                    "a toleration with operator Exists and no key tolerates every taint of every node "
                    f"(it reaches the pods of {pod.group or pod.where}); name the taint's key",
                ),
            )
    return list(problems.values())


def _image_problems(job: FlashRLJob, pods: Iterable[RenderedPod], allowed: tuple[str, ...]) -> list[Problem]:
    problems: dict[str, Problem] = {}
    for pod in pods:
        for kind in ("initContainers", "containers"):
            containers = pod.spec.get(kind) or []
            for i, container in enumerate(containers if isinstance(containers, list) else []):
                image = str(container.get("image", "")) if isinstance(container, Mapping) else ""
                if image_allowed(image, allowed):
                    continue
                path = (
                    "spec.images.trainer"
                    if image == job.spec.images.trainer
                    else f"{pod.where}.{kind}[{i}].image"
                )
                problems.setdefault(
                    path,
                    Problem(path, f"image {image!r} is not from an allowed registry ({', '.join(allowed)})"),
                )
    return list(problems.values())


def _priority_problems(
    job: FlashRLJob, pods: Iterable[RenderedPod], allowed: tuple[str, ...]
) -> list[Problem]:
    problems: dict[str, Problem] = {}
    for pod in pods:
        priority = pod.spec.get("priorityClassName")
        if priority is None or priority in allowed:
            continue
        path = (
            "spec.scheduling.priorityClassName"
            if priority == job.spec.scheduling.priority_class_name
            else f"{pod.where}.priorityClassName"
        )
        problems.setdefault(
            path, Problem(path, f"PriorityClass {priority!r} is not allowed ({', '.join(allowed)})")
        )
    return list(problems.values())


def policy_problems(
    job: FlashRLJob, policy: AdminPolicy, desired: DesiredState | None = None
) -> list[Problem]:
    """Every way ``job`` breaks ``policy``, each at its field path (empty when it complies).

    ``desired`` is what the operator would apply for ``job`` (rendered here when not given): the pod
    rules judge its pods.
    """
    if not policy.restricts_anything:
        return []
    pods = rendered_pods(desired if desired is not None else render(job))
    spec = job.spec
    problems: list[Problem] = []
    if policy.allowed_registries:
        problems += _image_problems(job, pods, policy.allowed_registries)
    if policy.allowed_priority_classes:
        problems += _priority_problems(job, pods, policy.allowed_priority_classes)
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
        problems += _toleration_problems(job, pods)
    return problems
