"""Compose verl's Hydra config offline, so a bad override fails in seconds, not after GPUs start.

verl is used for its config files only: the package is located with ``importlib.util.find_spec``
(which does not execute it; ``import verl`` needs torch) and its ``trainer/config`` directory is
composed with Hydra exactly as ``python3 -m verl.trainer.main_ppo`` would compose it, then resolved
with OmegaConf. Struct mode rejects every key the pinned verl does not know, so removed keys such
as ``rollout_token_veto_threshold`` or ``reward_model.overlong_buffer.*`` are caught here.

Callers: the launcher (before it waits on Ray), and, lazily, ``flashrl validate`` and the operator
through :func:`check_user_overrides`. Hydra keeps global state, so compositions are serialised by a
lock and the results of recent ones are cached (a composition takes about a second).

Hostile overrides are bounded: finding every bad override among n costs a fixed number of
compositions (the base config once, each override applied to it alone with Hydra's own override code,
then the survivors composed once), not one composition per bad override; and OmegaConf's ``oc.env``
resolver refuses to run, so no override or spec value can read the validating process's environment
(the spec's rules already refuse ``${`` in everything that reaches verl; this is the second lock).
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Final

from flashrl_api import FlashRLJob, Problem
from flashrl_api.staging import model_location
from flashrl_jobs.override_rules import RAY_ADDRESS_KEY, RUNTIME_ENV_VARS, reserved_runtime_env_name
from flashrl_jobs.verl_args import (
    CONFIG_NAME,
    FIELD_OF_KEY,
    PROTECTED_KEYS,
    generated_overrides,
    merge_overrides,
    override_key,
    protected_key_problems,
)

#: Keys older verl releases (and the recipes written for them) used; the pinned verl rejects them or,
#: when forced in with ``+``, silently ignores them. Value: what replaced each one.
REMOVED_KEYS: Final[dict[str, str]] = {
    "algorithm.rollout_correction.rollout_token_veto_threshold": "removed in verl 0.7.1; use "
    "algorithm.rollout_correction.rollout_rs (rejection sampling) instead",
    "algorithm.rollout_correction.use_policy_gradient": "removed in verl 0.7.0; use "
    "algorithm.rollout_correction.loss_type",
    "algorithm.rollout_correction.rollout_rs_threshold_lower": "removed in verl 0.7.1; give "
    "rollout_rs_threshold as 'lo_hi'",
    "actor_rollout_ref.actor.tis_imp_ratio_cap": "removed; set spec.correction.tis.cap",
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes": "moved to "
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
    "algorithm.rollout_is_threshold": "moved under algorithm.rollout_correction (set spec.correction.tis)",
    "algorithm.rollout_is": "moved under algorithm.rollout_correction (set spec.correction.tis)",
}
#: Whole subtrees that were removed (every key below them is rejected).
REMOVED_PREFIXES: Final[dict[str, str]] = {
    "reward_model.overlong_buffer.": "removed by verl's reward refactor (0.7.1); set "
    "spec.training.overlongBuffer (reward.reward_kwargs.overlong_buffer_cfg.*)",
}

_QUOTED = re.compile(r"'([^'\s]+)'")
_LOCK = threading.Lock()
#: Compositions the fallback search for a culprit may spend (after the linear screen, which normally
#: leaves none to find); what remains unexplained after that is reported at ``spec.overrides`` once.
MAX_FALLBACK_COMPOSITIONS = 12
#: Longest message of Hydra's or OmegaConf's quoted in a problem (they echo the override's value).
MAX_MESSAGE = 300


class VerlConfigUnavailableError(RuntimeError):
    """verl's config files or Hydra are not installed here, so nothing can be composed."""


@dataclass(frozen=True)
class ComposeError:
    """verl refused one override list; ``message`` is Hydra's or OmegaConf's own explanation."""

    message: str
    #: The dotted key the message names, when it names one.
    key: str | None = None


def verl_version() -> str:
    """Version of the installed verl distribution (``unknown`` when its metadata is missing)."""
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return "unknown"


def config_dir() -> Path:
    """``<verl package>/trainer/config``, found without importing verl (its ``__init__`` needs torch)."""
    try:
        found = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        found = None
    locations = list(found.submodule_search_locations or []) if found is not None else []
    if not locations:
        raise VerlConfigUnavailableError(
            "verl is not installed; install it for its config only: pip install --no-deps verl"
        )
    path = Path(locations[0]) / "trainer" / "config"
    if not (path / f"{CONFIG_NAME}.yaml").is_file():
        raise VerlConfigUnavailableError(f"{path} holds no {CONFIG_NAME}.yaml; is verl installed completely?")
    return path


def _hydra() -> tuple[Any, Any, Any]:
    try:
        from hydra import compose, initialize_config_dir
        from omegaconf import OmegaConf
    except ImportError as exc:
        raise VerlConfigUnavailableError(
            f"{exc.name} is not installed; install the verl-config extra (hydra-core, omegaconf)"
        ) from None
    return compose, initialize_config_dir, OmegaConf


def _named_key(message: str, overrides: Sequence[str]) -> str | None:
    keys = {override_key(o) for o in overrides}
    for quoted in _QUOTED.findall(message):
        key = str(quoted).lstrip("+~")
        if key in keys:
            return key
    return None


class InterpolationRefusedError(ValueError):
    """An override or spec value asked OmegaConf to read the environment while being validated."""


def _refuse_env(*args: Any, **kwargs: Any) -> Any:
    raise InterpolationRefusedError(
        "${oc.env:...} is refused: validating a FlashRLJob never reads the environment"
    )


def _guard_resolvers(omegaconf: Any) -> None:
    """Replace OmegaConf's ``oc.env`` resolver with one that refuses (verl's config uses only
    ``oc.select``, which reads the config itself). Process-wide and idempotent: verl runs in a child
    process of its own, so its resolvers are untouched."""
    omegaconf.register_new_resolver("oc.env", _refuse_env, replace=True)


def _compose(overrides: Sequence[str], resolve: bool = True) -> Any:
    """Compose (and resolve); raises Hydra or OmegaConf errors. Call with ``_LOCK`` held."""
    compose, initialize_config_dir, omegaconf = _hydra()
    from hydra.core.global_hydra import GlobalHydra

    _guard_resolvers(omegaconf)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        cfg = compose(config_name=CONFIG_NAME, overrides=list(overrides))
    if resolve:
        omegaconf.resolve(cfg)
    return cfg


def compose_config(overrides: Sequence[str]) -> Any:
    """verl's resolved trainer config (an OmegaConf ``DictConfig``) for these overrides.

    Raises :class:`VerlConfigUnavailableError` when verl or Hydra is missing and :class:`ValueError`
    carrying verl's message when an override is rejected.
    """
    with _LOCK:
        try:
            return _compose(overrides)
        except VerlConfigUnavailableError:
            raise
        except Exception as exc:
            raise ValueError(_message(exc)) from None


def _message(exc: BaseException) -> str:
    text = str(exc).strip()
    # Hydra appends its search path and a docs link; the first lines are the explanation.
    for marker in ("\nConfig search path:", "\nSee https://hydra.cc"):
        text = text.split(marker, 1)[0]
    full_key = getattr(exc, "full_key", None)
    if full_key and str(full_key) not in text:
        text = f"{full_key}: {text}"
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    # Hydra quotes the override back ("To append to your config use +key=<value>"): keep it short.
    return text if len(text) <= MAX_MESSAGE else f"{text[:MAX_MESSAGE]}... ({len(text)} characters)"


#: What :func:`owned_values` reads besides the protected keys: where verl reads the Ray address and the
#: Ray actors' environment.
_OWNED_EXTRA: Final = (RAY_ADDRESS_KEY, RUNTIME_ENV_VARS)
_ABSENT: Final = "<absent>"


def compose_error(overrides: tuple[str, ...]) -> ComposeError | None:
    """None when verl accepts the override list, else why not (cached: a compose takes ~1 s)."""
    return _composition(overrides)[0]


@lru_cache(maxsize=32)
def _composition(overrides: tuple[str, ...]) -> tuple[ComposeError | None, dict[str, str] | None]:
    """One composition of the list: why verl refuses it, or the values the spec owns in it (each as
    JSON; ``<absent>`` for a missing node), read from the same composition."""
    with _LOCK:
        try:
            cfg = _compose(overrides)
        except VerlConfigUnavailableError:
            raise
        except Exception as exc:
            message = _message(exc)
            key = getattr(exc, "full_key", None) or _named_key(message, overrides)
            return ComposeError(message=message, key=str(key) if key else None), None
        omegaconf = _hydra()[2]
        values: dict[str, str] = {}
        for owned in (*PROTECTED_KEYS, *_OWNED_EXTRA):
            node = omegaconf.select(cfg, owned, default=_ABSENT, throw_on_missing=False)
            if omegaconf.is_config(node):
                node = omegaconf.to_container(node, resolve=True)
            values[owned] = json.dumps(node, sort_keys=True, default=str)
    return None, values


def _parse_problem(override: str) -> str | None:
    """Hydra's own grammar check of one override (no composition needed)."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:
        return None
    try:
        OverridesParser.create().parse_override(override)
    except Exception as exc:
        return f"not a valid Hydra override: {_message(exc)}"
    return None


def removed_key_hint(override: str) -> str | None:
    """Why a key from an older verl no longer works here, or None when the key is not a removed one."""
    key = override_key(override)
    if key in REMOVED_KEYS:
        return REMOVED_KEYS[key]
    for prefix, hint in REMOVED_PREFIXES.items():
        if key.startswith(prefix):
            return hint
    return None


def _culprit(generated: list[str], user: list[tuple[int, str]], error: ComposeError) -> int | None:
    """Position in ``user`` of the override that breaks composition.

    First by the key verl's message names; otherwise by bisecting on prefixes of the user list
    (composition of a prefix only fails once the culprit is in it).
    """
    if error.key is not None:
        # The last override with a key wins the merge, so that is the one verl saw.
        for pos in reversed(range(len(user))):
            if override_key(user[pos][1]) == error.key:
                return pos
    if compose_error(tuple(generated)) is not None:
        return None
    low, high = 0, len(user)  # invariant: prefix of length `low` composes, of length `high` fails
    while high - low > 1:
        mid = (low + high) // 2
        if compose_error(tuple(merge_overrides(generated, [o for _, o in user[:mid]]))) is None:
            low = mid
        else:
            high = mid
    return high - 1


def screen_overrides(generated: Sequence[str], user: Sequence[tuple[int, str]]) -> dict[int, str]:
    """Each user override applied alone, in order, onto the config composed once: index -> why not.

    The base is verl's config with the generated overrides whose keys the user does not set; every
    user override is then parsed and applied with Hydra's own override code
    (``hydra._internal.config_loader_impl.ConfigLoaderImpl._apply_overrides_to_config``, pinned
    hydra-core 1.3.8, the function ``compose`` itself calls), so unknown keys, bad syntax and refused
    additions are found in one pass: linear in the number of overrides. An override that fails is
    left out, as the composition loop would leave it out.
    """
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:
        return {}
    user_keys = {override_key(o) for _, o in user}
    base_overrides = [o for o in generated if override_key(o) not in user_keys]
    with _LOCK:
        try:
            cfg = _compose(base_overrides, resolve=False)
        except VerlConfigUnavailableError:
            raise
        except Exception:
            return {}  # the base itself fails: the composition loop reports that at `spec`
        parser = OverridesParser.create()
        found: dict[int, str] = {}
        for index, text in user:
            try:
                parsed = parser.parse_overrides([text])
                ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
            except Exception as exc:
                found[index] = _message(exc)
    return found


def owned_values(overrides: tuple[str, ...]) -> dict[str, str] | None:
    """The values the spec owns in verl's composed config (each as JSON; ``<absent>`` for a missing
    node), or None when the list does not compose. Cached with :func:`compose_error`'s composition."""
    return _composition(overrides)[1]


def _owner_of(key: str, user: Sequence[tuple[int, str]]) -> int | None:
    """The index of the last user override whose key is ``key`` or a dict above it (the one that won)."""
    for index, override in reversed(user):
        okey = override_key(override)
        if key == okey or key.startswith(okey + ".") or not okey:
            return index
    return None


def composed_owned_problems(generated: Sequence[str], user: Sequence[tuple[int, str]]) -> dict[int, str]:
    """Each way the user's overrides change, in verl's composed config, what the spec owns.

    The spelling rules (:func:`flashrl_jobs.verl_args.protected_key_problems`) look at each override's
    key and value; this looks at the result: the protected keys' values composed with and without the
    user's overrides must be equal, the Ray address must be the launcher's, and the Ray actors'
    environment may hold no reserved name, whatever route (a parent dict, a config group, an
    interpolation) put them there. ``-1`` is a change no single override explains.
    """
    if not user:
        return {}
    base = owned_values(tuple(generated))
    full = owned_values(tuple(merge_overrides(generated, [o for _, o in user])))
    if base is None or full is None:
        return {}  # a composition failure is reported by the caller's own loop
    found: dict[int, str] = {}
    changed = [key for key in (*PROTECTED_KEYS, RAY_ADDRESS_KEY) if base[key] != full[key]]
    env = json.loads(full[RUNTIME_ENV_VARS]) if full[RUNTIME_ENV_VARS] != json.dumps(_ABSENT) else None
    if isinstance(env, dict):
        changed += [
            f"{RUNTIME_ENV_VARS}.{name}" for name in sorted(env) if reserved_runtime_env_name(str(name))
        ]
    texts = dict(user)
    for key in changed:
        index = _owner_of(key, user)
        what = (
            f"is set by {PROTECTED_KEYS[key]}; change that field instead"
            if key in PROTECTED_KEYS
            else "is the launcher's (the Ray cluster's address and the reserved environment)"
        )
        found.setdefault(
            -1 if index is None else index,
            f"{'' if index is None else override_key(texts[index]) + ': '}would change {key} "
            f"in verl's composed config, which {what}",
        )
    return found


def check_user_overrides(job: FlashRLJob) -> list[Problem]:
    """Every problem with ``spec.overrides`` against the installed verl, each at ``spec.overrides[i]``.

    Reports protected keys (set by other spec fields), removed keys (with what replaced them), Hydra
    syntax errors, and every key the pinned verl config rejects: the merged override list is composed,
    a rejected override is located, dropped and the rest composed again until verl accepts them.
    A rejection of a generated override (launcher and verl versions disagree) is reported at ``spec``.
    Raises :class:`VerlConfigUnavailableError` when verl's config cannot be loaded here.
    """
    config_dir()  # fail early and clearly when verl is absent
    problems: dict[int, Problem] = {}
    # Unsafe overrides first: nothing below composes them.
    for index, message in protected_key_problems(job.spec.overrides):
        problems[index] = Problem(f"spec.overrides[{index}]", message)
    for index, override in enumerate(job.spec.overrides):
        if index in problems:
            continue
        reason = removed_key_hint(override) or _parse_problem(override)
        if reason is not None:
            problems[index] = Problem(f"spec.overrides[{index}]", f"{override_key(override)}: {reason}")
    generated = generated_overrides(job)
    remaining = [(i, o) for i, o in enumerate(job.spec.overrides) if i not in problems]
    for index, message in screen_overrides(generated, remaining).items():
        override = job.spec.overrides[index]
        problems[index] = Problem(
            f"spec.overrides[{index}]",
            f"{override_key(override)}: rejected by verl {verl_version()}: {message}",
        )
    remaining = [(i, o) for i, o in remaining if i not in problems]
    started = _composition.cache_info().misses
    while True:
        error = compose_error(tuple(merge_overrides(generated, [o for _, o in remaining])))
        if error is None:
            break
        if _composition.cache_info().misses - started > MAX_FALLBACK_COMPOSITIONS:
            problems[-1] = Problem(
                "spec.overrides",
                f"verl {verl_version()} rejects the overrides together and the culprit was not found "
                f"within {MAX_FALLBACK_COMPOSITIONS} compositions: {error.message}",
            )
            break
        pos = _culprit(generated, remaining, error) if remaining else None
        if pos is None:
            problems[-1] = Problem(
                "spec",
                f"verl {verl_version()} rejects the launcher's generated config (launcher and verl "
                f"versions disagree): {error.message}",
            )
            break
        index, override = remaining.pop(pos)
        problems[index] = Problem(
            f"spec.overrides[{index}]",
            f"{override_key(override)}: rejected by verl {verl_version()}: {error.message}",
        )
    for index, message in composed_owned_problems(generated, remaining).items():
        problems[index] = Problem("spec.overrides" if index < 0 else f"spec.overrides[{index}]", message)
    return [problems[i] for i in sorted(problems)]


@dataclass(frozen=True)
class ConfigCheck:
    """The outcome of :func:`check_config`: problems (each at a field path) and what went unchecked."""

    problems: list[Problem]
    skipped: list[str]


def _leaf_mentioned(key: str, message: str) -> bool:
    leaf = key.rsplit(".", 1)[-1]
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(leaf)}(?![A-Za-z0-9_])", message) is not None


def finding_path(job: FlashRLJob, keys: Sequence[str], message: str, section: str = "") -> str:
    """Where a verl finding about ``keys`` belongs in the FlashRLJob.

    The user override that set one of the keys (``spec.overrides[i]``) when there is one, else the
    field the value came from (``spec.training.miniBatchSize``). A finding that names no key is
    matched by the keys' last segments appearing in verl's message, then by the user overrides in
    the section the check validated. ``spec`` when nothing matches (a value the launcher fixes).
    """
    user = {override_key(o): i for i, o in enumerate(job.spec.overrides)}
    candidates = list(keys)
    if not candidates:
        known = list(user) + [k for k in FIELD_OF_KEY if k not in user]
        candidates = [k for k in known if _leaf_mentioned(k, message)]
    if not candidates and section:
        candidates = [k for k in user if k.startswith(section + ".")]
    for key in candidates:
        if key in user:
            return f"spec.overrides[{user[key]}]"
    for key in candidates:
        if key in FIELD_OF_KEY:
            return f"spec.{FIELD_OF_KEY[key]}"
    return "spec"


def check_config(
    job: FlashRLJob, *, model_files: bool = True, model_config: Mapping[str, Any] | None = None
) -> ConfigCheck:
    """Everything verl 0.9.1 would refuse in this job's configuration, before any GPU is asked for.

    First the override checks of :func:`check_user_overrides` (keys, syntax, composition); when the
    configuration composes, verl's own start-up checks on it (:mod:`flashrl_jobs.verl_checks`), each
    reported at the FlashRLJob field or override its value came from. Model-dependent checks use the
    model's ``config.json`` when the model (``spec.model.source``, staged or a path) is a local
    directory, or an ``hf://`` model is in this machine's Hugging Face cache (``model_files=False``
    skips them: the operator's filesystem is not the pods'); ``model_config`` gives that ``config.json``
    directly (the sandboxed child, :mod:`flashrl_jobs.verl_child`, reads no file of its caller's);
    ``skipped`` says what could not be checked here. Raises :class:`VerlConfigUnavailableError` when
    verl's config cannot be loaded.
    """
    from flashrl_jobs.verl_checks import cached_model_config_json, model_config_json, run_checks

    problems = check_user_overrides(job)
    if problems:
        return ConfigCheck(problems, ["verl's start-up checks: not run until the overrides compose"])
    cfg = compose_config(verl_overrides_for(job))
    if model_config is None and model_files:
        model_config = model_config_json(model_location(job.spec)) or cached_model_config_json(
            job.spec.model.source
        )
    try:
        report = run_checks(cfg, model_config)
    except Exception as exc:
        return ConfigCheck(crash_problems(job, cfg, exc), ["verl's start-up checks: stopped by the crash"])
    found: dict[str, Problem] = {}
    for finding in report.findings:
        path = finding_path(job, finding.keys, finding.message, finding.section)
        problem = Problem(path, f"verl {verl_version()}: {finding.message}")
        found.setdefault(str(problem), problem)
    return ConfigCheck(list(found.values()), report.skipped)


def _kind(node: Any) -> str | None:
    """What sort of value a config node holds: a mapping, a list, a number, a string, a boolean
    (None for a null or a missing node, which fit any sort)."""
    omegaconf = _hydra()[2]
    if omegaconf.is_dict(node):
        return "a mapping"
    if omegaconf.is_list(node):
        return "a list"
    if node is None or node == _ABSENT:
        return None
    if isinstance(node, bool):
        return "a boolean"
    if isinstance(node, int | float):
        return "a number"
    return "a string"


def crash_problems(job: FlashRLJob, cfg: Any, exc: BaseException) -> list[Problem]:
    """Where a crash inside verl's checks came from: each user override that changed the sort of
    value verl's own config holds at its key (``rollout.n=[1,2]`` where verl holds a number), at
    ``spec.overrides[i]``; ``spec.overrides`` (``spec`` without overrides) when none did. The
    exception is named by its class only (its text may quote anything)."""
    omegaconf = _hydra()[2]
    base = compose_config(generated_overrides(job))
    problems: list[Problem] = []
    for index, override in enumerate(job.spec.overrides):
        key = override_key(override)
        before = _kind(omegaconf.select(base, key, default=_ABSENT, throw_on_missing=False))
        found = omegaconf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        if before is not None and isinstance(found, str) and found == _ABSENT:
            problems.append(
                Problem(
                    f"spec.overrides[{index}]",
                    f"{key}: verl's start-up checks failed with {type(exc).__name__}: the override deletes "
                    f"{before} verl's checks read",
                )
            )
            continue
        after = _kind(found)
        if before is not None and after is not None and before != after:
            problems.append(
                Problem(
                    f"spec.overrides[{index}]",
                    f"{key}: verl's start-up checks failed with {type(exc).__name__} on its value: verl's "
                    f"config holds {before} there, the override gives {after}",
                )
            )
    if problems:
        return problems
    path = "spec.overrides" if job.spec.overrides else "spec"
    return [Problem(path, f"verl's start-up checks failed with {type(exc).__name__} on this configuration")]


def verl_overrides_for(job: FlashRLJob) -> list[str]:
    """The merged override list verl runs with (generated, then the user's)."""
    return merge_overrides(generated_overrides(job), job.spec.overrides)
