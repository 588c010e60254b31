"""FlashRLJob -> the whole desired state: every Kubernetes object that runs it (pure, deterministic).

:func:`render` returns a :class:`DesiredState`: the children in apply order, exactly as the
operator applies them (the RayJob's spec annotation included), which is also exactly what
``flashrl render`` prints and what the tests validate against the real KubeRay schema.

Adding a child kind (a NetworkPolicy, a batch/v1 Job, ...) takes:

1. a builder ``<kind>(job) -> dict`` in a module of this package, added to :func:`render` in
   the place it must be applied (objects a pod needs come before the RayJob);
2. one entry in :data:`flashrl_operator.vocab.kinds.CHILD_KINDS` (its REST plural), and the chart's
   ClusterRole rule that ``tests/chart/test_chart_rbac.py`` then asks for.

The reconciler applies whatever :func:`render` returns; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from flashrl_api import FlashRLJob
from flashrl_operator.render.configmap import config_map
from flashrl_operator.render.history import history_config_map
from flashrl_operator.render.labels import (
    ATTEMPT_LABEL,
    JOB_LABEL,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    labels,
    owner_reference,
)
from flashrl_operator.render.names import ChildNames, child_names
from flashrl_operator.render.network import NetworkSettings, network_policy
from flashrl_operator.render.pod import HEAD_CONTAINER, WORKER_CONTAINER
from flashrl_operator.render.rayjob import (
    DRY_RUN_ENTRYPOINT,
    ENTRYPOINT,
    ROLLOUT_WORKER_GROUP,
    WORKER_GROUP,
    AttemptContext,
    attempt_ray_job_name,
    entrypoint,
    ray_job,
)
from flashrl_operator.render.rbac import role, role_binding, service_account
from flashrl_operator.render.staging import staging_job
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.kinds import JOB, resource_of
from flashrl_operator.vocab.resource import Resource

__all__ = [
    "ATTEMPT_LABEL",
    "DRY_RUN_ENTRYPOINT",
    "ENTRYPOINT",
    "HEAD_CONTAINER",
    "JOB_LABEL",
    "KUEUE_QUEUE_LABEL",
    "MANAGED_BY",
    "ROLLOUT_WORKER_GROUP",
    "WORKER_CONTAINER",
    "WORKER_GROUP",
    "AttemptContext",
    "Child",
    "ChildNames",
    "DesiredState",
    "NetworkSettings",
    "attempt_ray_job_name",
    "child_names",
    "entrypoint",
    "history_config_map",
    "labels",
    "owner_reference",
    "render",
]


@dataclass(frozen=True)
class Child:
    """One object to apply, with the REST identity of its kind."""

    resource: Resource
    body: dict[str, Any]

    @property
    def namespace(self) -> str:
        """Its namespace."""
        return str(self.body["metadata"]["namespace"])

    @property
    def name(self) -> str:
        """Its name."""
        return str(self.body["metadata"]["name"])

    def describe(self) -> str:
        """``Kind namespace/name``."""
        return self.resource.describe(self.namespace, self.name)

    @classmethod
    def of(cls, body: dict[str, Any]) -> Child:
        """Wrap a rendered manifest (its kind must be in :data:`flashrl_operator.vocab.kinds.KINDS`)."""
        return cls(resource_of(body), body)


@dataclass(frozen=True)
class DesiredState(Sequence[dict[str, Any]]):
    """Everything one FlashRLJob should have in the cluster, in apply order.

    A sequence of the manifests themselves (``for obj in render(job)``); :attr:`children` pairs
    each with its kind's REST identity, :attr:`ray_job` is the one KubeRay runs.
    """

    children: tuple[Child, ...]
    queued: bool = False
    """Kueue admits the job (``spec.scheduling.queueName``): it, not the operator, owns ``spec.suspend``."""

    @property
    def ray_job(self) -> Child:
        """The RayJob."""
        return next(c for c in self.children if c.resource == kuberay.RAY_JOB)

    @property
    def staging_job(self) -> Child | None:
        """The staging Job, when sources must be downloaded; the RayJob waits for it to succeed."""
        return next((c for c in self.children if c.resource == JOB), None)

    def manifests(self) -> list[dict[str, Any]]:
        """The objects, in apply order (what ``flashrl render`` prints)."""
        return [c.body for c in self.children]

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [c.body for c in self.children[index]]
        return self.children[index].body

    def __len__(self) -> int:
        return len(self.children)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (c.body for c in self.children)


def render(
    job: FlashRLJob, attempt: AttemptContext | None = None, network: NetworkSettings | None = None
) -> DesiredState:
    """Every child of ``job`` in apply order: ServiceAccount, Role, RoleBinding, ConfigMap,
    NetworkPolicy (unless ``network.enabled`` is off), the staging Job (only with Hugging Face
    sources), RayJob.

    The RBAC and the ConfigMap come first so the pods' ServiceAccount and spec volume exist before
    they are created, and the NetworkPolicy before any Ray pod can be reached. The reconciler applies
    the RayJob only once the staging Job succeeded (or the sources were staged before): no GPU is
    requested while anything downloads. The RayJob is the current attempt's (the first when not given).
    """
    network = network or NetworkSettings()
    stage = staging_job(job)
    bodies = [service_account(job), role(job), role_binding(job), config_map(job)]
    if network.enabled:
        bodies.append(network_policy(job, network))
    if stage is not None:
        bodies.append(stage)
    bodies.append(ray_job(job, attempt))
    return DesiredState(
        children=tuple(Child.of(body) for body in bodies),
        queued=job.spec.scheduling.queue_name is not None,
    )
