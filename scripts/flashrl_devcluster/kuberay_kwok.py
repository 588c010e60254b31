"""KubeRay's own operator and kwok's simulated H20 nodes on the real control plane (the kwok e2e and
``make dev-cluster``), and what stands in for what kwok cannot run.

There is no kubelet, container or Ray. kwok moves pods through their lifecycle (scheduled → Running; a
Job's pod → Succeeded when its process is said to have exited, label :data:`EXIT_LABEL`). KubeRay asks
the Ray dashboard of the head pod for the Ray job's status; that request is routed (``HTTP_PROXY``,
KubeRay's own HTTP client honours it) to :class:`RayDashboard` on loopback, which answers what it is
told, as the real dashboard would report the entrypoint's progress.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from flashrl_devcluster.control_plane import (
    REPO,
    TOOLS,
    TOOLS_CRDS,
    ControlPlane,
    ControlPlaneError,
    Process,
    free_ports,
)

KWOK_STAGES = REPO / ".tools" / "kwok-stages"
#: kwok completes a Job's pod only when it carries this label (its process exited).
EXIT_LABEL = "e2eexit"
#: The chart's ``helm test`` pod's ``activeDeadlineSeconds`` (charts/.../tests/test-operator-health.yaml).
TEST_POD_DEADLINE_S = 120
#: GPU Feature Discovery's labels and the device plugin's capacity of one 8 x H20 machine.
H20_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H20",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "97871",
}
H20_CAPACITY = {
    "cpu": "192",
    "memory": "2Ti",
    "pods": "110",
    "nvidia.com/gpu": "8",
    "ephemeral-storage": "4Ti",
}

POD_EXITED = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-exited-when-told
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
    - key: .metadata.labels.{EXIT_LABEL}
      operator: Exists
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      phase: Succeeded
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{{{ $now | Quote }}}}
            finishedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
"""


#: The kubelet's end of a pod past its ``activeDeadlineSeconds``, played by kwok for the chart's ``helm
#: test`` pod (kwok runs no container, so the check in it never runs and the pod would stay Running):
#: it fails as a kubelet fails it, and ``helm test`` ends with that result instead of hanging.
POD_PAST_DEADLINE = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-past-its-deadline
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
    - key: '.metadata.annotations["helm.sh/hook"]'
      operator: In
      values: [test]
    - key: '.spec.activeDeadlineSeconds'
      operator: Exists
  delay:
    durationMilliseconds: {TEST_POD_DEADLINE_S * 1000}
  next:
    statusTemplate: |
      phase: Failed
      reason: DeadlineExceeded
      message: Pod was active on the node longer than the specified deadline
"""


class RayDashboard:
    """The Ray dashboard's job API, as KubeRay reads it (``GET /api/jobs/<submission id>``).

    Each RayJob's Ray job reports what :meth:`set` said for the longest RayJob name its submission id
    starts with (KubeRay names it ``<rayjob>-<random>``); unknown ids are ``RUNNING`` once submitted.
    With ``states_file``, what was set is kept in that JSON file and read at every request, so another
    process (``python -m flashrl_devcluster play``) can tell it.
    """

    def __init__(self, port: int = 0, states_file: Path | None = None) -> None:
        self.states: dict[str, dict[str, Any]] = {}
        self.states_file = states_file
        self.requests = 0
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                dashboard.requests += 1
                job_id = self.path.rstrip("/").rsplit("/", 1)[-1]
                body = json.dumps(dashboard.info(job_id)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self.server.server_address[1])
        self.thread: threading.Thread | None = None

    def start(self) -> RayDashboard:
        """Serve in a thread of this process (the e2e)."""
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def info(self, job_id: str) -> dict[str, Any]:
        """The Ray job's record, as the dashboard returns it."""
        states = read_states(self.states_file) if self.states_file else self.states
        matches = sorted((n for n in states if job_id.startswith(n + "-")), key=len, reverse=True)
        state = states[matches[0]] if matches else {"status": "RUNNING"}
        return {"job_id": job_id, "submission_id": job_id, "entrypoint": "flashrl-launch train", **state}

    def set(self, ray_job: str, status: str, message: str = "") -> None:
        """What the Ray job of RayJob ``ray_job`` reports from now on."""
        self.states[ray_job] = {"status": status, "message": message}

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def read_states(path: Path) -> dict[str, dict[str, Any]]:
    """The Ray job states kept in ``path`` (none when it does not exist yet)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def set_state(path: Path, ray_job: str, status: str, message: str = "") -> None:
    """Tell a :class:`RayDashboard` serving from ``path`` what the Ray job of ``ray_job`` reports."""
    states = read_states(path) | {ray_job: {"status": status, "message": message}}
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(states))
    scratch.replace(path)


def write_stages(root: Path) -> Path:
    """kwok's fast node and pod stages (from its module, linked by ``make tools``) and
    :data:`POD_EXITED`, in one file under ``root``."""
    if not KWOK_STAGES.is_dir():
        raise ControlPlaneError(f"kwok's stages not found at {KWOK_STAGES}: run `make tools`")
    files = [
        p for p in sorted((KWOK_STAGES / "node" / "fast").glob("*.yaml")) if p.name != "kustomization.yaml"
    ]
    files += [
        KWOK_STAGES / "pod" / "fast" / "pod-ready.yaml",
        KWOK_STAGES / "pod" / "fast" / "pod-delete.yaml",
    ]
    text = "\n---\n".join(f.read_text() for f in files) + "\n---\n" + POD_EXITED + "---\n" + POD_PAST_DEADLINE
    path = root / "kwok-stages.yaml"
    path.write_text(text)
    return path


def start_kwok(plane: ControlPlane, root: Path) -> Process:
    """kwok, managing the nodes annotated ``kwok.x-k8s.io/node=fake`` (:func:`gpu_node`)."""
    (port,) = free_ports(1)
    return Process.start(
        "kwok",
        [
            str(TOOLS / "kwok"),
            f"--kubeconfig={plane.kubeconfig}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--config={write_stages(root)}",
            f"--server-address=127.0.0.1:{port}",
            "--node-ip=10.10.0.1",
            "--cidr=10.11.0.0/16",
        ],
        plane.root / "logs" / "kwok.log",
        plane.env(),
    )


def kuberay_operator_crds() -> Path:
    """The CRDs of the KubeRay operator built by ``make tools`` (its own version's)."""
    folder = TOOLS_CRDS / "kuberay"
    if not folder.is_dir():
        raise ControlPlaneError(f"KubeRay's CRDs not found at {folder}: run `make tools`")
    return folder


def apply_kuberay_crds(plane: ControlPlane) -> None:
    """KubeRay's own CRDs, until served."""
    # File by file: kubectl does not read a folder reached through a symlink (.tools/crds/kuberay).
    files = sorted(kuberay_operator_crds().glob("*.yaml"))
    plane.kubectl("apply", "--server-side", *(arg for path in files for arg in ("-f", str(path))))
    plane.wait_established("rayjobs.ray.io", "rayclusters.ray.io")


def start_kuberay(plane: ControlPlane, dashboard_port: int, lease_namespace: str | None = None) -> Process:
    """KubeRay's own operator, asking the dashboard stand-in on ``dashboard_port`` for Ray jobs. With
    ``lease_namespace`` it runs with leader election, as KubeRay's chart runs it, and holds its Lease
    there (what ``flashrl preflight`` looks for when no Deployment runs it)."""
    metrics, health = free_ports(2)
    election = (
        ["--enable-leader-election=true", f"--leader-election-namespace={lease_namespace}"]
        if lease_namespace
        else ["--enable-leader-election=false"]
    )
    env = plane.env() | {
        "HTTP_PROXY": f"http://127.0.0.1:{dashboard_port}",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    return Process.start(
        "kuberay-operator",
        [
            str(TOOLS / "kuberay-operator"),
            f"--metrics-addr=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
            *election,
        ],
        plane.root / "logs" / "kuberay-operator.log",
        env,
    )


def gpu_node(
    name: str,
    product: str = "NVIDIA-H20",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A node as GPU Feature Discovery and the NVIDIA device plugin describe an 8 x H20 machine (or
    8 GPUs of another ``product``), with the pool ``labels`` and ``taints`` an administrator adds."""
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "type": "kwok",
                **H20_LABELS,
                "nvidia.com/gpu.product": product,
                **(labels or {}),
            },
        },
        "status": {"capacity": H20_CAPACITY, "allocatable": H20_CAPACITY},
    }
    if taints:
        node["spec"] = {"taints": taints}
    return node


def add_h20_nodes(plane: ControlPlane, names: tuple[str, ...]) -> None:
    """:func:`gpu_node` for each name, schedulable at once."""
    add_nodes(plane, [gpu_node(node) for node in names])


def add_nodes(plane: ControlPlane, nodes: list[dict[str, Any]]) -> None:
    """Create these Node objects, schedulable at once."""
    for node in nodes:
        plane.apply_json(node)
        # The API server taints every new node not-ready; the node lifecycle controller lifts the taint
        # once the node reports Ready (kwok's node-initialize stage). That controller is not run here
        # (it would evict pods without kwok's heartbeats), so the taint is lifted as it would.
        name = node["metadata"]["name"]
        plane.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-", check=False)


def volume(
    name: str, storage_class: str, claim: tuple[str, str] | None = None, size: str = "1Ti"
) -> dict[str, Any]:
    """A ReadWriteMany hostPath volume of ``storage_class`` (no pod writes to it: kwok runs none), for the
    claim ``(namespace, name)`` only when given, else for any claim of that class."""
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteMany"],
        "storageClassName": storage_class,
        "persistentVolumeReclaimPolicy": "Retain",
        "hostPath": {"path": f"/srv/flashrl/{name}"},
    }
    if claim:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}
