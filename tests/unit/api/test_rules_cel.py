"""The CEL rules in the CRD agree with the Python predicates `flashrl validate` uses.

Each rule's CEL (as emitted into the CRD) is evaluated with cel-python on specs defaulted the way
the API server defaults them, and must give the same verdict as the rule's Python check on the
same spec parsed by the models: for the origin recipe, for a spec breaking each rule in turn, and
for a few hundred seeded random specs around the rules' boundaries.
"""

from __future__ import annotations

import random
from typing import Any

import celpy
import pytest
from crd_schema_tools import apply_defaults, spec_schema

from flashrl_api import RULES, FlashRLJobSpec


def _programs() -> list[tuple[str, Any]]:
    env = celpy.Environment()
    validations = spec_schema()["x-kubernetes-validations"]
    return [
        (rule.name, env.program(env.compile(v["rule"]))) for rule, v in zip(RULES, validations, strict=True)
    ]


PROGRAMS = _programs()


def _cel_verdicts(raw_spec: dict[str, Any]) -> dict[str, bool]:
    defaulted = apply_defaults(spec_schema(), raw_spec)
    activation = {"self": celpy.json_to_cel(defaulted)}
    verdicts = {}
    for name, program in PROGRAMS:
        result = program.evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{name}: CEL gave {result!r}, not a bool"
        verdicts[name] = bool(result)
    return verdicts


def _python_verdicts(raw_spec: dict[str, Any]) -> dict[str, bool]:
    # Field-level validation only: the rules themselves are what is being compared.
    spec = FlashRLJobSpec.model_validate(raw_spec, strict=True)
    return {rule.name: rule.check(spec) for rule in RULES}


BREAKING: dict[str, dict[str, Any]] = {
    "generation-batch-is-whole-prompt-batches": {"training": {"generationBatchSize": 80}},
    "mini-batch-divides-prompt-batch": {"training": {"miniBatchSize": 24}},
    "tensor-parallel-divides-node": {"rollout": {"tensorParallelSize": 3}},
    "sequence-parallel-divides-gpus": {"training": {"ulyssesSequenceParallelSize": 3}},
    "rollouts-divide-over-gpus": {"rollout": {"samplesPerPrompt": 5}, "resources": {"nodes": 3}},
    "mini-batch-divides-over-data-parallel": {
        "training": {"miniBatchSize": 2},
        "rollout": {"samplesPerPrompt": 1},
    },
    "overlong-buffer-fits-response": {"training": {"maxResponseLength": 1024}},
    "env-names-not-reserved": {"env": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "FLASHRL_SPEC"}]},
    "env-names-not-kuberay-managed": {"env": [{"name": "NCCL_DEBUG"}, {"name": "KUBERAY_GEN_RAY_START_CMD"}]},
    "gpu-product-is-a-gfd-label-value": {"resources": {"gpuProduct": "H20"}},
    "fp8-rollout-needs-fp8-gpus": {"resources": {"gpuProduct": "Tesla-T4"}},
    "fp8-kv-cache-needs-fp8-gpus": {
        "rollout": {"quantization": "bf16", "kvCache": "fp8-e4m3"},
        "resources": {"gpuProduct": "NVIDIA-A100-SXM4-80GB"},
    },
    "fallback-needs-fp8-rollout": {
        "rollout": {"quantization": "bf16", "kvCache": "bf16"},
        "correction": {"guard": {"action": "FallbackToBF16"}},
    },
    "fallback-needs-checkpoints": {
        "checkpoint": {"resumeMode": "disable"},
        "correction": {"guard": {"action": "FallbackToBF16"}},
    },
    "quantization-supported-by-engine": {"rollout": {"engine": "vllm", "quantization": "channel-fp8"}},
    "node-selector-leaves-gpu-product-to-gpu-product": {
        "resources": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100"}}
    },
    "tolerations-are-consistent": {"resources": {"tolerations": [{"operator": "Exists", "value": "x"}]}},
    "head-tolerations-are-consistent": {"resources": {"head": {"tolerations": [{"value": "cpu"}]}}},
    "mount-paths-unique": {"storage": {"data": {"mountPath": "/models"}}},
    "mount-paths-not-reserved": {"storage": {"checkpoints": {"mountPath": "/dev/shm"}}},
    "rdma-resource-is-not-gpu": {"resources": {"rdma": {"resourceName": "nvidia.com/gpu"}}},
    "no-interpolation-in-overrides": {"overrides": ["trainer.project_name=${oc.env:HOME}"]},
    "no-interpolation-in-model-source": {"model": {"source": "/${trainer.project_name}"}},
    "no-interpolation-in-train-data": {"data": {"train": "/data/${x}.parquet"}},
    "no-interpolation-in-validation-data": {"data": {"validation": "/${data.train_files}"}},
    "no-interpolation-in-prompt-key": {"data": {"promptKey": "${oc.env:USER}"}},
    "no-interpolation-in-sampling-metric": {"training": {"dynamicSampling": {"metric": "${a}"}}},
    "no-interpolation-in-project-name": {"training": {"projectName": "${oc.env:HOME}"}},
    "no-interpolation-in-experiment-name": {"training": {"experimentName": "run-${oc.env:HOSTNAME}"}},
    "staged-model-needs-claim": {"storage": {"modelCache": {"mountPath": "/models"}}},
    "staged-data-needs-claim": {
        "data": {"train": "/data/mine.parquet"},
        "storage": {"data": {"mountPath": "/data"}},
    },
    "async-settings-need-async-mode": {"training": {"async": {"warmupBatches": 2}}},
    "separate-async-settings-need-separate-async": {
        "training": {"mode": "colocate-async", "async": {"lendIdleTrainerGpus": False}}
    },
    "rollout-pool-needs-separate-async": {"rollout": {"pool": {}}},
    "separate-async-needs-rollout-pool": {"training": {"mode": "separate-async"}},
    "separate-async-batch-invariant": {"training": {"mode": "separate-async"}, "rollout": {"pool": {}}},
    "separate-async-checkpoint-engine-not-naive": {
        "training": {"mode": "separate-async", "async": {"checkpointEngine": "naive"}}
    },
    "rollout-pool-gpu-product-is-the-trainers": {
        "training": {"mode": "separate-async"},
        "rollout": {"pool": {"gpuProduct": "NVIDIA-L40S"}},
    },
    "rollout-pool-node-selector-leaves-gpu-product": {
        "rollout": {"pool": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H20"}}}
    },
    "rollout-pool-tolerations-are-consistent": {"rollout": {"pool": {"tolerations": [{"value": "v"}]}}},
    "tensor-parallel-divides-rollout-node": {
        "rollout": {"tensorParallelSize": 4, "pool": {"gpusPerNode": 2}}
    },
}

#: Training modes, their settings (present, absent, separate-async only) and rollout pools.
MODE_CHOICES: list[str | None] = [None, "sync", "colocate-async", "separate-async", "separate-async"]
ASYNC_CHOICES: list[dict[str, Any] | None] = [
    None,
    {},
    {"warmupBatches": 0.5, "maxOffPolicyVersions": 2, "offPolicyStrategy": "wait"},
    {"parameterSyncStep": 1},
    {"parameterSyncStep": 4, "lendIdleTrainerGpus": True},
    {"parameterSyncStep": 2, "checkpointEngine": "nixl"},
    {"checkpointEngine": "naive"},
    {"lendIdleTrainerGpus": False},
]
POOL_CHOICES: list[dict[str, Any] | None] = [
    None,
    {},
    {"nodes": 2, "gpusPerNode": 4},
    {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "gpusPerNode": 3},
    {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H20"}},
    {"tolerations": [{"operator": "Exists", "value": "v"}], "gpusPerNode": 2},
    {"tolerations": [{"key": "dedicated", "value": "rollout", "effect": "NoSchedule"}]},
]


def _random_mode(rng: random.Random, raw: dict[str, Any]) -> dict[str, Any]:
    """Adds a training mode, async settings and a rollout pool (each maybe absent) to ``raw``."""
    mode, settings, pool = rng.choice(MODE_CHOICES), rng.choice(ASYNC_CHOICES), rng.choice(POOL_CHOICES)
    if mode is not None:
        raw["training"]["mode"] = mode
    if settings is not None:
        raw["training"]["async"] = settings
    if pool is not None:
        raw["rollout"]["pool"] = pool
    return raw


#: Model and data sources (Hugging Face or paths) and volumes with and without claims: staging a
#: Hugging Face source needs a claim on its volume.
MODEL_SOURCE_CHOICES: list[str] = ["hf://Qwen/Qwen3-8B-Base", "hf://org/m@v1.0", "/models/qwen3"]
DATA_SOURCE_CHOICES: list[dict[str, str]] = [
    {},
    {"train": "/data/train.parquet", "validation": "/data/val.parquet"},
    {"train": "/data/train.parquet"},
    {"validation": "hf://datasets/o/aime@main/x.parquet", "train": "/data/t.parquet"},
]
VOLUME_CHOICES: list[dict[str, Any] | None] = [
    None,
    {"mountPath": "/v"},
    {"claimName": "my-claim", "mountPath": "/v"},
]

#: Node selectors with valid keys (key shape is a field check, see test_manifest), with and without
#: the label gpuProduct owns.
NODE_SELECTOR_CHOICES: list[dict[str, str]] = [
    {},
    {"cloud.google.com/gke-nodepool": "h20-pool", "topology.kubernetes.io/zone": "us-east-1a"},
    {"pool": ""},
    {"nvidia.com/gpu.product": "NVIDIA-H20"},
    {"pool": "a", "nvidia.com/gpu.product": ""},
    {"nvidia.com/gpu.count": "8"},
]

#: Tolerations as Kubernetes accepts them, and the combinations it refuses.
TOLERATION_CHOICES: list[list[dict[str, object]]] = [
    [],
    [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}],
    [{"operator": "Exists"}],
    [{"key": "k", "operator": "Exists", "value": ""}],
    [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 30}],
    [{"operator": "Exists", "value": "v"}],
    [{"value": "v"}],
    [{"key": "k", "tolerationSeconds": 30}],
    [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 0}],
]

#: Reserved names, and near misses that are allowed (prefix and case matter, whole names only).
ENV_CHOICES: list[list[dict[str, str]]] = [
    [],
    [{"name": "NCCL_IB_HCA", "value": "mlx5_0,mlx5_1"}, {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}],
    [{"name": "RAY_ADDRESS", "value": "10.0.0.1:6379"}],
    [{"name": "RAY_ADDRESSES"}, {"name": "XFLASHRL_A"}, {"name": "flashrl_lower"}],
    [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}],
    [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    [{"name": "FLASHRL_TERMINATION_LOG", "value": "/tmp/x"}],
    [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
    [{"name": "RAY_enable_autoscaler_v2", "value": "1"}],
    [{"name": "REDIS_USERNAME"}, {"name": "RAY_START_ULIMIT_OPEN_FILES", "value": "1048576"}],
    [{"name": "RAY_CLUSTER_NAMESPACE"}],
]

#: GPU products with and without FP8 tensor cores, GFD's spellings, and ones the table does not know.
GPU_PRODUCT_CHOICES: list[str] = [
    "NVIDIA-H20",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-L40S",
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-A10G",
    "Tesla-T4",
    "Tesla-V100-SXM2-16GB-SHARED",
    "NVIDIA-RTX-6000-Ada-Generation",
    "Quadro-RTX-6000",
    "Some-Future-GPU",
    "H20",
    "h100",
    "NVIDIA-h20",
]


def test_every_rule_has_a_breaking_case() -> None:
    assert set(BREAKING) == {rule.name for rule in RULES}


def test_origin_recipe_passes_every_rule_in_both() -> None:
    assert _cel_verdicts({}) == _python_verdicts({}) == {rule.name: True for rule in RULES}


@pytest.mark.parametrize("name", sorted(BREAKING))
def test_breaking_one_rule_fails_it_in_both(name: str) -> None:
    raw = BREAKING[name]
    cel, python = _cel_verdicts(raw), _python_verdicts(raw)
    assert cel == python
    assert cel[name] is False


def test_disabled_overlong_buffer_is_not_checked() -> None:
    raw = {"training": {"maxResponseLength": 1024, "overlongBuffer": {"enabled": False}}}
    assert _cel_verdicts(raw) == _python_verdicts(raw)
    assert _cel_verdicts(raw)["overlong-buffer-fits-response"] is True


def _random_spec(rng: random.Random) -> dict[str, Any]:
    return {
        "rollout": {
            "samplesPerPrompt": rng.choice([1, 2, 3, 5, 8, 16]),
            "tensorParallelSize": rng.choice([1, 2, 3, 4, 8]),
            "quantization": rng.choice(["blockwise-fp8", "channel-fp8", "bf16"]),
            "kvCache": rng.choice(["auto", "bf16", "fp8-e4m3", "fp8-e5m2"]),
            "engine": rng.choice(["sglang", "vllm"]),
        },
        "correction": {"guard": {"action": rng.choice(["Alert", "Suspend", "FallbackToBF16"])}},
        "checkpoint": {"resumeMode": rng.choice(["auto", "auto", "disable"])},
        "resources": {
            "gpuProduct": rng.choice(GPU_PRODUCT_CHOICES),
            "nodes": rng.choice([1, 2, 3, 4]),
            "gpusPerNode": rng.choice([1, 2, 4, 6, 8]),
            "nodeSelector": rng.choice(NODE_SELECTOR_CHOICES),
            "tolerations": rng.choice(TOLERATION_CHOICES),
            "head": {"tolerations": rng.choice(TOLERATION_CHOICES)},
        },
        "training": {
            "promptBatchSize": rng.choice([1, 8, 24, 32, 48]),
            "generationBatchSize": rng.choice([8, 32, 96]),
            "miniBatchSize": rng.choice([1, 8, 16, 32]),
            "ulyssesSequenceParallelSize": rng.choice([1, 2, 3, 4]),
            "maxResponseLength": rng.choice([1024, 4096, 20480]),
            "overlongBuffer": {"enabled": rng.random() < 0.7, "length": rng.choice([512, 4096, 8192])},
        },
        "env": rng.choice(ENV_CHOICES),
        "model": {"source": rng.choice(MODEL_SOURCE_CHOICES)},
        "data": rng.choice(DATA_SOURCE_CHOICES),
        "storage": {
            key: volume
            for key in ("modelCache", "data")
            if (volume := rng.choice(VOLUME_CHOICES)) is not None
        },
    }


#: Mount paths: distinct, shared, reserved, and near misses of the reserved ones.
MOUNT_CHOICES: list[tuple[str, str, str]] = [
    ("/models", "/data", "/checkpoints"),
    ("/models", "/models", "/checkpoints"),
    ("/mnt/a", "/mnt/b", "/mnt/a"),
    ("/dev/shm", "/data", "/checkpoints"),
    ("/models", "/etc/flashrl", "/checkpoints"),
    ("/models", "/data", "/etc"),
    ("/devices", "/etcd", "/system"),
    ("/proc/x", "/data", "/sys"),
]
RDMA_CHOICES: list[str | None] = [
    None,
    "rdma/hca_shared_devices_a",
    "nvidia.com/hostdev",
    "vpc.amazonaws.com/efa",
    "nvidia.com/gpu",
    "example.com/vgpu",
    "nvidia.com/mig-1g.12gb",
    "kubernetes.io/rdma",
    "rdma.kubernetes.io/hca",
    "gpu.example.com/rdma",
]
#: Fields whose value reaches verl's Hydra config, as spec paths.
VERL_STRING_FIELDS: list[tuple[str, ...]] = [
    ("model", "source"),
    ("data", "train"),
    ("data", "validation"),
    ("data", "promptKey"),
    ("training", "dynamicSampling", "metric"),
    ("training", "projectName"),
    ("training", "experimentName"),
]


def _random_hostile(rng: random.Random) -> dict[str, Any]:
    models, data, checkpoints = rng.choice(MOUNT_CHOICES)
    raw: dict[str, Any] = {
        "storage": {
            "modelCache": {"mountPath": models},
            "data": {"mountPath": data},
            "checkpoints": {"mountPath": checkpoints},
        },
        "overrides": rng.choice(
            [[], ["trainer.test_freq=10"], ["trainer.test_freq=10", "+x.y=${oc.env:HOME}"], ["a.b=$${x}"]]
        ),
    }
    rdma = rng.choice(RDMA_CHOICES)
    if rdma is not None:
        raw["resources_rdma"] = {"resourceName": rdma}
    if rng.random() < 0.5:
        *parents, leaf = rng.choice(VERL_STRING_FIELDS)
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = rng.choice(["/x/${HOME}", "/${a.b}", "/plain-$-{not}", "/$x"])
    return raw


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if key == "resources_rdma":
            base["resources"]["rdma"] = value
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def test_random_specs_agree() -> None:
    rng = random.Random(20260101)
    seen: dict[str, set[bool]] = {rule.name: set() for rule in RULES}
    for _ in range(300):
        raw = _merge(_random_mode(rng, _random_spec(rng)), _random_hostile(rng))
        cel = _cel_verdicts(raw)
        assert cel == _python_verdicts(raw), raw
        for name, verdict in cel.items():
            seen[name].add(verdict)
    # The sample exercised both outcomes of every rule, so agreement above means something.
    assert all(outcomes == {True, False} for outcomes in seen.values()), seen


# --- transition rules: immutable fields ----------------------------------------------------------


def _transition_programs() -> list[tuple[str, Any]]:
    """``(spec path, program)`` for every transition rule in the CRD."""
    from crd_schema_tools import walk

    env = celpy.Environment()
    return [
        (path, env.program(env.compile(v["rule"])))
        for path, node in walk(spec_schema(), "spec")
        for v in node.get("x-kubernetes-validations", [])
        if "oldSelf" in v["rule"]
    ]


def _at(tree: Any, path: str) -> Any:
    for part in path.split(".")[1:]:
        tree = tree[part]
    return tree


def _refused_transitions(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    """The paths whose transition rule the API server would fail for this update (both defaulted)."""
    old_d, new_d = apply_defaults(spec_schema(), old), apply_defaults(spec_schema(), new)
    refused = set()
    for path, program in _transition_programs():
        activation = {
            "self": celpy.json_to_cel(_at(new_d, path)),
            "oldSelf": celpy.json_to_cel(_at(old_d, path)),
        }
        if not bool(program.evaluate(activation)):
            refused.add(path)
    return refused


SEED: dict[str, Any] = {
    "rollout": {"samplesPerPrompt": 16},
    "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
    "overrides": ["trainer.test_freq=5"],
    "lifecycle": {"activeDeadlineSeconds": 86400},
}


def test_an_unchanged_spec_passes_every_transition_rule() -> None:
    assert _refused_transitions(SEED, SEED) == set()
    assert _refused_transitions({}, {}) == set()


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"rollout": {"samplesPerPrompt": 8}}, {"spec.rollout"}),
        ({"resources": {"gpusPerNode": 4}}, {"spec.resources"}),
        ({"overrides": ["trainer.test_freq=10"]}, {"spec.overrides"}),
        ({"env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}, {"spec.env"}),
        ({"lifecycle": {"activeDeadlineSeconds": 86400, "maxRestarts": 3}}, {"spec.lifecycle.maxRestarts"}),
        ({"dryRun": True}, {"spec.dryRun"}),
        (
            {"training": {"totalSteps": 10}, "model": {"source": "/models/other"}},
            {"spec.training", "spec.model"},
        ),
    ],
)
def test_changing_an_immutable_field_is_refused_at_its_path(
    change: dict[str, Any], refused: set[str]
) -> None:
    assert _refused_transitions(SEED, {**SEED, **change}) == refused


@pytest.mark.parametrize(
    "change",
    [
        {"lifecycle": {"suspend": True, "activeDeadlineSeconds": 86400}},
        {"lifecycle": {"activeDeadlineSeconds": 3600}},
        {"lifecycle": {"activeDeadlineSeconds": 86400, "ttlSecondsAfterFinished": 60}},
    ],
)
def test_the_lifecycle_knobs_stay_editable(change: dict[str, Any]) -> None:
    assert _refused_transitions(SEED, {**SEED, **change}) == set()


def test_operator_and_crd_agree_on_what_is_immutable() -> None:
    """The operator's second-line check reports exactly the fields the transition rules refuse."""
    from flashrl_operator.render.children import immutable_changes, spec_snapshot

    old = apply_defaults(spec_schema(), SEED)
    for change in (
        {"rollout": {"samplesPerPrompt": 8}},
        {"lifecycle": {"activeDeadlineSeconds": 1}},
        {"dryRun": True},
    ):
        new = apply_defaults(spec_schema(), {**SEED, **change})
        by_operator = {p for p in immutable_changes(spec_snapshot(old), new)}
        by_crd = _refused_transitions(SEED, {**SEED, **change})
        assert {p for p in by_crd if any(o == p or o.startswith(p + ".") for o in by_operator)} == by_crd
        assert all(any(o == p or o.startswith(p + ".") for p in by_crd) for o in by_operator)
