"""A job's GPU pools: the one list the launcher's gate, ``flashrl preflight``, goodput and metrics walk.

Every mode has the trainer's pool (``spec.resources``, KubeRay worker group ``gpu``); separate-async adds
the standalone rollout servers' pool (``spec.rollout.pool``, worker group ``rollout``). The names here are
what users read in status (``status.goodput.pools[].name``), metric labels (``pool``) and failure
messages; the worker group names are what KubeRay gives the pods (``ray.io/group``) and, through the
``RAY_NODE_TYPE_NAME`` variable KubeRay sets from that label in every Ray container
(``ray-operator/controllers/ray/common/pod.go``, ``setContainerEnvVars``), what Ray gives the nodes as
the default label ``ray.io/node-group``: how the gate tells the pools' GPUs apart on the Ray side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from flashrl_api.spec import FlashRLJobSpec, Toleration

#: The trainer's pool (``spec.resources``): FSDP training, and rollout too outside separate-async.
TRAINER_POOL: Final = "trainer"
#: The standalone rollout servers' pool (``spec.rollout.pool``, separate-async only).
ROLLOUT_POOL: Final = "rollout"
#: KubeRay worker group (``groupName``) of each pool.
TRAINER_WORKER_GROUP: Final = "gpu"
ROLLOUT_WORKER_GROUP: Final = "rollout"
#: The Ray node label Ray derives from ``RAY_NODE_TYPE_NAME`` (KubeRay: the pod's worker group).
RAY_NODE_GROUP_LABEL: Final = "ray.io/node-group"


@dataclass(frozen=True)
class GpuPool:
    """One pool's shape and placement, as the job asks for it."""

    name: str
    worker_group: str
    nodes: int
    gpus_per_node: int
    gpu_product: str
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()

    @property
    def gpus(self) -> int:
        """GPUs the pool holds while the job runs."""
        return self.nodes * self.gpus_per_node


def gpu_pools(spec: FlashRLJobSpec) -> tuple[GpuPool, ...]:
    """The trainer's pool, then the rollout pool when the job has one (separate-async)."""
    res = spec.resources
    pools = [
        GpuPool(
            TRAINER_POOL,
            TRAINER_WORKER_GROUP,
            res.nodes,
            res.gpus_per_node,
            res.gpu_product,
            dict(res.node_selector),
            tuple(res.tolerations),
        )
    ]
    pool = spec.rollout.pool
    if pool is not None:
        pools.append(
            GpuPool(
                ROLLOUT_POOL,
                ROLLOUT_WORKER_GROUP,
                pool.nodes,
                pool.gpus_per_node,
                pool.gpu_product,
                dict(pool.node_selector),
                tuple(pool.tolerations),
            )
        )
    return tuple(pools)
