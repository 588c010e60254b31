"""The whole path without Docker: the real control plane, KubeRay's own operator, kwok's simulated H20 nodes.

``helm install`` → ``kubectl apply -f examples/flashrljob.yaml`` → the staging Job (its pod scheduled and
run by kwok) → our RayJob → KubeRay's RayCluster and pods, placed by kube-scheduler onto nodes labelled
as GPU Feature Discovery labels an H20 node → KubeRay's submitter → the job Running, and Succeeded once
the launcher (played by status patches with the job's own token) reports the last step and the
submitter exits. A second job loses a worker pod mid-run and takes the retry path on a new RayJob.

What is played, and why: there is no kubelet, container or Ray here. kwok moves pods through their
lifecycle (scheduled → Running; a Job's pod → Succeeded when the test says its process exited, label
``e2eexit``). KubeRay asks the Ray dashboard of the head pod for the Ray job's status; that request is
routed (``HTTP_PROXY``, KubeRay's own HTTP client honours it) to a stand-in on loopback that answers
what the test tells it, as the real dashboard would report the entrypoint's progress.

The control plane's etcd is 3.6 (built from its Go module by ``make tools``): kwok's and KubeRay's
client-go ask the API server for streaming watch lists, which it serves only from an etcd that answers
watch-progress requests (on Debian's etcd 3.4, kwok missed pods created between its relists). Part of
``make test``; ``make e2e-kwok`` runs it alone (marker ``kwok``). Without the binaries it is skipped, as
the other real-control-plane tests are, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest.chart import install
from envtest.control_plane import (
    REPO,
    REQUIRED,
    TOOLS,
    ControlPlane,
    Process,
    free_ports,
    missing_binaries,
    running,
)
from envtest.operator import OperatorProcess
from envtest.upstream import kuberay_operator_crds

pytestmark = pytest.mark.kwok

NAMESPACE = "rl"
JOB = "qwen3-8b-dapo-fp8"
H20_NODES = ("h20-a", "h20-b")
WAIT_S = 240.0
KWOK_STAGES = REPO / ".tools" / "kwok-stages"
#: kwok completes a Job's pod only when the test labels it so (the process exited), with this label.
EXIT_LABEL = "e2eexit"

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


class RayDashboard:
    """The Ray dashboard's job API, as KubeRay reads it (``GET /api/jobs/<submission id>``).

    Each RayJob's Ray job reports what :meth:`set` said for the longest RayJob name its submission id
    starts with (KubeRay names it ``<rayjob>-<random>``); unknown ids are ``RUNNING`` once submitted.
    """

    def __init__(self) -> None:
        self.states: dict[str, dict[str, Any]] = {}
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def info(self, job_id: str) -> dict[str, Any]:
        matches = sorted((n for n in self.states if job_id.startswith(n + "-")), key=len, reverse=True)
        state = self.states[matches[0]] if matches else {"status": "RUNNING"}
        return {"job_id": job_id, "submission_id": job_id, "entrypoint": "flashrl-launch train", **state}

    def set(self, ray_job: str, status: str, message: str = "") -> None:
        self.states[ray_job] = {"status": status, "message": message}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _stages(root: Path) -> Path:
    if not KWOK_STAGES.is_dir():
        pytest.fail(f"kwok's stages not found at {KWOK_STAGES}: run `make tools`")
    files = [
        p for p in sorted((KWOK_STAGES / "node" / "fast").glob("*.yaml")) if p.name != "kustomization.yaml"
    ]
    files += [
        KWOK_STAGES / "pod" / "fast" / "pod-ready.yaml",
        KWOK_STAGES / "pod" / "fast" / "pod-delete.yaml",
    ]
    text = "\n---\n".join(f.read_text() for f in files) + "\n---\n" + POD_EXITED
    path = root / "kwok-stages.yaml"
    path.write_text(text)
    return path


def _h20_node(name: str) -> dict[str, Any]:
    """A node as GPU Feature Discovery and the NVIDIA device plugin describe an 8 x H20 machine."""
    capacity = {
        "cpu": "192",
        "memory": "2Ti",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "ephemeral-storage": "4Ti",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "type": "kwok",
                "nvidia.com/gpu.product": "NVIDIA-H20",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": "97871",
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _volume(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"e2e-{name}"},
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "standard",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": f"/srv/e2e/{name}"},
            "claimRef": {"namespace": NAMESPACE, "name": name},
        },
    }


class E2E:
    """The cluster, KubeRay, kwok, our operator and the dashboard stand-in, for one module."""

    def __init__(self, plane: ControlPlane, dashboard: RayDashboard, processes: dict[str, Any]) -> None:
        self.plane = plane
        self.dashboard = dashboard
        self.processes = processes

    def get(self, *args: str) -> Any:
        return self.plane.get_json(*args, "-n", NAMESPACE, check=False)

    def wait(self, what: str, probe: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + WAIT_S
        while True:
            for name, proc in self.processes.items():
                if proc.popen.poll() is not None:
                    raise AssertionError(f"{name} exited while waiting for {what}:\n{proc.tail()}")
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{p.tail()}" for n, p in self.processes.items())
                raise AssertionError(f"timed out after {WAIT_S:.0f} s waiting for {what}\n{logs}")
            time.sleep(0.5)

    def job_status(self, name: str) -> dict[str, Any]:
        job = self.get("flashrljob", name)
        return dict((job or {}).get("status") or {})

    def wait_phase(self, name: str, phase: str) -> dict[str, Any]:
        return dict(
            self.wait(f"{name} {phase}", lambda: (s := self.job_status(name)).get("phase") == phase and s)
        )

    def pods(self, selector: str) -> list[dict[str, Any]]:
        found = self.get("pod", "-l", selector)
        return list((found or {}).get("items") or [])

    def gpu_pods(self, cluster: str) -> list[dict[str, Any]]:
        """The Ray cluster's pods that request a GPU (its workers; the head and submitter request none)."""
        return [
            p
            for p in self.pods(f"ray.io/cluster={cluster}")
            if any(
                "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
                for c in p["spec"]["containers"]
            )
        ]

    def holds_no_gpu(self, job: str) -> dict[str, Any]:
        """Wait until the finished job's Ray cluster has no GPU pod left while its head stays (KubeRay's
        deletion rules: workers at once, the cluster after the TTL); returns the RayCluster."""
        name = str(self.job_status(job).get("rayClusterName") or "")
        assert name, f"{job} names no Ray cluster"
        self.wait(f"{job}'s GPU pods gone", lambda: not self.gpu_pods(name))
        ray_cluster = self.get("raycluster", name)
        assert ray_cluster is not None, "the head (logs, dashboard) stays for ttlSecondsAfterFinished"
        assert all(g.get("suspend") is True for g in ray_cluster["spec"]["workerGroupSpecs"])
        assert self.pods(f"ray.io/cluster={name},ray.io/node-type=head"), "the head pod stays"
        return dict(ray_cluster)

    def exit_pods(self, selector: str) -> None:
        """The processes of these (Job-owned) pods exit 0: kwok then marks them Succeeded."""
        for pod in self.pods(selector):
            self.plane.kubectl(
                "label", "pod", pod["metadata"]["name"], "-n", NAMESPACE, f"{EXIT_LABEL}=0", "--overwrite"
            )

    def assert_nothing_refused(self) -> None:
        """The chart's RBAC let the operator do everything it tried (it logs a refused read once)."""
        log = self.processes["operator"].process.log.read_text(errors="replace")
        refused = [line for line in log.splitlines() if "403 Forbidden" in line]
        assert not refused, "the API server refused the operator:\n" + "\n".join(refused)

    def launcher_reports(self, job: str, step: int, total: int) -> None:
        """The launcher's status patch, with a token of the job's own ServiceAccount."""
        kubeconfig = self.plane.token_kubeconfig(f"{job}-launcher", NAMESPACE, f"{job}-launcher")
        patch = {
            "status": {"progress": {"step": step, "totalSteps": total, "updateTime": "2026-12-03T00:00:00Z"}}
        }
        self.plane.kubectl(
            "patch", "flashrljob", job, "-n", NAMESPACE, "--subresource=status", "--type=merge",
            "-p", json.dumps(patch), kubeconfig=kubeconfig,
        )  # fmt: skip


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    with kwok_cluster(Path(tmp_path_factory.mktemp("e2e")), H20_NODES) as found:
        yield found


@contextmanager
def kwok_cluster(root: Path, nodes: tuple[str, ...]) -> Iterator[E2E]:
    """The control plane, kwok with ``nodes`` (8 x H20 each), KubeRay's operator, the chart, the claims
    and our operator; everything started is stopped on the way out (skipped without the binaries)."""
    missing = missing_binaries((*REQUIRED, "helm", "kuberay-operator", "kwok"))
    if missing:
        message = f"the kwok e2e needs {', '.join(missing)}: run `make tools`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with running(root / "control-plane") as plane:
        dashboard = RayDashboard()
        processes: dict[str, Any] = {}
        try:
            kwok_port, metrics, health = free_ports(3)
            processes["kwok"] = Process.start(
                "kwok",
                [
                    str(TOOLS / "kwok"),
                    f"--kubeconfig={plane.kubeconfig}",
                    "--manage-all-nodes=false",
                    "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    f"--config={_stages(root)}",
                    f"--server-address=127.0.0.1:{kwok_port}",
                    "--node-ip=10.10.0.1",
                    "--cidr=10.11.0.0/16",
                ],
                plane.root / "logs" / "kwok.log",
                plane.env(),
            )
            # File by file: kubectl does not read a folder reached through a symlink (.tools/crds/kuberay).
            crds = [
                arg for path in sorted(kuberay_operator_crds().glob("*.yaml")) for arg in ("-f", str(path))
            ]
            plane.kubectl("apply", "--server-side", *crds)
            plane.wait_established("rayjobs.ray.io", "rayclusters.ray.io")
            env = plane.env() | {
                "HTTP_PROXY": f"http://127.0.0.1:{dashboard.port}",
                "NO_PROXY": "127.0.0.1,localhost",
            }
            processes["kuberay"] = Process.start(
                "kuberay-operator",
                [
                    str(TOOLS / "kuberay-operator"),
                    f"--metrics-addr=127.0.0.1:{metrics}",
                    f"--health-probe-bind-address=127.0.0.1:{health}",
                    "--enable-leader-election=false",
                ],
                plane.root / "logs" / "kuberay-operator.log",
                env,
            )
            for node in nodes:
                plane.apply_json(_h20_node(node))
                # The API server taints every new node not-ready; the node lifecycle controller lifts the
                # taint once the node reports Ready (kwok's node-initialize stage). That controller is not
                # run here (it would evict pods without kwok's heartbeats), so the test lifts it as it would.
                plane.kubectl("taint", "node", node, "node.kubernetes.io/not-ready:NoSchedule-", check=False)
            install(plane)
            for name in ("namespace.yaml",):
                plane.kubectl("apply", "-f", str(REPO / "examples" / "cluster" / name))
            storage = (
                (REPO / "examples" / "cluster" / "storage.yaml")
                .read_text()
                .replace("STORAGE_CLASS", "standard")
            )
            plane.kubectl("apply", "-f", "-", stdin=storage)
            for doc in yaml.safe_load_all(storage):
                if doc and doc.get("kind") == "PersistentVolumeClaim":
                    plane.apply_json(_volume(doc["metadata"]["name"]))
            operator = OperatorProcess(plane, "operator-e2e")
            processes["operator"] = operator
            yield E2E(plane, dashboard, processes)
        finally:
            for proc in reversed(list(processes.values())):
                proc.stop()
            dashboard.stop()


def test_the_example_runs_on_kuberay_and_simulated_h20_nodes(e2e: E2E) -> None:
    plane = e2e.plane
    plane.kubectl("apply", "-f", str(REPO / "examples" / "flashrljob.yaml"))

    # Staging: a CPU-only Job; its pod is scheduled and run by kwok, and exits when we say so.
    e2e.wait(
        "the staging pod running",
        lambda: [
            p
            for p in e2e.pods(f"batch.kubernetes.io/job-name={JOB}-stage")
            if p["status"].get("phase") == "Running"
        ],
    )
    assert e2e.get("rayjob", JOB) is None, "no RayJob (and no GPU) before staging succeeded"
    e2e.exit_pods(f"batch.kubernetes.io/job-name={JOB}-stage")

    # Our RayJob, then KubeRay's RayCluster and pods on the H20 nodes.
    e2e.wait("our RayJob", lambda: e2e.get("rayjob", JOB))
    workers = e2e.wait(
        "the GPU worker pods running",
        lambda: [p for p in e2e.pods("ray.io/node-type=worker") if p["status"].get("phase") == "Running"],
    )
    for pod in workers:
        assert pod["spec"]["nodeName"] in H20_NODES
        assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H20"
    status = e2e.wait_phase(JOB, "Running")
    assert status["rayClusterName"]
    ray_job = e2e.get("rayjob", JOB)
    assert ray_job["status"]["jobDeploymentStatus"] == "Running"
    assert e2e.dashboard.requests > 0, "KubeRay asked the dashboard for the Ray job's status"

    # The launcher reports the last step, the Ray job ends, the submitter exits.
    total = status.get("progress", {}).get("totalSteps") or 150
    e2e.launcher_reports(JOB, total, total)
    e2e.dashboard.set(JOB, "SUCCEEDED")
    e2e.wait("KubeRay's submitter pod", lambda: e2e.pods(f"batch.kubernetes.io/job-name={JOB}"))
    e2e.exit_pods(f"batch.kubernetes.io/job-name={JOB}")
    status = e2e.wait_phase(JOB, "Succeeded")
    assert status["progress"]["step"] == total
    # A finished job holds no GPU: its workers are deleted at once, its head stays for the logs.
    e2e.holds_no_gpu(JOB)
    e2e.wait(
        "the attempt's GPUs seen released",
        lambda: all(a.get("releaseTime") for a in e2e.job_status(JOB).get("attempts") or [{}]),
    )
    e2e.assert_nothing_refused()


def test_a_lost_worker_takes_the_retry_path(e2e: E2E) -> None:
    plane = e2e.plane
    job = "worker-loss"
    manifest = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": job, "namespace": NAMESPACE},
        "spec": {
            "model": {"source": "/models/Qwen3-8B-Base"},
            "data": {"train": "/data/dapo-math-17k.parquet", "validation": "/data/aime-2024.parquet"},
            "lifecycle": {"maxRestarts": 1},
        },
    }
    plane.apply_json(manifest)
    status = e2e.wait_phase(job, "Running")
    (worker, *_) = e2e.pods(f"ray.io/node-type=worker,ray.io/cluster={status['rayClusterName']}")
    plane.kubectl("delete", "pod", worker["metadata"]["name"], "-n", NAMESPACE, "--wait=false")
    # The Ray job dies with its worker: the dashboard says so, as Ray would.
    e2e.dashboard.set(job, "FAILED", "RuntimeError: NCCL watchdog timeout: a worker disappeared")
    e2e.wait("KubeRay's submitter pod", lambda: e2e.pods(f"batch.kubernetes.io/job-name={job}"))
    e2e.exit_pods(f"batch.kubernetes.io/job-name={job}")
    second = e2e.wait("attempt 2's RayJob", lambda: e2e.get("rayjob", f"{job}-2"))
    assert second["metadata"]["labels"]["flashrl.dev/attempt"] == "2"
    assert e2e.job_status(job).get("attempt") == 2
    e2e.assert_nothing_refused()
