"""Cross-field rules, each written once and enforced twice.

Every rule carries a Python predicate (used by ``flashrl validate``, the operator and the launcher)
and the equivalent CEL expression (emitted into the CRD as ``x-kubernetes-validations``, so the
API server rejects the same specs at ``kubectl apply`` time). A unit test evaluates both sides on
the same inputs, so the two cannot disagree silently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flashrl_api.spec import (
    GPU_PRODUCT_LABEL,
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIX,
    FlashRLJobSpec,
    Toleration,
    is_reserved_env_name,
)


@dataclass(frozen=True)
class Rule:
    """One cross-field invariant of the spec."""

    name: str
    #: Field the message is about, relative to ``spec`` (dotted, camelCase).
    path: str
    #: CEL evaluated with ``self`` bound to ``spec`` (after defaulting).
    cel: str
    message: str
    check: Callable[[FlashRLJobSpec], bool]


_RESERVED_CEL = ", ".join(f"'{name}'" for name in RESERVED_ENV_NAMES)


def _world(spec: FlashRLJobSpec) -> int:
    return spec.resources.nodes * spec.resources.gpus_per_node


def _tolerations_consistent(tolerations: Sequence[Toleration]) -> bool:
    return all(
        (t.operator == "Exists" or bool(t.key))
        and (t.operator != "Exists" or not t.value)
        and (t.toleration_seconds is None or t.effect == "NoExecute")
        for t in tolerations
    )


def _tolerations_rule(
    name: str, path: str, tolerations: Callable[[FlashRLJobSpec], Sequence[Toleration]]
) -> Rule:
    """Kubernetes' own toleration checks, for one list of tolerations."""
    return Rule(
        name=name,
        path=path,
        cel=f"self.{path}.all(t, "
        "(t.operator == 'Exists' || (has(t.key) && t.key != '')) && "
        "(t.operator != 'Exists' || !has(t.value) || t.value == '') && "
        "(!has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute')))",
        message="an Equal toleration needs a key, an Exists toleration takes no value, and "
        "tolerationSeconds needs effect NoExecute (as Kubernetes requires)",
        check=lambda s: _tolerations_consistent(tolerations(s)),
    )


RULES: tuple[Rule, ...] = (
    Rule(
        name="generation-batch-covers-prompt-batch",
        path="training.generationBatchSize",
        cel="self.training.generationBatchSize >= self.training.promptBatchSize",
        message="must be at least training.promptBatchSize (dynamic sampling fills a step from it)",
        check=lambda s: s.training.generation_batch_size >= s.training.prompt_batch_size,
    ),
    Rule(
        name="mini-batch-divides-prompt-batch",
        path="training.miniBatchSize",
        cel="self.training.promptBatchSize % self.training.miniBatchSize == 0",
        message="must divide training.promptBatchSize",
        check=lambda s: s.training.prompt_batch_size % s.training.mini_batch_size == 0,
    ),
    Rule(
        name="tensor-parallel-divides-node",
        path="rollout.tensorParallelSize",
        cel="self.resources.gpusPerNode % self.rollout.tensorParallelSize == 0",
        message="must divide resources.gpusPerNode (an SGLang server may not span nodes)",
        check=lambda s: s.resources.gpus_per_node % s.rollout.tensor_parallel_size == 0,
    ),
    Rule(
        name="sequence-parallel-divides-gpus",
        path="training.ulyssesSequenceParallelSize",
        cel="(self.resources.nodes * self.resources.gpusPerNode) % "
        "self.training.ulyssesSequenceParallelSize == 0",
        message="must divide the GPU count (resources.nodes x resources.gpusPerNode)",
        check=lambda s: _world(s) % s.training.ulysses_sequence_parallel_size == 0,
    ),
    Rule(
        name="rollouts-divide-over-gpus",
        path="rollout.n",
        cel="(self.training.promptBatchSize * self.rollout.n) % "
        "(self.resources.nodes * self.resources.gpusPerNode) == 0",
        message="training.promptBatchSize x rollout.n must be divisible by the GPU count "
        "(resources.nodes x resources.gpusPerNode)",
        check=lambda s: (s.training.prompt_batch_size * s.rollout.n) % _world(s) == 0,
    ),
    Rule(
        name="overlong-buffer-fits-response",
        path="training.overlongBuffer.length",
        cel="!self.training.overlongBuffer.enabled || "
        "self.training.overlongBuffer.length <= self.training.maxResponseLength",
        message="must not exceed training.maxResponseLength",
        check=lambda s: (
            (not s.training.overlong_buffer.enabled)
            or s.training.overlong_buffer.length <= s.training.max_response_length
        ),
    ),
    Rule(
        name="node-selector-leaves-gpu-product-to-gpu-product",
        path="resources.nodeSelector",
        # A map lookup, not a per-key regex: map keys have no length bound in a structural schema, so
        # the API server would estimate any per-key string function as too costly and refuse the CRD.
        cel=f"!('{GPU_PRODUCT_LABEL}' in self.resources.nodeSelector)",
        message=f"must not set {GPU_PRODUCT_LABEL}: resources.gpuProduct sets it",
        check=lambda s: GPU_PRODUCT_LABEL not in s.resources.node_selector,
    ),
    _tolerations_rule(
        "tolerations-are-consistent", "resources.tolerations", lambda s: s.resources.tolerations
    ),
    _tolerations_rule(
        "head-tolerations-are-consistent",
        "resources.head.tolerations",
        lambda s: s.resources.head.tolerations,
    ),
    Rule(
        name="env-names-not-reserved",
        path="env",
        cel=f"self.env.all(e, !(e.name in [{_RESERVED_CEL}]) && !e.name.startsWith('{RESERVED_ENV_PREFIX}'))",
        message=f"must not set {', '.join(RESERVED_ENV_NAMES)} or {RESERVED_ENV_PREFIX}* variables "
        "(the operator and the launcher set them)",
        check=lambda s: not any(is_reserved_env_name(var.name) for var in s.env),
    ),
)


def violations(spec: FlashRLJobSpec) -> list[tuple[str, str]]:
    """Return ``(path, message)`` for every rule the spec breaks, paths relative to ``spec``."""
    return [(rule.path, rule.message) for rule in RULES if not rule.check(spec)]
