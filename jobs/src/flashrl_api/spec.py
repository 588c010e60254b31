"""The FlashRLJob spec: the single source of truth for the API.

Every default here reproduces the origin recipe (Qwen3-8B-Base, DAPO on DAPO-Math-17k with AIME-2024
validation, blockwise FP8 rollout on SGLang, token-level TIS with cap 2, prompt batch 32 x n=16,
generation batch 96, mini batch 32, one node of 8 NVIDIA H20). The CRD YAML is generated from these
classes (``flashrl crd``), and the in-pod launcher reads the same classes, so the schema the API
server enforces, the objects the operator renders and the command verl runs cannot drift apart.

Field docstrings become the CRD descriptions shown by ``kubectl explain``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from flashrl_api._base import ApiModel
from flashrl_api.k8s_names import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    EXTENDED_RESOURCE_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_KEY_RE,
    LABEL_VALUE_PATTERN,
    NONEMPTY_LABEL_VALUE_PATTERN,
)
from flashrl_api.pins import default_trainer_image
from flashrl_api.sources import (
    DATA_SOURCE_PATTERN,
    MODEL_SOURCE_PATTERN,
    check_data_source,
    check_model_source,
)

Quantization = Literal["blockwise-fp8", "channel-fp8", "bf16"]
#: The rollout engine's KV-cache precision (``spec.rollout.kvCache``): auto is the engine's default (the
#: model's dtype, bf16 for the recipe's model), bf16 says so explicitly, fp8-e4m3 and fp8-e5m2 store keys
#: and values in FP8 (both are among the pinned SGLang 0.5.12's and vLLM's ``kv_cache_dtype`` choices;
#: each engine's spelling is in :mod:`flashrl_api.precision`).
KvCache = Literal["auto", "bf16", "fp8-e4m3", "fp8-e5m2"]
#: verl 0.9.1's rollout engines this project runs (``actor_rollout_ref.rollout.name``).
RolloutEngine = Literal["sglang", "vllm"]
#: The rollout precisions each engine supports on the pinned verl. vLLM: verl's vLLM server accepts
#: ``quantization`` fp8 (128x128 blocks, quantized by the trainer at every sync), torchao and ascend
#: (``workers/rollout/vllm_rollout/vllm_async_server.py`` ``_apply_quantization``); per-channel FP8 is
#: SGLang's own ``flash_rl`` loader, which vLLM has no counterpart of.
ENGINE_QUANTIZATIONS: dict[str, tuple[str, ...]] = {
    "sglang": ("blockwise-fp8", "channel-fp8", "bf16"),
    "vllm": ("blockwise-fp8", "bf16"),
}
TisLevel = Literal["token", "sequence", "off"]
Logger = Literal["console", "wandb", "tensorboard", "mlflow"]
#: How verl 0.9.1's V1 trainer schedules rollout and training (``trainer.v1.trainer_mode``, spelled
#: with '-' here as Kubernetes enums are): sync alternates on the same GPUs (the origin recipe);
#: colocate-async overlaps them on the same GPUs; separate-async runs rollout on its own pool.
TrainingMode = Literal["sync", "colocate-async", "separate-async"]
#: What each mode is called in verl's ``trainer.v1.trainer_mode``.
VERL_TRAINER_MODES: dict[str, str] = {
    "sync": "sync",
    "colocate-async": "colocate_async",
    "separate-async": "separate_async",
}
#: verl 0.9.1's checkpoint engines (``verl/checkpoint_engine``), which move the trainer's weights to
#: standalone rollout servers. ``naive`` only works within one process group (the hybrid engine).
CheckpointEngine = Literal["nccl", "nixl", "mooncake", "naive"]

#: A Kubernetes resource quantity such as ``64``, ``500m``, ``512Gi``.
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"
Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, max_length=32)]

#: A DNS-1123 label: names that become label values (a Kueue LocalQueue's name is the value of the
#: ``kueue.x-k8s.io/queue-name`` label on the RayJob), at most 63 characters.
DnsLabel = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]
#: A DNS-1123 subdomain: what Kubernetes allows for Secret, PersistentVolumeClaim and PriorityClass
#: names (``hf.token`` is a valid Secret name), at most 253 characters.
DnsSubdomain = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, min_length=1, max_length=253)]
#: Names of Secrets and claims (kept for callers of the older name).
DnsName = DnsSubdomain

#: Kubernetes stores these fields as int32 (RayJob deadlines and TTL, pod counts); larger values
#: would be refused by the API server only after the FlashRLJob was accepted.
INT32_MAX = 2**31 - 1
#: Batch sizes and token counts: far above any real run, and small enough that the CEL rules'
#: products (promptBatchSize x rollout.samplesPerPrompt, ...) stay inside int64.
MAX_COUNT = 1_048_576

#: An environment variable name as the operator accepts it: a C identifier.
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: Variables the operator or the launcher own: GPU visibility (the CPU-only head hides the node's GPUs,
#: Ray assigns them to actors) and the Ray address the launcher hands to verl. One set for every route
#: to a process's environment: ``spec.env``, verl's ``runtime_env.env_vars``
#: (:func:`flashrl_jobs.override_rules.reserved_runtime_env_name`); Hydra's ``env_set`` is refused whole.
RESERVED_ENV_NAMES: tuple[str, ...] = (
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "RAY_ADDRESS",
    # What decides which shared libraries every process of the pod loads (the launcher's included).
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    # The two the launcher hands verl itself: its metrics file and the capacity block's deadline.
    "VERL_FILE_LOGGER_PATH",
    "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP",
)
#: Prefix of the launcher's own settings (spec path, API server, termination log).
RESERVED_ENV_PREFIX = "FLASHRL_"


def is_reserved_env_name(name: str) -> bool:
    """True for a variable a FlashRLJob may not set (see :data:`RESERVED_ENV_NAMES`)."""
    return name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIX)


_OVERRIDE_KEY = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_@\-]+)*"
#: A verl Hydra override: ``key=value``, ``+key=value`` (add), ``++key=value`` (force) or ``~key[=value]``
#: (delete). The ``=value`` is part of the pattern, so the API server refuses a bare key as we do.
#: Values are printable ASCII (Hydra's command-line grammar), which also bounds how much larger the
#: rendered ConfigMap can be than the overrides themselves (see MAX_OVERRIDES).
OVERRIDE_PATTERN = rf"^(~{_OVERRIDE_KEY}(=[ -~]*)?|(\+\+|\+)?{_OVERRIDE_KEY}=[ -~]*)$"
#: At most this many overrides of at most MAX_OVERRIDE_LENGTH characters: 128 KiB in all. The rendered
#: ConfigMap holds them twice (in the spec and in verl's argument list), within its 1 MiB limit
#: together with every other field at its maximum (tests/unit/render/test_size_limits.py renders that case).
MAX_OVERRIDES = 128
MAX_OVERRIDE_LENGTH = 1024
#: The start of an OmegaConf interpolation (``${oc.env:NAME}``, ``${path.to.key}``): refused in user
#: input that reaches verl's config, so validating a spec never resolves anything the user wrote.
INTERPOLATION_START = "${"

#: Paths a storage volume may not be mounted at or under: the operator's own mounts (the spec at
#: /etc/flashrl, the memory-backed /dev/shm), and system directories a volume would hide.
RESERVED_MOUNT_PATHS: tuple[str, ...] = ("/dev", "/etc", "/proc", "/sys")
#: An absolute path of non-empty segments, without ``.``/``..`` segments, ':', '$' or whitespace, and no
#: trailing '/': two spellings of one directory cannot slip past the uniqueness rule, and a mount path
#: (which reaches verl's config inside the checkpoint and staged paths) holds no interpolation.
MOUNT_PATH_PATTERN = r"^(/([^/\s:.$][^/\s:$]*|\.[^/\s:.$][^/\s:$]*|\.\.[^/\s:$]+))+$"
#: The non-root user of the pinned trainer image (images/trainer/Dockerfile).
DEFAULT_RUN_AS_USER = 1000
#: The GPU resource every worker requests (the NVIDIA device plugin's).
GPU_RESOURCE = "nvidia.com/gpu"


class ModelSpec(ApiModel):
    """The policy model to train."""

    source: str = Field(
        default="hf://Qwen/Qwen3-8B-Base",
        min_length=1,
        max_length=1024,
        json_schema_extra={"pattern": MODEL_SOURCE_PATTERN},
    )
    """hf://<owner>/<name>[@<revision>]: downloaded by a CPU-only staging Job into storage.modelCache
    before any GPU is requested (skipped when already staged there). Or an absolute path inside the
    pods, e.g. a directory on storage.modelCache that holds the model."""

    _source = field_validator("source")(staticmethod(check_model_source))


class DataSpec(ApiModel):
    """Training and validation data: parquet files in verl's RL format (columns prompt, data_source and
    reward_model.ground_truth)."""

    train: str = Field(
        default="hf://datasets/BytedTsinghua-SIA/DAPO-Math-17k/data/dapo-math-17k.parquet",
        min_length=1,
        max_length=1024,
        json_schema_extra={"pattern": DATA_SOURCE_PATTERN},
    )
    """Training set: DAPO-Math-17k by default. hf://datasets/<owner>/<name>[@<revision>]/<file> is
    downloaded into storage.data by the staging Job and checked for verl's columns; or an absolute path
    inside the pods."""

    validation: str = Field(
        default="hf://datasets/BytedTsinghua-SIA/AIME-2024/data/aime-2024.parquet",
        min_length=1,
        max_length=1024,
        json_schema_extra={"pattern": DATA_SOURCE_PATTERN},
    )
    """Validation set: AIME 2024 by default; every sample is evaluated. Same forms as train."""

    _sources = field_validator("train", "validation")(staticmethod(check_data_source))

    prompt_key: str = Field(default="prompt", min_length=1, max_length=128)
    """Column holding the chat-formatted prompt."""

    truncation: Literal["left", "right", "error"] = "left"
    """What to do with prompts longer than training.maxPromptLength."""


#: The Secret (key HF_TOKEN) the staging Job reads a Hub token from, when it exists.
DEFAULT_TOKEN_SECRET = "hf-token"  # noqa: S105 - a Secret's name, not a credential
#: The key of that Secret: the variable huggingface_hub reads.
TOKEN_KEY = "HF_TOKEN"  # noqa: S105 - a variable's name, not a credential


class ValidationSpec(ApiModel):
    """How each validation samples the validation set."""

    samples_per_problem: int = Field(default=1, ge=1, le=1024)
    """Responses sampled per validation row (verl's actor_rollout_ref.rollout.val_kwargs.n); verl's
    validation metric is then val-core/<data source>/acc/mean@<this>. The default validation file
    already repeats each of AIME 2024's 30 problems 32 times, so 1 gives 32 samples per problem; a file
    without copies needs more for a comparison problem by problem (the report counts and states the
    samples per problem it finds in the validation dumps)."""


class HuggingFaceSpec(ApiModel):
    """How the staging Job reaches the Hugging Face Hub for hf:// sources. A mirror is set with the
    HF_ENDPOINT variable in env, offline operation with HF_HUB_OFFLINE=1 (staged sources are then used
    as they are)."""

    token_secret: DnsName | None = DEFAULT_TOKEN_SECRET
    """Secret whose key HF_TOKEN holds a Hub token, for gated or private repositories. Optional: when the
    Secret does not exist the download is anonymous, and a gated repository fails staging with
    GatedRepository."""


class RolloutSpec(ApiModel):
    """The generation engine and how its weights are quantized."""

    engine: RolloutEngine = "sglang"
    """Inference engine serving rollouts (verl's actor_rollout_ref.rollout.name). sglang: SGLang, in the
    pinned SGLang trainer image. vllm: vLLM, in the pinned vLLM trainer image (images.trainer, when it
    holds the pinned SGLang image, the CRD's default, means the pinned vLLM image); vllm supports
    blockwise-fp8 and bf16, not channel-fp8."""

    quantization: Quantization = "blockwise-fp8"
    """Rollout weight precision. blockwise-fp8: 128x128-block FP8 re-quantized by the trainer at every
    weight sync (verl's path, either engine). channel-fp8: per-channel FP8 quantized inside SGLang (its
    flash_rl loader; SGLang only). bf16: no quantization, the baseline."""

    kv_cache: KvCache = "auto"
    """Rollout KV-cache precision, passed to the engine as its own argument (SGLang's and vLLM's
    kv_cache_dtype, through verl's actor_rollout_ref.rollout.engine_kwargs). auto: the engine's default
    (the model's dtype). bf16: BF16 explicitly. fp8-e4m3, fp8-e5m2: FP8 keys and values (needs FP8 tensor
    cores, like the FP8 weight precisions). verl 0.9.1 loads no calibrated KV-cache scales at weight syncs
    (docs/api.md); pair an FP8 KV cache with correction.guard."""

    samples_per_prompt: int = Field(default=16, ge=1, le=1024)
    """Responses sampled per prompt (the GRPO/DAPO group size; verl's actor_rollout_ref.rollout.n). Not
    called n: YAML 1.1, which kubectl and Helm read, turns a bare n key into the boolean false."""

    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    """Tensor parallelism of each rollout server. Must divide resources.gpusPerNode."""

    gpu_memory_utilization: float = Field(default=0.70, gt=0.0, le=0.95)
    """Fraction of GPU memory the rollout engine reserves for weights and KV cache (SGLang's
    mem_fraction_static, vLLM's gpu_memory_utilization)."""

    temperature: float = Field(default=1.0, gt=0.0, le=10.0)
    """Sampling temperature, above 0 (verl samples validation too and refuses 0). Keep 1.0: the
    trainer's log-probs only model temperature, so other values bias the importance ratios TIS
    corrects with."""

    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling. Keep 1.0 for unbiased TIS ratios."""

    top_k: int = Field(default=-1, ge=-1, le=INT32_MAX)
    """Top-k sampling; -1 disables it. Keep -1 for unbiased TIS ratios."""

    pool: RolloutPoolSpec | None = None
    """With training.mode separate-async (and only then): the GPU node pool of the standalone rollout
    servers, its own KubeRay worker group beside the trainer's (resources)."""


class TisSpec(ApiModel):
    """Truncated importance sampling: weight each token's loss by min(pi_train / pi_rollout, cap)."""

    level: TisLevel = "token"
    """token: one weight per token. sequence: one weight per sequence (product of token ratios).
    off: no weights (rollout log-prob diagnostics are still computed)."""

    cap: float = Field(default=2.0, gt=0.0, le=1000.0)
    """Truncation threshold C: weights above it are clipped to it."""

    batch_normalize: bool = False
    """Divide the weights by their batch mean."""


GuardAction = Literal["Alert", "Suspend", "FallbackToBF16"]


class MismatchGuardSpec(ApiModel):
    """Watch the rollout/trainer mismatch while the job runs and act when it drifts.

    The operator compares the newest values in status.metrics with these thresholds; a metric out of
    bounds for consecutiveSteps training steps sets the RolloutMismatch condition (reason
    MismatchDrift), emits a Warning Event naming the metric, its value and the threshold, and with
    action Suspend suspends the job (its checkpoints stay; set lifecycle.suspend back to false to
    resume). The defaults are the warning levels of verl's rollout-correction docs
    (docs/algo/rollout_corr.md, "Conditional Alerting Based on Metrics": abs(kl) > 0.1 and an
    effective sample size below 0.3). Unset a threshold (null) to stop checking it."""

    max_kl: float | None = Field(default=0.1, ge=0.0, le=100.0, alias="maxKL")
    """Upper bound of |rollout_corr/kl|, the mean log-ratio between the rollout and trainer policies.
    verl's docs warn above 0.1."""

    min_effective_sample_size: float | None = Field(default=0.3, ge=0.0, le=1.0)
    """Lower bound of rollout_corr/rollout_is_eff_sample_size, the normalised effective sample size
    of the IS weights (0..1). verl's docs warn below 0.3."""

    max_probs_diff_mean: float | None = Field(default=None, ge=0.0, le=1.0)
    """Upper bound of training/rollout_probs_diff_mean, the mean |p_rollout - p_trainer| per token.
    verl gives no level for it; unset by default."""

    consecutive_steps: int = Field(default=3, ge=1, le=1000)
    """How many consecutive training steps a metric must stay out of bounds before the guard acts
    (one noisy step is not drift)."""

    action: GuardAction = "Alert"
    """Alert: condition and Warning Event only. Suspend: also suspend the job. FallbackToBF16 (FP8
    rollout only, with checkpoints on a claim and resumeMode auto): end the attempt and start the next
    one from the newest checkpoint with BF16 rollout weights and KV cache, once (not counted against
    lifecycle.maxRestarts); the guard then only alerts."""


class CorrectionSpec(ApiModel):
    """How the mismatch between the FP8 rollout policy and the bf16 trainer policy is corrected."""

    tis: TisSpec = Field(default_factory=TisSpec)
    """Truncated importance sampling settings."""

    guard: MismatchGuardSpec = Field(default_factory=MismatchGuardSpec)
    """Thresholds on the rollout/trainer mismatch that the operator watches while the job runs."""


class OverlongBufferSpec(ApiModel):
    """DAPO's soft overlong punishment: a linear penalty over the last `length` response tokens."""

    enabled: bool = True
    """Apply the penalty."""

    length: int = Field(default=4096, ge=1, le=MAX_COUNT)
    """Buffer length in tokens (must not exceed training.maxResponseLength)."""

    penalty_factor: float = Field(default=1.0, ge=0.0)
    """Penalty at the maximum response length."""


class DynamicSamplingSpec(ApiModel):
    """DAPO's dynamic sampling: drop groups whose samples all score the same, generate until full."""

    enabled: bool = True
    """Filter zero-variance groups."""

    metric: str = Field(default="acc", min_length=1, max_length=64)
    """Per-sample metric compared across a group (``acc`` or ``reward``)."""


class AsyncSpec(ApiModel):
    """Settings of the asynchronous modes (training.mode colocate-async or separate-async; refused with
    sync). Defaults are verl 0.9.1's (``trainer.v1`` in ``ppo_trainer.yaml``). The fields marked
    separate-async only are refused with colocate-async; omitted, they take verl's default."""

    warmup_batches: float = Field(default=1.0, ge=0.0, le=1024.0)
    """Prompt batches generated ahead before the first training step
    (``trainer.v1.<mode>.num_warmup_batches``); fractions round down to whole generation chunks."""

    max_off_policy_versions: int | None = Field(default=8, ge=1, le=1_000_000)
    """Most model versions one trajectory may span (``trainer.v1.sampler.max_off_policy_threshold``);
    null lets staleness be bounded only by rollout concurrency."""

    off_policy_strategy: Literal["drop", "wait"] = "drop"
    """What happens to a trajectory past maxOffPolicyVersions
    (``trainer.v1.sampler.max_off_policy_strategy``): drop it, or wait for it to finish (dropless)."""

    parameter_sync_step: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    """separate-async only: optimiser updates (mini batches) between weight syncs to the rollout pool
    (``trainer.v1.separate_async.parameter_sync_step``, verl's default 4). verl requires
    training.promptBatchSize == parameterSyncStep x training.miniBatchSize."""

    lend_idle_trainer_gpus: bool | None = None
    """separate-async only: let the trainer's GPUs serve rollout while they wait for samples
    (``trainer.v1.separate_async.hybrid_rollout.enable_switch``; verl's default false). False renders
    ``actor_rollout_ref.hybrid_engine: false``: rollout runs only on the rollout pool."""

    checkpoint_engine: CheckpointEngine | None = None
    """separate-async only: how weights reach the rollout pool
    (``actor_rollout_ref.rollout.checkpoint_engine.backend``; nccl when omitted). verl refuses naive in
    this mode."""


class TrainingSpec(ApiModel):
    """The RL algorithm, its batch geometry and optimiser."""

    recipe: Literal["dapo"] = "dapo"
    """Training recipe. DAPO: clip-higher, dynamic sampling, token-mean loss, overlong shaping, GRPO
    advantages and no KL terms."""

    mode: TrainingMode = "sync"
    """How rollout and training share time and GPUs (verl's V1 trainer, trainer.v1.trainer_mode). sync:
    alternate on the same GPUs (the origin recipe). colocate-async: overlap them on the same GPUs, with
    bounded staleness. separate-async: rollout on its own pool (rollout.pool), weights synced every
    async.parameterSyncStep updates. See docs/api.md, "Training modes"."""

    async_: AsyncSpec | None = Field(default=None, alias="async")
    """Settings of the asynchronous modes; only with mode colocate-async or separate-async."""

    prompt_batch_size: int = Field(default=32, ge=1, le=MAX_COUNT)
    """Prompts per training step (data.train_batch_size)."""

    generation_batch_size: int = Field(default=96, ge=1, le=MAX_COUNT)
    """Prompts generated concurrently while dynamic sampling fills a step; a whole multiple of
    promptBatchSize. verl 0.9.1 reads it as algorithm.filter_groups.max_inflight_gen_batches =
    generationBatchSize / promptBatchSize (prompt batches in flight); unused without dynamic sampling."""

    mini_batch_size: int = Field(default=32, ge=1, le=MAX_COUNT)
    """Prompts per optimiser update (ppo_mini_batch_size); must divide promptBatchSize."""

    max_prompt_length: int = Field(default=2048, ge=1, le=1_048_576)
    """Maximum prompt tokens."""

    max_response_length: int = Field(default=20480, ge=1, le=1_048_576)
    """Maximum response tokens."""

    total_steps: int = Field(default=150, ge=1, le=INT32_MAX)
    """Training steps to run."""

    learning_rate: float = Field(default=1e-6, gt=0.0, le=1.0)
    """Actor learning rate."""

    warmup_steps: int = Field(default=10, ge=0, le=INT32_MAX)
    """Linear learning-rate warmup steps."""

    weight_decay: float = Field(default=0.1, ge=0.0)
    """AdamW weight decay."""

    grad_clip: float = Field(default=1.0, gt=0.0)
    """Gradient norm clip."""

    clip_ratio_low: float = Field(default=0.2, ge=0.0, le=1.0)
    """PPO clip lower bound epsilon_low."""

    clip_ratio_high: float = Field(default=0.28, ge=0.0, le=10.0)
    """PPO clip upper bound epsilon_high (DAPO clip-higher)."""

    clip_ratio_c: float = Field(default=10.0, gt=1.0)
    """Dual-clip constant for negative advantages."""

    ulysses_sequence_parallel_size: int = Field(default=2, ge=1, le=64)
    """Ulysses sequence parallelism for actor and reference. Must divide resources.gpusPerNode."""

    overlong_buffer: OverlongBufferSpec = Field(default_factory=OverlongBufferSpec)
    """Soft overlong punishment."""

    dynamic_sampling: DynamicSamplingSpec = Field(default_factory=DynamicSamplingSpec)
    """Dynamic sampling (group filtering)."""

    validate_before_train: bool = True
    """Run validation before the first step."""

    test_frequency: int = Field(default=5, ge=-1, le=INT32_MAX)
    """Validate every N steps; -1 never."""

    project_name: str = Field(default="DAPO-1", min_length=1, max_length=128)
    """Experiment tracker project."""

    experiment_name: str | None = Field(default=None, max_length=128)
    """Experiment tracker run name; defaults to the FlashRLJob's name."""

    loggers: list[Logger] = Field(
        default_factory=lambda: list[Logger](["console"]), min_length=1, max_length=4
    )
    """Where verl reports metrics. wandb needs WANDB_API_KEY (see secretRefs)."""

    seed: int = Field(default=0, ge=0, le=INT32_MAX)
    """Seed of the training data order (verl's data.seed), the actor's mini-batch shuffling
    (actor.data_loader_seed) and the rollout (rollout.seed). Runs with one seed see the same prompts in
    the same order; a FlashRLExperiment gives replica k of every variant seed + k."""


#: Node label set by GPU Feature Discovery, matched against resources.gpuProduct. The node selector
#: may not set it a second time (it could only disagree).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]


class Toleration(ApiModel):
    """A taint the GPU worker pods tolerate (Kubernetes' toleration, same fields and meaning)."""

    key: str | None = Field(default=None, max_length=317, pattern=LABEL_KEY_PATTERN)
    """Taint key; omitted with operator Exists to tolerate every taint."""

    operator: Literal["Equal", "Exists"] = "Equal"
    """Equal matches key and value; Exists matches the key (any value)."""

    value: LabelValue | None = None
    """Taint value for operator Equal."""

    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; omitted matches every effect."""

    toleration_seconds: int | None = Field(default=None, ge=0, le=INT32_MAX)
    """With effect NoExecute: how long the pod stays bound after the taint appears."""


def _label_keys(selector: dict[str, str]) -> dict[str, str]:
    """Node selector keys must be label keys. Checked by the models, not in CEL: the API server
    cannot bound the cost of a regular expression over map keys (they have no length limit)."""
    bad = [key for key in selector if LABEL_KEY_RE.fullmatch(key) is None]
    if bad:
        raise ValueError(
            f"{bad[0]!r} is not a label key (an optional DNS subdomain prefix and '/', then a name of "
            "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    return selector


class HeadSpec(ApiModel):
    """The CPU-only Ray head pod (runs the GCS, the dashboard and the verl driver)."""

    cpu: Quantity = "8"
    """CPU request and limit."""

    memory: Quantity = "32Gi"
    """Memory request and limit."""

    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=32)
    """Labels the head's node must have (e.g. a CPU pool); none by default."""

    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Taints of that node the head pod tolerates; none by default."""

    _node_selector_keys = field_validator("node_selector")(_label_keys)


class RdmaSpec(ApiModel):
    """Optional RDMA devices for NCCL between nodes (InfiniBand or RoCE); requesting them adds the IPC_LOCK
    capability to the worker pods."""

    resource_name: str = Field(min_length=1, max_length=317, pattern=EXTENDED_RESOURCE_PATTERN)
    """Extended resource name, e.g. rdma/hca_shared_devices_a, nvidia.com/hostdev or
    vpc.amazonaws.com/efa; not nvidia.com/gpu nor any name KubeRay counts as GPUs."""

    count: int = Field(default=1, ge=1, le=64)
    """Devices per worker pod."""


class ResourcesSpec(ApiModel):
    """The GPU node pool the Ray workers run on."""

    nodes: int = Field(default=1, ge=1, le=512)
    """Number of GPU worker pods (one per node)."""

    gpus_per_node: int = Field(default=8, ge=1, le=16)
    """GPUs per worker pod (nvidia.com/gpu limit)."""

    gpu_product: str = Field(
        default="NVIDIA-H20",
        min_length=1,
        max_length=63,
        pattern=NONEMPTY_LABEL_VALUE_PATTERN,
    )
    """Node-pool match on the nvidia.com/gpu.product label set by GPU Feature Discovery."""

    cpu: Quantity = "64"
    """CPU request and limit per worker pod."""

    memory: Quantity = "512Gi"
    """Memory request and limit per worker pod."""

    shared_memory: Quantity = "64Gi"
    """Size of the memory-backed /dev/shm (NCCL, Ray object store); counts against node RAM."""

    rdma: RdmaSpec | None = None
    """Optional RDMA devices; adds the IPC_LOCK capability."""

    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=32)
    """Labels the GPU nodes must also have (e.g. a node pool or zone), besides the
    nvidia.com/gpu.product label that gpuProduct sets."""

    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Taints of the GPU nodes the worker pods tolerate, besides any nvidia.com/gpu taint (always
    tolerated), e.g. a dedicated=training:NoSchedule taint on a reserved pool."""

    head: HeadSpec = Field(default_factory=HeadSpec)
    """The Ray head pod."""

    _node_selector_keys = field_validator("node_selector")(_label_keys)


#: The GPU product a rollout pool runs on unless it names another: H20s are inference-shaped (much memory
#: bandwidth, little compute) and have FP8 tensor cores.
DEFAULT_ROLLOUT_GPU_PRODUCT = "NVIDIA-H20"


class RolloutPoolSpec(ApiModel):
    """The standalone rollout servers' node pool (training.mode separate-async): one KubeRay worker group
    of its own. CPU, memory, shared memory and RDMA per pod are those of resources."""

    nodes: int = Field(default=1, ge=1, le=512)
    """Number of rollout worker pods (one per node); verl's actor_rollout_ref.rollout.nnodes."""

    gpus_per_node: int = Field(default=8, ge=1, le=16)
    """GPUs per rollout worker pod; verl's actor_rollout_ref.rollout.n_gpus_per_node."""

    gpu_product: str = Field(
        default=DEFAULT_ROLLOUT_GPU_PRODUCT,
        min_length=1,
        max_length=63,
        pattern=NONEMPTY_LABEL_VALUE_PATTERN,
    )
    """Node-pool match on the nvidia.com/gpu.product label. verl 0.9.1 cannot pin its roles to GPU
    products (its placement groups ask Ray only for GPUs), so it must equal resources.gpuProduct."""

    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=32)
    """Labels the rollout nodes must also have, besides nvidia.com/gpu.product."""

    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Taints of the rollout nodes the pods tolerate, besides any nvidia.com/gpu taint."""

    _node_selector_keys = field_validator("node_selector")(_label_keys)


RolloutSpec.model_rebuild()


class ImagesSpec(ApiModel):
    """Container images. The default is the pinned trainer image of the rollout engine (verl + the engine +
    the launcher)."""

    trainer: str = Field(default_factory=default_trainer_image, min_length=1, max_length=512)
    """Image for the Ray head and GPU workers. The default is the pinned SGLang trainer image; with
    rollout.engine vllm that value means the pinned vLLM trainer image."""

    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """Image pull policy."""

    pull_secrets: list[DnsSubdomain] = Field(default_factory=list, max_length=16)
    """Image pull Secret names."""

    run_as_user: int = Field(default=DEFAULT_RUN_AS_USER, ge=0, le=INT32_MAX)
    """User (and group) id the Ray containers run as: 1000 is the pinned trainer image's own non-root
    user, and volumes are made writable to its group (fsGroup). 0 keeps the image's own user, for images
    that need root (the pods then meet the baseline Pod Security level, not restricted)."""


class VolumeSpec(ApiModel):
    """A PersistentVolumeClaim mounted into every Ray pod (an emptyDir when no claim is given)."""

    claim_name: DnsSubdomain | None = None
    """PersistentVolumeClaim to mount; omit for a pod-local emptyDir."""

    mount_path: str = Field(pattern=MOUNT_PATH_PATTERN, max_length=512)
    """Where it appears inside the pods: an absolute path, unique among the volumes, not at or under
    /dev, /etc, /proc or /sys."""

    read_only: bool = False
    """Mount read-only."""


#: The claims a job mounts when it names none: the ones examples/storage.yaml creates.
DEFAULT_CLAIMS: dict[str, str] = {
    "modelCache": "hf-cache",
    "data": "rl-data",
    "checkpoints": "rl-checkpoints",
}


class StorageSpec(ApiModel):
    """Volumes for the model cache, the data sets and checkpoints. Omitted, each is the claim of the same
    role in examples/storage.yaml (hf-cache, rl-data, rl-checkpoints); a volume given without claimName
    is a pod-local emptyDir."""

    model_cache: VolumeSpec = Field(
        default_factory=lambda: VolumeSpec(claim_name=DEFAULT_CLAIMS["modelCache"], mount_path="/models")
    )
    """Model cache (HF_HOME): Hugging Face models are staged here; share it across jobs to download each
    model once."""

    data: VolumeSpec = Field(
        default_factory=lambda: VolumeSpec(
            claim_name=DEFAULT_CLAIMS["data"], mount_path="/data", read_only=True
        )
    )
    """Training and validation data; Hugging Face data sets are staged here (the staging Job mounts it
    writable, whatever readOnly says for the Ray pods)."""

    checkpoints: VolumeSpec = Field(
        default_factory=lambda: VolumeSpec(
            claim_name=DEFAULT_CLAIMS["checkpoints"], mount_path="/checkpoints"
        )
    )
    """Checkpoints (trainer.default_local_dir); a claim is needed for a retry to resume (see checkpoint)."""


#: Default checkpoint interval in steps. At the recipe's pace (on the order of 15 minutes per step on
#: 8 H20) and a Qwen3-8B FSDP checkpoint of ~100 GB (fp32 weights and Adam moments, 1-3 minutes to a
#: network volume), 5 steps cost about 2-4 % of the run in saving and bound the work a failure loses
#: to 5 steps; docs/api.md has the arithmetic.
DEFAULT_CHECKPOINT_INTERVAL = 5


class CheckpointSpec(ApiModel):
    """When verl saves a resumable checkpoint (to storage.checkpoints), how many it keeps, and whether a
    retry resumes from the newest one. The origin recipe never saved (save_freq -1), so a failure lost
    the whole run; here checkpoints are on by default."""

    interval: int = Field(default=DEFAULT_CHECKPOINT_INTERVAL, ge=1, le=1_000_000)
    """Save every this many training steps (trainer.save_freq), and always after the last step. A failure
    loses at most this many steps."""

    keep: int = Field(default=2, ge=1, le=1000)
    """Newest checkpoints kept on the volume; older ones are deleted (trainer.max_actor_ckpt_to_keep).
    One Qwen3-8B checkpoint takes about 100 GB."""

    hugging_face_model: bool = False
    """Also save the actor in Hugging Face format in each checkpoint (save_contents hf_model), for
    evaluation or serving without conversion. The resumable state (model and optimizer shards, scheduler
    and RNG state) is always saved: retries resume from it."""

    resume_mode: Literal["auto", "disable"] = "auto"
    """auto: resume from the newest checkpoint on the checkpoint volume when one exists (every retry
    does). disable: always start from step 0."""


class LifecycleSpec(ApiModel):
    """Suspension, deadlines, retention and retries."""

    suspend: bool = False
    """Suspend the job: the Ray cluster is deleted; resuming creates a new one."""

    ttl_seconds_after_finished: int = Field(default=3600, ge=0, le=INT32_MAX)
    """Keep the finished job's Ray head this long (its logs, the dashboard), then delete the cluster.
    The GPU workers go the moment the Ray job ends (a suspended or Kueue-queued job: the whole
    cluster stays this long)."""

    active_deadline_seconds: int | None = Field(default=None, ge=1, le=INT32_MAX)
    """Fail the job after this many seconds in total."""

    startup_timeout_seconds: int = Field(default=1800, ge=1, le=INT32_MAX)
    """Fail if the Ray cluster is not running the job within this time (image pulls, scheduling)."""

    gpu_wait_timeout_seconds: int = Field(default=600, ge=1, le=INT32_MAX)
    """Inside the job: how long to wait for every GPU to join Ray before verl starts."""

    max_restarts: int = Field(default=0, ge=0, le=100)
    """Retries after a failure, each a new Ray cluster (an attempt) resuming from the newest checkpoint.
    A retry needs progress: an attempt that saved no newer checkpoint than the one it resumed from
    (after one more try) ends the job with reason NoProgress. Some failures are never retried
    (InvalidConfig, CheckpointUnwritable, StoppedEarly, the deadline)."""


class SchedulingSpec(ApiModel):
    """Queueing and priority."""

    queue_name: DnsLabel | None = None
    """Kueue LocalQueue (at most 63 characters: it becomes a label value); the job waits, suspended,
    until Kueue admits it."""

    priority_class_name: DnsSubdomain | None = None
    """PriorityClass for the Ray pods."""


class EnvVar(ApiModel):
    """An environment variable set in every Ray container."""

    name: str = Field(min_length=1, max_length=256, pattern=ENV_NAME_PATTERN)
    """Variable name, e.g. NCCL_IB_HCA."""

    value: str = Field(default="", max_length=1024)
    """Literal value. Credentials belong in a Secret listed in secretRefs, not here."""


Override = Annotated[str, Field(min_length=3, max_length=MAX_OVERRIDE_LENGTH, pattern=OVERRIDE_PATTERN)]


class FlashRLJobSpec(ApiModel):
    """Desired state of a FlashRLJob: an FP8-rollout RL post-training run on a KubeRay cluster."""

    model: ModelSpec = Field(default_factory=ModelSpec)
    """Policy model."""

    data: DataSpec = Field(default_factory=DataSpec)
    """Data sets."""

    validation: ValidationSpec = Field(default_factory=ValidationSpec)
    """Validation sampling."""

    hugging_face: HuggingFaceSpec = Field(default_factory=HuggingFaceSpec)
    """Hub access for staging hf:// sources (token Secret)."""

    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """Rollout engine and precision."""

    correction: CorrectionSpec = Field(default_factory=CorrectionSpec)
    """Off-policy correction for the rollout/trainer mismatch."""

    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """Algorithm, batches and optimiser."""

    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """GPU node pool and pod sizes."""

    images: ImagesSpec = Field(default_factory=ImagesSpec)
    """Container images."""

    storage: StorageSpec = Field(default_factory=StorageSpec)
    """Volumes."""

    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    """Checkpoint interval, retention and resume."""

    lifecycle: LifecycleSpec = Field(default_factory=LifecycleSpec)
    """Suspension, deadlines and retries."""

    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    """Queueing and priority."""

    secret_refs: list[DnsSubdomain] = Field(default_factory=list, max_length=16)
    """Secrets exposed as environment variables in every Ray pod (e.g. WANDB_API_KEY). Required: each
    must exist in the job's namespace, or the Ray pods cannot start (ContainerConfigError); flashrl
    preflight checks them. The optional Hugging Face token is huggingFace.tokenSecret, not listed here."""

    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Extra environment variables for every Ray container (head and GPU workers), e.g. NCCL_IB_HCA and
    NCCL_SOCKET_IFNAME for RDMA, or NCCL_DEBUG=INFO. They take precedence over the engine defaults (HF_HOME,
    NCCL_DEBUG, ...) and over secretRefs; GPU visibility, RAY_ADDRESS and FLASHRL_* are reserved, and so
    is every variable KubeRay v1.7.0 refuses or sets in Ray containers (RAY_CLUSTER_NAME, RAY_PORT, ...)."""

    dry_run: bool = False
    """Do everything up to starting verl (compose its config, bring up the Ray cluster, wait for every
    GPU to join), then finish without training: a smoke test of the node pool, images and config."""

    overrides: list[Override] = Field(default_factory=list, max_length=MAX_OVERRIDES)
    """Extra verl Hydra overrides (key=value), applied last; checked against the pinned verl config.
    Values are printable ASCII; interpolations (${...}) are refused."""

    @model_validator(mode="after")
    def _engine_image(self) -> FlashRLJobSpec:
        """The pinned image of the job's engine where the spec holds the pinned SGLang image: the CRD
        defaults ``images.trainer`` to that one (a schema default cannot depend on another field), so
        with ``rollout.engine: vllm`` it means "the pinned image", which for vLLM is the vLLM one."""
        if self.rollout.engine != "sglang" and self.images.trainer == default_trainer_image():
            images = self.images.model_copy(update={"trainer": default_trainer_image(self.rollout.engine)})
            object.__setattr__(self, "images", images)
        return self

    @field_validator("env")
    @classmethod
    def _env_names_unique(cls, env: list[EnvVar]) -> list[EnvVar]:
        # The CRD declares env a list-map keyed by name, so the API server refuses duplicates too.
        seen: set[str] = set()
        for var in env:
            if var.name in seen:
                raise ValueError(f"duplicate variable {var.name!r} (each name may appear once)")
            seen.add(var.name)
        return env
