"""``flashrl preflight`` against the emulated API server, through a kubeconfig as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api.pins import load_pins
from flashrl_operator.job.preflight import RAY_JOB_SPEC_FIELDS
from flashrl_operator.sim import EmulatedCluster

pytestmark = pytest.mark.kmock

REPO = Path(__file__).resolve().parents[2]
FLASHRL = str(Path(sys.executable).with_name("flashrl"))


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emulated", "cluster": {"server": url}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "me"}}],
                "current-context": "emulated",
            }
        )
    )
    return path


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


def claim(name: str, modes: list[str], phase: str = "Bound") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "rl"},
        "spec": {"accessModes": modes, "resources": {"requests": {"storage": "10Gi"}}},
        "status": {"phase": phase},
    }


def crd(name: str) -> dict[str, Any]:
    spec_props = {f: {"type": "object"} for f in RAY_JOB_SPEC_FIELDS} if name.startswith("rayjobs") else {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": "ray.io",
            "versions": [
                {
                    "name": "v1",
                    "schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": spec_props}}}},
                }
            ],
        },
    }


async def test_preflight_names_each_missing_piece_then_passes(tmp_path: Path) -> None:
    async with EmulatedCluster() as cluster:
        config = kubeconfig(tmp_path, cluster.url)
        empty = await __import__("asyncio").to_thread(preflight, config, "-n", "rl")
        assert empty.returncode == 1, empty.stdout + empty.stderr
        lines = empty.stderr.strip().splitlines()
        assert lines[0].startswith("namespace rl does not exist")
        assert any(line.startswith("claim hf-cache (storage.modelCache) does not exist") for line in lines)
        assert any(line.startswith("0 node(s) labelled nvidia.com/gpu.product=NVIDIA-H20") for line in lines)
        assert any(line.startswith("CRD rayjobs.ray.io is not installed") for line in lines)

        api = cluster.api
        # Cluster-scoped objects go straight into the emulator (its client speaks for namespaced ones).
        objects = cluster.server.objects
        # kmock stores no Namespace objects (it reads /namespaces/<ns> as a prefix): a kmock reaction
        # answers the namespace's GET instead.
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rl"}}
        reaction = cluster.server["get /api/v1/namespaces/rl"] << namespace
        assert reaction is not None
        await api.create("v1/persistentvolumeclaims", claim("hf-cache", ["ReadWriteOnce"]))
        await api.create("v1/persistentvolumeclaims", claim("rl-data", ["ReadWriteMany"], phase="Pending"))
        await api.create("v1/persistentvolumeclaims", claim("rl-checkpoints", ["ReadWriteMany"]))
        objects["v1/nodes", None, "h20-0"] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "h20-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H20"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for name in ("rayjobs.ray.io", "rayclusters.ray.io"):
            objects["apiextensions.k8s.io/v1/customresourcedefinitions", None, name] = crd(name)
        partial = await __import__("asyncio").to_thread(preflight, config, "-n", "rl")
        assert partial.returncode == 1
        assert partial.stderr.strip().splitlines() == [
            "claim hf-cache (storage.modelCache) has access modes ReadWriteOnce: 2 pods on different nodes "
            "mount it and the staging Job writes to it, so it must be ReadWriteMany",
            "claim rl-data (storage.data) is Pending, not Bound: check its storage class",
        ]

        await api.delete("v1/persistentvolumeclaims", "rl", "hf-cache")
        await api.create("v1/persistentvolumeclaims", claim("hf-cache", ["ReadWriteMany"]))
        await api.patch("v1/persistentvolumeclaims", "rl", "rl-data", {"status": {"phase": "Bound"}})
        assert load_pins().versions.kuberay == "1.7.0"
        ok = await __import__("asyncio").to_thread(preflight, config, "-n", "rl")
        assert ok.returncode == 0, ok.stderr
        assert 'the cluster has what FlashRLJob "qwen3-8b-dapo-fp8" needs in rl' in ok.stdout
