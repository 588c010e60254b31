"""Refused before anything starts: KubeRay's own environment, FP8 on GPUs without FP8, DAPO batches.

Each family is a table: specs that break it are refused by the models (``flashrl validate``, the
operator) and by the CRD's CEL rule with the same verdict; specs that respect it are accepted.
"""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from crd_schema_tools import apply_defaults, spec_schema

from flashrl_api import RULES, SpecError, parse_spec, spec_problems, spec_warnings
from flashrl_api.gpus import GPU_FAMILIES, gpu_family, lacks_fp8
from flashrl_api.kuberay_env import KUBERAY_MANAGED_ENV, KUBERAY_MANAGED_ENV_NAMES
from flashrl_api.spec import RESERVED_ENV_NAMES


def _cel(rule_name: str, raw_spec: dict[str, Any]) -> bool:
    index = [r.name for r in RULES].index(rule_name)
    rule = spec_schema()["x-kubernetes-validations"][index]["rule"]
    env = celpy.Environment()
    program = env.program(env.compile(rule))
    return bool(program.evaluate({"self": celpy.json_to_cel(apply_defaults(spec_schema(), raw_spec))}))


# --- KubeRay v1.7.0's environment --------------------------------------------------------------


@pytest.mark.parametrize("name", KUBERAY_MANAGED_ENV_NAMES)
def test_every_variable_kuberay_owns_is_refused_in_spec_env(name: str) -> None:
    raw = {"env": [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}, {"name": name, "value": "1"}]}
    _, problems = spec_problems(raw)
    assert [p.path for p in problems] == ["spec.env"]
    assert name in problems[0].message
    if name not in RESERVED_ENV_NAMES:  # RAY_ADDRESS is the project's own reserved name too.
        assert KUBERAY_MANAGED_ENV[name] in problems[0].message
        assert _cel("env-names-not-kuberay-managed", raw) is False
    assert _cel("env-names-not-reserved", raw) is (name not in RESERVED_ENV_NAMES)


def test_the_cel_rule_lists_exactly_the_table() -> None:
    rule = next(
        v["rule"] for v in spec_schema()["x-kubernetes-validations"] if "RAY_CLUSTER_NAME" in v["rule"]
    )
    listed = set(rule.split("[", 1)[1].split("]", 1)[0].replace("'", "").replace(" ", "").split(","))
    assert listed == set(KUBERAY_MANAGED_ENV_NAMES) - set(RESERVED_ENV_NAMES)


@pytest.mark.parametrize(
    "name", ["RAY_START_ULIMIT_OPEN_FILES", "RAY_DEDUP_LOGS", "NCCL_SOCKET_IFNAME", "RAY_CLUSTER_NAMES"]
)
def test_variables_kuberay_leaves_alone_are_accepted(name: str) -> None:
    raw = {"env": [{"name": name, "value": "1"}]}
    assert spec_problems(raw)[1] == []
    assert _cel("env-names-not-kuberay-managed", raw) is True


# --- FP8 needs FP8 tensor cores ----------------------------------------------------------------

REFUSED_FOR_FP8 = [
    ("NVIDIA-A100-SXM4-80GB", "8.0"),
    ("NVIDIA-A100-PCIE-40GB", "8.0"),
    ("NVIDIA-A800-SXM4-80GB", "8.0"),
    ("NVIDIA-A10", "8.6"),
    ("NVIDIA-A10G", "8.6"),
    ("NVIDIA-A40", "8.6"),
    ("NVIDIA-RTX-A6000", "8.6"),
    ("Tesla-V100-SXM2-32GB", "7.0"),
    ("Tesla-T4", "7.5"),
    ("Tesla-T4-SHARED", "7.5"),
    ("Tesla-P100-PCIE-16GB", "6.0"),
]
FP8_CAPABLE = [
    "NVIDIA-H20",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-H800",
    "NVIDIA-H200",
    "NVIDIA-GH200-480GB",
    "NVIDIA-L40S",
    "NVIDIA-L4",
    "NVIDIA-L20",
    "NVIDIA-RTX-6000-Ada-Generation",
    "NVIDIA-GeForce-RTX-4090",
    "NVIDIA-B200",
]


@pytest.mark.parametrize(("product", "capability"), REFUSED_FOR_FP8)
@pytest.mark.parametrize("quantization", ["blockwise-fp8", "channel-fp8"])
def test_fp8_on_a_gpu_without_fp8_is_refused_with_the_reason(
    product: str, capability: str, quantization: str
) -> None:
    raw = {"rollout": {"quantization": quantization}, "resources": {"gpuProduct": product}}
    with pytest.raises(SpecError) as err:
        parse_spec(raw)
    assert [p.path for p in err.value.problems] == ["spec.rollout.quantization"]
    message = err.value.problems[0].message
    assert product in message and f"compute capability {capability}" in message and "8.9" in message
    assert _cel("fp8-rollout-needs-fp8-gpus", raw) is False


@pytest.mark.parametrize("product", [p for p, _ in REFUSED_FOR_FP8])
def test_bf16_runs_anywhere(product: str) -> None:
    raw = {"rollout": {"quantization": "bf16"}, "resources": {"gpuProduct": product}}
    assert spec_warnings(parse_spec(raw)) == []
    assert _cel("fp8-rollout-needs-fp8-gpus", raw) is True


@pytest.mark.parametrize("product", FP8_CAPABLE)
def test_fp8_on_fp8_hardware_is_accepted_without_warning(product: str) -> None:
    raw = {"resources": {"gpuProduct": product}}
    assert spec_warnings(parse_spec(raw)) == []
    assert _cel("fp8-rollout-needs-fp8-gpus", raw) is True


@pytest.mark.parametrize("product", ["Some-Future-GPU", "AMD-MI300X", "NVIDIA-X1"])
def test_unknown_products_are_accepted_with_a_warning(product: str) -> None:
    spec = parse_spec({"resources": {"gpuProduct": product}})
    assert [path for path, _ in spec_warnings(spec)] == ["resources.gpuProduct"]
    assert "not in the GPU table" in spec_warnings(spec)[0][1]
    assert _cel("fp8-rollout-needs-fp8-gpus", {"resources": {"gpuProduct": product}}) is True


def test_the_table_is_consistent() -> None:
    for family in GPU_FAMILIES:
        assert family.has_fp8 == (family.capability >= (8, 9)), family.name
    for product, _ in REFUSED_FOR_FP8:
        assert lacks_fp8(product) and gpu_family(product) is not None, product
    for product in FP8_CAPABLE:
        family = gpu_family(product)
        assert family is not None and family.has_fp8 and not lacks_fp8(product), product


# --- DAPO batches ------------------------------------------------------------------------------


@pytest.mark.parametrize(("prompt", "generation"), [(32, 96), (32, 32), (16, 64), (1, 7)])
def test_generation_batch_in_whole_prompt_batches_is_accepted(prompt: int, generation: int) -> None:
    raw = {
        "training": {"promptBatchSize": prompt, "generationBatchSize": generation, "miniBatchSize": prompt}
    }
    assert spec_problems(raw)[1] == []
    assert _cel("generation-batch-is-whole-prompt-batches", raw) is True


@pytest.mark.parametrize(("prompt", "generation"), [(32, 80), (32, 16), (64, 96)])
def test_generation_batch_that_is_not_whole_prompt_batches_is_refused(prompt: int, generation: int) -> None:
    raw = {
        "training": {"promptBatchSize": prompt, "generationBatchSize": generation, "miniBatchSize": prompt}
    }
    _, problems = spec_problems(raw)
    assert [p.path for p in problems] == ["spec.training.generationBatchSize"]
    assert "max_inflight_gen_batches" in problems[0].message
    assert _cel("generation-batch-is-whole-prompt-batches", raw) is False


def test_generation_batch_without_dynamic_sampling_is_a_warning() -> None:
    spec = parse_spec({"training": {"dynamicSampling": {"enabled": False}}})
    assert [path for path, _ in spec_warnings(spec)] == ["training.generationBatchSize"]
    quiet = parse_spec({"training": {"dynamicSampling": {"enabled": False}, "generationBatchSize": 32}})
    assert spec_warnings(quiet) == []


def test_max_generation_batches_is_gone() -> None:
    """verl 0.9.1's V1 trainer ignores max_num_gen_batches; the field that fed it was removed."""
    _, problems = spec_problems({"training": {"dynamicSampling": {"maxGenerationBatches": 10}}})
    assert [p.path for p in problems] == ["spec.training.dynamicSampling.maxGenerationBatches"]


# --- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("qwen3-8b-dapo-fp8", True),
        ("a", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("job-with-a-name-longer-than-kuberays-forty-seven-x", True),
        ("1job", False),
        ("job.v1", False),
        ("Job", False),
        ("job-", False),
    ],
)
def test_name_rule_agrees_in_cel_and_python(name: str, accepted: bool) -> None:
    from flashrl_api import SpecError, parse_job
    from flashrl_api.manifest import NAME_CEL

    env = celpy.Environment()
    program = env.program(env.compile(NAME_CEL))
    verdict = bool(program.evaluate({"self": celpy.json_to_cel({"metadata": {"name": name}})}))
    assert verdict is accepted
    doc = {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": name}, "spec": {}}
    if accepted:
        parse_job(doc)
    else:
        with pytest.raises(SpecError) as err:
            parse_job(doc)
        assert [p.path for p in err.value.problems] == ["metadata.name"]
