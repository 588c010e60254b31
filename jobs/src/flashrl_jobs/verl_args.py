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

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from flashrl_api import FlashRLJob, FlashRLJobSpec
from flashrl_api.rules import sync_step
from flashrl_api.spec import VERL_TRAINER_MODES
from flashrl_api.staging import data_location, model_location
from flashrl_jobs.contract import VALIDATION_DIR
from flashrl_jobs.override_rules import parsed_override_value, unsafe_override_problems

ENTRY_MODULE: Final = "verl.trainer.main_ppo"
#: verl's JSONL logger (``verl/utils/tracking.py`` ``FileLogger``), on in every job.
FILE_LOGGER: Final = "file"
CONFIG_NAME: Final = "ppo_trainer"

#: Keys that follow from other spec fields; a user override would silently desynchronise the pods
#: from verl's view of them, so ``spec.overrides`` may not set them.
PROTECTED_KEYS: Final[Mapping[str, str]] = {
    "trainer.nnodes": "spec.resources.nodes",
    "trainer.n_gpus_per_node": "spec.resources.gpusPerNode",
    "actor_rollout_ref.rollout.name": "spec.rollout.engine",
    "actor_rollout_ref.rollout.quantization": "spec.rollout.quantization",
    "actor_rollout_ref.rollout.load_format": "spec.rollout.quantization",
    "actor_rollout_ref.rollout.engine_kwargs.sglang.quantization": "spec.rollout.quantization",
    "actor_rollout_ref.rollout.calculate_log_probs": "spec.correction.tis (TIS needs rollout log-probs)",
    "trainer.default_local_dir": "spec.storage.checkpoints.mountPath",
    "trainer.validation_data_dir": "spec.storage.checkpoints.mountPath (one directory per attempt)",
    # The operator's retries reason about the checkpoint interval: it must be the one verl uses.
    "trainer.save_freq": "spec.checkpoint.interval",
    "trainer.max_actor_ckpt_to_keep": "spec.checkpoint.keep",
    "trainer.resume_mode": "spec.checkpoint.resumeMode",
    # The V1 trainer's mode and its settings: the typed fields own them (and the rules check them).
    "trainer.use_v1": "spec.training.mode (verl's V1 trainer runs every mode)",
    "trainer.v1.trainer_mode": "spec.training.mode",
    "trainer.v1.colocate_async.num_warmup_batches": "spec.training.async.warmupBatches",
    "trainer.v1.separate_async.num_warmup_batches": "spec.training.async.warmupBatches",
    "trainer.v1.separate_async.parameter_sync_step": "spec.training.async.parameterSyncStep",
    "trainer.v1.separate_async.hybrid_rollout.enable_switch": "spec.training.async.lendIdleTrainerGpus",
    "trainer.v1.sampler.max_off_policy_threshold": "spec.training.async.maxOffPolicyVersions",
    "trainer.v1.sampler.max_off_policy_strategy": "spec.training.async.offPolicyStrategy",
    "actor_rollout_ref.hybrid_engine": "spec.training.async.lendIdleTrainerGpus",
    "actor_rollout_ref.rollout.nnodes": "spec.rollout.pool.nodes",
    "actor_rollout_ref.rollout.n_gpus_per_node": "spec.rollout.pool.gpusPerNode",
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "spec.training.async.checkpointEngine",
}

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


def _tis(spec: FlashRLJobSpec) -> dict[str, Value]:
    tis = spec.correction.tis
    prefix = "algorithm.rollout_correction."
    return {
        # Set explicitly: verl's YAML default (null) and dataclass default ("sequence") disagree.
        prefix + "rollout_is": None if tis.level == "off" else tis.level,
        prefix + "rollout_is_threshold": float(tis.cap),
        prefix + "rollout_is_batch_normalize": tis.batch_normalize,
        prefix + "rollout_rs": None,
        prefix + "bypass_mode": False,
    }


def _rollout(spec: FlashRLJobSpec) -> dict[str, Value]:
    r = spec.rollout
    prefix = "actor_rollout_ref.rollout."
    values: dict[str, Value] = {
        prefix + "name": r.engine,
        prefix + "mode": "async",
        prefix + "tensor_model_parallel_size": r.tensor_parallel_size,
        prefix + "gpu_memory_utilization": float(r.gpu_memory_utilization),
        prefix + "n": r.samples_per_prompt,
        prefix + "temperature": float(r.temperature),
        prefix + "top_p": float(r.top_p),
        prefix + "top_k": r.top_k,
        # TIS divides by the rollout's own log-probs: without them no correction is computed.
        prefix + "calculate_log_probs": True,
        prefix + "val_kwargs.temperature": float(r.temperature),
        prefix + "val_kwargs.top_p": float(r.top_p),
        prefix + "val_kwargs.top_k": r.top_k,
        prefix + "val_kwargs.do_sample": True,
        prefix + "val_kwargs.n": spec.validation.samples_per_problem,
        # The sampling seed (verl passes it to vLLM's sampler and sets PYTHONHASHSEED from it; its
        # SGLang server in 0.9.1 does not read it): replicas of an experiment pair on it.
        prefix + "seed": spec.training.seed,
    }
    if r.quantization == "blockwise-fp8":
        # verl's own path: SGLang is told the model is 128x128-block FP8 and the trainer quantizes
        # the bf16 weights at every sync. load_format stays "dummy": weights arrive from the trainer.
        values[prefix + "quantization"] = "fp8"
    elif r.quantization == "channel-fp8":
        # SGLang's flash_rl loader: loads bf16, quantizes per output channel inside SGLang and
        # re-quantizes every update_weights_from_tensor into the same FP8 storage.
        values[prefix + "load_format"] = "flash_rl"
        values["+" + prefix + "engine_kwargs.sglang.quantization"] = "fp8"
    return values


def _mode(spec: FlashRLJobSpec) -> dict[str, Value]:
    """verl's V1 trainer keys for ``spec.training.mode``. A sync job renders none of them: verl's
    defaults (``trainer.use_v1: true``, ``trainer_mode: sync``) are the origin recipe, and its command
    stays as it was. Every mode runs the same entry point (``verl.trainer.main_ppo`` picks the trainer
    class from ``trainer.v1.trainer_mode``)."""
    t = spec.training
    if t.mode == "sync":
        return {}
    a = t.async_
    verl_mode = VERL_TRAINER_MODES[t.mode]
    values: dict[str, Value] = {
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": verl_mode,
        f"trainer.v1.{verl_mode}.num_warmup_batches": float(a.warmup_batches) if a else 1.0,
        "trainer.v1.sampler.max_off_policy_threshold": a.max_off_policy_versions if a else 8,
        "trainer.v1.sampler.max_off_policy_strategy": a.off_policy_strategy if a else "drop",
    }
    if t.mode == "separate-async":
        lend = bool(a is not None and a.lend_idle_trainer_gpus)
        engine = a.checkpoint_engine if a is not None and a.checkpoint_engine else None
        pool = spec.rollout.pool
        values.update(
            {
                "trainer.v1.separate_async.parameter_sync_step": sync_step(spec),
                "trainer.v1.separate_async.hybrid_rollout.enable_switch": lend,
                # Without lending, no rollout replica lives on the trainer's GPUs: the standalone
                # pool serves every rollout (verl's trainer_separate_async.py).
                "actor_rollout_ref.hybrid_engine": lend,
                "actor_rollout_ref.rollout.nnodes": pool.nodes if pool else 0,
                "actor_rollout_ref.rollout.n_gpus_per_node": pool.gpus_per_node if pool else 0,
                "actor_rollout_ref.rollout.checkpoint_engine.backend": engine
                or DEFAULT_SEPARATE_CHECKPOINT_ENGINE,
            }
        )
    return values


def _dynamic_sampling(spec: FlashRLJobSpec) -> dict[str, Value]:
    """DAPO's group filtering, in the keys verl 0.9.1's V1 trainer actually reads.

    With filtering on, the V1 trainer forces ``data.gen_batch_size`` to 1 (it refills one prompt at a
    time) and ignores ``algorithm.filter_groups.max_num_gen_batches``
    (``verl/trainer/ppo/v1/trainer_base.py``: ``_init_dataloader``'s ``requires_exact_refill`` block and
    ``_resolve_filter_groups_metric``); generation concurrency is ``max_inflight_gen_batches``, in
    train-batch units (``verl/trainer/ppo/v1/replay_buffer.py``). So neither of the first two is
    rendered, and generationBatchSize / promptBatchSize becomes the third. Without filtering the V1
    trainer reads none of them but ``enable``.
    """
    ds = spec.training.dynamic_sampling
    prefix = "algorithm.filter_groups."
    if not ds.enabled:
        return {prefix + "enable": False}
    values: dict[str, Value] = {prefix + "enable": True, prefix + "metric": ds.metric}
    if spec.training.mode == "sync":
        # Read only by the synchronous replay buffer; the asynchronous modes bound generation by
        # staleness (training.async) instead.
        values[prefix + "max_inflight_gen_batches"] = (
            spec.training.generation_batch_size // spec.training.prompt_batch_size
        )
    return values


def _training(job: FlashRLJob) -> dict[str, Value]:
    spec = job.spec
    t = spec.training
    tokens_per_gpu = t.max_prompt_length + t.max_response_length
    actor = "actor_rollout_ref.actor."
    ref = "actor_rollout_ref.ref."
    model = "actor_rollout_ref.model."
    values: dict[str, Value] = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        "algorithm.kl_ctrl.kl_coef": 0.0,
        **_dynamic_sampling(spec),
        "data.train_files": data_location(spec, spec.data.train),
        "data.val_files": data_location(spec, spec.data.validation),
        "data.prompt_key": spec.data.prompt_key,
        "data.truncation": spec.data.truncation,
        "data.max_prompt_length": t.max_prompt_length,
        "data.max_response_length": t.max_response_length,
        "data.train_batch_size": t.prompt_batch_size,
        "data.val_max_samples": -1,
        # Unset, verl draws the data order from an unseeded generator: two variants would train on
        # different prompts at the same step, and the report pairs them step by step.
        "data.seed": t.seed,
        actor + "data_loader_seed": t.seed,
        model + "path": model_location(spec),
        model + "use_remove_padding": True,
        model + "enable_gradient_checkpointing": True,
        model + "use_fused_kernels": True,
        actor + "ppo_mini_batch_size": t.mini_batch_size,
        actor + "use_dynamic_bsz": True,
        actor + "ppo_max_token_len_per_gpu": tokens_per_gpu,
        ref + "log_prob_use_dynamic_bsz": True,
        ref + "log_prob_max_token_len_per_gpu": tokens_per_gpu,
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": True,
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": tokens_per_gpu,
        actor + "use_kl_loss": False,
        actor + "kl_loss_coef": 0.0,
        actor + "clip_ratio_low": float(t.clip_ratio_low),
        actor + "clip_ratio_high": float(t.clip_ratio_high),
        actor + "clip_ratio_c": float(t.clip_ratio_c),
        actor + "optim.lr": float(t.learning_rate),
        actor + "optim.lr_warmup_steps": t.warmup_steps,
        actor + "optim.weight_decay": float(t.weight_decay),
        actor + "grad_clip": float(t.grad_clip),
        actor + "entropy_coeff": 0,
        actor + "loss_agg_mode": "token-mean",
        actor + "fsdp_config.param_offload": True,
        actor + "fsdp_config.optimizer_offload": True,
        actor + "fsdp_config.fsdp_size": -1,
        ref + "fsdp_config.param_offload": True,
        actor + "ulysses_sequence_parallel_size": t.ulysses_sequence_parallel_size,
        ref + "ulysses_sequence_parallel_size": t.ulysses_sequence_parallel_size,
        "reward.reward_manager.name": "dapo",
        "+reward.reward_kwargs.overlong_buffer_cfg.enable": t.overlong_buffer.enabled,
        "+reward.reward_kwargs.overlong_buffer_cfg.len": t.overlong_buffer.length,
        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": float(t.overlong_buffer.penalty_factor),
        "+reward.reward_kwargs.overlong_buffer_cfg.log": False,
        "+reward.reward_kwargs.max_resp_len": t.max_response_length,
    }
    experiment = t.experiment_name or job.name
    values.update(
        {
            # verl's file logger always, next to the user's: the launcher reads its JSONL for status
            # and /metrics (flashrl_jobs.run_metrics); the path comes at launch, per attempt.
            "trainer.logger": [*t.loggers, *([] if FILE_LOGGER in t.loggers else [FILE_LOGGER])],
            "trainer.project_name": t.project_name,
            "trainer.experiment_name": experiment,
            "trainer.nnodes": spec.resources.nodes,
            "trainer.n_gpus_per_node": spec.resources.gpus_per_node,
            "trainer.val_before_train": t.validate_before_train,
            "trainer.test_freq": t.test_frequency,
            "trainer.total_epochs": 1,
            "trainer.total_training_steps": t.total_steps,
            "trainer.default_local_dir": checkpoint_dir(job),
            # Every validation sample (prompt, response, answer, score, step) kept on the claim, so the
            # report can compare variants problem by problem; the launcher adds the attempt.
            "trainer.validation_data_dir": validation_dir(job),
        }
    )
    values.update(_checkpoint(spec))
    return values


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


def _checkpoint(spec: FlashRLJobSpec) -> dict[str, Value]:
    c = spec.checkpoint
    actor = "actor_rollout_ref.actor.checkpoint."
    contents = [*RESUMABLE_CONTENTS, *(["hf_model"] if c.hugging_face_model else [])]
    return {
        # verl saves when save_freq > 0 and (step % save_freq == 0 or it is the last step),
        # trainer/ppo/v1/trainer_base.py fit().
        "trainer.save_freq": c.interval,
        "trainer.max_actor_ckpt_to_keep": c.keep,
        "trainer.resume_mode": c.resume_mode,
        actor + "save_contents": contents,
        # verl's default load_contents is ${.save_contents}; a resume needs exactly the resumable set.
        actor + "load_contents": list(RESUMABLE_CONTENTS),
    }


def generated_overrides(job: FlashRLJob) -> list[str]:
    """The overrides derived from the typed spec, before the user's ``spec.overrides``."""
    values: dict[str, Value] = {}
    values.update(_training(job))
    values.update(_rollout(job.spec))
    values.update(_tis(job.spec))
    values.update(_mode(job.spec))
    return [f"{key}={format_value(value)}" for key, value in values.items()]


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


#: The FlashRLJob field each generated verl key comes from (relative to ``spec``), so a problem verl
#: finds with a value can be reported where the user set it. Keys the launcher fixes (remove padding,
#: dynamic batch sizes, ...) are absent: only an override can change them.
FIELD_OF_KEY: Final[Mapping[str, str]] = {
    "algorithm.filter_groups.enable": "training.dynamicSampling.enabled",
    "algorithm.filter_groups.metric": "training.dynamicSampling.metric",
    "algorithm.filter_groups.max_inflight_gen_batches": "training.generationBatchSize",
    "data.train_files": "data.train",
    "data.val_files": "data.validation",
    "data.prompt_key": "data.promptKey",
    "data.truncation": "data.truncation",
    "data.max_prompt_length": "training.maxPromptLength",
    "data.max_response_length": "training.maxResponseLength",
    "data.train_batch_size": "training.promptBatchSize",
    "actor_rollout_ref.model.path": "model.source",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "training.miniBatchSize",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "training.maxResponseLength",
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": "training.maxResponseLength",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "training.maxResponseLength",
    "actor_rollout_ref.actor.clip_ratio_low": "training.clipRatioLow",
    "actor_rollout_ref.actor.clip_ratio_high": "training.clipRatioHigh",
    "actor_rollout_ref.actor.clip_ratio_c": "training.clipRatioC",
    "actor_rollout_ref.actor.optim.lr": "training.learningRate",
    "actor_rollout_ref.actor.optim.lr_warmup_steps": "training.warmupSteps",
    "actor_rollout_ref.actor.optim.weight_decay": "training.weightDecay",
    "actor_rollout_ref.actor.grad_clip": "training.gradClip",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "training.ulyssesSequenceParallelSize",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": "training.ulyssesSequenceParallelSize",
    "reward.reward_kwargs.overlong_buffer_cfg.enable": "training.overlongBuffer.enabled",
    "reward.reward_kwargs.overlong_buffer_cfg.len": "training.overlongBuffer.length",
    "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": "training.overlongBuffer.penaltyFactor",
    "reward.reward_kwargs.max_resp_len": "training.maxResponseLength",
    "trainer.logger": "training.loggers",
    "trainer.project_name": "training.projectName",
    "trainer.experiment_name": "training.experimentName",
    "trainer.nnodes": "resources.nodes",
    "trainer.n_gpus_per_node": "resources.gpusPerNode",
    "trainer.val_before_train": "training.validateBeforeTrain",
    "trainer.test_freq": "training.testFrequency",
    "trainer.total_training_steps": "training.totalSteps",
    "trainer.default_local_dir": "storage.checkpoints.mountPath",
    "trainer.validation_data_dir": "storage.checkpoints.mountPath",
    "data.seed": "training.seed",
    "actor_rollout_ref.actor.data_loader_seed": "training.seed",
    "actor_rollout_ref.rollout.seed": "training.seed",
    "actor_rollout_ref.rollout.val_kwargs.n": "validation.samplesPerProblem",
    "trainer.save_freq": "checkpoint.interval",
    "trainer.max_actor_ckpt_to_keep": "checkpoint.keep",
    "trainer.resume_mode": "checkpoint.resumeMode",
    "actor_rollout_ref.rollout.name": "rollout.engine",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "rollout.tensorParallelSize",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "rollout.gpuMemoryUtilization",
    "actor_rollout_ref.rollout.n": "rollout.samplesPerPrompt",
    "actor_rollout_ref.rollout.temperature": "rollout.temperature",
    "actor_rollout_ref.rollout.top_p": "rollout.topP",
    "actor_rollout_ref.rollout.top_k": "rollout.topK",
    "actor_rollout_ref.rollout.val_kwargs.temperature": "rollout.temperature",
    "actor_rollout_ref.rollout.val_kwargs.top_p": "rollout.topP",
    "actor_rollout_ref.rollout.val_kwargs.top_k": "rollout.topK",
    "actor_rollout_ref.rollout.quantization": "rollout.quantization",
    "actor_rollout_ref.rollout.load_format": "rollout.quantization",
    "actor_rollout_ref.rollout.engine_kwargs.sglang.quantization": "rollout.quantization",
    "algorithm.rollout_correction.rollout_is": "correction.tis.level",
    "algorithm.rollout_correction.rollout_is_threshold": "correction.tis.cap",
    "algorithm.rollout_correction.rollout_is_batch_normalize": "correction.tis.batchNormalize",
    "trainer.v1.trainer_mode": "training.mode",
    "trainer.v1.colocate_async.num_warmup_batches": "training.async.warmupBatches",
    "trainer.v1.separate_async.num_warmup_batches": "training.async.warmupBatches",
    "trainer.v1.separate_async.parameter_sync_step": "training.async.parameterSyncStep",
    "trainer.v1.separate_async.hybrid_rollout.enable_switch": "training.async.lendIdleTrainerGpus",
    "trainer.v1.sampler.max_off_policy_threshold": "training.async.maxOffPolicyVersions",
    "trainer.v1.sampler.max_off_policy_strategy": "training.async.offPolicyStrategy",
    "actor_rollout_ref.hybrid_engine": "training.async.lendIdleTrainerGpus",
    "actor_rollout_ref.rollout.nnodes": "rollout.pool.nodes",
    "actor_rollout_ref.rollout.n_gpus_per_node": "rollout.pool.gpusPerNode",
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "training.async.checkpointEngine",
}
