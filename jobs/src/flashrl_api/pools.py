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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from flashrl_api.goodput import GoodputPhase, Ledger

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
    #: Where the pool's placement is written in the spec (``spec.resources``, ``spec.rollout.pool``):
    #: how the admin's policy names the field a rendered pod's toleration came from.
    spec_path: str = "spec.resources"

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
            "spec.resources",
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
                "spec.rollout.pool",
            )
        )
    return tuple(pools)


def held_gpus(spec: FlashRLJobSpec) -> int:
    """GPUs an attempt holds: every pool's (the goodput ledger multiplies its phases by this)."""
    return sum(pool.gpus for pool in gpu_pools(spec))


#: What each pool of a separate-async job waits for, and the goodput phases that are that wait. The
#: trainer's ``timing_s/gen`` is its wait for the rollout pool's samples (verl 0.9.1's V1 trainer times
#: ``replay_buffer.sample`` under ``gen``, ``trainer/ppo/v1/trainer_base.py`` ``_step_once``); the rollout
#: servers stop generating while ``timing_s/update_weights`` moves new weights to them.
POOL_WAITS: Final[dict[str, tuple[str, frozenset[GoodputPhase]]]] = {
    TRAINER_POOL: ("samples", frozenset({GoodputPhase.GENERATION, GoodputPhase.DISCARDED_GENERATION})),
    ROLLOUT_POOL: ("weights", frozenset({GoodputPhase.WEIGHT_SYNC})),
}


def pool_goodput(ledger: Ledger, pools: Sequence[tuple[str, int]]) -> list[dict[str, object]]:
    """``status.goodput.pools``: each pool's share of the ledger (its GPUs over all the pools'), and the
    GPU-seconds it spent waiting for the other pool (:data:`POOL_WAITS`). Empty for a job of one pool:
    there the trainer's GPUs generate themselves and nothing waits for another pool."""
    total = sum(gpus for _, gpus in pools)
    if len(pools) < 2 or total <= 0:
        return []
    out: list[dict[str, object]] = []
    for name, gpus in pools:
        share = gpus / total
        waiting_for, phases = POOL_WAITS[name]
        waiting = sum(v for p, v in ledger.gpu_seconds.items() if p in phases)
        out.append(
            {
                "name": name,
                "gpus": gpus,
                "heldGPUSeconds": round(ledger.held_gpu_seconds * share, 1),
                "trainingGPUSeconds": round(ledger.training_gpu_seconds * share, 1),
                "waitingFor": waiting_for,
                "waitingGPUSeconds": round(waiting * share, 1),
            }
        )
    return out
