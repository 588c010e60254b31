"""A separate-async job's two GPU pools on a real local Ray cluster: one Ray node per KubeRay worker group
(the trainer's ``gpu`` and the ``rollout`` pool), GPUs declared, none real.

What verl 0.9.1 itself would do here cannot run: its placement lives in
``verl/single_controller/ray/base.py`` (``ResourcePoolManager`` → ``RayResourcePool`` → one Ray placement
group per node of ``{"CPU": n, "GPU": 1}`` bundles, ``STRICT_PACK``), and importing that module imports
``verl.protocol``, which imports torch and tensordict; neither is installed in this environment (verl's
own ``verl/__init__.py`` already fails on tensordict), and they are not faked. What those bundles ask
for is read from the pinned source: a GPU count, no accelerator type (``RayResourcePool`` accepts one,
``ResourcePoolManager.create_resource_pool`` never passes it), no label selector, no custom resource;
the trainer's pool is created first, then each standalone rollout replica's. So nothing in verl's request
ties a role to a group, and the tests here show what does exist on such a cluster:

- Ray labels each node with the KubeRay group it belongs to (``ray.io/node-group``, from the
  ``RAY_NODE_TYPE_NAME`` KubeRay sets: the kwok e2e checks it on the example's pods), and a placement
  group that selects it lands on that group's node: the handle a pool-aware placement would use, and
  which verl 0.9.1's placement groups do not;
- the launcher's GPU gate waits for both groups' GPUs and opens once both joined;
- two GPU products are refused (``rollout-pool-gpu-product-is-the-trainers``) before the gate asks Ray
  for anything: with one product either role on either group runs on the same GPUs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_ray import DRIVER_ENV, LocalRay

from flashrl_jobs import contract

pytestmark = pytest.mark.ray

GPUS_PER_GROUP = 2

#: A driver that reports every alive node's GPUs and labels, then places one bundle per group with a
#: selector on the group label and reports where each landed (node labels are Ray's own node table).
_DRIVER = """
import json, sys
import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

ray.init(address=sys.argv[1], log_to_driver=False)
nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
report = {"nodes": [
    {"gpus": n["Resources"].get("GPU", 0), "group": (n.get("Labels") or {}).get("ray.io/node-group")}
    for n in nodes.values()
]}
placed = {}
for group in ("gpu", "rollout"):
    selector = [{"ray.io/node-group": group}]
    pg = placement_group([{"GPU": 1}], strategy="STRICT_PACK", bundle_label_selector=selector)
    ray.get(pg.ready(), timeout=60)
    node = placement_group_table(pg)["bundles_to_node_id"][0]
    placed[group] = (nodes[node].get("Labels") or {}).get("ray.io/node-group")
    remove_placement_group(pg)
report["placed"] = placed
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def two_groups() -> Iterator[LocalRay]:
    """A head without GPUs and one worker per KubeRay group, as a separate-async RayJob's cluster."""
    cluster = LocalRay()
    try:
        cluster.start_head(num_gpus=0)
        for group in ("gpu", "rollout"):  # one at a time: two raylets starting at once can time out
            cluster.wait_worker(cluster.start_worker(GPUS_PER_GROUP, group))
        yield cluster
    finally:
        cluster.stop()


def _job(path: Path, rollout_product: str = "NVIDIA-H20") -> Path:
    job = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "pools", "namespace": "ml"},
        "spec": {
            "training": {"mode": "separate-async", "async": {"parameterSyncStep": 1}},
            "resources": {"nodes": 1, "gpusPerNode": GPUS_PER_GROUP, "gpuProduct": "NVIDIA-H20"},
            "rollout": {"pool": {"nodes": 1, "gpusPerNode": GPUS_PER_GROUP, "gpuProduct": rollout_product}},
        },
    }
    path.write_text(yaml.safe_dump(job))
    return path


def test_each_ray_node_carries_its_kuberay_group_and_a_selector_places_by_it(two_groups: LocalRay) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _DRIVER, two_groups.address],
        env={**DRIVER_ENV, "PATH": str(Path(sys.executable).parent)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    groups = sorted((n["group"] or "", n["gpus"]) for n in report["nodes"])
    assert groups == [("", 0), ("gpu", GPUS_PER_GROUP), ("rollout", GPUS_PER_GROUP)]
    assert report["placed"] == {"gpu": "gpu", "rollout": "rollout"}


def test_the_gate_opens_with_both_groups_gpus(
    two_groups: LocalRay, launch: Callable[..., Any], tmp_path: Path
) -> None:
    job = _job(tmp_path / "job.yaml")
    run = launch("check", "--spec", str(job), "--ray-address", two_groups.address, "--timeout", "120")
    assert run.wait() == contract.EXIT_OK, run.output
    n = GPUS_PER_GROUP  # each pool counted on its own group's node
    assert f"trainer pool: {n}/{n} GPUs registered on 1 node(s) ({n} available)" in run.output
    assert f"rollout pool: {n}/{n} GPUs registered on 1 node(s) ({n} available), proceeding" in run.output


def test_two_gpu_products_are_refused_before_the_gate(
    two_groups: LocalRay, launch: Callable[..., Any], tmp_path: Path
) -> None:
    job = _job(tmp_path / "job.yaml", rollout_product="NVIDIA-H100-80GB-HBM3")
    run = launch("check", "--spec", str(job), "--ray-address", two_groups.address, "--timeout", "120")
    assert run.wait() == contract.EXIT_INVALID_CONFIG, run.output
    message = (tmp_path / "termination-log").read_text()
    assert (
        "spec.rollout.pool.gpuProduct: is NVIDIA-H100-80GB-HBM3 and resources.gpuProduct is NVIDIA-H20"
        in message
    )
    assert "by GPU count alone" in message
    assert "GPUs registered" not in run.output, "refused before asking Ray for GPUs"
