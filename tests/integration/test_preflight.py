"""``flashrl preflight`` against a real, empty API server, through a kubeconfig as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envtest.chart import apply_crd_dir
from envtest.control_plane import ControlPlane, require_binaries, running
from envtest.upstream import KUBERAY_PINNED_CRDS
from flashrl_api.pins import load_pins

REPO = Path(__file__).resolve().parents[2]
FLASHRL = str(Path(sys.executable).with_name("flashrl"))


def preflight(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(config)
    return subprocess.run(
        [FLASHRL, "preflight", *args, str(REPO / "examples" / "flashrljob.yaml")],
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
    assert any(line.startswith("0 node(s) labelled nvidia.com/gpu.product=NVIDIA-H20") for line in lines)
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
    ]

    plane.kubectl("delete", "pvc", "hf-cache", "-n", "rl")
    plane.kubectl("delete", "pv", "hf-cache")
    plane.apply_json([volume("hf-cache", ["ReadWriteMany"]), volume("rl-data", ["ReadWriteMany"])])
    plane.apply_json(claim("hf-cache", ["ReadWriteMany"]))
    wait_bound(plane, "hf-cache", "rl-data")
    assert load_pins().versions.kuberay == "1.7.0"
    ok = preflight(config, "-n", "rl")
    assert ok.returncode == 0, ok.stderr
    assert 'the cluster has what FlashRLJob "qwen3-8b-dapo-fp8" needs in rl' in ok.stdout
