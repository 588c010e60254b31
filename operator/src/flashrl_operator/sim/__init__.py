"""The emulated cluster: an API server, KubeRay and friends played, and the demo. Not the operator.

Installed with the ``sim`` extra (it needs kmock); the operator's core never imports it (an import
contract in ``pyproject.toml``). :class:`EmulatedCluster` (:mod:`.harness`) is the one way the demo,
the integration tests and the benchmark run the real operator against it.
"""

from flashrl_operator.sim.apiserver import (
    ACTOR_HEADER,
    EVENTS_RESOURCE,
    JOBS_RESOURCE,
    KUBELET,
    KUBERAY,
    LAUNCHER,
    PODS_RESOURCE,
    RAY_CLUSTERS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SCHEDULER,
    USER,
    ApiClient,
    EmulatedApiServer,
    Write,
    eventually,
    free_port,
    object_path,
    resource_key,
    watch_started,
)
from flashrl_operator.sim.harness import EmulatedCluster
from flashrl_operator.sim.standins import (
    CLUSTER_STARTING,
    SUBMITTED,
    SUCCEEDED,
    SUSPENDED,
    TRAINING,
    KubeRayStandIn,
    cluster_status,
    failed,
    image_pull_backoff,
    unschedulable,
)

__all__ = [
    "ACTOR_HEADER",
    "CLUSTER_STARTING",
    "EVENTS_RESOURCE",
    "JOBS_RESOURCE",
    "KUBELET",
    "KUBERAY",
    "LAUNCHER",
    "PODS_RESOURCE",
    "RAY_CLUSTERS_RESOURCE",
    "RAY_JOBS_RESOURCE",
    "SCHEDULER",
    "SUBMITTED",
    "SUCCEEDED",
    "SUSPENDED",
    "TRAINING",
    "USER",
    "ApiClient",
    "EmulatedApiServer",
    "EmulatedCluster",
    "KubeRayStandIn",
    "Write",
    "cluster_status",
    "eventually",
    "failed",
    "free_port",
    "image_pull_backoff",
    "object_path",
    "resource_key",
    "unschedulable",
    "watch_started",
]
