"""FlashRLJob spec -> the exact verl command line (pure; no I/O).

The target is the pinned verl (``images/pins.yaml``, 0.9.x) and its own entry point,
``python3 -m verl.trainer.main_ppo`` with the ``ppo_trainer`` config: its v1 trainer implements
DAPO's dynamic sampling (``algorithm.filter_groups``) and the ``dapo`` reward manager implements the
overlong penalty, so no separate recipe checkout is needed.

Every key written here exists in that config (a test composes the list against the installed verl
package and fails on any unknown key). Keys verl removed (``rollout_token_veto_threshold``,
``use_policy_gradient``, ``reward_model.overlong_buffer.*``, ``tis_imp_ratio_cap`` ...) never appear.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, get_args

from flashrl_api import FlashRLJob, FlashRLJobSpec
from flashrl_api.precision import ENGINE_DEFAULT_KV_CACHE, KV_CACHE_ARGUMENTS
from flashrl_api.rules import sync_step
from flashrl_api.spec import VERL_TRAINER_MODES, AsyncSpec, RolloutSpec
from flashrl_api.staging import data_location, model_location
from flashrl_jobs.contract import VALIDATION_DIR
from flashrl_jobs.override_rules import parsed_override_value, unsafe_override_problems

ENTRY_MODULE: Final = "verl.trainer.main_ppo"
#: verl's JSONL logger (``verl/utils/tracking.py`` ``FileLogger``), on in every job.
FILE_LOGGER: Final = "file"
CONFIG_NAME: Final = "ppo_trainer"

#: The checkpoint engine of a separate-async job that names none: verl's default ``naive`` is refused
#: by its own separate-async trainer.
DEFAULT_SEPARATE_CHECKPOINT_ENGINE: Final = "nccl"

Value = str | int | float | bool | None | list[str]

_PLAIN = re.compile(r"^[A-Za-z0-9_./:\-@+]+$")


def format_value(value: Value) -> str:
    """Render a Python value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if _PLAIN.fullmatch(value) and value.lower() not in {"null", "true", "false"}:
        return value
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def override_key(override: str) -> str:
    """The dotted key of a Hydra override, without its ``+``/``++``/``~`` prefix."""
    key = override.split("=", 1)[0]
    return key.strip().lstrip("+~").strip()


def checkpoint_dir(job: FlashRLJob) -> str:
    """verl's ``trainer.default_local_dir``: ``global_step_<n>/`` and the tracker file live here."""
    t = job.spec.training
    experiment = t.experiment_name or job.name
    return f"{job.spec.storage.checkpoints.mount_path.rstrip('/')}/{t.project_name}/{experiment}"


def validation_dir(job: FlashRLJob, attempt: int | None = None) -> str:
    """verl's ``trainer.validation_data_dir``: ``<checkpoint dir>/validation``, and ``attempt-<k>`` under
    it once the launcher knows the attempt (verl rewrites ``<step>.jsonl`` with ``"w"``, so a retry that
    repeats a validation would otherwise replace the earlier attempt's samples)."""
    base = f"{checkpoint_dir(job)}/{VALIDATION_DIR}"
    return base if attempt is None else f"{base}/attempt-{attempt}"


#: What a resumable FSDP checkpoint holds in verl (``utils/checkpoint/checkpoint_manager.py``): sharded
#: model and optimizer state, and ``extra`` (lr scheduler and RNG state).
RESUMABLE_CONTENTS: Final = ("model", "optimizer", "extra")


@dataclass(frozen=True)
class VerlKey:
    """One verl key the spec generates, and all that is known about it.

    The generated overrides (in row order), :data:`PROTECTED_KEYS` and :data:`FIELD_OF_KEY` are read
    off these rows, so a key cannot be written without a row, nor protected or attributed in a table
    that lags behind what is written. A spec field that reaches verl is one model field and one row.
    """

    key: str
    #: The value, from the whole job (the checkpoint directory needs its name).
    value: Callable[[FlashRLJob], Value]
    #: The FlashRLJob field the value comes from (relative to ``spec``), so a problem verl finds with it
    #: is reported where the user set it; None for a value the launcher fixes (only an override changes it).
    field: str | None = None
    #: A key that follows from a spec field: a user override would silently desynchronise the pods from
    #: verl's view of it, so ``spec.overrides`` may not set it.
    protected: bool = False
    #: The field that owns a protected key whose value comes from no field (a fixed value a field needs).
    owner: str | None = None
    #: Why the field owns it, said in the refusal.
    why: str = ""
    #: Written only for specs that satisfy this (a quantization, a training mode); always when None.
    when: Callable[[FlashRLJobSpec], bool] | None = None
    #: Written ``+key=...``: the key is absent from verl's config and Hydra must add it.
    append: bool = False

    @property
    def owned_by(self) -> str:
        """The refusal's ``set by ...`` text of a protected key."""
        return f"spec.{self.owner or self.field}" + (f" ({self.why})" if self.why else "")

    def applies(self, spec: FlashRLJobSpec) -> bool:
        """Whether this spec writes the key (a mode's keys are absent from another mode's command)."""
        return self.when is None or self.when(spec)


def _const(value: Value) -> Callable[[FlashRLJob], Value]:
    return lambda _job: value


def _tokens_per_gpu(job: FlashRLJob) -> int:
    t = job.spec.training
    return t.max_prompt_length + t.max_response_length


def _filtering(spec: FlashRLJobSpec) -> bool:
    return spec.training.dynamic_sampling.enabled


def _in_mode(*modes: str) -> Callable[[FlashRLJobSpec], bool]:
    return lambda spec: spec.training.mode in modes


def _async(job: FlashRLJob) -> AsyncSpec | None:
    return job.spec.training.async_


def _lend(job: FlashRLJob) -> bool:
    a = _async(job)
    return bool(a is not None and a.lend_idle_trainer_gpus)


def _quantization(quantization: str, key: str, value: str, append: bool = False) -> VerlKey:
    """A key only a ``spec.rollout.quantization`` writes (and owns)."""
    return VerlKey(
        key,
        _const(value),
        "rollout.quantization",
        protected=True,
        when=lambda spec: spec.rollout.quantization == quantization,
        append=append,
    )


#: The engines ``spec.rollout.engine`` accepts: a row per engine the spec can name (the KV-cache table
#: in flashrl_api.precision may know more).
ENGINES: Final = frozenset(get_args(RolloutSpec.model_fields["engine"].annotation))


def _kv_cache_key(engine: str) -> VerlKey:
    """``engine_kwargs.<engine>.<argument>`` for ``spec.rollout.kvCache`` (absent from verl's config:
    appended), written for specs on that engine whose KV cache is not the engine's default."""
    argument = KV_CACHE_ARGUMENTS[engine]

    def value(job: FlashRLJob) -> Value:
        return argument.values[job.spec.rollout.kv_cache]

    return VerlKey(
        f"actor_rollout_ref.rollout.engine_kwargs.{engine}.{argument.name}",
        value,
        "rollout.kvCache",
        protected=True,
        when=lambda spec: (
            str(spec.rollout.engine) == engine and spec.rollout.kv_cache != ENGINE_DEFAULT_KV_CACHE
        ),
        append=True,
    )


#: The training modes that run verl's asynchronous V1 trainers, and the one with a rollout pool.
_ASYNC_MODES: Final = ("colocate-async", "separate-async")
_SEPARATE: Final = ("separate-async",)


def _mode_key(modes: tuple[str, ...], key: str, value: Callable[[FlashRLJob], Value], field: str) -> VerlKey:
    """A key only these training modes write; its typed field owns it (and the rules check it)."""
    return VerlKey(key, value, field, protected=True, when=_in_mode(*modes))


_ACTOR = "actor_rollout_ref.actor."
_REF = "actor_rollout_ref.ref."
_MODEL = "actor_rollout_ref.model."
_ROLLOUT = "actor_rollout_ref.rollout."
_OVERLONG = "reward.reward_kwargs.overlong_buffer_cfg."
_FILTER = "algorithm.filter_groups."
_CORRECTION = "algorithm.rollout_correction."

_TRAINING: Final = (
    VerlKey("algorithm.adv_estimator", _const("grpo")),
    VerlKey("algorithm.use_kl_in_reward", _const(False)),
    VerlKey("algorithm.kl_ctrl.kl_coef", _const(0.0)),
    # DAPO's group filtering, in the keys verl 0.9.1's V1 trainer actually reads. With filtering on,
    # the V1 trainer forces ``data.gen_batch_size`` to 1 (it refills one prompt at a time) and ignores
    # ``algorithm.filter_groups.max_num_gen_batches`` (``verl/trainer/ppo/v1/trainer_base.py``:
    # ``_init_dataloader``'s ``requires_exact_refill`` block and ``_resolve_filter_groups_metric``);
    # generation concurrency is ``max_inflight_gen_batches``, in train-batch units
    # (``verl/trainer/ppo/v1/replay_buffer.py``). So neither of the first two is rendered, and
    # generationBatchSize / promptBatchSize becomes the third. Without filtering the V1 trainer reads
    # none of them but ``enable``.
    VerlKey(
        _FILTER + "enable",
        lambda j: j.spec.training.dynamic_sampling.enabled,
        "training.dynamicSampling.enabled",
    ),
    VerlKey(
        _FILTER + "metric",
        lambda j: j.spec.training.dynamic_sampling.metric,
        "training.dynamicSampling.metric",
        when=_filtering,
    ),
    # Read only by the synchronous replay buffer; the asynchronous modes bound generation by
    # staleness (training.async) instead.
    VerlKey(
        _FILTER + "max_inflight_gen_batches",
        lambda j: j.spec.training.generation_batch_size // j.spec.training.prompt_batch_size,
        "training.generationBatchSize",
        when=lambda spec: _filtering(spec) and spec.training.mode == "sync",
    ),
    VerlKey("data.train_files", lambda j: data_location(j.spec, j.spec.data.train), "data.train"),
    VerlKey("data.val_files", lambda j: data_location(j.spec, j.spec.data.validation), "data.validation"),
    VerlKey("data.prompt_key", lambda j: j.spec.data.prompt_key, "data.promptKey"),
    VerlKey("data.truncation", lambda j: j.spec.data.truncation, "data.truncation"),
    VerlKey(
        "data.max_prompt_length", lambda j: j.spec.training.max_prompt_length, "training.maxPromptLength"
    ),
    VerlKey(
        "data.max_response_length",
        lambda j: j.spec.training.max_response_length,
        "training.maxResponseLength",
    ),
    VerlKey("data.train_batch_size", lambda j: j.spec.training.prompt_batch_size, "training.promptBatchSize"),
    VerlKey("data.val_max_samples", _const(-1)),
    # Unset, verl draws the data order from an unseeded generator: two variants would train on
    # different prompts at the same step, and the report pairs them step by step.
    VerlKey("data.seed", lambda j: j.spec.training.seed, "training.seed"),
    VerlKey(_ACTOR + "data_loader_seed", lambda j: j.spec.training.seed, "training.seed"),
    VerlKey(_MODEL + "path", lambda j: model_location(j.spec), "model.source"),
    VerlKey(_MODEL + "use_remove_padding", _const(True)),
    VerlKey(_MODEL + "enable_gradient_checkpointing", _const(True)),
    VerlKey(_MODEL + "use_fused_kernels", _const(True)),
    VerlKey(
        _ACTOR + "ppo_mini_batch_size", lambda j: j.spec.training.mini_batch_size, "training.miniBatchSize"
    ),
    VerlKey(_ACTOR + "use_dynamic_bsz", _const(True)),
    VerlKey(_ACTOR + "ppo_max_token_len_per_gpu", _tokens_per_gpu, "training.maxResponseLength"),
    VerlKey(_REF + "log_prob_use_dynamic_bsz", _const(True)),
    VerlKey(_REF + "log_prob_max_token_len_per_gpu", _tokens_per_gpu, "training.maxResponseLength"),
    VerlKey(_ROLLOUT + "log_prob_use_dynamic_bsz", _const(True)),
    VerlKey(_ROLLOUT + "log_prob_max_token_len_per_gpu", _tokens_per_gpu, "training.maxResponseLength"),
    VerlKey(_ACTOR + "use_kl_loss", _const(False)),
    VerlKey(_ACTOR + "kl_loss_coef", _const(0.0)),
    VerlKey(
        _ACTOR + "clip_ratio_low", lambda j: float(j.spec.training.clip_ratio_low), "training.clipRatioLow"
    ),
    VerlKey(
        _ACTOR + "clip_ratio_high", lambda j: float(j.spec.training.clip_ratio_high), "training.clipRatioHigh"
    ),
    VerlKey(_ACTOR + "clip_ratio_c", lambda j: float(j.spec.training.clip_ratio_c), "training.clipRatioC"),
    VerlKey(_ACTOR + "optim.lr", lambda j: float(j.spec.training.learning_rate), "training.learningRate"),
    VerlKey(_ACTOR + "optim.lr_warmup_steps", lambda j: j.spec.training.warmup_steps, "training.warmupSteps"),
    VerlKey(
        _ACTOR + "optim.weight_decay", lambda j: float(j.spec.training.weight_decay), "training.weightDecay"
    ),
    VerlKey(_ACTOR + "grad_clip", lambda j: float(j.spec.training.grad_clip), "training.gradClip"),
    VerlKey(_ACTOR + "entropy_coeff", _const(0)),
    VerlKey(_ACTOR + "loss_agg_mode", _const("token-mean")),
    VerlKey(_ACTOR + "fsdp_config.param_offload", _const(True)),
    VerlKey(_ACTOR + "fsdp_config.optimizer_offload", _const(True)),
    VerlKey(_ACTOR + "fsdp_config.fsdp_size", _const(-1)),
    VerlKey(_REF + "fsdp_config.param_offload", _const(True)),
    VerlKey(
        _ACTOR + "ulysses_sequence_parallel_size",
        lambda j: j.spec.training.ulysses_sequence_parallel_size,
        "training.ulyssesSequenceParallelSize",
    ),
    VerlKey(
        _REF + "ulysses_sequence_parallel_size",
        lambda j: j.spec.training.ulysses_sequence_parallel_size,
        "training.ulyssesSequenceParallelSize",
    ),
    VerlKey("reward.reward_manager.name", _const("dapo")),
    VerlKey(
        _OVERLONG + "enable",
        lambda j: j.spec.training.overlong_buffer.enabled,
        "training.overlongBuffer.enabled",
        append=True,
    ),
    VerlKey(
        _OVERLONG + "len",
        lambda j: j.spec.training.overlong_buffer.length,
        "training.overlongBuffer.length",
        append=True,
    ),
    VerlKey(
        _OVERLONG + "penalty_factor",
        lambda j: float(j.spec.training.overlong_buffer.penalty_factor),
        "training.overlongBuffer.penaltyFactor",
        append=True,
    ),
    VerlKey(_OVERLONG + "log", _const(False), append=True),
    VerlKey(
        "reward.reward_kwargs.max_resp_len",
        lambda j: j.spec.training.max_response_length,
        "training.maxResponseLength",
        append=True,
    ),
    # verl's file logger always, next to the user's: the launcher reads its JSONL for status and
    # /metrics (flashrl_jobs.run_metrics); the path comes at launch, per attempt.
    VerlKey(
        "trainer.logger",
        lambda j: [
            *j.spec.training.loggers,
            *([] if FILE_LOGGER in j.spec.training.loggers else [FILE_LOGGER]),
        ],
        "training.loggers",
    ),
    VerlKey("trainer.project_name", lambda j: j.spec.training.project_name, "training.projectName"),
    VerlKey(
        "trainer.experiment_name",
        lambda j: j.spec.training.experiment_name or j.name,
        "training.experimentName",
    ),
    VerlKey("trainer.nnodes", lambda j: j.spec.resources.nodes, "resources.nodes", protected=True),
    VerlKey(
        "trainer.n_gpus_per_node",
        lambda j: j.spec.resources.gpus_per_node,
        "resources.gpusPerNode",
        protected=True,
    ),
    VerlKey(
        "trainer.val_before_train",
        lambda j: j.spec.training.validate_before_train,
        "training.validateBeforeTrain",
    ),
    VerlKey("trainer.test_freq", lambda j: j.spec.training.test_frequency, "training.testFrequency"),
    VerlKey("trainer.total_epochs", _const(1)),
    VerlKey("trainer.total_training_steps", lambda j: j.spec.training.total_steps, "training.totalSteps"),
    VerlKey("trainer.default_local_dir", checkpoint_dir, "storage.checkpoints.mountPath", protected=True),
    # Every validation sample (prompt, response, answer, score, step) kept on the claim, so the report
    # can compare variants problem by problem; the launcher adds the attempt.
    VerlKey(
        "trainer.validation_data_dir",
        validation_dir,
        "storage.checkpoints.mountPath",
        protected=True,
        why="one directory per attempt",
    ),
    # verl saves when save_freq > 0 and (step % save_freq == 0 or it is the last step),
    # trainer/ppo/v1/trainer_base.py fit(). The operator's retries reason about the checkpoint
    # interval: it must be the one verl uses.
    VerlKey("trainer.save_freq", lambda j: j.spec.checkpoint.interval, "checkpoint.interval", protected=True),
    VerlKey(
        "trainer.max_actor_ckpt_to_keep", lambda j: j.spec.checkpoint.keep, "checkpoint.keep", protected=True
    ),
    VerlKey(
        "trainer.resume_mode",
        lambda j: j.spec.checkpoint.resume_mode,
        "checkpoint.resumeMode",
        protected=True,
    ),
    VerlKey(
        _ACTOR + "checkpoint.save_contents",
        lambda j: [*RESUMABLE_CONTENTS, *(["hf_model"] if j.spec.checkpoint.hugging_face_model else [])],
    ),
    # verl's default load_contents is ${.save_contents}; a resume needs exactly the resumable set.
    VerlKey(_ACTOR + "checkpoint.load_contents", _const(list(RESUMABLE_CONTENTS))),
)

_ROLLOUT_KEYS: Final = (
    VerlKey(_ROLLOUT + "name", lambda j: j.spec.rollout.engine, "rollout.engine", protected=True),
    VerlKey(_ROLLOUT + "mode", _const("async")),
    VerlKey(
        _ROLLOUT + "tensor_model_parallel_size",
        lambda j: j.spec.rollout.tensor_parallel_size,
        "rollout.tensorParallelSize",
    ),
    VerlKey(
        _ROLLOUT + "gpu_memory_utilization",
        lambda j: float(j.spec.rollout.gpu_memory_utilization),
        "rollout.gpuMemoryUtilization",
    ),
    VerlKey(_ROLLOUT + "n", lambda j: j.spec.rollout.samples_per_prompt, "rollout.samplesPerPrompt"),
    VerlKey(_ROLLOUT + "temperature", lambda j: float(j.spec.rollout.temperature), "rollout.temperature"),
    VerlKey(_ROLLOUT + "top_p", lambda j: float(j.spec.rollout.top_p), "rollout.topP"),
    VerlKey(_ROLLOUT + "top_k", lambda j: j.spec.rollout.top_k, "rollout.topK"),
    # TIS divides by the rollout's own log-probs: without them no correction is computed.
    VerlKey(
        _ROLLOUT + "calculate_log_probs",
        _const(True),
        protected=True,
        owner="correction.tis",
        why="TIS needs rollout log-probs",
    ),
    VerlKey(
        _ROLLOUT + "val_kwargs.temperature",
        lambda j: float(j.spec.rollout.temperature),
        "rollout.temperature",
    ),
    VerlKey(_ROLLOUT + "val_kwargs.top_p", lambda j: float(j.spec.rollout.top_p), "rollout.topP"),
    VerlKey(_ROLLOUT + "val_kwargs.top_k", lambda j: j.spec.rollout.top_k, "rollout.topK"),
    VerlKey(_ROLLOUT + "val_kwargs.do_sample", _const(True)),
    VerlKey(
        _ROLLOUT + "val_kwargs.n",
        lambda j: j.spec.validation.samples_per_problem,
        "validation.samplesPerProblem",
    ),
    # The sampling seed (verl passes it to vLLM's sampler and sets PYTHONHASHSEED from it; its SGLang
    # server in 0.9.1 does not read it): replicas of an experiment pair on it.
    VerlKey(_ROLLOUT + "seed", lambda j: j.spec.training.seed, "training.seed"),
    # verl's own path: SGLang is told the model is 128x128-block FP8 and the trainer quantizes the bf16
    # weights at every sync. load_format stays "dummy": weights arrive from the trainer.
    _quantization("blockwise-fp8", _ROLLOUT + "quantization", "fp8"),
    # SGLang's flash_rl loader: loads bf16, quantizes per output channel inside SGLang and re-quantizes
    # every update_weights_from_tensor into the same FP8 storage.
    _quantization("channel-fp8", _ROLLOUT + "load_format", "flash_rl"),
    _quantization("channel-fp8", _ROLLOUT + "engine_kwargs.sglang.quantization", "fp8", append=True),
    # The KV-cache precision, in each engine's own argument (flashrl_api.precision.KV_CACHE_ARGUMENTS):
    # one row per engine, written for the spec's engine when kvCache is not the engine's default.
    *(_kv_cache_key(engine) for engine in KV_CACHE_ARGUMENTS if engine in ENGINES),
)

_TIS: Final = (
    # Set explicitly: verl's YAML default (null) and dataclass default ("sequence") disagree.
    VerlKey(
        _CORRECTION + "rollout_is",
        lambda j: None if j.spec.correction.tis.level == "off" else j.spec.correction.tis.level,
        "correction.tis.level",
    ),
    VerlKey(
        _CORRECTION + "rollout_is_threshold", lambda j: float(j.spec.correction.tis.cap), "correction.tis.cap"
    ),
    VerlKey(
        _CORRECTION + "rollout_is_batch_normalize",
        lambda j: j.spec.correction.tis.batch_normalize,
        "correction.tis.batchNormalize",
    ),
    VerlKey(_CORRECTION + "rollout_rs", _const(None)),
    VerlKey(_CORRECTION + "bypass_mode", _const(False)),
)

# verl's V1 trainer keys for ``spec.training.mode``. A sync job renders none of them: verl's defaults
# (``trainer.use_v1: true``, ``trainer_mode: sync``) are the origin recipe, and its command stays as it
# was. Every mode runs the same entry point (``verl.trainer.main_ppo`` picks the trainer class from
# ``trainer.v1.trainer_mode``). The typed fields own these keys (and the rules check them).
_MODE: Final = (
    VerlKey(
        "trainer.use_v1",
        _const(True),
        protected=True,
        owner="training.mode",
        why="verl's V1 trainer runs every mode",
        when=_in_mode(*_ASYNC_MODES),
    ),
    _mode_key(
        _ASYNC_MODES,
        "trainer.v1.trainer_mode",
        lambda j: VERL_TRAINER_MODES[j.spec.training.mode],
        "training.mode",
    ),
    *(
        _mode_key(
            (mode,),
            f"trainer.v1.{VERL_TRAINER_MODES[mode]}.num_warmup_batches",
            lambda j: float(a.warmup_batches) if (a := _async(j)) else 1.0,
            "training.async.warmupBatches",
        )
        for mode in _ASYNC_MODES
    ),
    _mode_key(
        _ASYNC_MODES,
        "trainer.v1.sampler.max_off_policy_threshold",
        lambda j: a.max_off_policy_versions if (a := _async(j)) else 8,
        "training.async.maxOffPolicyVersions",
    ),
    _mode_key(
        _ASYNC_MODES,
        "trainer.v1.sampler.max_off_policy_strategy",
        lambda j: a.off_policy_strategy if (a := _async(j)) else "drop",
        "training.async.offPolicyStrategy",
    ),
    _mode_key(
        _SEPARATE,
        "trainer.v1.separate_async.parameter_sync_step",
        lambda j: sync_step(j.spec),
        "training.async.parameterSyncStep",
    ),
    _mode_key(
        _SEPARATE,
        "trainer.v1.separate_async.hybrid_rollout.enable_switch",
        _lend,
        "training.async.lendIdleTrainerGpus",
    ),
    # Without lending, no rollout replica lives on the trainer's GPUs: the standalone pool serves every
    # rollout (verl's trainer_separate_async.py).
    _mode_key(_SEPARATE, "actor_rollout_ref.hybrid_engine", _lend, "training.async.lendIdleTrainerGpus"),
    _mode_key(
        _SEPARATE,
        _ROLLOUT + "nnodes",
        lambda j: pool.nodes if (pool := j.spec.rollout.pool) else 0,
        "rollout.pool.nodes",
    ),
    _mode_key(
        _SEPARATE,
        _ROLLOUT + "n_gpus_per_node",
        lambda j: pool.gpus_per_node if (pool := j.spec.rollout.pool) else 0,
        "rollout.pool.gpusPerNode",
    ),
    _mode_key(
        _SEPARATE,
        _ROLLOUT + "checkpoint_engine.backend",
        lambda j: (a.checkpoint_engine if (a := _async(j)) else None) or DEFAULT_SEPARATE_CHECKPOINT_ENGINE,
        "training.async.checkpointEngine",
    ),
)

#: Every verl key the spec generates, in the order the overrides are written.
VERL_KEYS: Final[tuple[VerlKey, ...]] = (*_TRAINING, *_ROLLOUT_KEYS, *_TIS, *_MODE)

#: Keys that follow from other spec fields (the rows marked ``protected``): ``spec.overrides`` may not
#: set them. Each names the field that owns it.
PROTECTED_KEYS: Final[Mapping[str, str]] = {row.key: row.owned_by for row in VERL_KEYS if row.protected}

#: The FlashRLJob field each generated verl key comes from (relative to ``spec``), so a problem verl
#: finds with a value can be reported where the user set it. Keys the launcher fixes (remove padding,
#: dynamic batch sizes, ...) are absent: only an override can change them.
FIELD_OF_KEY: Final[Mapping[str, str]] = {row.key: row.field for row in VERL_KEYS if row.field is not None}


def generated_overrides(job: FlashRLJob) -> list[str]:
    """The overrides derived from the typed spec, before the user's ``spec.overrides``: one per row
    that applies to this spec, in row order."""
    return [
        f"{'+' if row.append else ''}{row.key}={format_value(row.value(job))}"
        for row in VERL_KEYS
        if row.applies(job.spec)
    ]


def merge_overrides(generated: Iterable[str], user: Iterable[str]) -> list[str]:
    """Apply user overrides last; one replaces a generated entry with the same key in place."""
    merged = list(generated)
    index = {override_key(o): i for i, o in enumerate(merged)}
    for override in user:
        key = override_key(override)
        if key in index:
            merged[index[key]] = override
        else:
            index[key] = len(merged)
            merged.append(override)
    return merged


def _protected_below(key: str, override: str) -> str | None:
    """Why an override of ``key``, a dict holding protected keys, would change one of them, or None.

    Hydra merges a dict value into the dict it overrides, so ``trainer={total_epochs:2}`` leaves
    ``trainer.nnodes`` alone; a dict that names a protected key, a value that is not a dict (it
    replaces the whole subtree), a deletion (``~trainer``) or a value Hydra cannot parse do not.
    """
    below = [p for p in PROTECTED_KEYS if p.startswith(key + ".")] if key else list(PROTECTED_KEYS)
    if not below:
        return None
    first = below[0]
    owner = PROTECTED_KEYS[first]
    if override.strip().startswith("~"):
        return f"{key}: deleting it deletes {first}, which is set by {owner}; change that field instead"
    parsed, value = parsed_override_value(override)
    if not parsed:
        return f"{key}: holds {first} (set by {owner}) and could not be parsed to check what it replaces"
    for protected in below:
        node: Any = value
        walked = [key] if key else []
        for segment in protected[len(key) + 1 if key else 0 :].split("."):
            if not isinstance(node, dict):
                return (
                    f"{key}: would replace {'.'.join(walked)}, which holds {protected} "
                    f"(set by {PROTECTED_KEYS[protected]}); change that field instead"
                )
            if segment not in node:
                break
            node = node[segment]
            walked.append(segment)
        else:
            return (
                f"{key}: would set {protected}, which is set by {PROTECTED_KEYS[protected]}; "
                "change that field instead"
            )
    return None


def protected_key_problems(user: Iterable[str]) -> list[tuple[int, str]]:
    """``(index, message)`` for each user override that sets a key the spec owns (itself, or through
    a dict above it), names code for Hydra to instantiate, reaches Hydra's own configuration or the
    reserved environment (:mod:`flashrl_jobs.override_rules`)."""
    overrides = list(user)
    unsafe = dict(unsafe_override_problems(overrides))
    problems = []
    for i, override in enumerate(overrides):
        key = override_key(override)
        owner = PROTECTED_KEYS.get(key)
        if i in unsafe:
            problems.append((i, unsafe[i]))
        elif owner is not None:
            problems.append((i, f"{key} is set by {owner}; change that field instead"))
        elif (problem := _protected_below(key, override)) is not None:
            problems.append((i, problem))
    return problems


def verl_overrides(job: FlashRLJob) -> list[str]:
    """Every Hydra override verl will run with, one ``key=value`` string each, in order."""
    return merge_overrides(generated_overrides(job), job.spec.overrides)


def verl_argv(job: FlashRLJob, python: str = "python3") -> list[str]:
    """The full verl command as an argument list (no shell involved)."""
    return [python, "-m", ENTRY_MODULE, *verl_overrides(job)]


#: The name a check key is computed under: a job's name reaches verl only inside paths and labels.
_CHECK_NAME: Final = "checked"


def check_inputs(job: FlashRLJob) -> list[list[str]]:
    """What verl's configuration checks read of ``job``: the overrides the rows generate, then the user's.

    The name is replaced, and so is ``training.experimentName`` (each reaches verl only in the
    checkpoint path and the tracker's names, as a value :func:`format_value` quotes whatever it holds),
    and so is the seed unless an override names a seed: any int32 seed composes alike. An experiment's
    replicas, which differ only in the seed and the ``-r<n>`` of their experiment name, share one check.
    """
    names_seed = any("seed" in override for override in job.spec.overrides)
    training = job.spec.training.model_copy(update={"experiment_name": None})
    if not names_seed:
        training = training.model_copy(update={"seed": 0})
    spec = job.spec.model_copy(update={"training": training})
    canonical = job.model_copy(update={"metadata": {"name": _CHECK_NAME}, "spec": spec})
    return [generated_overrides(canonical), list(job.spec.overrides)]


def check_key(job: FlashRLJob) -> str:
    """A digest of :func:`check_inputs`: jobs with one key get one verdict from verl's checks."""
    wire = json.dumps(check_inputs(job), separators=(",", ":"))
    return hashlib.sha256(wire.encode()).hexdigest()[:32]
