"""Installing this project's chart into the real control plane, as a user's ``helm install`` does (the
tests and ``make dev-cluster``).

One release name and namespace for every test (``flashrl`` in ``flashrl-system``, as the README's quick
start): the chart keeps its CRDs on uninstall (``crds.keep``) and Helm adopts kept objects only into the
release that made them, so the install tour and the operator tests share the release rather than race
for the CRDs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flashrl_devcluster.control_plane import KUBERAY_PINNED_CRDS, REPO, ControlPlane

CHART = REPO / "charts" / "flashrl-operator"
RELEASE = "flashrl"
NAMESPACE = "flashrl-system"
CRD_NAMES = ("flashrljobs.flashrl.dev", "flashrlexperiments.flashrl.dev")


def install(plane: ControlPlane, *values: str) -> str:
    """``helm upgrade --install`` the chart (defaults unless ``--set`` arguments are given), waiting for
    the CRDs to be served."""
    out = plane.helm(
        "upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", *values
    ).stdout
    wait_crds(plane)
    return out


def wait_crds(plane: ControlPlane) -> None:
    """Until both CRDs are Established (the server serves their kinds)."""
    plane.wait_established(*CRD_NAMES)


def installed(plane: ControlPlane) -> bool:
    """Whether the release is deployed."""
    out = plane.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json", check=False)
    return out.returncode == 0 and json.loads(out.stdout)["info"]["status"] == "deployed"


def apply_crd_dir(plane: ControlPlane, folder: Path) -> None:
    """Apply every CRD in ``folder`` (files named ``<group>_<plural>.yaml``, as controller-gen writes
    them; server-side: some are larger than a client-side apply allows) and wait until they are served."""
    files = sorted(folder.glob("*.yaml"))
    plane.kubectl(
        "apply", "--server-side", "--force-conflicts", *(arg for f in files for arg in ("-f", str(f)))
    )
    plane.wait_established(*(".".join(reversed(f.stem.split("_", 1))) for f in files))


def ready_for_jobs(plane: ControlPlane) -> ControlPlane:
    """The chart with its defaults (installed unless it already is) and KubeRay 1.7.0's CRDs: what a
    cluster has before its first FlashRLJob."""
    if not installed(plane):
        install(plane)
    apply_crd_dir(plane, KUBERAY_PINNED_CRDS)
    return plane


#: The claims a FlashRLJob mounts by default (examples/cluster/storage.yaml).
DEFAULT_CLAIMS = ("hf-cache", "rl-data", "rl-checkpoints")
#: What the device plugin advertises on an H20 node.
H20_GPUS = {"nvidia.com/gpu": "8"}


def room_for_jobs(plane: ControlPlane, namespace: str, node: str = "h20-0") -> str:
    """The default claims in ``namespace`` and one H20 node of 8 GPUs: what the operator's fit check
    (``NeverFits``, ``ClaimNotFound``) asks of a cluster before a job of the default shape may start.
    The claims stay unbound and the node has no kubelet: nothing here runs a pod. Returns the node's
    name: nodes are cluster-wide, so whoever shares the control plane afterwards sees it until it is
    deleted."""
    claims = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
        }
        for name in DEFAULT_CLAIMS
    ]
    labels = {"nvidia.com/gpu.product": "NVIDIA-H20"}
    plane.apply_json(
        [*claims, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}}]
    )
    status = json.dumps({"status": {"capacity": H20_GPUS, "allocatable": H20_GPUS}})
    plane.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", status)
    return node


def deployment(plane: ControlPlane) -> dict[str, Any]:
    """The operator's Deployment as the chart installed it."""
    found: dict[str, Any] = plane.get_json(
        "deployment", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=flashrl-operator"
    )
    (item,) = found["items"]
    return dict(item)
