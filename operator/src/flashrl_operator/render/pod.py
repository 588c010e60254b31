"""Pod templates of the Ray head and GPU worker groups (pure).

Rules these templates follow, each because of how KubeRay builds pods (see docs/rendering.md):

* The Ray container is container 0 (KubeRay's ``RayContainerIndex``).
* No readiness or liveness probes: KubeRay injects Ray-aware probes into empty slots only, and a
  probe we add would gate job submission on our own definition of ready.
* The head is CPU-only. ``NVIDIA_VISIBLE_DEVICES=void`` stops the NVIDIA runtime from exposing a
  node's GPUs to a pod that requested none (it could otherwise land on a GPU node and see them all).
* Workers mount their own memory-backed ``/dev/shm`` of ``resources.sharedMemory``; otherwise
  KubeRay sizes it from the memory limit (512Gi by default), all of it chargeable to node RAM.
* Workers have no Kubernetes API access (``automountServiceAccountToken: false``); only the head,
  where the launcher runs as the Ray driver, gets the launcher ServiceAccount.
* Every pod and container is hardened as the restricted Pod Security Standard asks (``security.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from flashrl_api import FlashRLJob, FlashRLJobSpec
from flashrl_api.spec import GPU_PRODUCT_LABEL, RolloutPoolSpec, VolumeSpec
from flashrl_jobs.contract import DEFAULT_METRICS_PORT, METRICS_PORT_NAME, SPEC_DIR
from flashrl_jobs.engine_env import pod_env
from flashrl_operator.render.labels import labels
from flashrl_operator.render.names import child_names
from flashrl_operator.render.security import container_security_context, pod_security_context

HEAD_CONTAINER: Final = "ray-head"
#: KubeRay's name for the submitter container (``common/job.go``, ``GetDefaultSubmitterTemplate``).
SUBMITTER_CONTAINER: Final = "ray-job-submitter"
#: KubeRay's default submitter resources (same function): ``ray job submit`` and log tailing only.
SUBMITTER_RESOURCES: Final = {
    "requests": {"cpu": "500m", "memory": "200Mi"},
    "limits": {"cpu": "1", "memory": "1Gi"},
}
WORKER_CONTAINER: Final = "ray-worker"
GPU_RESOURCE: Final = "nvidia.com/gpu"
SPEC_VOLUME: Final = "flashrl-spec"
SHM_VOLUME: Final = "dshm"
SHM_PATH: Final = "/dev/shm"
#: Ray's default ports, named as KubeRay expects (it builds the head Service from these names).
HEAD_PORTS: Final = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001))
#: The launcher's Prometheus ``/metrics`` (verl's metrics of the running job) at the launcher's default
#: port; the chart's PodMonitor scrapes the head pods' port of this name.
METRICS_PORT: Final = (METRICS_PORT_NAME, DEFAULT_METRICS_PORT)

#: Any taint on GPU nodes keyed nvidia.com/gpu (GKE uses =present, others =true).
GPU_TOLERATION: Final = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def _storage(spec: FlashRLJobSpec) -> list[tuple[str, VolumeSpec]]:
    s = spec.storage
    return [("model-cache", s.model_cache), ("data", s.data), ("checkpoints", s.checkpoints)]


def storage_volumes(spec: FlashRLJobSpec) -> list[dict[str, Any]]:
    """A PVC volume per storage entry with a claim, an emptyDir for the others."""
    volumes: list[dict[str, Any]] = []
    for name, vol in _storage(spec):
        if vol.claim_name is not None:
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": vol.claim_name}})
        else:
            volumes.append({"name": name, "emptyDir": {}})
    return volumes


def storage_mounts(spec: FlashRLJobSpec) -> list[dict[str, Any]]:
    """Mounts matching :func:`storage_volumes`."""
    mounts: list[dict[str, Any]] = []
    for name, vol in _storage(spec):
        mount: dict[str, Any] = {"name": name, "mountPath": vol.mount_path}
        if vol.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    return mounts


def _env(spec: FlashRLJobSpec, extra: dict[str, str] | None = None) -> list[dict[str, str]]:
    # spec.env overrides the engine defaults; ``extra`` holds reserved names spec.env cannot set.
    merged = {**pod_env(spec), **{var.name: var.value for var in spec.env}, **(extra or {})}
    return [{"name": k, "value": v} for k, v in merged.items()]


def _env_from(spec: FlashRLJobSpec) -> list[dict[str, Any]]:
    return [{"secretRef": {"name": name}} for name in spec.secret_refs]


def _common_pod_spec(spec: FlashRLJobSpec) -> dict[str, Any]:
    """Fields shared by head and worker pods."""
    pod: dict[str, Any] = {"securityContext": pod_security_context(spec)}
    if spec.images.pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in spec.images.pull_secrets]
    if spec.scheduling.priority_class_name is not None:
        pod["priorityClassName"] = spec.scheduling.priority_class_name
    return pod


#: Security context, pull Secrets and priority class, shared with the staging Job's pod.
common_pod_spec = _common_pod_spec


def _container(spec: FlashRLJobSpec, name: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": spec.images.trainer,
        "imagePullPolicy": spec.images.pull_policy,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(),
    }
    return container


def head_template(job: FlashRLJob, attempt_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Pod template of the CPU-only head: GCS, dashboard and the launcher (the Ray driver).

    ``attempt_env``: the launcher's per-attempt variables (``FLASHRL_ATTEMPT``, ...), reserved names
    ``spec.env`` cannot set.
    """
    spec = job.spec
    resources = {"cpu": spec.resources.head.cpu, "memory": spec.resources.head.memory}
    container = _container(spec, HEAD_CONTAINER)
    container.update(
        {
            "ports": [
                {"name": n, "containerPort": p, "protocol": "TCP"} for n, p in (*HEAD_PORTS, METRICS_PORT)
            ],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "env": _env(spec, {"NVIDIA_VISIBLE_DEVICES": "void", **(attempt_env or {})}),
            "volumeMounts": [
                {"name": SPEC_VOLUME, "mountPath": SPEC_DIR, "readOnly": True},
                *storage_mounts(spec),
            ],
        }
    )
    env_from = _env_from(spec)
    if env_from:
        container["envFrom"] = env_from
    head = spec.resources.head
    placement: dict[str, Any] = {}
    if head.node_selector:
        placement["nodeSelector"] = dict(head.node_selector)
    if head.tolerations:
        placement["tolerations"] = [t.to_wire() for t in head.tolerations]
    pod: dict[str, Any] = {
        **placement,
        "serviceAccountName": child_names(job).service_account,
        "containers": [container],
        "volumes": [
            {"name": SPEC_VOLUME, "configMap": {"name": child_names(job).config_map}},
            *storage_volumes(spec),
        ],
        **_common_pod_spec(spec),
    }
    return {"metadata": {"labels": labels(job, "ray-job")}, "spec": pod}


def worker_template(
    job: FlashRLJob, attempt_env: Mapping[str, str] | None = None, pool: RolloutPoolSpec | None = None
) -> dict[str, Any]:
    """Pod template of one GPU worker: a whole node's GPUs, shared by SGLang and the FSDP trainer; or,
    with ``pool`` (``spec.rollout.pool``, separate-async), a node of the standalone rollout pool, which
    differs only in GPU count and placement (CPU, memory, shared memory and RDMA are resources')."""
    spec = job.spec
    res = spec.resources
    gpus = pool.gpus_per_node if pool is not None else res.gpus_per_node
    product = pool.gpu_product if pool is not None else res.gpu_product
    selector = pool.node_selector if pool is not None else res.node_selector
    tolerations = pool.tolerations if pool is not None else res.tolerations
    quantities: dict[str, Any] = {"cpu": res.cpu, "memory": res.memory, GPU_RESOURCE: str(gpus)}
    if res.rdma is not None:
        quantities[res.rdma.resource_name] = str(res.rdma.count)
    container = _container(spec, WORKER_CONTAINER)
    container.update(
        {
            "resources": {"requests": dict(quantities), "limits": dict(quantities)},
            "env": _env(spec, dict(attempt_env or {})),
            "volumeMounts": [{"name": SHM_VOLUME, "mountPath": SHM_PATH}, *storage_mounts(spec)],
        }
    )
    env_from = _env_from(spec)
    if env_from:
        container["envFrom"] = env_from
    if res.rdma is not None:
        # Registering RDMA memory regions pins pages; without IPC_LOCK NCCL falls back to TCP.
        container["securityContext"] = container_security_context(rdma=True)
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "nodeSelector": {**selector, GPU_PRODUCT_LABEL: product},
        "tolerations": [dict(GPU_TOLERATION), *(t.to_wire() for t in tolerations)],
        "containers": [container],
        "volumes": [
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": res.shared_memory}},
            *storage_volumes(spec),
        ],
        **_common_pod_spec(spec),
    }
    return {"metadata": {"labels": labels(job, "ray-job")}, "spec": pod}


def submitter_template(job: FlashRLJob) -> dict[str, Any]:
    """Pod template of KubeRay's submitter Job (``submissionMode: K8sJobMode``).

    Without one, KubeRay builds the submitter pod from the head's image alone
    (``ray-operator/controllers/ray/common/job.go``, ``GetDefaultSubmitterTemplate``): no
    ``imagePullSecrets``, so with a private registry the submitter could not pull the trainer image
    the head just pulled. This is KubeRay's default (container name, resources, ``restartPolicy:
    Never``) plus the job's pull Secrets, pull policy, priority class, labels and the head's placement,
    hardened like the Ray pods (KubeRay's default has no security context, which alone would fail the
    restricted Pod Security level).
    KubeRay still fills in the command (``ray job submit`` of the RayJob's entrypoint) and the
    ``RAY_DASHBOARD_ADDRESS`` and ``RAY_JOB_SUBMISSION_ID`` variables, because the container sets
    neither (``rayjob_controller.go``, ``getSubmitterTemplate``). HTTPMode would need no pod, but it
    gives up the Job's retries and its log of the submission, and ``kubectl logs`` on the driver.
    """
    spec = job.spec
    container = {
        **_container(spec, SUBMITTER_CONTAINER),
        "resources": {k: dict(v) for k, v in SUBMITTER_RESOURCES.items()},
    }
    head = spec.resources.head
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
        **_common_pod_spec(spec),
    }
    if head.node_selector:
        pod["nodeSelector"] = dict(head.node_selector)
    if head.tolerations:
        pod["tolerations"] = [t.to_wire() for t in head.tolerations]
    return {"metadata": {"labels": labels(job, "ray-job")}, "spec": pod}
