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
    schema_errors,
)

from flashrl_api import SpecError, load_documents, parse_job
from flashrl_api.manifest import NAME_PATTERN
from flashrl_operator.job.overrides import protected_problems
from flashrl_operator.render import render
from spec_corpus import HOSTILE, from_crd, mutated

MAX_EXAMPLES = 60
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


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


@FUZZ
@given(manifests())
def test_validate_and_render_hold_for_generated_and_mutated_manifests(manifest: dict[str, Any]) -> None:
    OUTCOMES.append(check(manifest))


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
