"""Spec corpora from the CRD's own schema: what the fuzzer (tests/unit/render/test_fuzz.py) and the two-judges
test on the real API server (tests/integration/test_apiserver_two_judges.py) both generate.

Strategies come from the generated CRD, so a field added to the models is generated without touching
this file. They are written here rather than taken from hypothesis-jsonschema: its latest release
(0.23.1) fails against current hypothesis (``AttributeError: 'many' object has no attribute 'more'`` in
``from_object_schema``), and a structural schema needs only this much.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import strategies as st

#: Values a fuzzer puts anywhere: wrong types, nulls, extremes, interpolations, odd text.
HOSTILE: list[Any] = [
    None,
    "",
    "x" * 5000,
    -1,
    0,
    2**31,
    2**63,
    1.5,
    True,
    [],
    {},
    [[[[]]]],
    {"a": {"b": {"c": {}}}},
    "${oc.env:HOME}",
    "a\x00b",
    "\ufeff日本語",
    "/dev/shm",
    "nvidia.com/gpu",
    "hf.token",
    # Issue 18: a trailing newline, Hub names and revisions the Hub refuses, paths with '..', and
    # overrides that name code or reach the reserved environment.
    "abc\n",
    "hf://a..b/c",
    "hf://a--b/c",
    "hf://a/b@%2e%2e",
    "hf://datasets/a/b/../x.parquet",
    "/data/../etc/passwd",
    ["+actor_rollout_ref.rollout.pwn={_target_:builtins.open,_args_:['/etc/hostname']}"],
    ["++ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD=/x.so"],
    ["+ray_kwargs.ray_init.address=evil:6379"],
]


def _string(node: dict[str, Any]) -> st.SearchStrategy[str]:
    if "enum" in node:
        return st.sampled_from(node["enum"])
    limit = min(node.get("maxLength", 64), 64)
    if "pattern" in node:
        pattern = node["pattern"]
        return st.from_regex(re.compile(pattern), fullmatch=True).filter(
            lambda s: len(s) <= node.get("maxLength", 10**6)
        )
    return st.text(min_size=node.get("minLength", 0), max_size=limit)


def _number(node: dict[str, Any], integer: bool) -> st.SearchStrategy[Any]:
    low, high = node.get("minimum"), node.get("maximum")
    if integer:
        return st.integers(
            min_value=low if low is not None else -(2**40), max_value=high if high is not None else 2**40
        )
    return st.floats(
        min_value=low if low is not None else -1e6,
        max_value=high if high is not None else 1e6,
        exclude_min=bool(node.get("exclusiveMinimum")),
        exclude_max=bool(node.get("exclusiveMaximum")),
        allow_nan=False,
        allow_infinity=False,
    )


def from_crd(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the CRD node's schema accepts (types, enums, ranges, patterns; small lists and maps)."""
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        required = set(node.get("required", []))
        return st.fixed_dictionaries(
            {k: from_crd(v) for k, v in node["properties"].items() if k in required},
            optional={k: from_crd(v) for k, v in node["properties"].items() if k not in required},
        )
    if kind == "object":
        return st.dictionaries(
            st.from_regex(r"\A[a-z]([a-z0-9.-]{0,20}/)?[a-z0-9]{1,10}\Z"),
            from_crd(node["additionalProperties"]),
            max_size=min(node.get("maxProperties", 3), 3),
        )
    if kind == "array":
        items = from_crd(node["items"])
        unique = node.get("x-kubernetes-list-map-keys")
        return st.lists(
            items,
            max_size=min(node.get("maxItems", 3), 3),
            unique_by=(lambda item: tuple(item.get(k) for k in unique)) if unique else None,
        )
    if kind == "string":
        return _string(node)
    if kind == "integer":
        return _number(node, integer=True)
    if kind == "number":
        return _number(node, integer=False)
    if kind == "boolean":
        return st.booleans()
    raise AssertionError(f"no strategy for {node}")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A generated spec with one to three places replaced by hostile values or odd keys.

    Every hostile value is a copy: the shared ones in :data:`HOSTILE` are containers too, and mutating
    them in place would change what later examples draw (hypothesis then reports a flaky strategy).
    """
    spec = copy.deepcopy(draw(base))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(spec) if p]
        if not paths:
            spec = {"training": copy.deepcopy(draw(st.sampled_from(HOSTILE)))}
            continue
        path = draw(st.sampled_from(paths))
        parent: Any = spec
        for part in path[:-1]:
            parent = parent[part]
        how = draw(st.sampled_from(["value", "snake_case", "unknown"]))
        leaf = path[-1]
        if how == "value" or not isinstance(leaf, str):
            parent[leaf] = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        elif how == "snake_case":
            parent[re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), leaf) + "_"] = parent.pop(leaf)
        else:
            parent[leaf + "X"] = parent[leaf]
    return spec
