"""Every example validates, renders, and renders what its comments promise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api import FlashRLJob, load_job_file
from flashrl_operator.render import render

EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "examples"
#: The FlashRLJob examples (examples/flashrlexperiment.yaml is tested with the experiment API).
EXAMPLES = sorted(
    p for p in EXAMPLES_DIR.glob("*.yaml") if "\nkind: FlashRLJob\n" in p.read_text(encoding="utf-8")
)
EXPECTED = {
    "flashrljob.yaml",
    "flashrljob-channel-fp8.yaml",
    "flashrljob-bf16-baseline.yaml",
    "flashrljob-two-node.yaml",
    "flashrljob-kueue.yaml",
    "flashrljob-separate-async.yaml",
}


def load(name: str) -> FlashRLJob:
    return load_job_file(EXAMPLES_DIR / name)


def rayjob(job: FlashRLJob) -> dict[str, Any]:
    obj: dict[str, Any] = render(job)[-1]
    assert obj["kind"] == "RayJob"
    return obj


def worker(job: FlashRLJob) -> dict[str, Any]:
    group: dict[str, Any] = rayjob(job)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    return group


def test_the_documented_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= EXPECTED


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_and_renders(path: Path) -> None:
    job = load_job_file(path)
    objs = render(job)
    assert [o["kind"] for o in objs] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "NetworkPolicy",
        "Job",
        "RayJob",
    ]
    assert all(o["metadata"]["namespace"] == job.namespace for o in objs)
    # Examples name real claims: every storage volume is a PVC, never a pod-local emptyDir.
    volumes = worker(job)["template"]["spec"]["volumes"]
    storage = [v for v in volumes if v["name"] in {"model-cache", "data", "checkpoints"}]
    assert len(storage) == 3
    assert all("persistentVolumeClaim" in v for v in storage)


def test_default_example_is_the_origin_recipe() -> None:
    job = load("flashrljob.yaml")
    spec = job.spec
    assert job.name == "qwen3-8b-dapo-fp8"
    assert spec.model.source == "hf://Qwen/Qwen3-8B-Base"
    assert spec.rollout.quantization == "blockwise-fp8"
    assert (spec.correction.tis.level, spec.correction.tis.cap) == ("token", 2.0)
    assert (spec.training.prompt_batch_size, spec.rollout.samples_per_prompt) == (32, 16)
    assert (spec.training.generation_batch_size, spec.training.mini_batch_size) == (96, 32)
    assert (spec.resources.nodes, spec.resources.gpus_per_node) == (1, 8)
    assert worker(job)["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H20"}


@pytest.mark.parametrize(
    ("name", "quantization"),
    [
        ("flashrljob.yaml", "blockwise-fp8"),
        ("flashrljob-channel-fp8.yaml", "channel-fp8"),
        ("flashrljob-bf16-baseline.yaml", "bf16"),
    ],
)
def test_precision_examples_differ_only_where_they_say(name: str, quantization: str) -> None:
    job = load(name)
    base = load("flashrljob.yaml").spec
    assert job.spec.rollout.quantization == quantization
    assert job.spec.correction == base.correction
    assert job.spec.training.model_copy(update={"experiment_name": None}) == base.training
    assert job.spec.resources == base.resources


def test_two_node_example_uses_rdma_across_16_gpus() -> None:
    job = load("flashrljob-two-node.yaml")
    group = worker(job)
    assert group["replicas"] == 2
    container = group["template"]["spec"]["containers"][0]
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) * group["replicas"] == 16
    assert container["resources"]["limits"]["rdma/hca_shared_devices_a"] == "1"
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert job.spec.lifecycle.max_restarts == 2
    assert rayjob(job)["spec"]["backoffLimit"] == 0  # the operator retries, each attempt a new RayJob


def test_kueue_example_is_queued_and_prioritised() -> None:
    job = load("flashrljob-kueue.yaml")
    rj = rayjob(job)
    assert rj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "h20-training"
    assert rj["spec"]["suspend"] is True
    assert worker(job)["template"]["spec"]["priorityClassName"] == "rl-batch"


# --- examples/cluster: what a job needs before it is applied --------------------------------------

CLUSTER_DIR = EXAMPLES_DIR / "cluster"


#: Kueue's queue (checked against the objects the kwok e2e and the dev cluster run, below).
KUEUE_EXAMPLE = CLUSTER_DIR / "kueue.yaml"


def _cluster_objects() -> list[dict[str, Any]]:
    import yaml

    objects: list[dict[str, Any]] = []
    for path in sorted(CLUSTER_DIR.glob("*.yaml")):
        if path == KUEUE_EXAMPLE:
            continue
        text = path.read_text(encoding="utf-8").replace("STORAGE_CLASS", "nfs-client")
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def test_cluster_examples_pass_kubernetes_validate_strict() -> None:
    import kubernetes_validate

    objects = _cluster_objects()
    assert sorted(o["kind"] for o in objects) == ["Namespace"] + ["PersistentVolumeClaim"] * 3 + ["Secret"]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.32", strict=True)


def test_cluster_examples_create_what_the_jobs_refer_to() -> None:
    from flashrl_api.spec import DEFAULT_CLAIMS, DEFAULT_TOKEN_SECRET, TOKEN_KEY

    objects = _cluster_objects()
    namespace = next(o["metadata"]["name"] for o in objects if o["kind"] == "Namespace")
    claims = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PersistentVolumeClaim"}
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert set(claims) == set(DEFAULT_CLAIMS.values())
    # Several pods on several nodes mount each claim (staging Job, head, GPU workers).
    assert all(c["spec"]["accessModes"] == ["ReadWriteMany"] for c in claims.values())
    assert (secret["metadata"]["name"], list(secret["stringData"])) == (DEFAULT_TOKEN_SECRET, [TOKEN_KEY])
    assert {o["metadata"]["namespace"] for o in objects if o["kind"] != "Namespace"} == {namespace}
    for path in EXAMPLES:
        job = load_job_file(path)
        assert job.namespace == namespace, path.name
        storage = job.spec.storage
        used = {v.claim_name for v in (storage.model_cache, storage.data, storage.checkpoints)}
        assert used <= set(claims), path.name
        assert job.spec.hugging_face.token_secret == DEFAULT_TOKEN_SECRET
        # The README calls the token Secret optional: no example job requires a Secret.
        assert job.spec.secret_refs == [], path.name


def test_the_experiment_example_requires_no_secret() -> None:
    """Every variant of the experiment example starts without the optional Hub token Secret: a Secret
    in secretRefs is required by every Ray pod (a real kubelet refuses to start them without it)."""
    from flashrl_api.experiment import parse_experiment, variant_jobs

    raw = yaml.safe_load((EXAMPLES_DIR / "flashrlexperiment.yaml").read_text(encoding="utf-8"))
    for job in variant_jobs(parse_experiment(raw)):
        assert job.spec.secret_refs == [], job.name
        for obj in render(job):
            text = str(obj)
            assert "'secretRef'" not in text, (job.name, obj["kind"])


def test_checkpoint_claim_holds_the_kept_checkpoints_of_the_default_job() -> None:
    objects = _cluster_objects()
    size = next(o for o in objects if o["metadata"]["name"] == "rl-checkpoints")["spec"]["resources"]
    gib = int(size["requests"]["storage"].removesuffix("Gi"))
    keep = load("flashrljob.yaml").spec.checkpoint.keep
    assert gib >= (keep + 1) * 100  # ~100 GB per Qwen3-8B checkpoint, plus the one being written


def test_separate_async_example_has_two_gpu_worker_groups() -> None:
    from flashrl_api import spec_warnings, violations
    from flashrl_jobs.verl_args import verl_overrides
    from flashrl_jobs.verl_config import check_config, compose_config

    job = load("flashrljob-separate-async.yaml")
    assert violations(job.spec) == [] and spec_warnings(job.spec) == []
    groups = rayjob(job)["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"]) for g in groups] == [("gpu", 1), ("rollout", 1)]
    selectors = [g["template"]["spec"]["nodeSelector"] for g in groups]
    assert selectors == [
        {"flashrl.dev/pool": "training", "nvidia.com/gpu.product": "NVIDIA-H20"},
        {"flashrl.dev/pool": "rollout", "nvidia.com/gpu.product": "NVIDIA-H20"},
    ]
    assert all(
        g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8" for g in groups
    )
    # Composed against the pinned verl: the V1 separate-async trainer with what it asserts at start.
    cfg = compose_config(verl_overrides(job))
    v1 = cfg.trainer.v1
    assert v1.trainer_mode == "separate_async"
    assert (
        cfg.data.train_batch_size
        == v1.separate_async.parameter_sync_step * cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    )
    assert (cfg.actor_rollout_ref.rollout.nnodes, cfg.actor_rollout_ref.rollout.n_gpus_per_node) == (1, 8)
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"
    assert cfg.actor_rollout_ref.hybrid_engine is False
    assert check_config(job).problems == []


def test_the_kueue_example_is_the_queue_the_e2e_and_the_dev_cluster_run() -> None:
    """examples/cluster/kueue.yaml is what ``flashrl_devcluster.kueue.queue_objects`` makes for one
    node (the kwok e2e runs those objects on Kueue's own manager), and its LocalQueue is the one the
    queued example names, in the examples' namespace."""
    import yaml

    from flashrl_devcluster.kueue import queue_objects

    objects = [doc for doc in yaml.safe_load_all(KUEUE_EXAMPLE.read_text(encoding="utf-8")) if doc]
    assert objects == queue_objects(1, "rl")
    (local,) = [o for o in objects if o["kind"] == "LocalQueue"]
    job = load_job_file(EXAMPLES_DIR / "flashrljob-kueue.yaml")
    assert (local["metadata"]["name"], local["metadata"]["namespace"]) == (
        job.spec.scheduling.queue_name,
        job.namespace,
    )


def test_the_kueue_example_creates_the_priority_class_the_queued_example_names() -> None:
    """Without it the API server refuses every pod of the queued example and Kueue creates no Workload
    for it (the operator fails the job, PriorityClassNotFound): examples/cluster/kueue.yaml, and so
    ``make dev-cluster`` and the kwok e2e (``queue_objects``), create the class the example names, one
    that is not the cluster's default and whose pods wait rather than evict others."""
    from flashrl_devcluster.kueue import queue_objects

    job = load_job_file(EXAMPLES_DIR / "flashrljob-kueue.yaml")
    for objects in (
        [doc for doc in yaml.safe_load_all(KUEUE_EXAMPLE.read_text(encoding="utf-8")) if doc],
        queue_objects(3, "rl"),
    ):
        (priority,) = [o for o in objects if o["kind"] == "PriorityClass"]
        assert priority["apiVersion"] == "scheduling.k8s.io/v1"
        assert priority["metadata"]["name"] == job.spec.scheduling.priority_class_name == "rl-batch"
        assert priority["value"] > 0 and priority["globalDefault"] is False
        assert priority["preemptionPolicy"] == "Never" and priority["description"]


def test_only_the_gpus_are_counted_in_the_h20_flavor() -> None:
    """Kueue gives a pod set the node labels and tolerations of every flavor it assigns to the pod set's
    resources: ``cpu`` and ``memory`` (all the CPU-only head and the submitter request) are in a resource
    group whose flavor has no node labels nor tolerations, so Kueue never pins the head to a GPU node;
    only ``nvidia.com/gpu`` is in the H20 flavor. The quota grows with the nodes (``NODES=``)."""
    from flashrl_devcluster.kueue import queue_objects

    shipped = [doc for doc in yaml.safe_load_all(KUEUE_EXAMPLE.read_text(encoding="utf-8")) if doc]
    for nodes, objects in ((1, shipped), (3, queue_objects(3, "rl"))):
        flavors = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ResourceFlavor"}
        (queue,) = [o for o in objects if o["kind"] == "ClusterQueue"]
        groups = {
            tuple(group["coveredResources"]): {
                flavor["name"]: {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
                for flavor in group["flavors"]
            }
            for group in queue["spec"]["resourceGroups"]
        }
        assert groups == {
            ("cpu", "memory"): {"default-flavor": {"cpu": str(192 * nodes), "memory": f"{2048 * nodes}Gi"}},
            ("nvidia.com/gpu",): {"nvidia-h20": {"nvidia.com/gpu": str(8 * nodes)}},
        }
        assert flavors["default-flavor"] == {}, "no node selector nor toleration for cpu and memory"
        assert flavors["nvidia-h20"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H20"}


def test_the_install_guide_gives_the_kueue_example() -> None:
    """docs/install.md shows the Kueue objects exactly as examples/cluster/kueue.yaml has them."""
    import textwrap

    import yaml

    doc = (EXAMPLES_DIR.parent / "docs" / "install.md").read_text(encoding="utf-8")
    block = doc.split("(the quota is one 8 x H20 node's", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    shown = [d for d in yaml.safe_load_all(textwrap.dedent(block)) if d]
    assert shown == [d for d in yaml.safe_load_all(KUEUE_EXAMPLE.read_text(encoding="utf-8")) if d]
