"""``flashrl preflight`` against a real, empty API server, through a kubeconfig as a user would run it: each
missing piece named, KubeRay's own operator seen running (its leader-election Lease), GPUs counted free
only when no live pod holds them, and the experiment example checked variant by variant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest.chart import apply_crd_dir
from envtest.control_plane import ControlPlane, free_ports, missing_binaries, require_binaries, running
from envtest.upstream import KUBERAY_PINNED_CRDS
from flashrl_api.pins import load_pins
from flashrl_devcluster.kuberay_kwok import apply_kuberay_crds, start_kuberay

REPO = Path(__file__).resolve().parents[2]
FLASHRL = str(Path(sys.executable).with_name("flashrl"))


def preflight(config: Path, *args: str, example: str = "flashrljob.yaml") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(config)
    return subprocess.run(
        [FLASHRL, "preflight", *args, str(REPO / "examples" / example)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


GPUS = {"nvidia.com/gpu": "8"}


def claim(name: str, modes: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "rl"},
        "spec": {
            "accessModes": modes,
            "storageClassName": "",
            "resources": {"requests": {"storage": "10Gi"}},
        },
    }


def volume(name: str, modes: list[str]) -> dict[str, Any]:
    """A volume for claim ``name`` only (pre-bound), as an admin provisions one by hand."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "accessModes": modes,
            "capacity": {"storage": "10Gi"},
            "storageClassName": "",
            "hostPath": {"path": f"/srv/{name}"},
            "claimRef": {"namespace": "rl", "name": name},
        },
    }


def wait_bound(plane: ControlPlane, *claims: str) -> None:
    for name in claims:
        plane.kubectl(
            "wait", "--for=jsonpath={.status.phase}=Bound", f"pvc/{name}", "-n", "rl", "--timeout=120s"
        )


def set_status(plane: ControlPlane, kind: str, name: str, status: dict[str, Any], *args: str) -> None:
    patch = json.dumps({"status": status})
    plane.kubectl("patch", kind, name, *args, "--subresource=status", "--type=merge", "-p", patch)


@pytest.fixture
def empty_cluster(tmp_path: Path) -> Iterator[ControlPlane]:
    """A control plane of its own, empty: no namespace, CRD or node that another test made."""
    require_binaries()
    with running(tmp_path / "plane", scheduler=False) as plane:
        yield plane


def test_preflight_names_each_missing_piece_then_passes(empty_cluster: ControlPlane) -> None:
    plane = empty_cluster
    config = plane.kubeconfig
    empty = preflight(config, "-n", "rl")
    assert empty.returncode == 1, empty.stdout + empty.stderr
    lines = empty.stderr.strip().splitlines()
    assert lines[0].startswith("namespace rl does not exist")
    assert any(line.startswith("claim hf-cache (storage.modelCache) does not exist") for line in lines)
    # The operator's own judgement (NeverFits), word for word.
    assert "never fits: needs 1 node x 8 NVIDIA-H20; no node matches (the nodes carry " in empty.stderr
    assert any(line.startswith("never fits: needs 1 node x 8 NVIDIA-H20; no node matches") for line in lines)
    assert any(line.startswith("CRD rayjobs.ray.io is not installed") for line in lines)

    plane.kubectl("create", "namespace", "rl")
    # Claims bound by the real volume binder to volumes made for them; rl-data has none: Pending.
    plane.apply_json([volume("hf-cache", ["ReadWriteOnce"]), volume("rl-checkpoints", ["ReadWriteMany"])])
    claims = [claim("hf-cache", ["ReadWriteOnce"]), claim("rl-data", ["ReadWriteMany"])]
    plane.apply_json([*claims, claim("rl-checkpoints", ["ReadWriteMany"])])
    wait_bound(plane, "hf-cache", "rl-checkpoints")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "h20-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H20"}},
    }
    plane.apply_json(node)
    set_status(plane, "node", "h20-0", {"capacity": GPUS, "allocatable": GPUS})
    apply_crd_dir(plane, KUBERAY_PINNED_CRDS)  # KubeRay's own CRDs, at the pinned version
    partial = preflight(config, "-n", "rl")
    assert partial.returncode == 1
    assert partial.stderr.strip().splitlines() == [
        "claim hf-cache (storage.modelCache) has access modes ReadWriteOnce: 2 pods on different nodes "
        "mount it and the staging Job writes to it, so it must be ReadWriteMany",
        "claim rl-data (storage.data) is Pending, not Bound: check its storage class",
        # The CRDs are served, but nothing would act on a RayJob.
        "KubeRay's operator is not running: no Deployment labelled app.kubernetes.io/name=kuberay-operator "
        "has a ready replica and no Lease ray-operator-leader (KubeRay's leader election) is held, in any "
        "namespace; nothing would create the Ray cluster. Install KubeRay 1.7.2 (docs/install.md) or start "
        "its operator",
    ]

    plane.kubectl("delete", "pvc", "hf-cache", "-n", "rl")
    plane.kubectl("delete", "pv", "hf-cache")
    plane.apply_json([volume("hf-cache", ["ReadWriteMany"]), volume("rl-data", ["ReadWriteMany"])])
    plane.apply_json(claim("hf-cache", ["ReadWriteMany"]))
    wait_bound(plane, "hf-cache", "rl-data")
    assert load_pins().versions.kuberay == "1.7.2"
    missing = missing_binaries(("kuberay-operator",))
    if missing:
        pytest.skip("KubeRay's operator is not built: run `make tools`")
    # KubeRay's own operator, run as its chart runs it: with leader election, holding its Lease.
    apply_kuberay_crds(plane)
    plane.kubectl("create", "namespace", "kuberay-system")
    (unused,) = free_ports(1)
    kuberay = start_kuberay(plane, unused, "kuberay-system")
    try:
        deadline = time.monotonic() + 120
        while not (plane.get_json("lease", "ray-operator-leader", "-n", "kuberay-system", check=False) or {}):
            assert kuberay.popen.poll() is None, kuberay.tail()
            assert time.monotonic() < deadline, f"KubeRay took no Lease:\n{kuberay.tail()}"
            time.sleep(0.3)
        assert kuberay.popen.poll() is None, kuberay.tail()
        ok = preflight(config, "-n", "rl")
        assert ok.returncode == 0, ok.stderr
        assert 'the cluster has what FlashRLJob "qwen3-8b-dapo-fp8" needs in rl' in ok.stdout

        # The queued example names a PriorityClass: the operator's own judgement (PriorityClassNotFound)
        # until the one examples/cluster/kueue.yaml has exists (the queue itself is Kueue's to check).
        unranked = preflight(config, example="flashrljob-kueue.yaml")
        assert unranked.returncode == 1
        assert unranked.stderr.startswith(
            "PriorityClass rl-batch (spec.scheduling.priorityClassName) does not exist in the cluster: the "
            "API server refuses every pod that names it"
        ), unranked.stderr
        shipped = (REPO / "examples" / "cluster" / "kueue.yaml").read_text(encoding="utf-8")
        (priority,) = [d for d in yaml.safe_load_all(shipped) if d and d["kind"] == "PriorityClass"]
        plane.apply_json(priority)
        ranked = preflight(config, example="flashrljob-kueue.yaml")
        assert ranked.returncode == 0, ranked.stderr

        # The experiment example: each variant as the FlashRLJob it becomes, one at a time.
        experiment = preflight(config, example="flashrlexperiment.yaml")
        assert experiment.returncode == 0, experiment.stderr
        assert experiment.stdout.splitlines() == [
            f"{REPO / 'examples' / 'flashrlexperiment.yaml'}: the cluster has what FlashRLExperiment "
            '"origin-fp8-vs-bf16" needs in rl, 1 of 3 variants at a time:',
            *(
                f"  variant {v} (FlashRLJob origin-fp8-vs-bf16-{v}): 1x8 NVIDIA-H20: ok"
                for v in ("blockwise-fp8", "channel-fp8", "bf16")
            ),
        ]

        # Every GPU of the one H20 node is held by a pod that has not ended: allocatable is not free.
        plane.apply_json(busy_pod("h20-0"))
        busy = preflight(config, "-n", "rl")
        assert busy.returncode == 1
        assert busy.stderr.strip().splitlines() == [
            "GPUs in use: 0 of the 1 GPU pod(s) of 8 nvidia.com/gpu of the job fit in the free GPUs of the "
            "node(s) labelled nvidia.com/gpu.product=NVIDIA-H20 now (h20-0: 0 of 8 free; free = "
            "allocatable minus the requests of pods that have not terminated): the pods would wait for "
            "those GPUs"
        ]
        crowded = preflight(config, example="flashrlexperiment.yaml")
        assert crowded.returncode == 1
        lines = crowded.stderr.strip().splitlines()
        assert lines[0].startswith("GPUs in use: 0 of the 1 GPU pod(s)")  # said once, for every variant
        assert sum(line.startswith("GPUs in use") for line in lines) == 1
        assert "  variant bf16 (FlashRLJob origin-fp8-vs-bf16-bf16): 1x8 NVIDIA-H20: 1 problem(s)" in lines

        # separate-async: each pool counted on the nodes of its own selector, each named in its own line.
        pools = preflight(config, example="flashrljob-separate-async.yaml")
        assert pools.returncode == 1
        assert [line.split(";")[:2] for line in pools.stderr.strip().splitlines()] == [
            [
                f"never fits: {pool} pool ({where}) needs 1 node x 8 NVIDIA-H20 labelled "
                f"flashrl.dev/pool={label}",
                " no node matches",
            ]
            for pool, where, label in (
                ("trainer", "resources", "training"),
                ("rollout", "rollout.pool", "rollout"),
            )
        ]
        for name, pool in (("h20-train", "training"), ("h20-rollout", "rollout")):
            labels = {"nvidia.com/gpu.product": "NVIDIA-H20", "flashrl.dev/pool": pool}
            plane.apply_json(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            )
            set_status(plane, "node", name, {"capacity": GPUS, "allocatable": GPUS})
        fed = preflight(config, example="flashrljob-separate-async.yaml")
        assert fed.returncode == 0, fed.stderr
        assert fed.stdout.splitlines()[1:] == [
            f"  {pool} pool: 1x8 NVIDIA-H20 on the node(s) labelled nvidia.com/gpu.product=NVIDIA-H20, "
            f"flashrl.dev/pool={label}: 1 fit"
            for pool, label in (("trainer", "training"), ("rollout", "rollout"))
        ]
        # The async experiment, two variants at once (the two async ones, holding the most GPUs): each
        # alone fits, together every pool counts (rollout pods on the rollout nodes), a line per pod shape.
        both = preflight(config, example="flashrlexperiment-async.yaml")
        assert both.returncode == 1
        lines = both.stderr.strip().splitlines()
        assert [line.split(" fit in")[0] for line in lines[:2]] == [
            f"GPUs too few: 1 of the 2 GPU pod(s) of 8 nvidia.com/gpu of the {pool} pool of 2 variants run "
            "at once (spec.parallelism)"
            for pool in ("trainer", "rollout")
        ]
        assert (
            "  variant async-fp8 (FlashRLJob async-vs-sync-fp8-async-fp8): 1x8 NVIDIA-H20 (trainer) + 1x8 "
            "NVIDIA-H20 (rollout): ok" in lines
        )
    finally:
        kuberay.stop()


def busy_pod(node: str) -> dict[str, Any]:
    """A pod bound to ``node`` holding its 8 GPUs (no kubelet here: it stays Pending, not terminated)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "someone-elses-training", "namespace": "rl"},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "train", "image": "busybox", "resources": {"limits": GPUS, "requests": GPUS}}
            ],
        },
    }
