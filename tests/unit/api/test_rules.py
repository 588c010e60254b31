"""flashrl_api.rules: the cross-field invariants and the origin-recipe defaults they protect."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import BaseModel

from flashrl_api import RULES, FlashRLJobSpec, parse_spec, spec_problems, violations
from flashrl_api.pins import default_trainer_image, load_pins


def test_the_defaults_are_the_origin_recipe() -> None:
    spec = FlashRLJobSpec()
    assert spec.model.source == "hf://Qwen/Qwen3-8B-Base"
    assert spec.training.recipe == "dapo"
    assert spec.data.train == "hf://datasets/BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet"
    assert spec.data.validation == "hf://datasets/BytedTsinghua-SIA/AIME-2024/data/aime-2024.parquet"
    assert (spec.rollout.engine, spec.rollout.quantization) == ("sglang", "blockwise-fp8")
    assert (spec.correction.tis.level, spec.correction.tis.cap) == ("token", 2.0)
    t = spec.training
    assert (
        t.prompt_batch_size,
        spec.rollout.samples_per_prompt,
        t.generation_batch_size,
        t.mini_batch_size,
    ) == (
        32,
        16,
        96,
        32,
    )
    assert (t.max_prompt_length, t.max_response_length) == (2048, 20480)
    assert (t.learning_rate, t.total_steps) == (1e-6, 150)
    r = spec.resources
    assert (r.nodes, r.gpus_per_node, r.gpu_product) == (1, 8, "NVIDIA-H20")
    assert spec.images.trainer == default_trainer_image()
    assert default_trainer_image().startswith(load_pins().images["trainer"].repository + ":")
    assert violations(spec) == []


def test_rule_names_are_unique_and_messages_say_what_to_do() -> None:
    assert len({r.name for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.message and rule.message[0].islower(), rule.name
        assert rule.cel.count("(") == rule.cel.count(")"), rule.name


def _field(model: type[BaseModel], alias: str) -> Any:
    for name, info in model.model_fields.items():
        if (info.alias or name) == alias:
            return info
    raise AssertionError(f"{model.__name__} has no field {alias}")


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_rule_paths_name_real_fields(rule: Any) -> None:
    model: type[BaseModel] = FlashRLJobSpec
    info = None
    for part in rule.path.split("."):
        info = _field(model, part)
        annotation = info.annotation
        for candidate in (annotation, *typing.get_args(annotation)):  # M or M | None
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
    assert info is not None


def _separate_async(extra: dict[str, Any]) -> dict[str, Any]:
    """A valid separate-async spec (prompt batch 32 = 1 x mini batch 32, a default pool) plus ``extra``."""
    base: dict[str, Any] = {
        "training": {"mode": "separate-async", "async": {"parameterSyncStep": 1}},
        "rollout": {"pool": {}},
    }
    for key, value in extra.items():
        for sub, inner in value.items():
            if isinstance(inner, dict) and isinstance(base[key].get(sub), dict):
                base[key][sub] = {**base[key][sub], **inner}
            else:
                base[key][sub] = inner
    return base


BREAKING: list[tuple[str, dict[str, Any]]] = [
    ("generation-batch-is-whole-prompt-batches", {"training": {"promptBatchSize": 128}}),
    ("mini-batch-divides-prompt-batch", {"training": {"miniBatchSize": 5}}),
    ("tensor-parallel-divides-node", {"rollout": {"tensorParallelSize": 16}}),
    ("sequence-parallel-divides-gpus", {"training": {"ulyssesSequenceParallelSize": 16}}),
    (
        "rollouts-divide-over-gpus",
        {
            "rollout": {"samplesPerPrompt": 5},
            "resources": {"gpusPerNode": 6},
            "training": {"ulyssesSequenceParallelSize": 6},
        },
    ),
    (
        "mini-batch-divides-over-data-parallel",
        {"training": {"miniBatchSize": 1}, "rollout": {"samplesPerPrompt": 2}},
    ),
    ("overlong-buffer-fits-response", {"training": {"maxResponseLength": 2048}}),
    ("env-names-not-reserved", {"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]}),
    ("env-names-not-kuberay-managed", {"env": [{"name": "RAY_CLUSTER_NAME", "value": "x"}]}),
    ("gpu-product-is-a-gfd-label-value", {"resources": {"gpuProduct": "h20"}}),
    ("fp8-rollout-needs-fp8-gpus", {"resources": {"gpuProduct": "NVIDIA-A100-SXM4-80GB"}}),
    (
        "node-selector-leaves-gpu-product-to-gpu-product",
        {"resources": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H20"}}},
    ),
    ("tolerations-are-consistent", {"resources": {"tolerations": [{"value": "training"}]}}),
    (
        "head-tolerations-are-consistent",
        {"resources": {"head": {"tolerations": [{"key": "k", "tolerationSeconds": 5}]}}},
    ),
    ("async-settings-need-async-mode", {"training": {"async": {}}}),
    (
        "separate-async-settings-need-separate-async",
        {"training": {"mode": "colocate-async", "async": {"parameterSyncStep": 1}}},
    ),
    ("rollout-pool-needs-separate-async", {"rollout": {"pool": {"nodes": 1}}}),
    (
        "separate-async-needs-rollout-pool",
        {"training": {"mode": "separate-async", "async": {"parameterSyncStep": 1}}},
    ),
    ("separate-async-batch-invariant", {"training": {"mode": "separate-async"}, "rollout": {"pool": {}}}),
    (
        "separate-async-checkpoint-engine-not-naive",
        _separate_async({"training": {"async": {"parameterSyncStep": 1, "checkpointEngine": "naive"}}}),
    ),
    (
        "rollout-pool-gpu-product-is-the-trainers",
        _separate_async({"rollout": {"pool": {"gpuProduct": "NVIDIA-H100-80GB-HBM3"}}}),
    ),
    (
        "rollout-pool-node-selector-leaves-gpu-product",
        _separate_async({"rollout": {"pool": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H20"}}}}),
    ),
    (
        "rollout-pool-tolerations-are-consistent",
        _separate_async({"rollout": {"pool": {"tolerations": [{"value": "rollout"}]}}}),
    ),
    (
        "tensor-parallel-divides-rollout-node",
        _separate_async({"rollout": {"tensorParallelSize": 8, "pool": {"gpusPerNode": 4}}}),
    ),
]


@pytest.mark.parametrize(("name", "spec"), BREAKING, ids=[n for n, _ in BREAKING])
def test_each_rule_catches_its_case_alone(name: str, spec: dict[str, Any]) -> None:
    rule = next(r for r in RULES if r.name == name)
    _, problems = spec_problems(spec)
    parsed = FlashRLJobSpec.model_validate(spec, strict=True)
    assert [str(p) for p in problems] == [f"spec.{rule.path}: {rule.message_for(parsed)}"]


def test_rules_hold_at_their_boundaries() -> None:
    # Equal batches, 16 GPUs over 2 nodes with TP 8, and a buffer exactly as long as the response.
    spec = parse_spec(
        {
            "training": {
                "promptBatchSize": 64,
                "generationBatchSize": 64,
                "miniBatchSize": 64,
                "maxResponseLength": 4096,
                "overlongBuffer": {"length": 4096},
                "ulyssesSequenceParallelSize": 16,
            },
            "rollout": {"tensorParallelSize": 8, "samplesPerPrompt": 1},
            "resources": {"nodes": 2},
        }
    )
    assert violations(spec) == []


def test_disabled_overlong_buffer_is_not_checked() -> None:
    spec = parse_spec({"training": {"maxResponseLength": 1024, "overlongBuffer": {"enabled": False}}})
    assert violations(spec) == []


def test_several_rules_report_in_rule_order() -> None:
    _, problems = spec_problems({"training": {"miniBatchSize": 5, "maxResponseLength": 1024}})
    assert [p.path for p in problems] == [
        "spec.training.miniBatchSize",
        "spec.training.overlongBuffer.length",
    ]


@pytest.mark.parametrize(
    ("name", "named_as"),
    [
        ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),
        ("CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
        ("RAY_ADDRESS", "RAY_ADDRESS"),
        ("FLASHRL_SPEC", "FLASHRL_*"),
    ],
)
def test_reserved_env_names_are_refused_at_spec_env(name: str, named_as: str) -> None:
    _, problems = spec_problems({"env": [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}, {"name": name}]})
    assert [p.path for p in problems] == ["spec.env"]
    assert named_as in problems[0].message


def test_env_near_misses_of_reserved_names_are_allowed() -> None:
    spec = parse_spec({"env": [{"name": "RAY_DEDUP_LOGS", "value": "0"}, {"name": "MY_FLASHRL_X"}]})
    assert violations(spec) == []


def test_a_valid_separate_async_spec_passes_every_rule() -> None:
    spec = parse_spec(
        {
            "training": {
                "mode": "separate-async",
                "promptBatchSize": 128,
                "miniBatchSize": 32,
                "generationBatchSize": 384,
            },
            "rollout": {"pool": {"nodes": 2}},
        }
    )
    assert violations(spec) == []
    assert spec.rollout.pool is not None and spec.rollout.pool.gpu_product == "NVIDIA-H20"


def test_the_batch_invariant_names_the_numbers() -> None:
    _, problems = spec_problems(
        {"training": {"mode": "separate-async", "async": {"parameterSyncStep": 2}}, "rollout": {"pool": {}}}
    )
    assert [str(p) for p in problems] == [
        "spec.training.promptBatchSize: is 32, and must equal training.async.parameterSyncStep (2) x "
        "training.miniBatchSize (32) = 64 with training.mode separate-async (verl 0.9.1 asserts "
        "train_batch_size == parameter_sync_step x ppo_mini_batch_size)"
    ]


def test_a_zero_node_rollout_pool_is_refused_at_its_path() -> None:
    _, problems = spec_problems(
        {
            "training": {"mode": "separate-async", "async": {"parameterSyncStep": 1}},
            "rollout": {"pool": {"nodes": 0}},
        }
    )
    assert [p.path for p in problems] == ["spec.rollout.pool.nodes"]


def test_the_sync_default_has_no_mode_settings() -> None:
    t = FlashRLJobSpec().training
    assert (t.mode, t.async_) == ("sync", None)
    assert FlashRLJobSpec().rollout.pool is None
