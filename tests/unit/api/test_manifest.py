"""flashrl_api.manifest: reading untrusted FlashRLJob input, every problem named by its field path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from flashrl_api import (
    API_VERSION,
    FlashRLJobSpec,
    Problem,
    SpecError,
    load_documents,
    load_job_file,
    parse_job,
    parse_spec,
    spec_problems,
)


def _raw(**extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "FlashRLJob", "metadata": {"name": "job"}}
    raw.update(extra)
    return raw


def _paths(exc: pytest.ExceptionInfo[SpecError]) -> list[str]:
    return [p.path for p in exc.value.problems]


def test_problem_and_error_text() -> None:
    assert (
        str(Problem("spec.rollout.samplesPerPrompt", "too small"))
        == "spec.rollout.samplesPerPrompt: too small"
    )
    assert str(Problem("", "file is empty")) == "file is empty"
    err = SpecError([Problem("a", "x"), Problem("b", "y")])
    assert str(err) == "a: x\nb: y"
    assert isinstance(err, ValueError)


def test_minimal_job_gets_every_default() -> None:
    job = parse_job(_raw())
    assert job.name == "job"
    assert job.namespace == "default"
    assert job.uid is None
    assert job.spec == FlashRLJobSpec()
    assert job.status is None
    assert parse_job(_raw(spec=None)).spec == FlashRLJobSpec()


def test_identity_comes_from_metadata() -> None:
    job = parse_job(_raw(metadata={"name": "a", "namespace": "rl", "uid": "1234"}))
    assert (job.name, job.namespace, job.uid) == ("a", "rl", "1234")


def test_all_problems_are_reported_at_once() -> None:
    raw = {
        "apiVersion": "v1",
        "kind": "Job",
        "metadata": {"name": "Bad_Name"},
        "extra": 1,
        "spec": {"rollout": {"samplesPerPrompt": 0}, "training": {"learningRate": 0}},
    }
    with pytest.raises(SpecError) as exc:
        parse_job(raw)
    assert _paths(exc) == [
        "apiVersion",
        "kind",
        "metadata.name",
        "extra",
        "spec.rollout.samplesPerPrompt",
        "spec.training.learningRate",
    ]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (None, "must be a mapping with a name"),
        ({}, "is required"),
        ({"name": ""}, "is required"),
        ({"name": 7}, "is required"),
        ({"name": "a" * 64}, "DNS-1035 label"),
        ({"name": "1abc"}, "DNS-1035 label"),
        ({"name": "abc-"}, "DNS-1035 label"),
    ],
)
def test_metadata_name_rules(metadata: Any, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_job(_raw(metadata=metadata))
    assert message in str(exc.value)


def test_name_of_63_characters_is_accepted() -> None:
    assert parse_job(_raw(metadata={"name": "a" * 63})).name == "a" * 63


@pytest.mark.parametrize("raw", [[], "job", 3, None])
def test_non_mapping_job(raw: Any) -> None:
    with pytest.raises(SpecError) as exc:
        parse_job(raw)
    assert "must be a YAML mapping" in str(exc.value)


def test_paths_for_nested_lists_and_unknown_fields() -> None:
    spec = {"secretRefs": ["ok", "Not_Ok"], "overrides": ["a=1", "=x"], "rollout": {"nn": 1}}
    _, problems = spec_problems(spec)
    assert [p.path for p in problems] == ["spec.rollout.nn", "spec.secretRefs[1]", "spec.overrides[1]"]
    assert problems[0].message.startswith("unknown field")


def test_enum_message_lists_the_choices() -> None:
    _, problems = spec_problems({"rollout": {"quantization": "int4"}})
    (problem,) = problems
    assert problem.path == "spec.rollout.quantization"
    assert "'blockwise-fp8'" in problem.message and "'int4'" in problem.message


def test_types_are_not_coerced() -> None:
    """The API server refuses "8" for an integer and "yes" for a boolean; so do we."""
    _, problems = spec_problems(
        {"resources": {"gpusPerNode": "8"}, "dryRun": "yes", "rollout": {"samplesPerPrompt": 1.5}}
    )
    assert {p.path: p.message for p in problems} == {
        "spec.resources.gpusPerNode": "Input should be a valid integer, got '8'",
        "spec.dryRun": "Input should be a valid boolean, got 'yes'",
        "spec.rollout.samplesPerPrompt": "Input should be a valid integer, got 1.5",
    }
    # Integers are fine where a number is expected (YAML writes 2.0 as 2 often enough).
    assert parse_spec({"correction": {"tis": {"cap": 3}}}).correction.tis.cap == 3.0


def test_section_must_be_a_mapping() -> None:
    _, problems = spec_problems({"rollout": "fast"})
    assert [str(p) for p in problems] == ["spec.rollout: must be a mapping, got str"]
    assert [str(p) for p in spec_problems(["x"])[1]] == ["spec: must be a mapping, got list"]


def test_cross_field_rules_run_after_field_validation() -> None:
    spec, problems = spec_problems({"training": {"miniBatchSize": 24}})
    assert spec is not None
    assert [str(p) for p in problems] == ["spec.training.miniBatchSize: must divide training.promptBatchSize"]
    # A field error stops there: rules are not evaluated on a spec that does not parse.
    spec, problems = spec_problems({"training": {"miniBatchSize": 0}})
    assert spec is None and [p.path for p in problems] == ["spec.training.miniBatchSize"]


def test_custom_prefix() -> None:
    _, problems = spec_problems({"rollout": {"samplesPerPrompt": 0}}, prefix="job.spec")
    assert problems[0].path == "job.spec.rollout.samplesPerPrompt"


def test_wire_round_trip_is_stable() -> None:
    spec = parse_spec(
        {"resources": {"nodes": 2, "rdma": {"resourceName": "rdma/hca"}}, "overrides": ["a.b=1"]}
    )
    wire = spec.to_wire()
    assert parse_spec(wire) == spec
    assert wire["resources"]["rdma"] == {"resourceName": "rdma/hca", "count": 1}
    assert "activeDeadlineSeconds" not in wire["lifecycle"]  # None is left out, never sent as null


def test_models_are_frozen() -> None:
    spec = FlashRLJobSpec()
    with pytest.raises(ValidationError):
        spec.dry_run = True  # type: ignore[misc]


def test_status_is_parsed_leniently() -> None:
    good = {"phase": "Running", "progress": {"step": 3, "totalSteps": 10}, "operatorOnly": "ignored"}
    job = parse_job(_raw(status=good))
    assert job.status is not None and job.status.phase == "Running"
    assert job.status.progress is not None and job.status.progress.total_steps == 10
    # A damaged status is the operator's to rewrite, not the user's error.
    assert parse_job(_raw(status={"phase": "Exploded"})).status is None
    assert parse_job(_raw(status="nonsense")).status is None


def test_load_documents() -> None:
    assert load_documents("a: 1\n---\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]
    with pytest.raises(SpecError, match=r"x.yaml is not valid YAML \(line 2, column"):
        load_documents("a: 1\nb: c: d\n", "x.yaml")
    with pytest.raises(SpecError, match="contains no YAML document"):
        load_documents("# only a comment\n")


def test_load_job_file(tmp_path: Path) -> None:
    good = tmp_path / "job.yaml"
    good.write_text(f"apiVersion: {API_VERSION}\nkind: FlashRLJob\nmetadata: {{name: j}}\n", encoding="utf-8")
    assert load_job_file(good).name == "j"
    two = tmp_path / "two.yaml"
    two.write_text(good.read_text() + "---\n" + good.read_text(), encoding="utf-8")
    with pytest.raises(SpecError, match="must hold one FlashRLJob, found 2 documents"):
        load_job_file(two)
    with pytest.raises(SpecError, match="cannot read"):
        load_job_file(tmp_path / "missing.yaml")
    with pytest.raises(SpecError, match="cannot read"):
        load_job_file(tmp_path)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\x80\x81")
    with pytest.raises(SpecError, match="is not UTF-8 text"):
        load_job_file(binary)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"overrides": ["trainer.x"]}, "must be a Hydra override: key=value, +key=value (add)"),
        ({"secretRefs": ["HF"]}, "must be a DNS-1123 subdomain"),
        ({"env": [{"name": "NCCL-IB-HCA", "value": "mlx5_0"}]}, "must be an environment variable name"),
        (
            {"resources": {"cpu": "lots"}},
            "must be a Kubernetes quantity such as 64, 500m or 512Gi, got 'lots'",
        ),
    ],
)
def test_pattern_mismatches_read_as_advice(spec: dict[str, Any], message: str) -> None:
    _, problems = spec_problems(spec)
    (problem,) = problems
    assert message in problem.message


@pytest.mark.parametrize("key", ["pool name", "-pool", "a/b/c", "x" * 64, "Example.com/pool", "/pool"])
def test_node_selector_keys_must_be_label_keys(key: str) -> None:
    _, problems = spec_problems({"resources": {"nodeSelector": {"pool": "a", key: "b"}}})
    assert [p.path for p in problems] == ["spec.resources.nodeSelector"]
    assert problems[0].message.startswith(f"{key!r} is not a label key")
    _, problems = spec_problems({"resources": {"head": {"nodeSelector": {key: "b"}}}})
    assert [p.path for p in problems] == ["spec.resources.head.nodeSelector"]


@pytest.mark.parametrize(
    "key", ["pool", "cloud.google.com/gke-nodepool", "example.com/" + "x" * 63, "a_b.c-d"]
)
def test_label_keys_accepted(key: str) -> None:
    _, problems = spec_problems({"resources": {"nodeSelector": {key: "v"}}})
    assert problems == []


def test_env_names_must_be_unique() -> None:
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_DEBUG", "value": "TRACE"}]
    _, problems = spec_problems({"env": env})
    assert [str(p) for p in problems] == [
        "spec.env: duplicate variable 'NCCL_DEBUG' (each name may appear once)"
    ]


def test_env_item_paths() -> None:
    _, problems = spec_problems(
        {"env": [{"name": "A", "value": "1"}, {"value": "2"}, {"name": "B", "valu": "3"}]}
    )
    assert [p.path for p in problems] == ["spec.env[1].name", "spec.env[2].valu"]


@pytest.mark.parametrize("override", ["a.b=1", "+a.b=c", "++a.b=", "~a.b", "~a.b=1", "a.b@x=[1,2]"])
def test_override_forms_accepted(override: str) -> None:
    assert parse_spec({"overrides": [override]}).overrides == [override]
