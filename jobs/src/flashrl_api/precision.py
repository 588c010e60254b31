"""Rollout precision: the weights' (``spec.rollout.quantization``) and the KV cache's (``rollout.kvCache``).

One module for what the renderer, the rules, the operator's fallback and the report need to agree on:

* which settings need FP8 tensor cores (:func:`uses_fp8`, the rules' hardware check);
* how each engine spells a KV-cache precision (:data:`KV_CACHE_ARGUMENTS`, data keyed by engine name:
  the renderer writes ``actor_rollout_ref.rollout.engine_kwargs.<engine>.<argument>``, which verl 0.9.1
  passes to the engine's server arguments unchanged);
* what the mismatch guard's ``FallbackToBF16`` turns a spec into (:func:`fallback_spec`). The operator
  renders the fallen-back attempt from that spec, so the spec ConfigMap the launcher reads and the
  overrides it recomputes from it are the same as the ones the operator rendered: one source of truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from flashrl_api.spec import FlashRLJobSpec

#: Rollout weight precisions that need FP8 tensor cores.
FP8_QUANTIZATIONS: Final[tuple[str, ...]] = ("blockwise-fp8", "channel-fp8")
#: KV-cache precisions that need FP8 tensor cores.
FP8_KV_CACHES: Final[tuple[str, ...]] = ("fp8-e4m3", "fp8-e5m2")
#: The KV-cache setting that leaves the engine's default alone (nothing is rendered for it).
ENGINE_DEFAULT_KV_CACHE: Final = "auto"
#: What FallbackToBF16 runs: BF16 weights and an explicit BF16 KV cache.
BF16_QUANTIZATION: Final = "bf16"
BF16_KV_CACHE: Final = "bf16"


@dataclass(frozen=True)
class EngineArgument:
    """One engine's server argument for a setting, and its spelling of each value."""

    name: str
    values: dict[str, str]


#: ``spec.rollout.kvCache`` per engine: SGLang 0.5.12's ``--kv-cache-dtype`` (choices auto, fp8_e5m2,
#: fp8_e4m3, bf16, bfloat16, fp4_e2m1; fp4 needs Blackwell and is not offered) and vLLM's
#: ``kv_cache_dtype`` (auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, ...). verl 0.9.1 forwards
#: ``engine_kwargs.sglang`` into SGLang's ``ServerArgs`` and ``engine_kwargs.vllm`` into vLLM's engine
#: arguments.
KV_CACHE_ARGUMENTS: Final[dict[str, EngineArgument]] = {
    "sglang": EngineArgument(
        "kv_cache_dtype", {"bf16": "bf16", "fp8-e4m3": "fp8_e4m3", "fp8-e5m2": "fp8_e5m2"}
    ),
    "vllm": EngineArgument(
        "kv_cache_dtype", {"bf16": "bfloat16", "fp8-e4m3": "fp8_e4m3", "fp8-e5m2": "fp8_e5m2"}
    ),
}


def uses_fp8(quantization: str, kv_cache: str) -> bool:
    """Whether the rollout runs anything in FP8 (weights or KV cache)."""
    return quantization in FP8_QUANTIZATIONS or kv_cache in FP8_KV_CACHES


def spec_uses_fp8(spec: FlashRLJobSpec) -> bool:
    """:func:`uses_fp8` of a spec's rollout."""
    return uses_fp8(spec.rollout.quantization, spec.rollout.kv_cache)


def precision_label(quantization: str, kv_cache: str) -> str:
    """One name for a rollout precision, as goodput and the report group by it: the weights'
    precision, with the KV cache's when it is not the engine's default (``blockwise-fp8``,
    ``bf16/kv-fp8-e4m3``)."""
    if kv_cache == ENGINE_DEFAULT_KV_CACHE:
        return quantization
    return f"{quantization}/kv-{kv_cache}"


def fallback_spec(spec: FlashRLJobSpec) -> FlashRLJobSpec:
    """The spec an attempt after the guard's FallbackToBF16 runs: BF16 weights and KV cache, and a
    guard that only alerts from then on (the fallback happens once)."""
    rollout = spec.rollout.model_copy(update={"quantization": BF16_QUANTIZATION, "kv_cache": BF16_KV_CACHE})
    guard = spec.correction.guard.model_copy(update={"action": "Alert"})
    correction = spec.correction.model_copy(update={"guard": guard})
    return spec.model_copy(update={"rollout": rollout, "correction": correction})
