"""Deterministic, valid and collision-resistant child names."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from flashrl_api import parse_job
from flashrl_operator.render import child_names
from flashrl_operator.render.names import (
    MAX_RAY_JOB_NAME,
    derived_name,
    is_dns1035_label,
    label_value,
    ray_job_name,
    short_hash,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

LONG_A = "qwen3-8b-dapo-fp8-blockwise-tis-cap2-h20-node-pool-a-run-0001"
LONG_B = "qwen3-8b-dapo-fp8-blockwise-tis-cap2-h20-node-pool-a-run-0002"


@pytest.mark.parametrize("name", ["a", "qwen3-8b-dapo-fp8", "x" * MAX_RAY_JOB_NAME])
def test_short_valid_names_are_kept(name: str) -> None:
    assert ray_job_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "x" * (MAX_RAY_JOB_NAME + 1),
        "a" * 63,
        LONG_A,
        "a" + "-" * 60 + "b",  # A cut inside the run of dashes must not end the name with '-'.
        "0-starts-with-a-digit",
        "UPPER_case.and.dots",
        "-",
    ],
)
def test_ray_job_name_is_a_short_dns1035_label(name: str) -> None:
    short = ray_job_name(name)
    assert len(short) <= MAX_RAY_JOB_NAME == 47
    assert DNS_1035.match(short), short
    assert is_dns1035_label(short, 47)
    assert short.endswith(short_hash(name))


def test_shortened_names_are_stable_and_distinct() -> None:
    assert ray_job_name(LONG_A) == ray_job_name(LONG_A)
    assert ray_job_name(LONG_A) != ray_job_name(LONG_B)
    # Readable: the start of the original survives.
    assert ray_job_name(LONG_A).startswith("qwen3-8b-dapo-fp8")


def test_hash_is_stable_across_processes() -> None:
    # sha256, not Python's salted hash(): another interpreter computes the same name.
    code = f"from flashrl_operator.render.names import ray_job_name; print(ray_job_name({LONG_A!r}))"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert other.stdout.strip() == ray_job_name(LONG_A)


@pytest.mark.parametrize("name", ["a", "a" * 63, LONG_A])
def test_derived_names_keep_their_suffix(name: str) -> None:
    for suffix in ("spec", "launcher"):
        derived = derived_name(name, suffix)
        assert derived == f"{name}-{suffix}"
        assert len(derived) <= 253
        assert DNS_1123_SUBDOMAIN.match(derived)


def test_derived_names_are_hashed_when_invalid() -> None:
    for name in ("Has_Upper", "x" * 260):
        derived = derived_name(name, "spec")
        assert derived.endswith(f"-{short_hash(name)}-spec")
        assert len(derived) <= 253
        assert DNS_1123_SUBDOMAIN.match(derived), derived
    assert derived_name("x" * 260, "spec") != derived_name("x" * 259, "spec")


@pytest.mark.parametrize("value", ["a", "a" * 63, "a" * 64, "a" * 200, "-leading", "has space", "ok.value_1"])
def test_label_values_are_valid(value: str) -> None:
    out = label_value(value)
    assert len(out) <= 63
    assert LABEL_VALUE.match(out), out
    if len(value) <= 63 and LABEL_VALUE.match(value):
        assert out == value
    else:
        assert out.endswith(short_hash(value))


def test_child_names_of_a_long_job() -> None:
    name = "a" * 63  # The longest FlashRLJob name the API accepts.
    job = parse_job({"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": name}})
    names = child_names(job)
    assert len(names.ray_job) <= 47
    assert names.config_map == f"{name}-spec"
    assert names.service_account == names.role == names.role_binding == f"{name}-launcher"


# --- issue 18: every child of a 63-character name fits its kind's limit -----------------------------

#: Each kind's name limit on the API server (a Job's name is its pods' job-name label value).
KIND_LIMITS = {
    "RayJob": MAX_RAY_JOB_NAME,
    "Job": 63,
    "ConfigMap": 253,
    "ServiceAccount": 253,
    "Role": 253,
    "RoleBinding": 253,
    "NetworkPolicy": 253,
}


def _labels_everywhere(obj: object) -> list[str]:
    """Every label value in an object, pod templates included."""
    found: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "labels" and isinstance(value, dict):
                found.extend(str(v) for v in value.values())
            else:
                found.extend(_labels_everywhere(value))
    elif isinstance(obj, list):
        for item in obj:
            found.extend(_labels_everywhere(item))
    return found


def _hf_job(name: str) -> dict[str, object]:
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": name},
        "spec": {},
    }


@pytest.mark.parametrize(
    "name",
    ["a" * 63, "qwen3-8b-dapo-fp8-blockwise-tis-cap2-h20-node-pool-a-run-000001", "j" + "-x" * 31],
)
def test_every_child_of_a_63_character_job_fits_its_kind(name: str) -> None:
    from flashrl_api.history import history_name
    from flashrl_operator.render import render

    assert len(name) == 63
    objects = render(parse_job(_hf_job(name)))
    kinds = {obj["kind"] for obj in objects}
    assert {"Job", "RayJob", "ConfigMap"} <= kinds  # the staging Job too (Hugging Face sources)
    for obj in objects:
        child = obj["metadata"]["name"]
        assert len(child) <= KIND_LIMITS[obj["kind"]], (obj["kind"], child)
        pattern = DNS_1035 if obj["kind"] == "RayJob" else DNS_1123_SUBDOMAIN
        assert pattern.fullmatch(child), (obj["kind"], child)
        for value in _labels_everywhere(obj):
            assert len(value) <= 63 and LABEL_VALUE.fullmatch(value), (obj["kind"], value)
    stage = next(obj for obj in objects if obj["kind"] == "Job")
    assert stage["metadata"]["name"].endswith("-stage")
    history = history_name(name)
    assert len(history) <= 253 and DNS_1123_SUBDOMAIN.fullmatch(history)


def test_every_child_of_a_63_character_experiment_variant_fits_its_kind() -> None:
    from flashrl_api.experiment import experiment_problems, variant_jobs
    from flashrl_operator.render import render

    name = "e" * (63 - len("-bf16"))
    experiment, problems = experiment_problems(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLExperiment",
            "metadata": {"name": name, "namespace": "team-a", "uid": "u-1"},
            "spec": {
                "variants": [
                    {"name": "bf16", "spec": {"rollout": {"quantization": "bf16"}}},
                    {"name": "fp8", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
                ]
            },
        }
    )
    assert experiment is not None, problems
    jobs = variant_jobs(experiment)
    assert [len(job.name) for job in jobs] == [63, 62]
    for job in jobs:
        for obj in render(job):
            assert len(obj["metadata"]["name"]) <= KIND_LIMITS[obj["kind"]], obj["kind"]


@pytest.mark.parametrize("bad", ["abc\n", "abc\n\n", "a\nb"])
def test_a_name_with_a_newline_is_refused(bad: str) -> None:
    from flashrl_api.manifest import SpecError

    with pytest.raises(SpecError, match=r"metadata\.name"):
        parse_job(_hf_job(bad))
    assert not is_dns1035_label(bad)
    assert ray_job_name(bad) != bad and "\n" not in ray_job_name(bad)


def test_a_namespace_with_a_newline_is_refused_for_jobs_and_experiments() -> None:
    from flashrl_api.experiment import experiment_problems
    from flashrl_api.manifest import SpecError

    job = _hf_job("ok")
    job["metadata"] = {"name": "ok", "namespace": "team-a\n"}
    with pytest.raises(SpecError, match=r"metadata\.namespace"):
        parse_job(job)
    experiment, problems = experiment_problems(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLExperiment",
            "metadata": {"name": "ok", "namespace": "Team_A"},
            "spec": {
                "variants": [
                    {"name": "bf16", "spec": {"rollout": {"quantization": "bf16"}}},
                    {"name": "fp8", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
                ]
            },
        }
    )
    assert experiment is None and [p.path for p in problems] == ["metadata.namespace"]


def test_a_63_character_experiment_name_is_refused_at_each_variant_not_rendered_too_long() -> None:
    """A variant's FlashRLJob is ``<experiment>-<variant>``: with a 63-character experiment name it cannot
    fit, and each variant is refused at its field path (by the API server's CEL twin as well) rather
    than rendered into names the API server would refuse."""
    from flashrl_api.experiment import experiment_problems

    experiment, problems = experiment_problems(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLExperiment",
            "metadata": {"name": "e" * 63, "namespace": "team-a"},
            "spec": {
                "variants": [
                    {"name": "bf16", "spec": {"rollout": {"quantization": "bf16"}}},
                    {"name": "fp8", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
                ]
            },
        }
    )
    assert experiment is None
    assert {p.path for p in problems} == {"spec.variants[0].name", "spec.variants[1].name"}
    assert all("at most 63" in p.message for p in problems)
