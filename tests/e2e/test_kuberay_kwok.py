"""The whole path without Docker: the real control plane, KubeRay's own operator, kwok's simulated H20 nodes.

``helm install`` → ``kubectl apply -f examples/flashrljob.yaml`` → the staging Job (its pod scheduled and
run by kwok) → our RayJob → KubeRay's RayCluster and pods, placed by kube-scheduler onto nodes labelled
as GPU Feature Discovery labels an H20 node → KubeRay's submitter → the job Running, and Succeeded once
the launcher (played by status patches with the job's own token) reports the last step and the
submitter exits. A second job loses a worker pod mid-run and takes the retry path on a new RayJob.
Kueue's own manager (built from its Go module, its webhooks on loopback) queues jobs that name its
LocalQueue for one node of its own: two 8-GPU jobs run one after the other, the second holding nothing
while it waits; a 16-GPU job on that 8-GPU queue holds nothing at all.

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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest.chart import install
from envtest.control_plane import KWOK_CLUSTER, REPO, ControlPlane, require_binaries, running
from envtest.operator import OperatorProcess
from flashrl_devcluster.kuberay_kwok import (
    EXIT_LABEL,
    RayDashboard,
    add_h20_nodes,
    add_nodes,
    apply_kuberay_crds,
    gpu_node,
    start_kuberay,
    start_kwok,
    volume,
)
from flashrl_devcluster.kueue import (
    DEFAULT_FLAVOR,
    GPU_FLAVOR,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    H20_PRODUCT,
    LOCAL_QUEUE,
    queue_objects,
    start_kueue,
)
from flashrl_operator.render.rayjob import ROLLOUT_WORKER_GROUP, WORKER_GROUP
from flashrl_operator.vocab import kuberay, kueue

pytestmark = pytest.mark.kwok

NAMESPACE = "rl"
JOB = "qwen3-8b-dapo-fp8"
H20_NODES = ("h20-a", "h20-b")
WAIT_S = 240.0
#: The node Kueue's queue owns (one 8 x H20 machine): its GPU ResourceFlavor selects it and tolerates
#: its taint, so only queued jobs' GPU workers land there (their heads, with no flavor of it, do not)
#: and the other tests' pods never take its GPUs.
QUEUED_NODE = "h20-queued"
QUEUED_POOL = {"flashrl.dev/pool": "queued"}
QUEUED_TAINT = {"key": "dedicated", "value": "queued", "effect": "NoSchedule"}


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
    with kwok_cluster(Path(tmp_path_factory.mktemp("e2e")), H20_NODES, kueue=True) as found:
        yield found


@contextmanager
def kwok_cluster(root: Path, nodes: tuple[str, ...], *, kueue: bool = False) -> Iterator[E2E]:
    """The control plane, kwok with ``nodes`` (8 x H20 each), KubeRay's operator, the chart, the claims
    and our operator; with ``kueue``, Kueue's own manager and a queue of one more node,
    :data:`QUEUED_NODE`. Everything started is stopped on the way out (skipped without the binaries)."""
    require_binaries(KWOK_CLUSTER, "the kwok e2e")
    with running(root / "control-plane") as plane:
        dashboard = RayDashboard().start()
        processes: dict[str, Any] = {}
        try:
            processes["kwok"] = start_kwok(plane, root)
            apply_kuberay_crds(plane)
            processes["kuberay"] = start_kuberay(plane, dashboard.port)
            if kueue:
                processes["kueue"] = start_kueue(plane, root)
            add_h20_nodes(plane, nodes)
            if kueue:
                add_nodes(plane, [gpu_node(QUEUED_NODE, labels=QUEUED_POOL, taints=[QUEUED_TAINT])])
            install(plane)
            for name in ("namespace.yaml",):
                plane.kubectl("apply", "-f", str(REPO / "examples" / "cluster" / name))
            if kueue:
                tolerations = [{**QUEUED_TAINT, "operator": "Equal"}]
                queue = queue_objects(1, NAMESPACE, node_labels=QUEUED_POOL, tolerations=tolerations)
                plane.apply_json(queue)
            storage = (
                (REPO / "examples" / "cluster" / "storage.yaml")
                .read_text()
                .replace("STORAGE_CLASS", "standard")
            )
            plane.kubectl("apply", "-f", "-", stdin=storage)
            for doc in yaml.safe_load_all(storage):
                if doc and doc.get("kind") == "PersistentVolumeClaim":
                    name = doc["metadata"]["name"]
                    plane.apply_json(volume(f"e2e-{name}", "standard", (NAMESPACE, name)))
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


def env_value(pod: dict[str, Any], name: str) -> str | None:
    """A container variable's value as the kubelet would give it: literal, or a pod label by fieldRef."""
    for container in pod["spec"]["containers"]:
        for var in container.get("env") or []:
            if var["name"] != name:
                continue
            if "value" in var:
                return str(var["value"])
            path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            if path.startswith("metadata.labels['") and path.endswith("']"):
                return pod["metadata"]["labels"].get(path[len("metadata.labels['") : -2])
    return None


#: The separate-async example's two pools, as an administrator labels and taints them.
TRAINING_POOL = {"flashrl.dev/pool": "training"}
ROLLOUT_POOL = {"flashrl.dev/pool": "rollout"}
ROLLOUT_TAINT = {"key": "dedicated", "value": "rollout", "effect": "NoSchedule"}
DECOY_PRODUCT = "NVIDIA-H100-80GB-HBM3"


def test_the_separate_async_example_lands_each_pool_on_its_own_h20_nodes(e2e: E2E) -> None:
    """examples/flashrljob-separate-async.yaml as shipped among nodes of two GPU products: the trainer's
    group on the H20 training pool, the rollout group on the tainted H20 rollout pool; H100 nodes carrying
    the same pool labels and taint, and the module's unlabelled H20 nodes, get none of its pods."""
    plane = e2e.plane
    example = REPO / "examples" / "flashrljob-separate-async.yaml"
    job = yaml.safe_load(example.read_text())["metadata"]["name"]
    taint = [ROLLOUT_TAINT]
    add_nodes(
        plane,
        [
            gpu_node("h20-train", labels=TRAINING_POOL),
            gpu_node("h20-rollout", labels=ROLLOUT_POOL, taints=taint),
            gpu_node("h100-train", DECOY_PRODUCT, labels=TRAINING_POOL),
            gpu_node("h100-rollout", DECOY_PRODUCT, labels=ROLLOUT_POOL, taints=taint),
        ],
    )
    plane.kubectl("apply", "-f", str(example))

    # Staging (the same model as the first test's job: it may find it staged already).
    stage = f"batch.kubernetes.io/job-name={job}-stage"
    e2e.wait(
        "the staging pod running or the RayJob",
        lambda: (
            e2e.get("rayjob", job) or [p for p in e2e.pods(stage) if p["status"].get("phase") == "Running"]
        ),
    )
    if e2e.get("rayjob", job) is None:
        e2e.exit_pods(stage)
    e2e.wait("the RayJob", lambda: e2e.get("rayjob", job))
    status = e2e.wait_phase(job, "Running")
    cluster = str(status["rayClusterName"])

    def running_workers() -> dict[str, list[dict[str, Any]]]:
        pods = [p for p in e2e.gpu_pods(cluster) if p["status"].get("phase") == "Running"]
        groups: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            groups.setdefault(pod["metadata"]["labels"][kuberay.GROUP_LABEL], []).append(pod)
        return groups

    one_each = {WORKER_GROUP: 1, ROLLOUT_WORKER_GROUP: 1}
    groups = e2e.wait(
        "both worker groups running",
        lambda: (g := running_workers()) and {k: len(v) for k, v in g.items()} == one_each and g,
    )
    placed = {group: [p["spec"]["nodeName"] for p in pods] for group, pods in groups.items()}
    # KubeRay names each pod's group to Ray (RAY_NODE_TYPE_NAME): Ray labels the node ray.io/node-group
    # with it (tests/ray/test_ray_pools.py), the one handle a placement group could select a pool by.
    for group, pods in groups.items():
        assert env_value(pods[0], "RAY_NODE_TYPE_NAME") == group, json.dumps(pods[0]["spec"]["containers"])
    assert placed == {WORKER_GROUP: ["h20-train"], ROLLOUT_WORKER_GROUP: ["h20-rollout"]}
    products = {
        node["metadata"]["name"]: node["metadata"]["labels"]["nvidia.com/gpu.product"]
        for node in e2e.plane.get_json("node")["items"]
    }
    on_decoys = [
        p["metadata"]["name"]
        for p in e2e.gpu_pods(cluster)
        if products.get(p["spec"].get("nodeName", "")) == DECOY_PRODUCT
    ]
    assert on_decoys == [], "a pod of the H20 job sits on an H100 node"
    assert e2e.get("rayjob", job)["status"]["jobDeploymentStatus"] == "Running"

    # The rest is played as for the synchronous example: last step, SUCCEEDED, the submitter exits.
    total = (status.get("progress") or {}).get("totalSteps") or 150
    e2e.launcher_reports(job, total, total)
    e2e.dashboard.set(job, "SUCCEEDED")
    e2e.wait("KubeRay's submitter pod", lambda: e2e.pods(f"batch.kubernetes.io/job-name={job}"))
    e2e.exit_pods(f"batch.kubernetes.io/job-name={job}")
    assert e2e.wait_phase(job, "Succeeded")["progress"]["step"] == total
    # Both groups' GPU workers are freed (KubeRay's deletion rules suspend every worker group).
    e2e.holds_no_gpu(job)
    e2e.assert_nothing_refused()


def queued_job(name: str, nodes: int = 1) -> dict[str, Any]:
    """A job of ``nodes`` x 8 H20 GPUs in Kueue's LocalQueue (its sources are on the claims: no staging)."""
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "model": {"source": "/models/Qwen3-8B-Base"},
            "data": {"train": "/data/dapo-math-17k.parquet", "validation": "/data/aime-2024.parquet"},
            "resources": {"nodes": nodes},
            "scheduling": {"queueName": LOCAL_QUEUE},
        },
    }


def assert_queued_holding_nothing(e2e: E2E, job: str) -> dict[str, Any]:
    """``job`` is Pending, reason Queued, naming its Kueue workload and why it waits; its RayJob is
    suspended and it has no Ray cluster and no pod."""
    status = e2e.wait(
        f"{job} queued with its Kueue workload's reason",
        lambda: (s := e2e.job_status(job)).get("reason") == "Queued" and "insufficient" in s["message"] and s,
    )
    assert status["phase"] == "Pending"
    assert "Kueue workload " in status["message"] and f"LocalQueue {LOCAL_QUEUE}" in status["message"]
    assert e2e.get("rayjob", job)["spec"]["suspend"] is True
    clusters = e2e.get("raycluster", "-l", f"{kuberay.ORIGINATED_FROM_NAME}={job}")
    assert not (clusters or {}).get("items"), "a queued job has no Ray cluster, so no pod and no GPU"
    assert not e2e.pods(f"batch.kubernetes.io/job-name={job}"), "nor a submitter"
    return dict(status)


def assert_only_the_gpu_pods_get_the_h20_flavor(e2e: E2E, job: str, cluster: str) -> None:
    """Kueue gives each pod set the node labels and tolerations of the flavors it assigned to the pod
    set's resources. The admitted job's Workload has the H20 flavor for ``nvidia.com/gpu`` of its GPU
    workers only, the label-less flavor for every ``cpu`` and ``memory``; so the GPU workers carry the
    flavor's selector (here with the queued pool's label, which only Kueue adds) and toleration, and
    the CPU-only head carries neither: it is not pinned to an H20 node (nor to the queue's node)."""
    uid = e2e.get("rayjob", job)["metadata"]["uid"]
    (workload,) = e2e.get("workload", "-l", kueue.workload_selector(uid))["items"]
    assigned = {
        a["name"]: a.get("flavors") or {} for a in workload["status"]["admission"]["podSetAssignments"]
    }
    cpu_only = {"cpu": DEFAULT_FLAVOR, "memory": DEFAULT_FLAVOR}
    assert assigned.get(WORKER_GROUP) == {**cpu_only, GPU_RESOURCE: GPU_FLAVOR}, assigned
    others = {name: flavors for name, flavors in assigned.items() if name != WORKER_GROUP}
    assert "head" in others and all(f == cpu_only for f in others.values()), f"the head's flavors: {assigned}"

    (head,) = e2e.pods(f"{kuberay.CLUSTER_LABEL}={cluster},{kuberay.NODE_TYPE_LABEL}=head")
    selector = head["spec"].get("nodeSelector") or {}
    assert not selector.keys() & {GPU_PRODUCT_LABEL, *QUEUED_POOL}, f"the head pinned by Kueue: {selector}"
    tolerated = {t.get("key") for t in head["spec"].get("tolerations") or []}
    assert QUEUED_TAINT["key"] not in tolerated, head["spec"].get("tolerations")
    assert head["spec"].get("nodeName") not in (None, QUEUED_NODE)
    workers = e2e.gpu_pods(cluster)
    assert workers
    flavor_labels = {GPU_PRODUCT_LABEL: H20_PRODUCT, **QUEUED_POOL}
    for worker in workers:
        assert worker["spec"]["nodeSelector"].items() >= flavor_labels.items(), worker["spec"]["nodeSelector"]
        assert QUEUED_TAINT["key"] in {t.get("key") for t in worker["spec"].get("tolerations") or []}


def finish(e2e: E2E, job: str) -> None:
    """The launcher reports the last step, the Ray job succeeds, KubeRay's submitter exits."""
    total = (e2e.job_status(job).get("progress") or {}).get("totalSteps") or 150
    e2e.launcher_reports(job, total, total)
    e2e.dashboard.set(job, "SUCCEEDED")
    e2e.wait("KubeRay's submitter pod", lambda: e2e.pods(f"batch.kubernetes.io/job-name={job}"))
    e2e.exit_pods(f"batch.kubernetes.io/job-name={job}")
    e2e.wait_phase(job, "Succeeded")


def test_two_queued_jobs_on_one_node_run_one_after_the_other(e2e: E2E) -> None:
    """Kueue's own manager queues two 8-GPU jobs for one 8-GPU node: the second waits holding nothing,
    and starts by itself once the first one's GPU workers are gone at its end (the operator suspends
    the finished cluster's worker groups; the head stays for its logs). Kueue's H20 flavor places the
    GPU workers only, never the CPU-only head."""
    first, second = "queued-first", "queued-second"
    e2e.plane.apply_json(queued_job(first))
    status = e2e.wait_phase(first, "Running")
    workers = e2e.gpu_pods(str(status["rayClusterName"]))
    assert [p["spec"]["nodeName"] for p in workers] == [QUEUED_NODE], "Kueue's flavor placed the job"
    assert_only_the_gpu_pods_get_the_h20_flavor(e2e, first, str(status["rayClusterName"]))

    e2e.plane.apply_json(queued_job(second))
    waiting = assert_queued_holding_nothing(e2e, second)
    assert "nvidia.com/gpu" in waiting["message"]

    finish(e2e, first)
    e2e.holds_no_gpu(first)
    status = e2e.wait_phase(second, "Running")
    workers = e2e.gpu_pods(str(status["rayClusterName"]))
    assert [p["spec"]["nodeName"] for p in workers] == [QUEUED_NODE]
    # Its startup deadline (KubeRay's preRunningDeadlineSeconds) counts from its admission, after the
    # first job ended, not from its creation.
    ended = e2e.get("rayjob", first)["status"]["endTime"]
    assert e2e.get("rayjob", second)["status"]["startTime"] >= ended
    for job in (first, second):
        assert e2e.job_status(job).get("reason") != "PreRunningDeadlineExceeded"
    finish(e2e, second)
    e2e.holds_no_gpu(second)
    e2e.assert_nothing_refused()


def test_a_queued_job_bigger_than_the_queue_holds_no_gpu(e2e: E2E) -> None:
    """16 GPUs (2 nodes x 8) on a queue of one 8-GPU node: Kueue admits the job whole or not at all, so
    it waits with no Ray cluster, no pod and no GPU, saying why."""
    job = "queued-too-big"
    e2e.plane.apply_json(queued_job(job, nodes=2))
    status = assert_queued_holding_nothing(e2e, job)
    assert "nvidia.com/gpu" in status["message"]
    assert not [p for p in e2e.pods("ray.io/node-type=worker") if p["spec"].get("nodeName") == QUEUED_NODE], (
        "no pod holds the queue's GPUs"
    )
    e2e.plane.kubectl("delete", "flashrljob", job, "-n", NAMESPACE, "--wait=false")
