"""The emulated cluster: an API server, KubeRay and friends played, and the demo. Not the operator.

Installed with the ``sim`` extra (it needs kmock); the operator's core never imports it (an import
contract in ``pyproject.toml``). :class:`EmulatedCluster` (:mod:`.harness`) is the one way the demo,
the integration tests and the benchmark run the real operator against it.
"""

from flashrl_operator.sim.apiserver import (
    CONFIG_MAPS_RESOURCE,
    EXPERIMENTS_RESOURCE,
    JOBS_RESOURCE,
    PODS_RESOURCE,
    RAY_CLUSTERS_RESOURCE,
    RAY_JOBS_RESOURCE,
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
from flashrl_operator.sim.staging import BATCH_JOBS_RESOURCE, JOB_CONTROLLER, STAGER, StagingStandIn
from flashrl_operator.sim.standins import (
    CLUSTER_STARTING,
    SUBMITTED,
    SUCCEEDED,
    SUSPENDED,
    TRAINING,
    GarbageCollectorStandIn,
    KubeRayStandIn,
    cluster_status,
    failed,
    image_pull_backoff,
    timed_verl_step,
    unschedulable,
    verl_step_metrics,
)

__all__ = [
    "BATCH_JOBS_RESOURCE",
    "CLUSTER_STARTING",
    "CONFIG_MAPS_RESOURCE",
    "EXPERIMENTS_RESOURCE",
    "JOBS_RESOURCE",
    "JOB_CONTROLLER",
    "PODS_RESOURCE",
    "RAY_CLUSTERS_RESOURCE",
    "RAY_JOBS_RESOURCE",
    "STAGER",
    "SUBMITTED",
    "SUCCEEDED",
    "SUSPENDED",
    "TRAINING",
    "ApiClient",
    "EmulatedApiServer",
    "EmulatedCluster",
    "GarbageCollectorStandIn",
    "KubeRayStandIn",
    "StagingStandIn",
    "Write",
    "cluster_status",
    "eventually",
    "failed",
    "free_port",
    "image_pull_backoff",
    "object_path",
    "resource_key",
    "timed_verl_step",
    "unschedulable",
    "verl_step_metrics",
    "watch_started",
]
