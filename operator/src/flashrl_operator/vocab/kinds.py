"""Every kind the operator reads or writes: one registry.

The I/O layer finds an object's REST path here (:func:`resource_of`), and the chart's RBAC is
tested against :data:`KINDS` (``tests/chart/test_chart_rbac.py``), so adding a child kind (a
NetworkPolicy, a batch/v1 Job) is its renderer plus one entry in :data:`CHILD_KINDS` here, and the
chart's ClusterRole rule the test then asks for. KubeRay's kinds come from
:mod:`flashrl_operator.vocab.kuberay`, the FlashRLJob's from :mod:`flashrl_api`.

A table rather than the API server's discovery (``kubernetes_asyncio``'s dynamic client): discovery
would cost requests at every start and need read access to every API group, and it would tell the
operator the plurals but not which kinds it may touch; this table is what the chart's RBAC and the
ownership tests are checked against, and a wrong plural fails the emulator tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from flashrl_api import GROUP, KIND, PLURAL, VERSION
from flashrl_api.experiment import EXPERIMENT_KIND, EXPERIMENT_PLURAL
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.resource import Resource

FLASHRL_JOB: Final = Resource(f"{GROUP}/{VERSION}", KIND, PLURAL)
#: The operator reads FlashRLExperiments, creates their FlashRLJobs and writes their status.
FLASHRL_EXPERIMENT: Final = Resource(f"{GROUP}/{VERSION}", EXPERIMENT_KIND, EXPERIMENT_PLURAL)
SERVICE_ACCOUNT: Final = Resource("v1", "ServiceAccount", "serviceaccounts")
CONFIG_MAP: Final = Resource("v1", "ConfigMap", "configmaps")
ROLE: Final = Resource("rbac.authorization.k8s.io/v1", "Role", "roles")
ROLE_BINDING: Final = Resource("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings")
NETWORK_POLICY: Final = Resource("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies")
EVENT: Final = Resource("v1", "Event", "events")
#: The RayCluster's pods; the operator only lists them while a cluster is starting.
POD: Final = Resource("v1", "Pod", "pods")
#: The nodes (cluster-scoped): listed, GPU nodes only, before a new job creates anything, to judge
#: whether its GPU pods can ever fit (job/fits.py); and, with the pods bound to them, whose pods hold the
#: GPUs a starting job waits for.
NODE: Final = Resource("v1", "Node", "nodes")
#: The PriorityClasses (cluster-scoped) the job's pods name: each read once before a new job creates
#: anything, as the claims are (job/fits.py, ``PriorityClassNotFound``).
PRIORITY_CLASS: Final = Resource("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses")
#: The staging Job (render/staging.py), run before the RayJob when sources must be downloaded.
JOB: Final = Resource("batch/v1", "Job", "jobs")
#: The claims sources are staged into: read, and annotated with what is staged on them (staging.py).
PERSISTENT_VOLUME_CLAIM: Final = Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims")

#: The kinds :func:`flashrl_operator.render.render` produces (the operator applies and owns them).
CHILD_KINDS: Final[tuple[Resource, ...]] = (
    SERVICE_ACCOUNT,
    ROLE,
    ROLE_BINDING,
    CONFIG_MAP,
    NETWORK_POLICY,
    JOB,
    kuberay.RAY_JOB,
)

#: Kinds the operator only reads.
READ_KINDS: Final[tuple[Resource, ...]] = (kuberay.RAY_CLUSTER, POD, NODE, PRIORITY_CLASS)

#: Kinds the operator reads and patches but neither creates nor owns.
ANNOTATED_KINDS: Final[tuple[Resource, ...]] = (PERSISTENT_VOLUME_CLAIM,)

#: Every kind the operator touches, by (apiVersion, kind).
KINDS: Final[dict[tuple[str, str], Resource]] = {
    (r.api_version, r.kind): r
    for r in (FLASHRL_JOB, FLASHRL_EXPERIMENT, EVENT, *CHILD_KINDS, *READ_KINDS, *ANNOTATED_KINDS)
}


def resource_of(obj: Mapping[str, Any]) -> Resource:
    """The :class:`Resource` of an object (by its apiVersion and kind)."""
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    try:
        return KINDS[key]
    except KeyError:
        raise ValueError(
            f"the operator does not manage {key[1]} ({key[0]}): add it to flashrl_operator.vocab.kinds"
        ) from None


def describe(obj: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` for messages."""
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
