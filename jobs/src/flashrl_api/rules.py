"""Cross-field rules, each written once and enforced twice.

Every rule carries a Python predicate (used by ``flashrl validate``, the operator and the launcher)
and the equivalent CEL expression (emitted into the CRD as ``x-kubernetes-validations``, so the
API server rejects the same specs at ``kubectl apply`` time). A unit test evaluates both sides on
the same inputs, so the two cannot disagree silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from flashrl_api.cel import cel_string
from flashrl_api.gpus import (
    FP8_MIN_CAPABILITY,
    GFD_LABEL_VALUES,
    NO_FP8_PATTERN,
    NOT_A_LABEL_PATTERN,
    gpu_family,
    label_values_for,
    lacks_fp8,
)
from flashrl_api.kuberay_env import KUBERAY_MANAGED_ENV, KUBERAY_MANAGED_ENV_NAMES
from flashrl_api.precision import FP8_KV_CACHES, FP8_QUANTIZATIONS, spec_uses_fp8
from flashrl_api.sources import HF_SCHEME, is_hf
from flashrl_api.spec import (
    ENGINE_QUANTIZATIONS,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    INTERPOLATION_START,
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIX,
    RESERVED_MOUNT_PATHS,
    FlashRLJobSpec,
    Toleration,
    VolumeSpec,
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
    #: A message naming the offending values, for the Python side (CEL messages are static).
    explain: Callable[[FlashRLJobSpec], str] | None = None

    def message_for(self, spec: FlashRLJobSpec) -> str:
        """The message for a spec that breaks this rule: specific where the rule can say more."""
        return self.explain(spec) if self.explain is not None else self.message


_RESERVED_CEL = ", ".join(f"'{name}'" for name in RESERVED_ENV_NAMES)
#: KubeRay's names the project does not already reserve for itself (RAY_ADDRESS is both).
_KUBERAY_ONLY_ENV = tuple(name for name in KUBERAY_MANAGED_ENV_NAMES if not is_reserved_env_name(name))
_KUBERAY_ENV_CEL = ", ".join(f"'{name}'" for name in _KUBERAY_ONLY_ENV)
_FP8_CEL = ", ".join(f"'{q}'" for q in FP8_QUANTIZATIONS)
_FP8_KV_CEL = ", ".join(f"'{q}'" for q in FP8_KV_CACHES)
#: CEL: the rollout runs something in FP8 (weights or KV cache), as precision.spec_uses_fp8.
_USES_FP8_CEL = f"(self.rollout.quantization in [{_FP8_CEL}] || self.rollout.kvCache in [{_FP8_KV_CEL}])"
_FALLBACK_CEL = "self.correction.guard.action != 'FallbackToBF16'"
_GFD_LABELS_CEL = ", ".join(f"'{value}'" for value in GFD_LABEL_VALUES)


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


#: The storage volumes by their field path (relative to ``spec``), for the mount-path rules.
_VOLUMES: tuple[str, ...] = ("storage.modelCache", "storage.data", "storage.checkpoints")


def _mount_paths(spec: FlashRLJobSpec) -> list[str]:
    s = spec.storage
    return [s.model_cache.mount_path, s.data.mount_path, s.checkpoints.mount_path]


def is_reserved_mount_path(path: str) -> bool:
    """At or under one of :data:`RESERVED_MOUNT_PATHS` (``/dev/shm``, ``/etc/flashrl``, ``/dev``...)."""
    return any(path == reserved or path.startswith(reserved + "/") for reserved in RESERVED_MOUNT_PATHS)


_MOUNTS_CEL = "[" + ", ".join(f"self.{v}.mountPath" for v in _VOLUMES) + "]"
_RESERVED_MOUNT_CEL = " || ".join(f"p == '{r}' || p.startsWith('{r}/')" for r in RESERVED_MOUNT_PATHS)

#: KubeRay counts a container limit as GPUs when its name ends in "gpu" or is an NVIDIA MIG profile
#: (ray-operator/controllers/ray/utils/util.go, IsGPUResourceKey, v1.7.0): such an RDMA resource
#: would replace the GPU count Ray advertises, or (nvidia.com/gpu itself) the GPU limit.
MIG_RESOURCE_PATTERN = r"^nvidia\.com/mig-[0-9]+g\.[0-9]+gb$"


def counts_as_gpu(resource: str) -> bool:
    """Whether KubeRay would read this extended resource as GPUs."""
    return (
        resource == GPU_RESOURCE
        or resource.endswith("gpu")
        or re.fullmatch(MIG_RESOURCE_PATTERN, resource) is not None
    )


#: Extended resources may not live in the kubernetes.io domain (Kubernetes reserves it).
KUBERNETES_DOMAIN_PATTERN = r"^([^/]*\.)?kubernetes\.io/"


def is_kubernetes_domain(resource: str) -> bool:
    """Whether the resource name is in the kubernetes.io domain."""
    return re.match(KUBERNETES_DOMAIN_PATTERN, resource) is not None


def _rdma_resource_ok(spec: FlashRLJobSpec) -> bool:
    rdma = spec.resources.rdma
    return rdma is None or not (counts_as_gpu(rdma.resource_name) or is_kubernetes_domain(rdma.resource_name))


def _no_interpolation_rule(
    name: str, path: str, value: Callable[[FlashRLJobSpec], str | None], optional: bool = False
) -> Rule:
    """A spec string that reaches verl's Hydra config may not hold an OmegaConf interpolation: Hydra
    resolves ``${...}`` even inside a quoted override value, so it cannot be escaped, only refused."""
    has = f"has(self.{path}) && " if optional else ""
    return Rule(
        name=f"no-interpolation-in-{name}",
        path=path,
        cel=f"!({has}self.{path}.contains('{INTERPOLATION_START}'))",
        message=f"must not contain '{INTERPOLATION_START}': the value reaches verl's config, where OmegaConf "
        "would resolve it as an interpolation (${oc.env:...} reads the environment)",
        check=lambda s: INTERPOLATION_START not in (value(s) or ""),
    )


def _staged_needs_claim(name: str, volume: str, fields: tuple[str, ...]) -> Rule:
    """A Hugging Face source is downloaded into a volume before the Ray pods start: into a pod-local
    emptyDir it would vanish with the staging Job's pod, so the volume must be a claim."""
    storage = f"storage.{volume}"
    hf_cel = " || ".join(f"self.{f}.startsWith('{HF_SCHEME}')" for f in fields)
    return Rule(
        name=name,
        path=f"{storage}.claimName",
        cel=f"!({hf_cel}) || (has(self.{storage}.claimName) && self.{storage}.claimName != '')",
        message=f"must name a PersistentVolumeClaim: {' or '.join(fields)} is a Hugging Face source, which "
        "a staging Job downloads into this volume before the Ray pods start (an emptyDir would not keep it)",
        check=lambda s: (
            not any(is_hf(str(_wire_value(s, f))) for f in fields) or bool(_volume_of(s, volume).claim_name)
        ),
    )


def _wire_value(spec: FlashRLJobSpec, path: str) -> object:
    """The value at a spec path as CEL names it (dotted, camelCase: the fields' aliases)."""
    value: object = spec
    for part in path.split("."):
        assert isinstance(value, BaseModel), f"spec.{path}: {part} is not a field of a model"
        fields = type(value).model_fields
        value = getattr(value, next(name for name, info in fields.items() if (info.alias or name) == part))
    return value


def _divides_rule(name: str, path: str, divisor: str, dividend: str, message: str) -> Rule:
    """The spec field ``divisor`` divides the field ``dividend`` (spec paths as CEL names them): CEL and
    Python read the same two fields."""

    def check(spec: FlashRLJobSpec) -> bool:
        a, b = _wire_value(spec, dividend), _wire_value(spec, divisor)
        assert isinstance(a, int) and isinstance(b, int), f"spec.{dividend} and spec.{divisor} are integers"
        return a % b == 0

    return Rule(
        name=name, path=path, cel=f"self.{dividend} % self.{divisor} == 0", message=message, check=check
    )


def _volume_of(spec: FlashRLJobSpec, volume: str) -> VolumeSpec:
    return spec.storage.model_cache if volume == "modelCache" else spec.storage.data


RULES: tuple[Rule, ...] = (
    _divides_rule(
        "generation-batch-is-whole-prompt-batches",
        "training.generationBatchSize",
        "training.promptBatchSize",
        "training.generationBatchSize",
        "must be a whole multiple of training.promptBatchSize: verl 0.9.1 keeps "
        "generationBatchSize / promptBatchSize prompt batches in flight while dynamic sampling fills a "
        "step (algorithm.filter_groups.max_inflight_gen_batches)",
    ),
    _divides_rule(
        "mini-batch-divides-prompt-batch",
        "training.miniBatchSize",
        "training.miniBatchSize",
        "training.promptBatchSize",
        "must divide training.promptBatchSize",
    ),
    _divides_rule(
        "tensor-parallel-divides-node",
        "rollout.tensorParallelSize",
        "rollout.tensorParallelSize",
        "resources.gpusPerNode",
        "must divide resources.gpusPerNode (an SGLang server may not span nodes)",
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
        path="rollout.samplesPerPrompt",
        cel="(self.training.promptBatchSize * self.rollout.samplesPerPrompt) % "
        "(self.resources.nodes * self.resources.gpusPerNode) == 0",
        message="training.promptBatchSize x rollout.samplesPerPrompt must be divisible by the GPU count "
        "(resources.nodes x resources.gpusPerNode)",
        check=lambda s: (s.training.prompt_batch_size * s.rollout.samples_per_prompt) % _world(s) == 0,
    ),
    Rule(
        name="mini-batch-divides-over-data-parallel",
        path="training.miniBatchSize",
        cel="(self.resources.nodes * self.resources.gpusPerNode) % self.training.ulyssesSequenceParallelSize "
        "!= 0 || (self.training.miniBatchSize * self.rollout.samplesPerPrompt) % ((self.resources.nodes * "
        "self.resources.gpusPerNode) / self.training.ulyssesSequenceParallelSize) == 0",
        message="training.miniBatchSize x rollout.samplesPerPrompt must be divisible by the data-parallel "
        "size (the GPU count divided by training.ulyssesSequenceParallelSize): verl splits every mini "
        "batch over those ranks (verl/workers/engine_workers.py:267)",
        check=lambda s: (
            _world(s) % s.training.ulysses_sequence_parallel_size != 0
            or (s.training.mini_batch_size * s.rollout.samples_per_prompt)
            % (_world(s) // s.training.ulysses_sequence_parallel_size)
            == 0
        ),
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
    Rule(
        name="env-names-not-kuberay-managed",
        path="env",
        cel=f"self.env.all(e, !(e.name in [{_KUBERAY_ENV_CEL}]))",
        message="must not set a variable KubeRay v1.7.0 refuses, or sets itself, in Ray containers: "
        f"{', '.join(_KUBERAY_ONLY_ENV)}",
        check=lambda s: not any(var.name in _KUBERAY_ONLY_ENV for var in s.env),
        explain=lambda s: _kuberay_env_explained(s),
    ),
    _staged_needs_claim("staged-model-needs-claim", "modelCache", ("model.source",)),
    _staged_needs_claim("staged-data-needs-claim", "data", ("data.train", "data.validation")),
    Rule(
        name="gpu-product-is-a-gfd-label-value",
        path="resources.gpuProduct",
        cel=f"self.resources.gpuProduct in [{_GFD_LABELS_CEL}] || "
        f"!self.resources.gpuProduct.matches({cel_string(NOT_A_LABEL_PATTERN)})",
        message=f"must be the {GPU_PRODUCT_LABEL} value GPU Feature Discovery writes (NVML's product name "
        "with '-' for spaces: NVIDIA-H20, NVIDIA-H100-80GB-HBM3, NVIDIA-L40S, ...), not a short name no "
        "node carries",
        check=lambda s: not label_values_for(s.resources.gpu_product),
        explain=lambda s: _gpu_label_explained(s),
    ),
    Rule(
        name="fp8-rollout-needs-fp8-gpus",
        path="rollout.quantization",
        cel=f"!(self.rollout.quantization in [{_FP8_CEL}]) || "
        f"!self.resources.gpuProduct.matches({cel_string(NO_FP8_PATTERN)})",
        message="an FP8 rollout needs FP8 tensor cores (compute capability "
        f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or newer: L4, L40S, H100, H20, H200, B200, ...), "
        "and resources.gpuProduct names an older GPU; use bf16 or an FP8-capable pool",
        check=lambda s: (
            s.rollout.quantization not in FP8_QUANTIZATIONS or not lacks_fp8(s.resources.gpu_product)
        ),
        explain=lambda s: _fp8_explained(s, s.rollout.quantization, "bf16"),
    ),
    Rule(
        name="fp8-kv-cache-needs-fp8-gpus",
        path="rollout.kvCache",
        cel=f"!(self.rollout.kvCache in [{_FP8_KV_CEL}]) || "
        f"!self.resources.gpuProduct.matches({cel_string(NO_FP8_PATTERN)})",
        message="an FP8 KV cache needs FP8 tensor cores (compute capability "
        f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or newer: L4, L40S, H100, H20, H200, B200, ...), "
        "and resources.gpuProduct names an older GPU; use auto or bf16, or an FP8-capable pool",
        check=lambda s: s.rollout.kv_cache not in FP8_KV_CACHES or not lacks_fp8(s.resources.gpu_product),
        explain=lambda s: _fp8_explained(s, s.rollout.kv_cache, "auto or bf16"),
    ),
    Rule(
        name="fallback-needs-fp8-rollout",
        path="correction.guard.action",
        cel=f"{_FALLBACK_CEL} || {_USES_FP8_CEL}",
        message="action FallbackToBF16 needs an FP8 rollout to fall back from (rollout.quantization "
        "blockwise-fp8 or channel-fp8, or rollout.kvCache fp8-e4m3 or fp8-e5m2); this rollout is BF16 "
        "already: use Alert or Suspend",
        check=lambda s: s.correction.guard.action != "FallbackToBF16" or spec_uses_fp8(s),
    ),
    Rule(
        name="fallback-needs-checkpoints",
        path="correction.guard.action",
        cel=f"{_FALLBACK_CEL} || (self.checkpoint.resumeMode == 'auto' && "
        "has(self.storage.checkpoints.claimName))",
        message="action FallbackToBF16 resumes the next attempt from the newest checkpoint, so it needs "
        "checkpoint.resumeMode auto and storage.checkpoints.claimName (a pod-local emptyDir disappears "
        "with the attempt's Ray cluster); use Alert or Suspend, or keep checkpoints on a claim",
        check=lambda s: (
            s.correction.guard.action != "FallbackToBF16"
            or (s.checkpoint.resume_mode == "auto" and s.storage.checkpoints.claim_name is not None)
        ),
    ),
    Rule(
        name="quantization-supported-by-engine",
        path="rollout.quantization",
        cel=" && ".join(
            f"(self.rollout.engine != '{engine}' || self.rollout.quantization in "
            f"[{', '.join(repr(q) for q in supported)}])"
            for engine, supported in ENGINE_QUANTIZATIONS.items()
        ),
        message="channel-fp8 is SGLang's flash_rl loader: with rollout.engine vllm use blockwise-fp8 (verl's "
        "FP8 path, which vLLM supports) or bf16",
        check=lambda s: s.rollout.quantization in ENGINE_QUANTIZATIONS[s.rollout.engine],
    ),
    Rule(
        name="mount-paths-unique",
        path="storage",
        cel=f"{_MOUNTS_CEL}.all(p, {_MOUNTS_CEL}.filter(q, q == p).size() == 1)",
        message="modelCache, data and checkpoints must each have their own mountPath (Kubernetes refuses "
        "two volumes on one path)",
        check=lambda s: len(set(_mount_paths(s))) == len(_mount_paths(s)),
    ),
    Rule(
        name="mount-paths-not-reserved",
        path="storage",
        cel=f"{_MOUNTS_CEL}.all(p, !({_RESERVED_MOUNT_CEL}))",
        message=f"a mountPath must not be at or under {', '.join(RESERVED_MOUNT_PATHS)} (the operator mounts "
        "the job's spec at /etc/flashrl and shared memory at /dev/shm; the others hold the system)",
        check=lambda s: not any(is_reserved_mount_path(p) for p in _mount_paths(s)),
        explain=lambda s: _reserved_mounts_explained(s),
    ),
    Rule(
        name="rdma-resource-is-not-gpu",
        path="resources.rdma.resourceName",
        cel="!has(self.resources.rdma) || !("
        f"self.resources.rdma.resourceName == '{GPU_RESOURCE}' || "
        "self.resources.rdma.resourceName.endsWith('gpu') || "
        f"self.resources.rdma.resourceName.matches({cel_string(MIG_RESOURCE_PATTERN)}) || "
        f"self.resources.rdma.resourceName.matches({cel_string(KUBERNETES_DOMAIN_PATTERN)}))",
        message=f"must not be {GPU_RESOURCE}, a name ending in 'gpu' or an NVIDIA MIG profile (KubeRay "
        "counts those as GPUs, so the RDMA request would replace the GPU count), nor in the "
        "kubernetes.io domain",
        check=_rdma_resource_ok,
    ),
    Rule(
        name="no-interpolation-in-overrides",
        path="overrides",
        cel=f"self.overrides.all(o, !o.contains('{INTERPOLATION_START}'))",
        message=f"must not contain '{INTERPOLATION_START}': interpolations (${{oc.env:NAME}}, ${{a.b}}) are "
        "refused, so validating a spec never resolves anything it holds; write the value itself",
        check=lambda s: not any(INTERPOLATION_START in o for o in s.overrides),
        explain=lambda s: _interpolated_overrides_explained(s),
    ),
    _no_interpolation_rule("model-source", "model.source", lambda s: s.model.source),
    _no_interpolation_rule("train-data", "data.train", lambda s: s.data.train),
    _no_interpolation_rule("validation-data", "data.validation", lambda s: s.data.validation),
    _no_interpolation_rule("prompt-key", "data.promptKey", lambda s: s.data.prompt_key),
    _no_interpolation_rule(
        "sampling-metric", "training.dynamicSampling.metric", lambda s: s.training.dynamic_sampling.metric
    ),
    _no_interpolation_rule("project-name", "training.projectName", lambda s: s.training.project_name),
    _no_interpolation_rule(
        "experiment-name", "training.experimentName", lambda s: s.training.experiment_name, optional=True
    ),
)


#: verl 0.9.1's ``trainer.v1.separate_async.parameter_sync_step`` when the spec leaves it out.
VERL_PARAMETER_SYNC_STEP = 4
_ASYNC = "self.training.async"
_SYNC_STEP_CEL = (
    f"(has({_ASYNC}) && has({_ASYNC}.parameterSyncStep) ? {_ASYNC}.parameterSyncStep : "
    f"{VERL_PARAMETER_SYNC_STEP})"
)
_SEPARATE_ONLY = ("parameterSyncStep", "lendIdleTrainerGpus", "checkpointEngine")


def sync_step(spec: FlashRLJobSpec) -> int:
    """The parameter sync interval a separate-async job runs with: its own, else verl's default."""
    a = spec.training.async_
    if a is None or a.parameter_sync_step is None:
        return VERL_PARAMETER_SYNC_STEP
    return a.parameter_sync_step


def _separate_only_set(spec: FlashRLJobSpec) -> list[str]:
    a = spec.training.async_
    if a is None:
        return []
    values = (a.parameter_sync_step, a.lend_idle_trainer_gpus, a.checkpoint_engine)
    return [name for name, v in zip(_SEPARATE_ONLY, values, strict=True) if v is not None]


def _pool_rule(rule: Rule) -> Rule:
    """A rule about ``rollout.pool``, which only separate-async jobs have: holds without a pool."""
    return Rule(
        name=rule.name,
        path=rule.path,
        cel=f"!has(self.rollout.pool) || ({rule.cel})",
        message=rule.message,
        check=lambda s: s.rollout.pool is None or rule.check(s),
        explain=rule.explain,
    )


def _pool_product(spec: FlashRLJobSpec) -> str:
    return spec.rollout.pool.gpu_product if spec.rollout.pool is not None else ""


#: The training modes' rules: which settings go with which mode, and what verl 0.9.1's separate-async
#: trainer asserts at start-up (``verl/trainer/ppo/v1/trainer_separate_async.py``), refused here first.
#: The rollout pool's product must be the trainer's, so the product rules on resources.gpuProduct (a
#: GFD label value, FP8 tensor cores for an FP8 rollout: the table in flashrl_api.gpus) hold for the
#: pool too; they get rules of their own when verl can place roles by product.
MODE_RULES: tuple[Rule, ...] = (
    Rule(
        name="async-settings-need-async-mode",
        path="training.async",
        cel=f"!has({_ASYNC}) || self.training.mode != 'sync'",
        message="is only valid with training.mode colocate-async or separate-async",
        check=lambda s: s.training.async_ is None or s.training.mode != "sync",
    ),
    Rule(
        name="separate-async-settings-need-separate-async",
        path="training.async",
        cel=f"self.training.mode == 'separate-async' || !has({_ASYNC}) || ("
        + " && ".join(f"!has({_ASYNC}.{f})" for f in _SEPARATE_ONLY)
        + ")",
        message=f"{', '.join(_SEPARATE_ONLY)} are only valid with training.mode separate-async",
        check=lambda s: s.training.mode == "separate-async" or not _separate_only_set(s),
        explain=lambda s: (
            f"{', '.join(_separate_only_set(s))}: only valid with training.mode separate-async, and "
            f"training.mode is {s.training.mode}"
        ),
    ),
    Rule(
        name="rollout-pool-needs-separate-async",
        path="rollout.pool",
        cel="!has(self.rollout.pool) || self.training.mode == 'separate-async'",
        message="is only valid with training.mode separate-async (the other modes run rollout on the "
        "trainer's GPUs)",
        check=lambda s: s.rollout.pool is None or s.training.mode == "separate-async",
    ),
    Rule(
        name="separate-async-needs-rollout-pool",
        path="rollout.pool",
        cel="self.training.mode != 'separate-async' || has(self.rollout.pool)",
        message="is required with training.mode separate-async: the standalone rollout servers need "
        "their own nodes (verl asserts actor_rollout_ref.rollout.nnodes > 0)",
        check=lambda s: s.training.mode != "separate-async" or s.rollout.pool is not None,
    ),
    Rule(
        name="separate-async-batch-invariant",
        path="training.promptBatchSize",
        cel=f"self.training.mode != 'separate-async' || "
        f"self.training.promptBatchSize == {_SYNC_STEP_CEL} * self.training.miniBatchSize",
        message="must equal training.async.parameterSyncStep (default "
        f"{VERL_PARAMETER_SYNC_STEP}) x training.miniBatchSize with training.mode separate-async "
        "(verl 0.9.1 asserts train_batch_size == parameter_sync_step x ppo_mini_batch_size)",
        check=lambda s: (
            s.training.mode != "separate-async"
            or s.training.prompt_batch_size == sync_step(s) * s.training.mini_batch_size
        ),
        explain=lambda s: (
            f"is {s.training.prompt_batch_size}, and must equal training.async.parameterSyncStep "
            f"({sync_step(s)}) x training.miniBatchSize ({s.training.mini_batch_size}) = "
            f"{sync_step(s) * s.training.mini_batch_size} with training.mode separate-async (verl 0.9.1 "
            "asserts train_batch_size == parameter_sync_step x ppo_mini_batch_size)"
        ),
    ),
    Rule(
        name="separate-async-checkpoint-engine-not-naive",
        path="training.async.checkpointEngine",
        cel=f"!has({_ASYNC}) || !has({_ASYNC}.checkpointEngine) || {_ASYNC}.checkpointEngine != 'naive'",
        message="must not be naive with training.mode separate-async: weights cross from the trainer's "
        "pool to the rollout pool (use nccl, nixl or mooncake; verl 0.9.1 asserts it)",
        check=lambda s: s.training.async_ is None or s.training.async_.checkpoint_engine != "naive",
    ),
    _pool_rule(
        Rule(
            name="rollout-pool-gpu-product-is-the-trainers",
            path="rollout.pool.gpuProduct",
            cel="self.rollout.pool.gpuProduct == self.resources.gpuProduct",
            message="must equal resources.gpuProduct: verl 0.9.1 places the trainer's and the standalone "
            "rollout's workers by GPU count alone (its placement groups name no accelerator type, node "
            "label or custom resource), so with two GPU products either role could land on either pool; "
            "run both pools on one product (see docs/api.md, Training modes)",
            check=lambda s: _pool_product(s) == s.resources.gpu_product,
            explain=lambda s: (
                f"is {_pool_product(s)} and resources.gpuProduct is {s.resources.gpu_product}: verl 0.9.1 "
                "places the trainer's and the standalone rollout's workers by GPU count alone (its placement "
                "groups name no accelerator type, node label or custom resource), so with two GPU products "
                "either role could land on either pool; run both pools on one product (see docs/api.md, "
                "Training modes)"
            ),
        )
    ),
    _pool_rule(
        Rule(
            name="rollout-pool-node-selector-leaves-gpu-product",
            path="rollout.pool.nodeSelector",
            cel=f"!('{GPU_PRODUCT_LABEL}' in self.rollout.pool.nodeSelector)",
            message=f"must not set {GPU_PRODUCT_LABEL}: rollout.pool.gpuProduct sets it",
            check=lambda s: (
                s.rollout.pool is not None and GPU_PRODUCT_LABEL not in s.rollout.pool.node_selector
            ),
        )
    ),
    _pool_rule(
        _tolerations_rule(
            "rollout-pool-tolerations-are-consistent",
            "rollout.pool.tolerations",
            lambda s: s.rollout.pool.tolerations if s.rollout.pool is not None else [],
        )
    ),
    _pool_rule(
        Rule(
            name="tensor-parallel-divides-rollout-node",
            path="rollout.tensorParallelSize",
            cel="self.rollout.pool.gpusPerNode % self.rollout.tensorParallelSize == 0",
            message="must divide rollout.pool.gpusPerNode (an SGLang server may not span nodes)",
            check=lambda s: (
                s.rollout.pool is not None
                and s.rollout.pool.gpus_per_node % s.rollout.tensor_parallel_size == 0
            ),
        )
    ),
)

RULES = (*RULES, *MODE_RULES)


def violations(spec: FlashRLJobSpec) -> list[tuple[str, str]]:
    """Return ``(path, message)`` for every rule the spec breaks, paths relative to ``spec``."""
    return [(rule.path, rule.message_for(spec)) for rule in RULES if not rule.check(spec)]


def _reserved_mounts_explained(spec: FlashRLJobSpec) -> str:
    bad = [
        f"{v}.mountPath {p}"
        for v, p in zip(_VOLUMES, _mount_paths(spec), strict=True)
        if is_reserved_mount_path(p)
    ]
    return (
        f"{', '.join(bad)}: must not be at or under {', '.join(RESERVED_MOUNT_PATHS)} (the operator "
        "mounts the job's spec at /etc/flashrl and shared memory at /dev/shm; the others hold the system)"
    )


def _interpolated_overrides_explained(spec: FlashRLJobSpec) -> str:
    indexes = [str(i) for i, o in enumerate(spec.overrides) if INTERPOLATION_START in o]
    return (
        f"overrides {', '.join(indexes)} contain '{INTERPOLATION_START}': interpolations (${{oc.env:NAME}}, "
        "${a.b}) are refused, so validating a spec never resolves anything it holds; write the value itself"
    )


def _kuberay_env_explained(spec: FlashRLJobSpec) -> str:
    managed = [var.name for var in spec.env if var.name in _KUBERAY_ONLY_ENV]
    why = "; ".join(f"{name}: {KUBERAY_MANAGED_ENV[name]}" for name in managed)
    return f"must not set variables KubeRay v1.7.0 refuses, or sets itself, in Ray containers ({why})"


def _gpu_label_explained(spec: FlashRLJobSpec) -> str:
    product = spec.resources.gpu_product
    values = label_values_for(product)
    use = values[0] if len(values) == 1 else f"one of {', '.join(values)}"
    return (
        f"{product!r} is not a {GPU_PRODUCT_LABEL} value: GPU Feature Discovery labels such nodes "
        f"{' or '.join(values)} (NVML's product name with '-' for spaces), so no node would match; use "
        f"{use} (`flashrl preflight` lists the products your nodes carry)"
    )


def _fp8_explained(spec: FlashRLJobSpec, setting: str, instead: str) -> str:
    family = gpu_family(spec.resources.gpu_product)
    what = "an older GPU"
    if family is not None:
        major, minor = family.capability
        what = f"{family.name}, compute capability {major}.{minor}"
    return (
        f"{setting} needs FP8 tensor cores (compute capability "
        f"{FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} or newer), and resources.gpuProduct "
        f"{spec.resources.gpu_product} is {what}; use {instead} or an FP8-capable pool (gpuProduct "
        "NVIDIA-L40S, NVIDIA-H100-80GB-HBM3, NVIDIA-H20, ...)"
    )


def spec_warnings(spec: FlashRLJobSpec) -> list[tuple[str, str]]:
    """``(path, message)`` for what is accepted but may not do what the user expects."""
    found: list[tuple[str, str]] = []
    if spec_uses_fp8(spec) and gpu_family(spec.resources.gpu_product) is None:
        found.append(
            (
                "resources.gpuProduct",
                f"{spec.resources.gpu_product!r} is not in the GPU table (flashrl_api/gpus.py), so whether "
                f"it has FP8 tensor cores for rollout.quantization {spec.rollout.quantization} (kvCache "
                f"{spec.rollout.kv_cache}) was not checked",
            )
        )
    t = spec.training
    if not t.dynamic_sampling.enabled and t.generation_batch_size != t.prompt_batch_size:
        found.append(
            (
                "training.generationBatchSize",
                "has no effect with training.dynamicSampling.enabled false: verl 0.9.1 generates one "
                "prompt batch per step",
            )
        )
    if t.mode != "sync" and t.dynamic_sampling.enabled and t.generation_batch_size != t.prompt_batch_size:
        found.append(
            (
                "training.generationBatchSize",
                f"has no effect with training.mode {t.mode}: verl 0.9.1's asynchronous trainers bound "
                "generation by staleness (training.async.maxOffPolicyVersions), not by prompt batches",
            )
        )
    if spec.lifecycle.max_restarts > 0 and spec.storage.checkpoints.claim_name is None:
        found.append(
            (
                "storage.checkpoints.claimName",
                "is not set, so checkpoints go to a pod-local emptyDir that disappears with each Ray "
                "cluster: every retry (lifecycle.maxRestarts) starts again from step 0",
            )
        )
    if spec.lifecycle.max_restarts > 0 and spec.checkpoint.resume_mode == "disable":
        found.append(
            (
                "checkpoint.resumeMode",
                "is disable: every retry (lifecycle.maxRestarts) starts again from step 0",
            )
        )
    return found


#: Spec fields a running job may change: the lifecycle knobs KubeRay honours on a live RayJob. Every
#: other field is fixed once the job exists (the Ray cluster and verl's command are built from it), so
#: the CRD refuses changes to them (CEL transition rules) and the operator checks again.
MUTABLE_SPEC_FIELDS: tuple[str, ...] = (
    "lifecycle.suspend",
    "lifecycle.activeDeadlineSeconds",
    "lifecycle.ttlSecondsAfterFinished",
)
IMMUTABLE_CEL = "self == oldSelf"
IMMUTABLE_MESSAGE = (
    "cannot change once the job exists (its Ray cluster and verl command are built from it); "
    "delete and recreate the FlashRLJob, or change only lifecycle.suspend, "
    "lifecycle.activeDeadlineSeconds or lifecycle.ttlSecondsAfterFinished"
)


def _aliases(model: type[BaseModel]) -> list[tuple[str, type[BaseModel] | None]]:
    out: list[tuple[str, type[BaseModel] | None]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        nested = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        out.append((info.alias or name, nested))
    return out


def immutable_spec_fields(model: type[BaseModel] = FlashRLJobSpec, prefix: str = "") -> tuple[str, ...]:
    """Spec paths (camelCase, relative to ``spec``) that carry ``self == oldSelf``: the largest subtrees
    holding no field of :data:`MUTABLE_SPEC_FIELDS`."""
    paths: list[str] = []
    for alias, nested in _aliases(model):
        path = f"{prefix}{alias}"
        if path in MUTABLE_SPEC_FIELDS:
            continue
        if nested is not None and any(m.startswith(path + ".") for m in MUTABLE_SPEC_FIELDS):
            paths.extend(immutable_spec_fields(nested, path + "."))
        else:
            paths.append(path)
    return tuple(paths)
