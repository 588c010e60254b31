"""Overrides refused for what they would make the operator or the pods do, not for what verl thinks.

Two routes around the spec's rules go through ``spec.overrides``, and both are closed here, before any
composition (pure: Hydra's override parser only reads the text):

* **Instantiation.** Hydra's ``instantiate`` turns any node holding ``_target_`` into a call of the
  named Python callable, and verl's start-up checks, which the operator and ``flashrl validate`` run on
  the composed config, call it. An override that introduces one of Hydra's instantiation keys
  (:data:`INSTANTIATION_KEYS`), in its key path or anywhere inside its value (dicts, lists, sweeps), would
  let whoever may create a FlashRLJob run Python of their choice in the operator. User text is data:
  every such override is refused, whatever the callable.
* **The reserved environment, sideways.** ``spec.env`` may not set the launcher's, KubeRay's or the GPU
  runtime's variables; verl hands ``ray_kwargs.ray_init.runtime_env.env_vars`` to every Ray actor, so
  the same names are refused there, and ``ray_kwargs.ray_init.address`` (the launcher hands verl the
  cluster's address) may not be set at all.
* **Hydra's own configuration.** verl's entry point is a ``@hydra.main`` application: ``hydra.*``
  (``hydra.job.env_set.RAY_ADDRESS``, the logging handlers it instantiates, the run directory, the
  launcher) is read by Hydra before verl runs, in the driver. No override may touch it, in any
  spelling (``hydra.x=``, ``+hydra.x=``, ``++hydra=``, ``~hydra``, ``hydra/job_logging=``, a package
  ``@hydra`` or ``@_global_``).

These rules read the override's spelling; :func:`flashrl_jobs.verl_config.check_user_overrides` then
compares what the spec owns in verl's composed config with and without the user's overrides, so a
route these rules miss is still refused.

The value is parsed with Hydra's own grammar, so what is checked is what Hydra would build. Without
Hydra, or when the text does not parse (Hydra will refuse it anyway), the check fails closed on the
text itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from flashrl_api.kuberay_env import KUBERAY_MANAGED_ENV_NAMES
from flashrl_api.spec import is_reserved_env_name

#: Keys Hydra's ``instantiate``/``call`` act on (hydra-core 1.3 ``_Keys``).
INSTANTIATION_KEYS: Final = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")
_INSTANTIATION_TEXT = re.compile("|".join(re.escape(k) for k in INSTANTIATION_KEYS))

#: Where verl reads the Ray actors' environment and the address ``ray.init`` connects to.
RUNTIME_ENV_VARS: Final = "ray_kwargs.ray_init.runtime_env.env_vars"
RAY_ADDRESS_KEY: Final = "ray_kwargs.ray_init.address"


def reserved_runtime_env_name(name: str) -> bool:
    """Whether ``<name>`` is one a job may not set, by any route: the rule ``spec.env`` follows
    (:func:`flashrl_api.spec.is_reserved_env_name` and KubeRay's own), here for ``runtime_env``."""
    return is_reserved_env_name(name) or name in KUBERAY_MANAGED_ENV_NAMES


def _key_of(override: str) -> str:
    return override.split("=", 1)[0].strip().lstrip("+~").strip()


#: Key segments that reach Hydra's own configuration (``hydra``) or the root package (``_global_``).
HYDRA_SEGMENTS: Final = frozenset({"hydra", "_global_"})
_KEY_SEGMENTS = re.compile(r"[./@:\s]+")


def hydra_key_problem(override: str) -> str | None:
    """Why the override reaches Hydra's own configuration, or None.

    Every segment of the key (the dotted path, a config group's ``/`` path, a package after ``@``)
    is compared, case-insensitively: Hydra's grammar has no quoting for keys, so this is every
    spelling of a key under ``hydra``.
    """
    key = _key_of(override)
    segments = [s.lower() for s in _KEY_SEGMENTS.split(key) if s]
    hit = next((s for s in segments if s in HYDRA_SEGMENTS), None)
    if hit is None:
        return None
    return (
        f"{key}: reaches Hydra's own configuration ({hit}); Hydra reads it in verl's driver before verl "
        "starts (its environment, logging and run directory), so no override may touch it"
    )


def parsed_override_value(override: str) -> tuple[bool, Any]:
    """``(True, value)`` parsed by Hydra's override grammar; ``(False, None)`` when that is impossible."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
    except ImportError:
        return False, None
    try:
        return True, OverridesParser.create().parse_override(override).value()
    except Exception:
        return False, None


def _nodes(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every ``(relative key path, node)`` in a parsed override value, sweeps' alternatives included."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, (*path, str(key)))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _nodes(item, path)
    else:
        # Hydra's sweep types (choice, range, interval, glob) keep their alternatives in attributes.
        for attr in ("list", "include", "exclude"):
            inner = getattr(value, attr, None)
            if isinstance(inner, list):
                yield from _nodes(inner, path)


def _instantiation_problem(override: str, parsed: bool, value: Any) -> str | None:
    key = _key_of(override)
    if any(part in INSTANTIATION_KEYS for part in key.split(".")):
        return f"{key}: is a Hydra instantiation key (overrides are data, not code)"
    if not parsed:
        if _INSTANTIATION_TEXT.search(override):
            return f"{key}: mentions a Hydra instantiation key (overrides are data, not code)"
        return None
    for path, _node in _nodes(value):
        if path and path[-1] in INSTANTIATION_KEYS:
            return f"{key}: holds Hydra instantiation key {path[-1]} (overrides are data, not code)"
    return None


def _runtime_env_problem(override: str, parsed: bool, value: Any) -> str | None:
    key = _key_of(override)
    if override.lstrip().startswith("~"):
        return None  # deleting cannot set anything; the launcher's own variables are added after
    if key == RAY_ADDRESS_KEY or key.startswith(RAY_ADDRESS_KEY + "."):
        return f"{key}: the launcher hands verl the Ray cluster's address; it cannot be overridden"
    if key.startswith(RUNTIME_ENV_VARS + "."):
        name = key[len(RUNTIME_ENV_VARS) + 1 :]
        if reserved_runtime_env_name(name):
            return f"{key}: {name} is reserved (as in spec.env); it cannot be set through runtime_env either"
        return None
    # A whole subtree above the address or the variables: look inside the value.
    for target in (RAY_ADDRESS_KEY, RUNTIME_ENV_VARS):
        if not (target + ".").startswith(key + "."):
            continue
        if not parsed:
            return f"{key}: could not be parsed to check the Ray address and runtime_env variables it sets"
        rest = tuple(target[len(key) + 1 :].split(".")) if target != key else ()
        for path, node in _nodes(value):
            if target == RAY_ADDRESS_KEY and path == rest:
                return f"{key}: sets {RAY_ADDRESS_KEY}, which the launcher owns"
            if (
                target == RUNTIME_ENV_VARS
                and path[: len(rest)] == rest
                and len(path) == len(rest) + 1
                and reserved_runtime_env_name(path[-1])
            ):
                return f"{key}: sets runtime_env variable {path[-1]}, which is reserved (as in spec.env)"
            if (
                target == RUNTIME_ENV_VARS
                and path == rest
                and node is not None
                and not isinstance(node, dict)
            ):
                return f"{key}: runtime_env.env_vars must be a mapping of variable names"
    return None


#: Items (list and dict entries, counted by their commas) all of one job's overrides may hold: the size
#: budget of one job's verl checks. Hydra's override parser is slow on long lists (seconds per thousand
#: items, several passes per check), so a spec at the API server's own size limits (128 overrides of
#: 1,024 characters) would hold a check slot for minutes; verl's configuration needs few list items.
MAX_OVERRIDE_ITEMS: Final = 1024


def override_items(overrides: Iterable[str]) -> int:
    """An upper bound of the list and dict entries in the overrides' values (their commas)."""
    return sum(override.count(",") for override in overrides)


def budget_problem(overrides: Sequence[str]) -> str | None:
    """Why the overrides are beyond one job's check budget (size), or None."""
    items = override_items(overrides)
    if items <= MAX_OVERRIDE_ITEMS:
        return None
    return (
        f"{items} list or dict items (commas) in all, more than the {MAX_OVERRIDE_ITEMS} one job's verl "
        "checks may take: shorten the lists, or set them in the dataset or a config file instead"
    )


def unsafe_override_problems(overrides: Iterable[str]) -> list[tuple[int, str]]:
    """``(index, message)`` for each override that would instantiate code or reach the reserved
    environment; the message names the key and the rule, never the value."""
    problems: list[tuple[int, str]] = []
    for index, override in enumerate(overrides):
        parsed, value = parsed_override_value(override)
        problem = (
            hydra_key_problem(override)
            or _instantiation_problem(override, parsed, value)
            or _runtime_env_problem(override, parsed, value)
        )
        if problem is not None:
            problems.append((index, problem))
    return problems
