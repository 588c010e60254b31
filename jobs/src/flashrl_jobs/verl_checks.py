"""verl 0.9.1's own start-up checks, run on the composed config before any GPU is requested.

Composing the config (``verl_config``) proves every key exists; it does not prove verl will start.
verl checks much more at start-up, some of it only after the Ray cluster is up and the model is
loaded. This module runs those checks offline, where they can run without torch or GPUs, through
:mod:`flashrl_jobs.verl_import`:

* **verl's code, called.** ``verl.utils.config.validate_config`` (as ``verl/trainer/main_ppo.py``
  calls it, which converts the actor section to ``FSDPActorConfig`` and runs its ``__post_init__`` and
  ``validate`` with the world size), ``RolloutConfig`` and ``AlgoConfig`` through
  ``omega_conf_to_dataclass`` (their ``__post_init__``), the V1 ``ReplayBuffer`` constructor with the
  arguments ``trainer_base._build_replay_buffer`` passes, and ``rollout_corr_helper``'s rejection-sampling
  option table and threshold parser.
* **verl's registries, read.** Trainer modes (``@register_trainer``) and policy losses
  (``@register_policy_loss``) are read from verl's source files, because the modules that hold them
  execute torch at import.
* **Transcribed**, each with verl's file and line, where the check sits inside code that needs torch,
  Ray or the model: the checks of ``workers/engine_workers.py`` (parallel sizes against the world size,
  dynamic batch sizes), ``utils/seqlen_balancing.py`` (token budget against the sequence length),
  ``trainer/ppo/v1/trainer_base.py`` (DAPO's metric, and what the V1 trainer overrides or ignores),
  ``trainer/ppo/v1/trainer_separate_async.py`` (the separate-async trainer's constructor assertions:
  its module imports torch),
  and the model-dependent ones (``models/transformers/monkey_patch.py``: Ulysses against the attention
  heads; ``workers/rollout/sglang_rollout/async_sglang_server.py``: context length). Those need the
  model's ``config.json``; they run when the model (``model.source``) is a local directory holding it, and are
  otherwise reported as skipped.

Every finding names the verl keys it is about, so callers can point at the FlashRLJob field the value
came from (:func:`flashrl_jobs.verl_config.check_config` does).

**Nothing the checks call can instantiate user code.** verl converts config sections to its dataclasses
with Hydra's ``instantiate``, which calls whatever ``_target_`` names. The overrides that could add one
are refused before (:mod:`flashrl_jobs.override_rules`); here, for the duration of the checks
(:func:`instantiation_guard`), Hydra resolves a target only when it names a dataclass in a ``verl.``
module, refuses ``_args_``, ``_partial_``, ``_recursive_`` and ``_convert_`` inside a config, and its
``call``/``get_class``/``get_method``/``get_object`` refuse outright. When the guard cannot be put in
place (another Hydra), verl's code checks are not run (failing closed). A check's own exception text is
quoted only for the exception classes verl's checks raise about values (``ValueError`` and kin); any other
failure is reported by a fixed sentence, so no text read from elsewhere reaches a status or an Event.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

from flashrl_jobs.verl_import import VerlUnavailableError, verl_module, verl_sandbox

#: Metrics the ``dapo`` reward manager with verl's default scorer puts where DAPO's filter reads them:
#: ``reward`` is the canonical score (``trainer/ppo/v1/replay_buffer.py``: FILTER_GROUPS_REWARD_METRIC);
#: ``acc`` always and ``score`` for dict-returning scorers (math_dapo, aime*) are copied into
#: reward_extra_info (``experimental/reward_loop/reward_manager/dapo.py:95-104``,
#: ``utils/reward_score/math_dapo.py:275-279``); ``pred`` is a string and cannot be compared.
DAPO_METRICS: Final = ("reward", "acc", "score")
#: Added by the same reward manager when ``overlong_buffer_cfg.log`` is on (dapo.py:114-117).
DAPO_OVERLONG_METRICS: Final = ("overlong_reward", "overlong")


@dataclass(frozen=True)
class Finding:
    """One reason verl would refuse (or silently change) the configuration."""

    message: str
    #: The verl keys it is about, most specific first (may be empty).
    keys: tuple[str, ...] = ()
    #: Config section the check validated (to attribute a message that names no key).
    section: str = ""


@dataclass
class Report:
    """Everything the checks found, and what they could not check here."""

    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@lru_cache(maxsize=1)
def _verl_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise VerlUnavailableError("verl is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


@lru_cache(maxsize=8)
def registered_names(relative_dir: str, decorator: str) -> frozenset[str]:
    """String arguments of ``@decorator("name")`` in verl's source files under ``relative_dir``."""
    names: set[str] = set()
    root = _verl_root() / relative_dir
    files = [root] if root.is_file() else sorted(root.glob("*.py"))
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.ClassDef):
                continue
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and getattr(deco.func, "id", None) == decorator
                    and deco.args
                    and isinstance(deco.args[0], ast.Constant)
                    and isinstance(deco.args[0].value, str)
                ):
                    names.add(deco.args[0].value)
    return frozenset(names)


def _message(exc: BaseException) -> str:
    """verl's own words, without Hydra's instantiation wrapper."""
    text = str(exc).strip() or type(exc).__name__
    inner = re.search(r"Error in call to target '[^']+':\s*\w+\((['\"])(.*)\1\)", text, re.S)
    if inner:
        text = inner.group(2)
    text = text.split("\nfull_key:", 1)[0]
    return " ".join(text.split())


def _unavailable(exc: BaseException) -> VerlUnavailableError | None:
    """The placeholder error behind ``exc`` (Hydra wraps what a dataclass raises), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, VerlUnavailableError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class InstantiationRefusedError(RuntimeError):
    """Hydra was asked to instantiate something other than one of verl's config dataclasses."""


#: A target the guard lets Hydra resolve: a dotted name inside verl.
_VERL_TARGET = re.compile(r"verl(\.[A-Za-z_][A-Za-z0-9_]*)+\Z")
#: Instantiation keys verl's own config never holds; present in a config, they are refused.
_REFUSED_CONFIG_KEYS: Final = frozenset({"_args_", "_partial_", "_recursive_", "_convert_"})
#: Exception classes whose text is verl's verdict on a value of the config (quoted to the user). Any
#: other class is reported by its name only.
_QUOTABLE: Final = (ValueError, AssertionError, TypeError, KeyError, IndexError, NotImplementedError)


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise InstantiationRefusedError("refused: verl's checks may not call or locate arbitrary code")


def _walk_config(node: Any, depth: int = 0) -> None:
    """Refuse a config handed to ``instantiate`` that holds keys only user text could have put there."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if depth > 64:
        raise InstantiationRefusedError("refused: config nested too deeply to instantiate")
    if isinstance(node, DictConfig | ListConfig):
        node = OmegaConf.to_container(node, resolve=False)
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _REFUSED_CONFIG_KEYS:
                raise InstantiationRefusedError(f"refused: instantiation key {key} in a config")
            if key == "_target_" and not (isinstance(value, str) and _VERL_TARGET.fullmatch(value)):
                raise InstantiationRefusedError("refused: a target outside verl's config classes")
            _walk_config(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            _walk_config(value, depth + 1)


@contextlib.contextmanager
def instantiation_guard() -> Iterator[None]:
    """Hydra instantiates only verl's config dataclasses while this is entered (process-wide).

    Raises :class:`InstantiationRefusedError` on entry when Hydra's internals are not the ones this
    guard knows (the caller then skips the checks that would instantiate).
    """
    import dataclasses

    try:
        import hydra.utils as utils
        from hydra._internal.instantiate import _instantiate2 as impl
    except ImportError as exc:
        raise InstantiationRefusedError("Hydra is not importable here") from exc
    real_instantiate = impl.instantiate
    real_resolve = getattr(impl, "_resolve_target", None)
    if not callable(real_resolve) or not callable(real_instantiate):
        raise InstantiationRefusedError("unknown Hydra internals: instantiation cannot be guarded")

    def resolve(target: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(target, str) and _VERL_TARGET.fullmatch(target)):
            raise InstantiationRefusedError("refused: a target outside verl's config classes")
        found = real_resolve(target, *args, **kwargs)
        if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
            raise InstantiationRefusedError("refused: a target that is not one of verl's config dataclasses")
        return found

    def instantiate(config: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            raise InstantiationRefusedError("refused: positional arguments to a target")
        _walk_config(config)
        for value in kwargs.values():
            _walk_config(value)
        return real_instantiate(config, **kwargs)

    saved = [
        (owner, name, getattr(owner, name))
        for owner, name in (
            (impl, "_resolve_target"),
            (impl, "instantiate"),
            (utils, "instantiate"),
            (utils, "call"),
            (utils, "get_class"),
            (utils, "get_method"),
            (utils, "get_object"),
        )
        if hasattr(owner, name)
    ]
    replacement = {"_resolve_target": resolve, "instantiate": instantiate}
    try:
        for owner, name, _value in saved:
            setattr(owner, name, replacement.get(name, _refuse))
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _safe_message(name: str, exc: BaseException) -> str:
    """verl's words when the failure is its verdict on a value; a fixed sentence otherwise.

    The exception that caused the others decides (Hydra wraps what a dataclass raises). A refused
    instantiation, an I/O error or anything unexpected is named by its class only: its text could
    carry something read from outside the spec.
    """
    chain = _chain(exc)
    if any(isinstance(e, InstantiationRefusedError) for e in chain):
        return f"verl's {name} check asked Hydra to instantiate something other than verl's config classes"
    root = chain[-1]
    if isinstance(root, _QUOTABLE) and not isinstance(root, OSError | UnicodeError):
        return _message(exc)
    return f"verl's {name} check failed with {type(root).__name__}"


def _run(report: Report, name: str, section: str, keys: tuple[str, ...], check: Callable[[], object]) -> None:
    """Run one verl check; its exception becomes a finding, a missing library a skip note.

    verl's ``validate_config`` prints its verdict; stdout is captured while it runs (process-wide, for
    the second it takes) so the operator's and the CLI's output stay theirs.
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check()
    except Exception as exc:
        missing = _unavailable(exc)
        if missing is not None or "is not available without its library" in str(exc):
            report.skipped.append(f"verl's {name}: not run here ({missing or _message(exc)})")
        else:
            report.findings.append(Finding(_safe_message(name, exc), keys, section))


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if node is None or not hasattr(node, "get"):
            return default
        node = node.get(part)
    return default if node is None else node


def model_config_json(model_path: str) -> dict[str, Any] | None:
    """The model's ``config.json`` when ``model_path`` is a local directory holding one, else None."""
    path = Path(model_path) / "config.json"
    try:
        if path.is_file():
            loaded = json.loads(path.read_text(encoding="utf-8"))
            return loaded if isinstance(loaded, dict) else None
    except (OSError, ValueError):
        return None
    return None


def cached_model_config_json(source: str) -> dict[str, Any] | None:
    """An ``hf://`` model's ``config.json`` from this machine's Hugging Face cache, never the network.

    ``huggingface_hub.try_to_load_from_cache`` (the ``stage`` extra) resolves the revision through the
    cache's refs like a download would; without the library, or with the model not cached, None.
    """
    from flashrl_api.sources import parse_model_source

    try:
        parsed = parse_model_source(source)
        from huggingface_hub import try_to_load_from_cache
    except (ImportError, ValueError):
        return None
    if parsed is None:
        return None
    found = try_to_load_from_cache(parsed.repo_id, "config.json", revision=parsed.revision)
    return model_config_json(str(Path(found).parent)) if isinstance(found, str) else None


def run_checks(cfg: Any, model_config: Mapping[str, Any] | None = None) -> Report:
    """verl's checks on a composed, resolved config; ``model_config`` enables the model-dependent ones."""
    report = Report()
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(instantiation_guard())
        except InstantiationRefusedError:
            report.skipped.append(
                "verl's code checks: not run (Hydra's instantiation cannot be guarded here)"
            )
        else:
            with verl_sandbox():
                _verl_code_checks(cfg, report)
    _transcribed_checks(cfg, report)
    if model_config is None:
        report.skipped.append(
            "verl's model-dependent checks (Ulysses degree against the attention heads, context length; "
            f"{_get(cfg, 'actor_rollout_ref.model.path')} is not a local directory with a config.json here)"
        )
    else:
        _model_checks(cfg, model_config, report)
    return report


# --- verl's code ---------------------------------------------------------------------------------


def _need_reference_policy(cfg: Any) -> bool:
    # verl/trainer/ppo/utils.py:75-79 (its module imports torch through core_algos).
    return bool(
        _get(cfg, "algorithm.use_kl_in_reward", False) or _get(cfg, "actor_rollout_ref.actor.use_kl_loss")
    )


def _need_critic(cfg: Any) -> bool:
    # verl/trainer/ppo/utils.py:96-107.
    enable = _get(cfg, "critic.enable")
    if enable is not None:
        return bool(enable)
    return str(_get(cfg, "algorithm.adv_estimator")) == "gae"


def _verl_code_checks(cfg: Any, report: Report) -> None:
    config = verl_module("verl.utils.config")

    def validate() -> None:
        # verl/trainer/main_ppo.py: main() calls this before anything starts.
        config.validate_config(
            config=cfg, use_reference_policy=_need_reference_policy(cfg), use_critic=_need_critic(cfg)
        )

    _run(report, "validate_config", "actor_rollout_ref.actor", (), validate)
    _run(
        report,
        "RolloutConfig",
        "actor_rollout_ref.rollout",
        (),
        lambda: config.omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout),
    )
    _run(report, "AlgoConfig", "algorithm", (), lambda: config.omega_conf_to_dataclass(cfg.algorithm))
    _rejection_sampling(cfg, report)
    _replay_buffer(cfg, report)


def _rejection_sampling(cfg: Any, report: Report) -> None:
    """``rollout_rs`` options and thresholds, with verl's table and parser
    (``trainer/ppo/rollout_corr_helper.py:235-260``, called there only once training has started)."""
    options_text = _get(cfg, "algorithm.rollout_correction.rollout_rs")
    if options_text is None:
        return
    keys = ("algorithm.rollout_correction.rollout_rs", "algorithm.rollout_correction.rollout_rs_threshold")

    def check() -> None:
        helper = verl_module("verl.trainer.ppo.rollout_corr_helper")
        threshold = _get(cfg, "algorithm.rollout_correction.rollout_rs_threshold")
        if not isinstance(options_text, str):
            raise ValueError("rollout_rs must be a non-empty string (comma separated for multiple options).")
        if threshold is None:
            raise ValueError("rollout_rs_threshold must be provided for rejection sampling.")
        options = list(dict.fromkeys(o.strip() for o in options_text.split(",") if o.strip()))
        if not options:
            raise ValueError("rollout_rs must contain at least one valid option.")
        for option in options:
            if option not in helper.SUPPORTED_ROLLOUT_RS_OPTIONS:
                raise ValueError(
                    f"Invalid rollout_rs option: {option}. Must be one of "
                    f"{sorted(helper.SUPPORTED_ROLLOUT_RS_OPTIONS)}."
                )
        helper._parse_rollout_rs_thresholds(options, threshold)

    _run(report, "rollout_rs", "algorithm.rollout_correction", keys, check)


def _filter_metric(cfg: Any) -> str | None:
    filter_groups = _get(cfg, "algorithm.filter_groups")
    if not (filter_groups is not None and filter_groups.get("enable", False)):
        return None
    return str(filter_groups.get("metric") or "") or None


def _replay_buffer(cfg: Any, report: Report) -> None:
    """The V1 replay buffer's constructor checks, with the arguments
    ``trainer/ppo/v1/trainer_base.py:_build_replay_buffer`` (lines 139-185) would pass."""
    sampler = _get(cfg, "trainer.v1.sampler")
    if sampler is None:
        return
    custom = sampler.get("custom_sampler")
    if custom is not None and custom.get("path") and custom.get("name"):
        report.skipped.append("replay buffer: a custom sampler is configured; its checks are its own")
        return
    mode = _get(cfg, "trainer.v1.trainer_mode")
    metric = _filter_metric(cfg)
    refill = bool(sampler.get("sync_refill_failed_groups", False))
    keys = (
        "trainer.v1.sampler.max_off_policy_threshold",
        "trainer.v1.sampler.max_off_policy_strategy",
        "algorithm.filter_groups.max_inflight_gen_batches",
    )

    def check() -> None:
        module = verl_module("verl.trainer.ppo.v1.replay_buffer")
        cls = module.ReplayBuffer if mode == "sync" else module.ReplayBufferAsync
        kwargs: dict[str, Any] = {
            "trainer_mode": mode,
            "trainer_config": _get(cfg, f"trainer.v1.{mode}", {}),
            "max_off_policy_threshold": sampler.max_off_policy_threshold,
            "max_off_policy_strategy": sampler.max_off_policy_strategy,
            "sampler_kwargs": sampler.sampler_kwargs,
            "refill_fn": lambda *args, **kwargs: None,
            "filter_groups_metric": metric,
            "sync_refill_failed_groups": refill,
        }
        if cls is module.ReplayBuffer:
            train_batch_size = cfg.data.train_batch_size
            kwargs.update(
                train_batch_size=train_batch_size,
                gen_batch_size=1
                if metric is not None or refill
                else (_get(cfg, "data.gen_batch_size") or train_batch_size),
                max_inflight_gen_batches=_get(cfg, "algorithm.filter_groups.max_inflight_gen_batches", 1)
                if metric is not None
                else 1,
            )
        cls(**kwargs)

    if mode in registered_names("trainer/ppo/v1", "register_trainer"):
        _run(report, "ReplayBuffer", "trainer.v1.sampler", keys, check)


# --- transcribed ---------------------------------------------------------------------------------


def _transcribed_checks(cfg: Any, report: Report) -> None:
    findings = report.findings
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    actor = "actor_rollout_ref.actor."
    rollout = "actor_rollout_ref.rollout."
    ref = "actor_rollout_ref.ref."

    # trainer/ppo/v1/trainer_base.py:2017-2023 (get_trainer_cls) over the @register_trainer names.
    modes = registered_names("trainer/ppo/v1", "register_trainer")
    mode = _get(cfg, "trainer.v1.trainer_mode")
    if mode not in modes:
        findings.append(
            Finding(
                f"Unknown trainer '{mode}'. Available trainers: {', '.join(sorted(modes))}.",
                ("trainer.v1.trainer_mode",),
            )
        )
    if not _get(cfg, "trainer.use_v1", True):
        findings.append(
            Finding(
                "the legacy trainer (trainer.use_v1=False) was to be removed in verl 0.9.0 "
                "(verl/trainer/main_ppo.py); FlashRLJob's recipe mapping targets the V1 trainer",
                ("trainer.use_v1",),
            )
        )

    # trainer/ppo/core_algos.py:70-84 (get_policy_loss_fn) over the @register_policy_loss names.
    losses = registered_names("trainer/ppo/core_algos.py", "register_policy_loss")
    loss_mode = _get(cfg, actor + "policy_loss.loss_mode", "vanilla")
    if loss_mode not in losses:
        findings.append(
            Finding(
                f"Unsupported loss mode: {loss_mode}. Supported modes are: {sorted(losses)}",
                (actor + "policy_loss.loss_mode",),
            )
        )

    # workers/engine_workers.py:616: the actor and the log-prob passes batch the same way.
    if bool(_get(cfg, actor + "use_dynamic_bsz")) != bool(_get(cfg, rollout + "log_prob_use_dynamic_bsz")):
        findings.append(
            Finding(
                "actor.use_dynamic_bsz must equal rollout.log_prob_use_dynamic_bsz "
                "(verl/workers/engine_workers.py:616)",
                (actor + "use_dynamic_bsz", rollout + "log_prob_use_dynamic_bsz"),
            )
        )
    # workers/engine_workers.py:632-637.
    if _get(cfg, actor + "use_dynamic_bsz"):
        for key in (rollout + "log_prob_max_token_len_per_gpu", actor + "ppo_max_token_len_per_gpu"):
            if _get(cfg, key) is None:
                findings.append(Finding(f"{key} must be set with dynamic batch sizes", (key,)))

    # workers/engine_workers.py:653-661: rollout replicas tile the GPUs.
    tp = int(_get(cfg, rollout + "tensor_model_parallel_size", 1))
    dp = int(_get(cfg, rollout + "data_parallel_size", 1))
    pp = int(_get(cfg, rollout + "pipeline_model_parallel_size", 1))
    if world % (tp * dp * pp):
        findings.append(
            Finding(
                f"rollout world_size: {world} is not divisible by infer_world_size: {tp * dp * pp} "
                "(tensor x data x pipeline parallel sizes; verl/workers/engine_workers.py:659)",
                (
                    rollout + "tensor_model_parallel_size",
                    rollout + "data_parallel_size",
                    rollout + "pipeline_model_parallel_size",
                ),
            )
        )

    # workers/engine_workers.py:267: each mini batch (prompts x n sequences) splits over the actor's
    # data-parallel ranks (the GPUs divided by the Ulysses degree).
    sp = int(_get(cfg, actor + "ulysses_sequence_parallel_size", 1) or 1)
    if world % sp == 0:
        actor_dp = world // sp
        mini = int(_get(cfg, actor + "ppo_mini_batch_size")) * int(_get(cfg, rollout + "n", 1))
        if mini % actor_dp:
            findings.append(
                Finding(
                    f"Got mini_batch_size={mini} (ppo_mini_batch_size x rollout.n) and data parallel size "
                    f"{actor_dp} (GPUs / ulysses_sequence_parallel_size): it must divide "
                    "(verl/workers/engine_workers.py:267)",
                    (actor + "ppo_mini_batch_size", rollout + "n", actor + "ulysses_sequence_parallel_size"),
                )
            )

    # utils/seqlen_balancing.py:384 with workers/engine/utils.py:109-111: a dynamic micro batch must
    # hold one whole sequence (prompt + response), the budget counted across the Ulysses group.
    longest = int(_get(cfg, "data.max_prompt_length")) + int(_get(cfg, "data.max_response_length"))
    budgets = [
        (actor + "use_dynamic_bsz", actor + "ppo_max_token_len_per_gpu", sp),
        (rollout + "log_prob_use_dynamic_bsz", rollout + "log_prob_max_token_len_per_gpu", sp),
        (
            ref + "log_prob_use_dynamic_bsz",
            ref + "log_prob_max_token_len_per_gpu",
            int(_get(cfg, ref + "ulysses_sequence_parallel_size", sp) or sp),
        ),
    ]
    for switch, key, group in budgets:
        budget = _get(cfg, key)
        if _get(cfg, switch) and budget is not None and int(budget) * group < longest:
            findings.append(
                Finding(
                    f"max_token_len must be greater than the sequence length: {key}={budget} x Ulysses "
                    f"{group} < data.max_prompt_length + data.max_response_length = {longest} "
                    "(verl/utils/seqlen_balancing.py:384)",
                    (key, "data.max_response_length", "data.max_prompt_length"),
                )
            )

    _separate_async_checks(cfg, report)
    _dapo_checks(cfg, report)


#: Where verl 0.9.1's separate-async trainer asserts its start-up conditions.
SEPARATE_ASYNC_SOURCE: Final = "verl/trainer/ppo/v1/trainer_separate_async.py"


def _separate_async_checks(cfg: Any, report: Report) -> None:
    """The start-up assertions of ``PPOTrainerSeparateAsync.__init__`` (trainer_separate_async.py:55-107),
    transcribed: the module imports ``transfer_queue`` and ``verl.experimental.separation.engine_workers``
    (torch) at its top, so neither the class nor its constructor can be loaded without torch. Its
    assertions read nothing but the config, so they run here on the composed one."""
    if _get(cfg, "trainer.v1.trainer_mode") != "separate_async":
        return
    findings = report.findings
    rollout = "actor_rollout_ref.rollout."
    batch = int(_get(cfg, "data.train_batch_size"))
    mini = int(_get(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size"))
    sync_step = int(_get(cfg, "trainer.v1.separate_async.parameter_sync_step", 1))
    if batch != sync_step * mini:
        findings.append(
            Finding(
                "train_batch_size must equal parameter_sync_step * ppo_mini_batch_size in separate async "
                f"training, but got train_batch_size={batch}, parameter_sync_step={sync_step}, "
                f"ppo_mini_batch_size={mini} ({SEPARATE_ASYNC_SOURCE}:59)",
                (
                    "data.train_batch_size",
                    "trainer.v1.separate_async.parameter_sync_step",
                    "actor_rollout_ref.actor.ppo_mini_batch_size",
                ),
            )
        )
    for key, line in (("nnodes", 64), ("n_gpus_per_node", 65)):
        if int(_get(cfg, rollout + key, 0) or 0) <= 0:
            findings.append(
                Finding(
                    f"{key} must be > 0 in separate async training ({SEPARATE_ASYNC_SOURCE}:{line})",
                    (rollout + key,),
                )
            )
    if _get(cfg, rollout + "checkpoint_engine.backend") == "naive":
        findings.append(
            Finding(
                "please use nccl/nixl/mooncake, etc. backend for separate async training "
                f"({SEPARATE_ASYNC_SOURCE}:68)",
                (rollout + "checkpoint_engine.backend",),
            )
        )
    # trainer/ppo/utils.py:89-93 (need_reward_model) is reward.reward_model.enable.
    if _get(cfg, "reward.reward_model.enable") and not _get(cfg, "reward.reward_model.enable_resource_pool"):
        findings.append(
            Finding(
                "Colocate reward model (reward.reward_model.enable_resource_pool=False) is not supported in "
                f"separate async mode ({SEPARATE_ASYNC_SOURCE}:72)",
                ("reward.reward_model.enable_resource_pool", "reward.reward_model.enable"),
            )
        )
    # :89-105: lending idle trainer GPUs (hybrid rollout switching) needs the hybrid replicas and no
    # prefill/decode disaggregation; without hybrid replicas verl turns the switch off (a warning).
    switch = bool(_get(cfg, "trainer.v1.separate_async.hybrid_rollout.enable_switch", False))
    hybrid = bool(_get(cfg, "actor_rollout_ref.hybrid_engine", True))
    if switch and hybrid and bool(_get(cfg, rollout + "disaggregation.enabled", False)):
        findings.append(
            Finding(
                "trainer.v1.separate_async.hybrid_rollout.enable_switch does not support rollout "
                f"disaggregation ({SEPARATE_ASYNC_SOURCE}:100)",
                (
                    "trainer.v1.separate_async.hybrid_rollout.enable_switch",
                    rollout + "disaggregation.enabled",
                ),
            )
        )


def _dapo_checks(cfg: Any, report: Report) -> None:
    findings = report.findings
    metric = _filter_metric(cfg)
    filter_groups = _get(cfg, "algorithm.filter_groups")
    if filter_groups is not None and filter_groups.get("enable", False) and metric is None:
        # trainer/ppo/v1/trainer_base.py:187-196.
        findings.append(
            Finding(
                "algorithm.filter_groups.metric must be set when group filtering is enabled",
                ("algorithm.filter_groups.metric",),
            )
        )
    if metric is not None:
        # trainer/ppo/v1/trainer_base.py:198-204.
        reward_model = _get(cfg, "reward.reward_model")
        if (
            reward_model is not None
            and reward_model.get("enable")
            and not reward_model.get("enable_resource_pool")
        ):
            findings.append(
                Finding(
                    "algorithm.filter_groups requires the reward metric at sampling time: use rule-based "
                    "reward or reward.reward_model.enable_resource_pool=True",
                    ("reward.reward_model.enable", "algorithm.filter_groups.enable"),
                )
            )
        # trainer/ppo/v1/replay_buffer.py:278-305: a missing metric fails the first step (RuntimeError).
        manager = _get(cfg, "reward.reward_manager.name")
        custom_score = _get(cfg, "reward.custom_reward_function.path")
        if manager == "dapo" and custom_score is None:
            produced = list(DAPO_METRICS)
            if _get(cfg, "reward.reward_kwargs.overlong_buffer_cfg.log"):
                produced += DAPO_OVERLONG_METRICS
            if metric not in produced:
                findings.append(
                    Finding(
                        f"the dapo reward manager does not produce DAPO metric {metric!r} (it produces "
                        f"{', '.join(produced)}); verl would fail the first step with 'Finished groups are "
                        "missing DAPO metric' (verl/trainer/ppo/v1/replay_buffer.py:299-305)",
                        ("algorithm.filter_groups.metric",),
                    )
                )
        else:
            report.skipped.append(
                f"DAPO metric {metric!r}: produced by reward manager {manager!r}"
                + (f" with the custom scorer {custom_score}" if custom_score else "")
                + ", whose metrics are not known offline"
            )
    findings.extend(v1_overridden_or_ignored(cfg))


def v1_overridden_or_ignored(cfg: Any, rendered: Iterable[str] | None = None) -> list[Finding]:
    """Keys verl 0.9.1's V1 trainer silently overrides or ignores at start (``rendered``: only these).

    ``trainer/ppo/v1/trainer_base.py``: ``_init_dataloader``'s ``requires_exact_refill`` block (727-739)
    forces ``data.gen_batch_size`` to 1; ``_resolve_filter_groups_metric`` (205-211) ignores a positive
    ``max_num_gen_batches``; ``_build_replay_buffer`` (171-184) reads ``max_inflight_gen_batches`` only
    with filtering on and the built-in synchronous buffer; lines 776-786 overwrite the optimisers'
    ``total_training_steps``; ``main_ppo.py:143`` forces ``transfer_queue.enable``.
    """
    keys = None if rendered is None else set(rendered)

    def set_here(key: str) -> bool:
        return keys is None or key in keys

    found: list[Finding] = []
    filter_groups = _get(cfg, "algorithm.filter_groups") or {}
    dapo = bool(filter_groups.get("enable", False))
    mode = _get(cfg, "trainer.v1.trainer_mode")
    sampler = _get(cfg, "trainer.v1.sampler") or {}
    custom = sampler.get("custom_sampler")
    builtin_sync = mode == "sync" and not (custom and custom.get("path") and custom.get("name"))
    exact_refill = mode != "sync" or dapo or bool(sampler.get("sync_refill_failed_groups", False))
    gen = _get(cfg, "data.gen_batch_size")
    if exact_refill and gen not in (None, 1) and set_here("data.gen_batch_size"):
        found.append(
            Finding(
                f"data.gen_batch_size={gen} is overridden to 1 by verl's V1 trainer with DAPO filtering or "
                "an asynchronous mode (set spec.training.generationBatchSize instead)",
                ("data.gen_batch_size",),
            )
        )
    ignored = "algorithm.filter_groups.max_num_gen_batches"
    if dapo and int(filter_groups.get("max_num_gen_batches", 0) or 0) > 0 and set_here(ignored):
        found.append(
            Finding(
                f"{ignored} is ignored by verl's V1 trainer; generation concurrency is "
                "spec.training.generationBatchSize (max_inflight_gen_batches)",
                (ignored,),
            )
        )
    inflight = "algorithm.filter_groups.max_inflight_gen_batches"
    if keys is not None and inflight in keys and not (dapo and builtin_sync):
        found.append(
            Finding(f"{inflight} is read only with DAPO filtering in the sync trainer mode", (inflight,))
        )
    for key in ("actor_rollout_ref.actor.optim.total_training_steps", "critic.optim.total_training_steps"):
        if keys is not None and key in keys:
            found.append(
                Finding(
                    f"{key} is overwritten by verl's V1 trainer from trainer.total_training_steps", (key,)
                )
            )
    if keys is not None and "transfer_queue.enable" in keys:
        found.append(
            Finding(
                "transfer_queue.enable is forced to True by verl's V1 trainer", ("transfer_queue.enable",)
            )
        )
    return found


def _model_checks(cfg: Any, model: Mapping[str, Any], report: Report) -> None:
    text = model.get("text_config") if isinstance(model.get("text_config"), Mapping) else None
    source = model if "num_attention_heads" in model or text is None else text
    heads = source.get("num_attention_heads")
    kv_heads = source.get("num_key_value_heads", heads)
    for section in ("actor_rollout_ref.actor", "actor_rollout_ref.ref"):
        sp = int(_get(cfg, f"{section}.ulysses_sequence_parallel_size", 1) or 1)
        if sp <= 1 or not isinstance(heads, int):
            continue
        key = f"{section}.ulysses_sequence_parallel_size"
        # models/transformers/monkey_patch.py:343-350.
        if heads % sp:
            report.findings.append(
                Finding(
                    f"num_attention_heads {heads} must be divisible by ulysses_sp_size {sp} "
                    "(verl/models/transformers/monkey_patch.py:343)",
                    (key,),
                )
            )
        elif isinstance(kv_heads, int) and kv_heads % sp and sp % kv_heads:
            report.findings.append(
                Finding(
                    f"num_key_value_heads {kv_heads} must be divisible by ulysses_sp_size {sp} or vice versa "
                    "(verl/models/transformers/monkey_patch.py:346)",
                    (key,),
                )
            )
    context = source.get("max_position_embeddings")
    if isinstance(context, int):
        max_model_len = _get(cfg, "actor_rollout_ref.rollout.max_model_len")
        # workers/rollout/sglang_rollout/async_sglang_server.py:167-174.
        if max_model_len is not None and int(max_model_len) > context:
            report.findings.append(
                Finding(
                    f"max_model_len ({max_model_len}) should be less than or equal to "
                    f"max_position_embeddings ({context}) "
                    "(verl/workers/rollout/sglang_rollout/async_sglang_server.py:170)",
                    ("actor_rollout_ref.rollout.max_model_len",),
                )
            )
        limit = int(max_model_len) if max_model_len is not None else context
        prompt = int(_get(cfg, "data.max_prompt_length"))
        # async_sglang_server.py:588-593: a prompt at the maximum length leaves no room to generate.
        if prompt + 1 > limit:
            report.findings.append(
                Finding(
                    f"data.max_prompt_length {prompt} leaves no room to generate within the model's context "
                    f"length {limit} (verl/workers/rollout/sglang_rollout/async_sglang_server.py:588-593)",
                    ("data.max_prompt_length",),
                )
            )
