"""``flashrl preflight``'s pure judgements: free GPUs (allocatable minus what live pods request), a
running KubeRay operator, and an experiment's variants alone and at once."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from flashrl_api import FlashRLJob, parse_job
from flashrl_operator.job.preflight import (
    ClusterFacts,
    cluster_notes,
    cluster_problems,
    experiment_check,
    gpus_in_use,
    offline_limits,
    pod_gpus,
    pool_fits,
)

CRDS = Path(__file__).resolve().parents[2] / "data" / "crds" / "kuberay-v1.7.0"
H20 = {"nvidia.com/gpu.product": "NVIDIA-H20"}


def _lease(renewed: datetime | None = None) -> dict[str, Any]:
    """KubeRay's leader-election Lease, renewed now unless told when."""
    return {
        "metadata": {"name": "ray-operator-leader", "namespace": "kuberay-system"},
        "spec": {
            "holderIdentity": "kuberay-0",
            "leaseDurationSeconds": 15,
            "renewTime": (renewed or datetime.now(UTC)).isoformat().replace("+00:00", "Z"),
        },
    }


def _node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": H20},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def _pod(node: str, gpus: int, phase: str = "Running", *, limits_only: bool = False) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if not limits_only:
        resources["requests"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase},
    }


def _job(name: str = "j", **resources: Any) -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": name, "namespace": "rl"},
            "spec": {"resources": resources} if resources else {},
        }
    )


def _facts(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None, **extra: Any) -> ClusterFacts:
    fields: dict[str, Any] = {
        "namespace": {},
        "claims": {
            c: {"status": {"phase": "Bound"}, "spec": {"accessModes": ["ReadWriteMany"]}}
            for c in ("hf-cache", "rl-data", "rl-checkpoints")
        },
        "secrets": {},
        "nodes": nodes,
        "crds": {
            n: yaml.safe_load((CRDS / f"ray.io_{n.split('.')[0]}.yaml").read_text())
            for n in ("rayjobs.ray.io", "rayclusters.ray.io")
        },
        "kuberay_images": [],
        "kuberay_leases": [_lease()],
        "gpus_in_use": None if pods is None else gpus_in_use(pods),
        "now": time.time(),
    }
    return ClusterFacts(**(fields | extra))


def _gpu_lines(problems: list[str]) -> list[str]:
    return [p for p in problems if "GPU" in p and not p.startswith("CRD")]


def test_a_pod_holds_its_requests_or_its_limits_and_terminated_pods_hold_nothing() -> None:
    assert pod_gpus(_pod("a", 8, limits_only=True)) == 8
    used = gpus_in_use(
        [_pod("a", 4), _pod("a", 4, "Pending"), _pod("a", 8, "Succeeded"), _pod("b", 2, "Failed")]
    )
    assert used == {"a": 8}


def test_every_gpu_in_use_is_a_problem_naming_each_node() -> None:
    facts = _facts([_node("h20-a")], [_pod("h20-a", 8)])
    (line,) = _gpu_lines(cluster_problems(_job(), facts, "1.7.0"))
    assert line.startswith("GPUs in use: 0 of the 1 GPU pod(s) of 8 nvidia.com/gpu of the job fit")
    assert "h20-a: 0 of 8 free" in line


def test_free_gpus_pass_and_unreadable_pods_are_a_note_not_a_problem() -> None:
    assert (
        _gpu_lines(
            cluster_problems(_job(), _facts([_node("h20-a")], [_pod("h20-a", 8, "Succeeded")]), "1.7.0")
        )
        == []
    )
    blind = _facts([_node("h20-a")], None)
    assert _gpu_lines(cluster_problems(_job(), blind, "1.7.0")) == []
    assert any("free GPUs" in note for note in cluster_notes(blind))


def test_no_running_kuberay_operator_is_a_problem_saying_what_was_checked() -> None:
    stale = _lease(datetime(2020, 1, 1, tzinfo=UTC))
    not_ready = {
        "metadata": {"namespace": "kuberay-system", "name": "kuberay-operator"},
        "spec": {"replicas": 1},
    }
    facts = _facts([_node("h20-a")], [], kuberay_leases=[stale], kuberay_deployments=[not_ready])
    (line,) = [p for p in cluster_problems(_job(), facts, "1.7.0") if "operator" in p]
    assert line.startswith(
        "KubeRay's operator is not running: no Deployment labelled "
        "app.kubernetes.io/name=kuberay-operator has a ready replica"
    )
    assert "kuberay-system/kuberay-operator (0 of 1 ready)" in line
    assert "no Lease ray-operator-leader" in line
    ready = not_ready | {"status": {"readyReplicas": 1}}
    assert not [
        p
        for p in cluster_problems(
            _job(), _facts([_node("h20-a")], [], kuberay_leases=[], kuberay_deployments=[ready]), "1.7.0"
        )
        if "operator is not" in p
    ]
    blind = _facts([_node("h20-a")], [], kuberay_leases=None, kuberay_deployments=None)
    assert not [p for p in cluster_problems(_job(), blind, "1.7.0") if "operator is not" in p]
    assert any("KubeRay's operator runs" in note for note in cluster_notes(blind))


def test_an_experiment_checks_each_variant_and_the_variants_run_at_once() -> None:
    variants = [(v, _job(f"e-{v}")) for v in ("a", "b", "c")]
    one_node = _facts([_node("h20-a")], [])
    one_at_a_time = experiment_check(variants, 1, one_node, "1.7.0")
    assert one_at_a_time.ok and one_at_a_time.at_once == 1
    together = experiment_check(variants, None, one_node, "1.7.0")
    assert not together.ok and together.at_once == 3
    (too_few,) = together.capacity
    assert too_few.startswith("GPUs too few: 1 of the 3 GPU pod(s) of 8 nvidia.com/gpu of 3 variants")
    three_nodes = _facts([_node("h20-a"), _node("h20-b"), _node("h20-c")], [_pod("h20-c", 1)])
    busy_one = experiment_check(variants, None, three_nodes, "1.7.0")
    (in_use,) = busy_one.capacity
    assert in_use.startswith("GPUs in use: 2 of the 3 GPU pod(s)")
    assert "h20-c: 7 of 8 free" in in_use
    assert too_few.endswith("spec.parallelism: 1 runs them one after another")
    busy = experiment_check(variants, 1, _facts([_node("h20-a")], [_pod("h20-a", 8)]), "1.7.0")
    assert [line[:12] for line in busy.shared] == ["GPUs in use:"]
    assert busy.variants == {"a": [], "b": [], "c": []}


def test_nodes_the_user_may_not_list_are_a_note_not_a_missing_gpu_node() -> None:
    blind = _facts([], None, nodes_readable=False)
    assert not [p for p in cluster_problems(_job(), blind, "1.7.0") if "node(s)" in p or "GPUs" in p]
    assert cluster_notes(blind) == ["not checked: GPU nodes and their GPUs (your user may not list nodes)"]


def _separate_async(pool: dict[str, Any], name: str = "sa", **resources: Any) -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": name, "namespace": "rl"},
            "spec": {
                "training": {"mode": "separate-async", "async": {"parameterSyncStep": 1}},
                "rollout": {"pool": pool},
                **({"resources": resources} if resources else {}),
            },
        }
    )


def _pool_lines(problems: list[str]) -> list[str]:
    return [p for p in problems if "pool" in p]


def test_the_rollout_pool_is_counted_on_its_own_nodes_and_named_in_its_own_line() -> None:
    """One H20 node holds the trainer's pod; the rollout pool needs a node of its own, and a busy rollout
    node is named as the rollout pool's."""
    job = _separate_async({"nodes": 1, "gpusPerNode": 8})
    one = _facts([_node("h20-a")], [])
    assert _pool_lines(cluster_problems(job, one, "1.7.0")) == [
        "never fits: the trainer pool needs 1 node x 8 NVIDIA-H20 and the rollout pool needs 1 node x 8 "
        "NVIDIA-H20, at once; 1 node matches, with 8"
    ]
    busy = _facts([_node("h20-a"), _node("h20-b")], [_pod("h20-b", 4)])
    (line,) = _pool_lines(cluster_problems(job, busy, "1.7.0"))
    assert line.startswith(
        "rollout pool (rollout.pool): GPUs in use: 0 of the 1 GPU pod(s) of 8 nvidia.com/gpu of the job's "
        "rollout pool fit in the free GPUs"
    )
    assert "h20-b: 4 of 8 free" in line and "h20-a" not in line
    free = _facts([_node("h20-a"), _node("h20-b")], [])
    assert _pool_lines(cluster_problems(job, free, "1.7.0")) == []
    # Offline, `flashrl validate` says what it could not check: both pools' nodes.
    assert (
        "1 node(s) with 8 allocatable and free NVIDIA-H20 for the trainer pool; 1 node(s) with 8 "
        "allocatable and free NVIDIA-H20 for the rollout pool" in offline_limits(job)
    )
    assert [f.describe() for f in pool_fits(job, free)] == [
        "trainer pool: 1x8 NVIDIA-H20 on the node(s) labelled nvidia.com/gpu.product=NVIDIA-H20: 2 fit",
        "rollout pool: 1x8 NVIDIA-H20 on the node(s) labelled nvidia.com/gpu.product=NVIDIA-H20: 1 fit",
    ]


def _labelled(name: str, pool: str, gpus: int = 8) -> dict[str, Any]:
    node = _node(name, gpus)
    node["metadata"]["labels"] = {**H20, "flashrl.dev/pool": pool}
    return node


def test_variants_run_at_once_count_both_pools_of_a_separate_async_variant() -> None:
    """A sync variant and a separate-async one at once: the async variant's rollout pod counts beside
    the trainer pods when the pools share nodes, and on its own nodes when its selector has some."""
    shared = [("sync", _job("e-sync")), ("async", _separate_async({"nodes": 1, "gpusPerNode": 8}, "e-async"))]
    two = _facts([_node("h20-a"), _node("h20-b")], [])
    (line,) = experiment_check(shared, None, two, "1.7.0").capacity
    # Each variant alone fits on two nodes; together they need three pods of 8: the rollout pod counts.
    assert line.startswith(
        "GPUs too few: 2 of the 3 GPU pod(s) of 8 nvidia.com/gpu of the trainer and rollout pools of 2 "
        "variants run at once (spec.parallelism) fit in the allocatable GPUs of the node(s) labelled "
        "nvidia.com/gpu.product=NVIDIA-H20"
    )
    assert experiment_check(shared, None, _facts([*two.nodes, _node("h20-c")], []), "1.7.0").ok

    # The rollout pool on nodes of its own (selector flashrl.dev/pool=rollout): counted there, per shape.
    apart = _separate_async(
        {"nodes": 2, "gpusPerNode": 4, "nodeSelector": {"flashrl.dev/pool": "rollout"}},
        "e-apart",
        nodeSelector={"flashrl.dev/pool": "training"},
    )
    variants = [("a", apart), ("b", apart.model_copy(update={"metadata": {**apart.metadata, "name": "e-b"}}))]
    nodes = [
        _labelled("train-a", "training"),
        _labelled("train-b", "training"),
        _labelled("roll-a", "rollout"),
    ]
    busy = _facts(nodes, [_pod("roll-a", 2)])
    (rollout,) = experiment_check(variants, None, busy, "1.7.0").capacity
    # Four rollout pods of 4 GPUs: one 8-GPU rollout node holds two; the trainers' nodes are not counted.
    assert rollout.startswith(
        "GPUs too few: 2 of the 4 GPU pod(s) of 4 nvidia.com/gpu of the rollout pool of 2 variants run at "
        "once (spec.parallelism) fit in the allocatable GPUs of the node(s) labelled "
        "nvidia.com/gpu.product=NVIDIA-H20, flashrl.dev/pool=rollout"
    )
    more = _facts([*nodes, _labelled("roll-b", "rollout")], [_pod("roll-a", 2)])
    (free,) = experiment_check(variants, None, more, "1.7.0").capacity
    assert free.startswith("GPUs in use: 3 of the 4 GPU pod(s) of 4 nvidia.com/gpu of the rollout pool of 2")
    assert "roll-a: 6 of 8 free, roll-b: 8 of 8 free" in free and "train-a" not in free
