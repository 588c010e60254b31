"""spec.rollout.engine: SGLang by default, vLLM on request, each with its pinned trainer image and the
precisions verl 0.9.1 supports on it."""

from __future__ import annotations

from typing import Any

import pytest

from flashrl_api import parse_job
from flashrl_api.experiment import FlashRLExperimentSpec, variants_of
from flashrl_api.manifest import SpecError
from flashrl_api.pins import default_trainer_image, load_pins
from flashrl_api.rules import violations
from flashrl_api.spec import ENGINE_QUANTIZATIONS, FlashRLJobSpec


def job(spec: dict[str, Any]) -> FlashRLJobSpec:
    manifest = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "engine", "namespace": "default"},
        "spec": spec,
    }
    return parse_job(manifest).spec


def test_sglang_is_the_default_engine_with_the_sglang_image() -> None:
    spec = job({})
    assert spec.rollout.engine == "sglang"
    assert spec.images.trainer == default_trainer_image() == load_pins().images["trainer"].reference


def test_a_vllm_job_gets_the_pinned_vllm_image_where_it_holds_the_crds_default() -> None:
    vllm = load_pins().images["trainer-vllm"].reference
    assert job({"rollout": {"engine": "vllm"}}).images.trainer == vllm
    # What the API server stores: the CRD's default, the SGLang image, filled in.
    stored = job({"rollout": {"engine": "vllm"}, "images": {"trainer": default_trainer_image()}})
    assert stored.images.trainer == vllm
    own = job({"rollout": {"engine": "vllm"}, "images": {"trainer": "registry.example/mine:1"}})
    assert own.images.trainer == "registry.example/mine:1"


def test_the_vllm_trainer_image_is_built_on_verls_vllm_image() -> None:
    pins = load_pins()
    assert pins.bases["verl-vllm"].repository == "docker.io/verlai/verl"
    assert pins.bases["verl-vllm"].tag == "vllm024.dev2"
    assert pins.versions.vllm == "0.24.0"


@pytest.mark.parametrize("quantization", ["blockwise-fp8", "channel-fp8", "bf16"])
def test_each_engine_accepts_only_its_precisions(quantization: str) -> None:
    for engine, supported in ENGINE_QUANTIZATIONS.items():
        spec = FlashRLJobSpec.model_validate({"rollout": {"engine": engine, "quantization": quantization}})
        refused = [path for path, _ in violations(spec) if path == "rollout.quantization"]
        assert bool(refused) is (quantization not in supported), (engine, quantization)
        if refused:
            with pytest.raises(SpecError, match="channel-fp8 is SGLang's flash_rl loader"):
                job({"rollout": {"engine": engine, "quantization": quantization}})
    assert ENGINE_QUANTIZATIONS["vllm"] == ("blockwise-fp8", "bf16")


def test_an_experiment_of_vllm_runs_leaves_channel_fp8_out_of_its_default_variants() -> None:
    spec = FlashRLExperimentSpec.model_validate({"template": {"rollout": {"engine": "vllm"}}})
    assert [v.name for v in variants_of(spec)] == ["blockwise-fp8", "bf16"]
    sglang = FlashRLExperimentSpec.model_validate({})
    assert [v.name for v in variants_of(sglang)] == ["blockwise-fp8", "channel-fp8", "bf16"]
