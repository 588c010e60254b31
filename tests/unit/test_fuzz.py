"""Property-based fuzzing of validate and render: manifests generated from the CRD's own schema, and mutated.

The property, for every manifest: reading it never raises anything but a ``SpecError``; every refusal
names a field path; and every accepted manifest renders objects that pass ``kubernetes-validate
--strict`` (the core objects and the pod templates as pods), the KubeRay v1.7.0 RayJob CRD schema
closed like strict field validation, and KubeRay's and Kueue's admission rules
(``test_render_schema.py`` holds those checks).

Strategies come from the generated CRD (``flashrl crd``), so a field added to the models is fuzzed
without touching this file. They are written here rather than taken from hypothesis-jsonschema: its
latest release (0.23.1) fails against current hypothesis (``AttributeError: 'many' object has no
attribute 'more'`` in ``from_object_schema``), and a structural schema needs only this much.

Bounded for the suite: ``derandomize=True`` (the same examples on every run, no database) and a fixed
``max_examples``.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from crd_schema_tools import spec_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_render_schema import (
    K8S_VERSION,
    as_pods,
    kuberay_and_kueue_problems,
    needs_crd,
    schema_errors,
)

from flashrl_api import SpecError, load_documents, parse_job
from flashrl_api.manifest import NAME_PATTERN
from flashrl_operator.cli import protected_problems
from flashrl_operator.render import render

MAX_EXAMPLES = 60
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

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

#: Issue 18's probes as whole specs: each must be refused, every problem at a field path.
ISSUE_18_SPECS: list[dict[str, Any]] = [
    {"overrides": ["+a.b={_target_:builtins.float,_args_:[{_target_:builtins.next}]}"]},
    {"overrides": ["actor_rollout_ref.actor._target_=builtins.open"]},
    {"overrides": ["++trainer.x=[1,{c:{_partial_:true}}]"]},
    {"overrides": ["+trainer.x=choice({_target_:os.getcwd},1)"]},
    {"overrides": ["+ray_kwargs.ray_init.runtime_env.env_vars.FLASHRL_SPEC=/x"]},
    {"overrides": ["ray_kwargs.ray_init={address:evil:6379}"]},
    {"model": {"source": "hf://a..b/c"}},
    {"model": {"source": "hf://a/b@%2e%2e"}},
    {"data": {"train": "hf://datasets/a/b/../x.parquet"}},
    {"data": {"train": "/data/../etc/passwd"}},
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
    """A generated spec with one to three places replaced by hostile values or odd keys."""
    spec = draw(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(spec) if p]
        if not paths:
            spec = {"training": draw(st.sampled_from(HOSTILE))}
            continue
        path = draw(st.sampled_from(paths))
        parent: Any = spec
        for part in path[:-1]:
            parent = parent[part]
        how = draw(st.sampled_from(["value", "snake_case", "unknown"]))
        leaf = path[-1]
        if how == "value" or not isinstance(leaf, str):
            parent[leaf] = draw(st.sampled_from(HOSTILE))
        elif how == "snake_case":
            parent[re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), leaf) + "_"] = parent.pop(leaf)
        else:
            parent[leaf + "X"] = parent[leaf]
    return spec


def manifests() -> st.SearchStrategy[dict[str, Any]]:
    spec = from_crd(spec_schema())
    return st.fixed_dictionaries(
        {
            "apiVersion": st.just("flashrl.dev/v1alpha1"),
            "kind": st.just("FlashRLJob"),
            "metadata": st.fixed_dictionaries(
                {
                    "name": st.from_regex(re.compile(NAME_PATTERN), fullmatch=True).filter(
                        lambda n: len(n) <= 63
                    )
                },
                optional={"namespace": st.sampled_from(["rl", "team-a", 7, "Bad_NS", "team-a\n"])},
            ),
            "spec": st.one_of(spec, mutated(spec)),
        }
    )


def check(manifest: dict[str, Any]) -> str:
    """The property for one manifest; returns ``accepted`` or ``refused``."""
    text = yaml.safe_dump(manifest, allow_unicode=True)
    try:
        job = parse_job(load_documents(text, "fuzz")[0])
    except SpecError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.path or problem.message.startswith("... and "), problem
            assert len(problem.message) < 2000, problem
        return "refused"
    protected = protected_problems(job)
    if protected:
        assert all(p.path.startswith("spec.overrides[") for p in protected)
        return "refused"
    objects = {obj["kind"]: obj for obj in render(job)}
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap"):
        kubernetes_validate.validate(objects[kind], K8S_VERSION, strict=True)
    ray_job = objects["RayJob"]
    for pod in as_pods(ray_job):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert schema_errors(ray_job) == []
    assert kuberay_and_kueue_problems(ray_job) == []
    return "accepted"


OUTCOMES: list[str] = []


@needs_crd
@FUZZ
@given(manifests())
def test_validate_and_render_hold_for_generated_and_mutated_manifests(manifest: dict[str, Any]) -> None:
    OUTCOMES.append(check(manifest))


@needs_crd
def test_the_fuzzer_reaches_both_outcomes() -> None:
    if not OUTCOMES:
        pytest.skip("runs after the fuzz test")
    assert "accepted" in OUTCOMES and "refused" in OUTCOMES, OUTCOMES


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v)[:20] for v in HOSTILE])
def test_each_hostile_value_at_the_top_of_the_spec(value: Any) -> None:
    assert check(
        {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": "j"}, "spec": value}
    ) in (
        "accepted",
        "refused",
    )


@pytest.mark.parametrize("spec", ISSUE_18_SPECS, ids=[str(s)[:40] for s in ISSUE_18_SPECS])
def test_issue_18_probes_are_refused_with_field_paths(spec: dict[str, Any]) -> None:
    pytest.importorskip("hydra")
    assert check(
        {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": "j"}, "spec": spec}
    ) == ("refused")


@pytest.mark.parametrize(
    "metadata", [{"name": "abc\n"}, {"name": "abc", "namespace": "rl\n"}, {"name": "a" * 64}]
)
def test_issue_18_names_are_matched_whole(metadata: dict[str, Any]) -> None:
    assert check(
        {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": metadata, "spec": {}}
    ) == ("refused")
