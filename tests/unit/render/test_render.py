"""Structural assertions on the objects rendered for a FlashRLJob."""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

import pytest
import yaml

from flashrl_api import FlashRLJob, parse_job
from flashrl_api.pins import ray_version
from flashrl_jobs.contract import DEFAULT_SPEC_PATH, OVERRIDES_FILE, SPEC_DIR, SPEC_FILE
from flashrl_jobs.engine_env import pod_env
from flashrl_jobs.verl_args import verl_overrides
from flashrl_operator.render import (
    JOB_LABEL,
    MANAGED_BY,
    AttemptContext,
    attempt_ray_job_name,
    child_names,
    owner_reference,
    render,
)

UID = "6f1c2a9e-0000-4000-8000-000000000001"


def make_job(
    spec: dict[str, Any] | None = None, name: str = "qwen3-8b-dapo-fp8", uid: str | None = UID
) -> FlashRLJob:
    metadata: dict[str, Any] = {"name": name, "namespace": "rl"}
    if uid is not None:
        metadata["uid"] = uid
    return parse_job(
        {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": metadata, "spec": spec or {}}
    )


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objs}


def ray_job_of(job: FlashRLJob) -> dict[str, Any]:
    return by_kind(render(job))["RayJob"]


def head_pod(job: FlashRLJob) -> dict[str, Any]:
    spec: dict[str, Any] = ray_job_of(job)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    return spec


def worker_group(job: FlashRLJob) -> dict[str, Any]:
    groups = ray_job_of(job)["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert len(groups) == 1
    group: dict[str, Any] = groups[0]
    return group


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


# --- the list as a whole --------------------------------------------------------------------------


def test_children_in_apply_order() -> None:
    kinds = [(o["apiVersion"], o["kind"]) for o in render(make_job())]
    assert kinds == [
        ("v1", "ServiceAccount"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("v1", "ConfigMap"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("batch/v1", "Job"),  # the staging Job: the defaults are Hugging Face sources
        ("ray.io/v1", "RayJob"),
    ]


def test_render_is_deterministic_and_returns_fresh_objects() -> None:
    job = make_job({"resources": {"rdma": {"resourceName": "rdma/hca_shared_devices_a"}}})
    first = render(job)
    pristine = copy.deepcopy(first)
    # Mutating one result (as an apply loop might) must not leak into the next render.
    first[-1]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["tolerations"][0]["x"] = 1
    first[-1]["metadata"]["labels"]["x"] = "y"
    assert render(job) == pristine


def test_every_child_is_named_labelled_namespaced_and_owned() -> None:
    job = make_job()
    names = child_names(job)
    expected_names = {
        "ServiceAccount": names.service_account,
        "Role": names.role,
        "RoleBinding": names.role_binding,
        "ConfigMap": names.config_map,
        "NetworkPolicy": names.network_policy,
        "Job": "qwen3-8b-dapo-fp8-stage",
        "RayJob": names.ray_job,
    }
    components = {
        "ServiceAccount": "launcher-rbac",
        "Role": "launcher-rbac",
        "RoleBinding": "launcher-rbac",
        "ConfigMap": "spec",
        "NetworkPolicy": "network",
        "Job": "staging",
        "RayJob": "ray-job",
    }
    for obj in render(job):
        meta = obj["metadata"]
        assert meta["name"] == expected_names[obj["kind"]]
        assert meta["namespace"] == "rl"
        labels = meta["labels"]
        assert labels["app.kubernetes.io/name"] == "flashrl"
        assert labels["app.kubernetes.io/instance"] == "qwen3-8b-dapo-fp8"
        assert labels["app.kubernetes.io/component"] == components[obj["kind"]]
        assert labels["app.kubernetes.io/managed-by"] == MANAGED_BY == "flashrl-operator"
        assert labels["app.kubernetes.io/part-of"] == "flashrl"
        assert labels[JOB_LABEL] == "qwen3-8b-dapo-fp8"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "flashrl.dev/v1alpha1",
                "kind": "FlashRLJob",
                "name": "qwen3-8b-dapo-fp8",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def test_no_owner_reference_without_uid() -> None:
    job = make_job(uid=None)
    assert owner_reference(job) is None
    assert all("ownerReferences" not in o["metadata"] for o in render(job))


def test_namespace_defaults_like_kubectl() -> None:
    job = parse_job({"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": "a"}})
    assert {o["metadata"]["namespace"] for o in render(job)} == {"default"}


def test_default_names() -> None:
    names = child_names(make_job())
    assert names.ray_job == "qwen3-8b-dapo-fp8"
    assert names.config_map == "qwen3-8b-dapo-fp8-spec"
    assert names.service_account == names.role == names.role_binding == "qwen3-8b-dapo-fp8-launcher"


def test_long_job_name_gets_short_ray_job_and_valid_labels() -> None:
    name = "a" * 63
    job = make_job(name=name)
    rj = ray_job_of(job)
    assert len(rj["metadata"]["name"]) <= 47
    for obj in render(job):
        for value in obj["metadata"]["labels"].values():
            assert len(value) <= 63
    assert rj["metadata"]["labels"][JOB_LABEL] == name


# --- RBAC -----------------------------------------------------------------------------------------


def test_role_allows_only_this_jobs_status() -> None:
    objs = by_kind(render(make_job()))
    assert objs["Role"]["rules"] == [
        {
            "apiGroups": ["flashrl.dev"],
            "resources": ["flashrljobs/status"],
            "resourceNames": ["qwen3-8b-dapo-fp8"],
            "verbs": ["get", "patch"],
        }
    ]
    binding = objs["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": objs["Role"]["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": objs["ServiceAccount"]["metadata"]["name"], "namespace": "rl"}
    ]


# --- ConfigMap ------------------------------------------------------------------------------------


@pytest.mark.parametrize("quantization", ["blockwise-fp8", "channel-fp8", "bf16"])
def test_config_map_carries_the_exact_overrides(quantization: str) -> None:
    job = make_job({"rollout": {"quantization": quantization}, "overrides": ["trainer.test_freq=20"]})
    data = by_kind(render(job))["ConfigMap"]["data"]
    assert set(data) == {SPEC_FILE, OVERRIDES_FILE}
    overrides = json.loads(data[OVERRIDES_FILE])
    assert overrides == verl_overrides(job)
    assert all(isinstance(o, str) and "=" in o for o in overrides)
    assert "trainer.test_freq=20" in overrides


def test_config_map_spec_parses_back_to_the_same_job() -> None:
    job = make_job(
        {
            "rollout": {"quantization": "channel-fp8", "samplesPerPrompt": 8},
            "resources": {"nodes": 2, "rdma": {"resourceName": "rdma/hca_shared_devices_a", "count": 2}},
            "storage": {"checkpoints": {"claimName": "ckpt", "mountPath": "/checkpoints"}},
            "secretRefs": ["hf-token"],
        }
    )
    text = by_kind(render(job))["ConfigMap"]["data"][SPEC_FILE]
    parsed = parse_job(yaml.safe_load(text))
    assert parsed.spec == job.spec
    assert parsed.metadata == {"name": "qwen3-8b-dapo-fp8", "namespace": "rl", "uid": UID}
    # The full defaulted spec is written, not the user's sparse one.
    assert yaml.safe_load(text)["spec"]["training"]["promptBatchSize"] == 32


def test_config_map_spec_has_no_uid_when_unknown() -> None:
    text = by_kind(render(make_job(uid=None)))["ConfigMap"]["data"][SPEC_FILE]
    assert "uid" not in yaml.safe_load(text)["metadata"]


# --- RayJob ---------------------------------------------------------------------------------------


def test_ray_job_lifecycle_defaults() -> None:
    spec = ray_job_of(make_job())["spec"]
    assert spec["entrypoint"] == shlex.join(["flashrl-launch", "train", "--spec", DEFAULT_SPEC_PATH])
    assert shlex.split(spec["entrypoint"]) == [
        "flashrl-launch",
        "train",
        "--spec",
        "/etc/flashrl/flashrljob.yaml",
    ]
    assert spec["submissionMode"] == "K8sJobMode"
    # When the Ray job ends its GPU workers go at once; the head (logs, dashboard) stays for the TTL.
    assert spec["shutdownAfterJobFinishes"] is False
    assert spec["ttlSecondsAfterFinished"] == 0
    rules = spec["deletionStrategy"]["deletionRules"]
    by_end = {}
    for rule in rules:
        condition = dict(rule["condition"])
        ttl = condition.pop("ttlSeconds")
        by_end.setdefault(tuple(condition.items()), {})[rule["policy"]] = ttl
    assert by_end == {
        (("jobStatus", "SUCCEEDED"),): {"DeleteWorkers": 0, "DeleteCluster": 3600},
        (("jobStatus", "FAILED"),): {"DeleteWorkers": 0, "DeleteCluster": 3600},
        # A RayJob failed before its Ray job ran (startup deadline) has no jobStatus.
        (("jobDeploymentStatus", "Failed"),): {"DeleteWorkers": 0, "DeleteCluster": 3600},
    }
    assert spec["preRunningDeadlineSeconds"] == 1800
    assert spec["backoffLimit"] == 0
    assert spec["suspend"] is False
    assert "activeDeadlineSeconds" not in spec
    assert "clusterSelector" not in spec
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == ray_version()
    assert cluster["enableInTreeAutoscaling"] is False


def test_ray_job_lifecycle_from_spec() -> None:
    spec = ray_job_of(
        make_job(
            {
                "lifecycle": {
                    "suspend": True,
                    "ttlSecondsAfterFinished": 0,
                    "activeDeadlineSeconds": 86400,
                    "startupTimeoutSeconds": 600,
                    "maxRestarts": 3,
                }
            }
        )
    )["spec"]
    assert spec["suspend"] is True
    # KubeRay refuses suspend without shutdownAfterJobFinishes, which excludes the deletion rules.
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] == 0
    assert "deletionStrategy" not in spec
    assert spec["activeDeadlineSeconds"] == 86400
    assert spec["preRunningDeadlineSeconds"] == 600
    # The operator retries (maxRestarts) with a new RayJob per attempt; KubeRay never does.
    assert spec["backoffLimit"] == 0


def test_dry_run_submits_the_launcher_check_command() -> None:
    spec = ray_job_of(make_job({"dryRun": True}))["spec"]
    assert shlex.split(spec["entrypoint"]) == ["flashrl-launch", "check", "--spec", DEFAULT_SPEC_PATH]


def test_kueue_queue_labels_and_suspends() -> None:
    job = make_job({"scheduling": {"queueName": "team-a", "priorityClassName": "rl-high"}})
    rj = ray_job_of(job)
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    # Kueue admits by clearing suspend; the renderer must hand it a suspended job.
    assert rj["spec"]["suspend"] is True
    assert rj["spec"]["shutdownAfterJobFinishes"] is True  # Kueue's webhook requires it
    assert rj["spec"]["ttlSecondsAfterFinished"] == 3600
    assert "deletionStrategy" not in rj["spec"]
    assert "rayClusterSpec" in rj["spec"]
    assert all(g["groupName"] != "head" for g in rj["spec"]["rayClusterSpec"]["workerGroupSpecs"])
    assert head_pod(job)["priorityClassName"] == "rl-high"
    assert worker_group(job)["template"]["spec"]["priorityClassName"] == "rl-high"


def test_no_queue_no_kueue_label() -> None:
    job = make_job()
    assert "kueue.x-k8s.io/queue-name" not in ray_job_of(job)["metadata"]["labels"]
    assert "priorityClassName" not in head_pod(job)
    assert "priorityClassName" not in worker_group(job)["template"]["spec"]


# --- submitter ------------------------------------------------------------------------------------


def test_pull_secrets_reach_kuberays_submitter_pod() -> None:
    job = make_job(
        {
            "images": {"pullSecrets": ["regcred"], "pullPolicy": "Always"},
            "scheduling": {"priorityClassName": "training"},
            "resources": {"head": {"nodeSelector": {"pool": "cpu"}}},
        }
    )
    rayjob = ray_job_of(job)["spec"]
    assert rayjob["submissionMode"] == "K8sJobMode"
    pod = rayjob["submitterPodTemplate"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["restartPolicy"] == "Never"  # KubeRay's submitter Job requires it
    assert (pod["priorityClassName"], pod["nodeSelector"]) == ("training", {"pool": "cpu"})
    (c,) = pod["containers"]
    assert (c["name"], c["image"], c["imagePullPolicy"]) == (
        "ray-job-submitter",
        job.spec.images.trainer,
        "Always",
    )
    # KubeRay fills in the submit command only when the container has none.
    assert "command" not in c and "args" not in c
    assert (
        rayjob["submitterPodTemplate"]["metadata"]["labels"]
        == rayjob["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]
    )


# --- head -----------------------------------------------------------------------------------------


def test_head_is_cpu_only_and_runs_as_the_launcher() -> None:
    job = make_job({"secretRefs": ["hf-token", "wandb"], "images": {"pullSecrets": ["regcred"]}})
    head_group = ray_job_of(job)["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head_group["rayStartParams"] == {"num-gpus": "0", "dashboard-host": "0.0.0.0"}
    pod = head_group["template"]["spec"]
    assert pod["serviceAccountName"] == child_names(job).service_account
    assert pod.get("automountServiceAccountToken", True) is True
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert "nodeSelector" not in pod
    assert "tolerations" not in pod
    c = pod["containers"][0]
    assert c["name"] == "ray-head"
    assert c["image"] == job.spec.images.trainer
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"cpu": "8", "memory": "32Gi"},
    }
    assert not any("gpu" in key for key in c["resources"]["limits"])
    env = env_of(c)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    for key, value in pod_env(job.spec).items():
        assert env[key] == value
    assert c["envFrom"] == [{"secretRef": {"name": "hf-token"}}, {"secretRef": {"name": "wandb"}}]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    # Ray's ports and the launcher's /metrics (the chart's PodMonitor scrapes it by name).
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "flashrl-metrics": 9450}
    # KubeRay injects Ray-aware probes only into empty slots; ours would gate submission.
    assert "readinessProbe" not in c
    assert "livenessProbe" not in c


def test_head_mounts_the_spec_config_map_read_only() -> None:
    job = make_job()
    pod = head_pod(job)
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    spec_mount = mounts[SPEC_DIR]
    assert spec_mount["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[spec_mount["name"]]["configMap"]["name"] == child_names(job).config_map
    assert f"{SPEC_DIR}/{SPEC_FILE}" == DEFAULT_SPEC_PATH


# --- GPU workers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "gpus"), [(1, 8), (2, 8), (4, 4)])
def test_gpu_limits_sum_to_nodes_times_gpus(nodes: int, gpus: int) -> None:
    job = make_job({"resources": {"nodes": nodes, "gpusPerNode": gpus}, "rollout": {"samplesPerPrompt": 16}})
    cluster = ray_job_of(job)["spec"]["rayClusterSpec"]
    total = 0
    for group in cluster["workerGroupSpecs"]:
        per_pod = sum(
            int(c["resources"]["limits"].get("nvidia.com/gpu", 0))
            for c in group["template"]["spec"]["containers"]
        )
        total += per_pod * group["replicas"] * group["numOfHosts"]
    head_containers = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    total += sum(int(c["resources"]["limits"].get("nvidia.com/gpu", 0)) for c in head_containers)
    assert total == nodes * gpus
    group = worker_group(job)
    assert group["groupName"] == "gpu"
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == nodes
    assert group["numOfHosts"] == 1
    assert group["rayStartParams"] == {}


def test_worker_pod_targets_the_gpu_pool() -> None:
    job = make_job({"resources": {"gpuProduct": "NVIDIA-H20-3e"}})
    pod = worker_group(job)["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H20-3e"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    c = pod["containers"][0]
    assert c["name"] == "ray-worker"
    assert c["image"] == job.spec.images.trainer
    assert c["resources"]["limits"] == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert "add" not in c["securityContext"]["capabilities"]  # IPC_LOCK only with RDMA
    assert "readinessProbe" not in c
    assert "livenessProbe" not in c
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(c)
    assert env_of(c) == {**pod_env(job.spec), "FLASHRL_ATTEMPT": "1"}


def test_spec_env_reaches_every_ray_container_and_overrides_engine_defaults() -> None:
    env = [
        {"name": "NCCL_IB_HCA", "value": "mlx5_0,mlx5_1"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        {"name": "NCCL_DEBUG", "value": "INFO"},
    ]
    job = make_job({"env": env, "secretRefs": ["hf-token"]})
    cluster = ray_job_of(job)["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = worker_group(job)["template"]["spec"]["containers"][0]
    expected = {**pod_env(job.spec), "NCCL_IB_HCA": "mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "eth0"}
    expected["NCCL_DEBUG"] = "INFO"
    expected["FLASHRL_ATTEMPT"] = "1"
    assert env_of(worker) == expected
    assert env_of(head) == {**expected, "NVIDIA_VISIBLE_DEVICES": "void"}
    # One entry per name: a duplicate would leave the winner to the container runtime.
    for container in (head, worker):
        names = [e["name"] for e in container["env"]]
        assert len(names) == len(set(names))
        # Explicit env wins over envFrom in Kubernetes, so spec.env also beats a Secret's keys.
        assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]


def test_extra_node_labels_and_taints_reach_only_the_gpu_workers() -> None:
    job = make_job(
        {
            "resources": {
                "nodeSelector": {"cloud.google.com/gke-nodepool": "h20-reserved"},
                "tolerations": [
                    {"key": "dedicated", "value": "training", "effect": "NoSchedule"},
                    {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                ],
            }
        }
    )
    pod = worker_group(job)["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-nodepool": "h20-reserved",
        "nvidia.com/gpu.product": "NVIDIA-H20",
    }
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ]
    head = ray_job_of(job)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in head and "tolerations" not in head


def test_the_head_can_be_placed_on_its_own_pool() -> None:
    head_spec = {
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "dedicated", "value": "ray-head", "effect": "NoSchedule"}],
    }
    job = make_job({"resources": {"head": head_spec}})
    head = ray_job_of(job)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"pool": "cpu"}
    assert head["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ray-head", "effect": "NoSchedule"}
    ]
    workers = worker_group(job)["template"]["spec"]
    assert workers["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H20"}


def test_worker_shared_memory_is_explicit() -> None:
    pod = worker_group(make_job({"resources": {"sharedMemory": "128Gi"}}))["template"]["spec"]
    shm = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert len(shm) == 1
    volume = next(v for v in pod["volumes"] if v["name"] == shm[0]["name"])
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "128Gi"}


def test_rdma_adds_device_and_ipc_lock() -> None:
    job = make_job(
        {"resources": {"nodes": 2, "rdma": {"resourceName": "rdma/hca_shared_devices_a", "count": 1}}}
    )
    c = worker_group(job)["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["rdma/hca_shared_devices_a"] == "1"
    assert c["resources"]["requests"]["rdma/hca_shared_devices_a"] == "1"
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}


def test_storage_pvcs_and_empty_dirs() -> None:
    job = make_job(
        {
            "storage": {
                "modelCache": {"claimName": "hf-cache", "mountPath": "/models"},
                "data": {"claimName": "rl-data", "mountPath": "/data", "readOnly": True},
                # No claim: a pod-local emptyDir.
                "checkpoints": {"mountPath": "/ckpt"},
            }
        }
    )
    for pod in (head_pod(job), worker_group(job)["template"]["spec"]):
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert volumes[mounts["/models"]["name"]]["persistentVolumeClaim"] == {"claimName": "hf-cache"}
        assert volumes[mounts["/data"]["name"]]["persistentVolumeClaim"] == {"claimName": "rl-data"}
        assert mounts["/data"]["readOnly"] is True
        assert mounts["/models"].get("readOnly", False) is False
        assert volumes[mounts["/ckpt"]["name"]]["emptyDir"] == {}
        # Every mount refers to a volume of the pod, and volume names are unique.
        assert {m["name"] for m in pod["containers"][0]["volumeMounts"]} <= set(volumes)
        assert len(volumes) == len(pod["volumes"])


def test_image_settings_reach_both_groups() -> None:
    job = make_job({"images": {"trainer": "registry.local/flashrl-trainer:dev", "pullPolicy": "Always"}})
    for pod in (head_pod(job), worker_group(job)["template"]["spec"]):
        assert pod["containers"][0]["image"] == "registry.local/flashrl-trainer:dev"
        assert pod["containers"][0]["imagePullPolicy"] == "Always"
        assert "imagePullSecrets" not in pod


def _leaves(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [leaf for v in node.values() for leaf in _leaves(v)]
    if isinstance(node, list):
        return [leaf for v in node for leaf in _leaves(v)]
    return [node]


def test_objects_are_plain_json_without_nulls() -> None:
    job = make_job({"scheduling": {"queueName": "q"}, "resources": {"rdma": {"resourceName": "rdma/x"}}})
    objs = render(job).manifests()
    assert json.loads(json.dumps(objs)) == objs
    # A null would read as "delete this field" in a merge patch, and as a diff on every reconcile.
    assert all(leaf is not None for leaf in _leaves(objs))


def test_each_attempt_is_its_own_ray_job_with_its_number_and_what_is_left_of_the_deadline() -> None:
    job = make_job({"lifecycle": {"activeDeadlineSeconds": 86400, "maxRestarts": 3}})
    first = ray_job_of(job)
    assert first["metadata"]["name"] == job.name
    assert first["metadata"]["labels"]["flashrl.dev/attempt"] == "1"
    assert first["metadata"]["labels"]["flashrl.dev/job"] == job.name
    third = by_kind(list(render(job, AttemptContext(3, "2026-01-02T03:04:05Z", 3600))))["RayJob"]
    assert third["metadata"]["name"] == f"{job.name}-3"
    assert third["metadata"]["labels"]["flashrl.dev/attempt"] == "3"
    assert third["spec"]["backoffLimit"] == 0
    assert third["spec"]["activeDeadlineSeconds"] == 3600
    cluster = third["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"], cluster["workerGroupSpecs"][0]["template"]]
    for pod in pods:
        env = env_of(pod["spec"]["containers"][0])
        assert env["FLASHRL_ATTEMPT"] == "3"
        assert env["FLASHRL_JOB_START_TIME"] == "2026-01-02T03:04:05Z"


def test_attempt_names_stay_valid_ray_job_names() -> None:
    job = make_job({}, name="a" * 47)
    names = {attempt_ray_job_name(job, k) for k in range(1, 102)}
    assert len(names) == 101
    assert all(len(n) <= 47 and n[0].isalpha() and not n.endswith("-") for n in names)


def test_hf_token_is_set_once_in_the_staging_container_and_the_secrets_wins() -> None:
    """Issue 18: ``HF_TOKEN`` in ``spec.env`` and a token Secret would list the variable twice, which
    server-side apply refuses; the Secret's is the one kept."""
    from flashrl_api import parse_job
    from flashrl_operator.render.staging import staging_job

    job = parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": "tok", "namespace": "rl"},
            "spec": {
                "env": [{"name": "HF_TOKEN", "value": "from-the-spec"}],
                "huggingFace": {"tokenSecret": "hf-token"},
            },
        }
    )
    rendered = staging_job(job)
    assert rendered is not None
    env = rendered["spec"]["template"]["spec"]["containers"][0]["env"]
    tokens = [e for e in env if e["name"] == "HF_TOKEN"]
    assert tokens == [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN", "optional": True}},
        }
    ]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names))


def test_the_staging_job_fails_at_once_on_every_launcher_exit_a_retry_cannot_fix() -> None:
    """The pod failure policy reads the launcher's failure table: a non-retryable exit (a gated repository,
    a bad spec) fails the Job at once, a retryable or unknown one (a killed download) uses backoffLimit,
    and a disruption does not count."""
    from flashrl_api.status import LAUNCHER_FAILURES
    from flashrl_jobs import contract
    from flashrl_operator.render.staging import STAGE_CONTAINER, staging_job

    rendered = staging_job(make_job({"huggingFace": {"tokenSecret": "hf-token"}}))
    assert rendered is not None
    fail_job, ignore = rendered["spec"]["podFailurePolicy"]["rules"]
    final = set(fail_job["onExitCodes"]["values"])
    assert fail_job["action"] == "FailJob"
    assert fail_job["onExitCodes"]["containerName"] == STAGE_CONTAINER
    assert {contract.EXIT_STAGING_FAILED, contract.EXIT_INVALID_CONFIG, contract.EXIT_USAGE} <= final
    for row in LAUNCHER_FAILURES:
        if row.exit_code is not None:
            assert (row.exit_code in final) is (not row.retryable), row
    assert contract.EXIT_GPU_TIMEOUT not in final and 1 not in final and 137 not in final
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert rendered["spec"]["backoffLimit"] >= 1


# --- training modes: the rollout pool's worker group -----------------------------------------------

SEPARATE_ASYNC: dict[str, Any] = {
    "training": {"mode": "separate-async", "async": {"parameterSyncStep": 1}},
    "rollout": {
        "pool": {
            "nodes": 3,
            "gpusPerNode": 4,
            "nodeSelector": {"pool": "rollout"},
            "tolerations": [{"key": "dedicated", "value": "rollout", "effect": "NoSchedule"}],
        }
    },
    "resources": {"nodes": 2, "nodeSelector": {"pool": "train"}},
}


def test_separate_async_adds_a_rollout_worker_group_beside_the_trainers() -> None:
    groups = ray_job_of(make_job(SEPARATE_ASYNC))["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in groups] == [
        ("gpu", 2, 2, 2),
        ("rollout", 3, 3, 3),
    ]
    trainer, rollout = (g["template"]["spec"] for g in groups)
    assert trainer["nodeSelector"] == {"pool": "train", "nvidia.com/gpu.product": "NVIDIA-H20"}
    assert rollout["nodeSelector"] == {"pool": "rollout", "nvidia.com/gpu.product": "NVIDIA-H20"}
    assert {"key": "dedicated", "value": "rollout", "effect": "NoSchedule", "operator": "Equal"} in rollout[
        "tolerations"
    ]
    assert not any(t.get("key") == "dedicated" for t in trainer["tolerations"])
    assert trainer["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert rollout["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    # Same image, volumes and launcher environment: one Ray cluster, two pools.
    assert rollout["containers"][0]["image"] == trainer["containers"][0]["image"]
    assert rollout["volumes"] == trainer["volumes"]


@pytest.mark.parametrize("mode", ["sync", "colocate-async"])
def test_the_other_modes_keep_one_worker_group(mode: str) -> None:
    assert worker_group(make_job({"training": {"mode": mode}}))["groupName"] == "gpu"
