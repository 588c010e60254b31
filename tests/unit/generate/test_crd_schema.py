"""The generated CRD: a structural, documented schema that accepts and rejects what the models do."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_schema_tools import apply_defaults, error_path, root_schema, spec_schema, validator, walk

from flashrl_api import (
    GROUP,
    KIND,
    PLURAL,
    RULES,
    SHORT_NAMES,
    FlashRLJobSpec,
    SpecError,
    parse_job,
    parse_spec,
)
from flashrl_api.pins import default_trainer_image
from flashrl_operator.generate.crd import build_crd, crd_yaml

REPO = Path(__file__).resolve().parents[3]
#: The FlashRLJob examples (the experiment example is checked against its own CRD in test_experiment).
EXAMPLES = sorted(
    p for p in (REPO / "examples").glob("*.yaml") if "\nkind: FlashRLJob\n" in p.read_text(encoding="utf-8")
)

FORBIDDEN_KEYWORDS = ("$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf", "not", "title", "const")


def _job(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "j"},
    }
    if spec is not None:
        job["spec"] = spec
    return job


def _version() -> dict[str, Any]:
    version: dict[str, Any] = build_crd()["spec"]["versions"][0]
    return version


# --- the CRD object itself -----------------------------------------------------------------------


def test_names_and_version() -> None:
    crd = build_crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}" == "flashrljobs.flashrl.dev"
    names = crd["spec"]["names"]
    assert names == {
        "kind": KIND,
        "listKind": "FlashRLJobList",
        "plural": "flashrljobs",
        "singular": "flashrljob",
        "shortNames": list(SHORT_NAMES),
        "categories": ["flashrl"],
    }
    assert names["shortNames"] == ["frj"]
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("k8s", ["1.28", "1.37"])
def test_kubernetes_validate_strict_accepts_the_crd(tmp_path: Path, k8s: str) -> None:
    exe = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert exe is not None, "kubernetes-validate is missing: `make install` (the dev extra)"
    path = tmp_path / "crd.yaml"
    path.write_text(crd_yaml(), encoding="utf-8")
    out = subprocess.run(
        [exe, "--strict", "-k", k8s, str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "passed" in out.stdout


def test_kubernetes_validate_notices_a_broken_crd(tmp_path: Path) -> None:
    """The check above is not vacuous: a misspelt CRD field fails it."""
    exe = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert exe is not None, "kubernetes-validate is missing: `make install` (the dev extra)"
    crd = build_crd()
    crd["spec"]["versions"][0]["servd"] = True
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd), encoding="utf-8")
    out = subprocess.run(
        [exe, "--strict", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode != 0


# --- structural schema ---------------------------------------------------------------------------


def test_schema_is_structural() -> None:
    for path, node in walk(root_schema()):
        assert (
            "type" in node
            or node.get("x-kubernetes-preserve-unknown-fields")
            or node.get("x-kubernetes-int-or-string")
        ), f"{path or '<root>'} has no type"
        for keyword in FORBIDDEN_KEYWORDS:
            assert keyword not in node, f"{path} uses {keyword}"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("nullable") is not True, f"{path} is nullable; the API never sends null"
        if "properties" in node:
            assert node["type"] == "object", path
            assert set(node.get("required", [])) <= set(node["properties"]), path
        if node.get("type") == "array":
            assert "items" in node, path
        if "enum" in node:
            py = {"string": str, "integer": int, "number": (int, float), "boolean": bool}[node["type"]]
            assert all(isinstance(v, py) for v in node["enum"]), path
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path


def test_every_field_has_a_description() -> None:
    for path, node in walk(root_schema()):
        if path == "metadata":
            # The API server refuses anything but the type on metadata: it describes metadata itself.
            assert node == {"type": "object"}
            continue
        if path and not path.endswith("[]"):
            assert node.get("description", "").strip(), f"{path} has no description"
            assert "``" not in node["description"], path


def test_descriptions_read_well_in_kubectl_explain() -> None:
    rollout = spec_schema()["properties"]["rollout"]
    assert rollout["description"] == "The generation engine and how its weights are quantized."
    quantization = rollout["properties"]["quantization"]["description"]
    assert "\n" not in quantization and "blockwise-fp8: 128x128-block FP8" in quantization
    # A class used by several fields keeps each field's own text in front.
    storage = spec_schema()["properties"]["storage"]["properties"]
    assert storage["modelCache"]["description"].startswith("Model cache (HF_HOME)")
    assert storage["checkpoints"]["description"].startswith("Checkpoints (trainer.default_local_dir)")


def test_constraints_come_from_the_models() -> None:
    props = spec_schema()["properties"]
    samples = props["rollout"]["properties"]["samplesPerPrompt"]
    assert samples["description"].startswith("Responses sampled per prompt (the GRPO/DAPO group size;")
    assert {k: v for k, v in samples.items() if k != "description"} == {
        "type": "integer",
        "default": 16,
        "minimum": 1,
        "maximum": 1024,
    }
    util = props["rollout"]["properties"]["gpuMemoryUtilization"]
    assert (util["minimum"], util["exclusiveMinimum"], util["maximum"]) == (0.0, True, 0.95)
    assert props["rollout"]["properties"]["quantization"]["enum"] == ["blockwise-fp8", "channel-fp8", "bf16"]
    assert props["correction"]["properties"]["tis"]["properties"]["level"]["enum"] == [
        "token",
        "sequence",
        "off",
    ]
    assert props["training"]["properties"]["recipe"]["enum"] == ["dapo"]
    assert props["training"]["properties"]["loggers"]["maxItems"] == 4
    assert props["overrides"]["items"]["maxLength"] == 1024
    assert props["resources"]["properties"]["memory"]["pattern"].startswith("^[0-9]+")
    assert props["storage"]["properties"]["data"]["required"] == ["mountPath"]


def test_optional_fields_are_plain_types_without_defaults() -> None:
    lifecycle = spec_schema()["properties"]["lifecycle"]["properties"]
    assert lifecycle["activeDeadlineSeconds"] == {
        "type": "integer",
        "description": "Fail the job after this many seconds in total.",
        "minimum": 1,
        "maximum": 2**31 - 1,
    }
    rdma = spec_schema()["properties"]["resources"]["properties"]["rdma"]
    assert rdma["type"] == "object" and "default" not in rdma


def test_env_is_a_list_map_keyed_by_name() -> None:
    """The API server refuses duplicate names and server-side apply merges entries by name."""
    env = spec_schema()["properties"]["env"]
    assert env["x-kubernetes-list-type"] == "map"
    assert env["x-kubernetes-list-map-keys"] == ["name"]
    assert env["items"]["required"] == ["name"]
    assert env["items"]["properties"]["value"]["default"] == ""


def test_status_schema_and_conditions_map() -> None:
    status = root_schema()["properties"]["status"]
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]
    assert status["properties"]["phase"]["enum"] == [
        "Pending",
        "Staging",
        "Starting",
        "Running",
        "Succeeded",
        "Failed",
        "Suspended",
    ]
    assert "x-kubernetes-validations" not in status
    # The API server refuses any other keyword on metadata (it is implicitly specified).
    assert root_schema()["properties"]["metadata"] == {"type": "object"}


# --- defaults ------------------------------------------------------------------------------------


def test_every_default_is_valid_against_its_own_schema() -> None:
    """The API server refuses a CRD whose defaults do not validate; check each one here."""
    for path, node in walk(root_schema()):
        if "default" in node:
            errors = list(validator(node).iter_errors(apply_defaults(node, node["default"])))
            assert not errors, f"default of {path}: {[e.message for e in errors]}"


def test_empty_spec_defaults_to_the_origin_recipe() -> None:
    """`default: {}` on every section makes the API server fill in exactly what the models do."""
    defaulted = apply_defaults(root_schema(), _job())["spec"]
    assert defaulted == FlashRLJobSpec().to_wire()
    assert defaulted["images"]["trainer"] == default_trainer_image()
    assert defaulted["storage"]["data"] == {"claimName": "rl-data", "mountPath": "/data", "readOnly": True}
    assert defaulted["training"]["promptBatchSize"] == 32 and defaulted["rollout"]["samplesPerPrompt"] == 16


@pytest.mark.parametrize(
    "spec",
    [
        {"rollout": {"quantization": "bf16"}},
        {"correction": {"tis": {"level": "off"}}, "training": {"overlongBuffer": {"enabled": False}}},
        {"storage": {"checkpoints": {"claimName": "ckpt", "mountPath": "/ckpt"}}},
        {"resources": {"nodes": 2, "rdma": {"resourceName": "rdma/hca_shared_devices_a"}}},
        {"lifecycle": {"activeDeadlineSeconds": 86400}, "overrides": ["trainer.val_before_train=false"]},
    ],
)
def test_partial_specs_default_like_the_models(spec: dict[str, Any]) -> None:
    defaulted = apply_defaults(spec_schema(), spec)
    assert not list(validator(spec_schema()).iter_errors(defaulted))
    assert defaulted == parse_spec(spec).to_wire()


# --- accepting and rejecting manifests -----------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_are_accepted_by_the_crd_and_the_models(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
    assert jobs, f"{path.name} holds no {KIND}"
    for raw in jobs:
        errors = [f"{error_path(e)}: {e.message}" for e in validator().iter_errors(raw)]
        assert not errors, errors
        defaulted = apply_defaults(root_schema(), raw)
        assert defaulted["spec"] == parse_job(raw).spec.to_wire()


def test_a_full_manifest_is_accepted() -> None:
    raw = _job(FlashRLJobSpec().to_wire())
    raw["metadata"] = {"name": "full", "namespace": "ml", "labels": {"team": "rl"}}
    raw["status"] = {
        "phase": "Running",
        "progress": {"step": 3, "totalSteps": 150},
        "conditions": [
            {
                "type": "Accepted",
                "status": "True",
                "reason": "Valid",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "rayJobName": "full",
    }
    assert not list(validator().iter_errors(raw))


BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("typo", {"training": {"promptBatchsize": 32}}, "spec.training.promptBatchsize"),
    ("unknown-section", {"rolout": {"samplesPerPrompt": 8}}, "spec.rolout"),
    ("n-zero", {"rollout": {"samplesPerPrompt": 0}}, "spec.rollout.samplesPerPrompt"),
    ("n-huge", {"rollout": {"samplesPerPrompt": 4096}}, "spec.rollout.samplesPerPrompt"),
    ("util-over", {"rollout": {"gpuMemoryUtilization": 0.99}}, "spec.rollout.gpuMemoryUtilization"),
    ("util-zero-exclusive", {"rollout": {"gpuMemoryUtilization": 0}}, "spec.rollout.gpuMemoryUtilization"),
    ("top-p-zero", {"rollout": {"topP": 0.0}}, "spec.rollout.topP"),
    ("quant-enum", {"rollout": {"quantization": "fp4"}}, "spec.rollout.quantization"),
    ("tis-enum", {"correction": {"tis": {"level": "tokens"}}}, "spec.correction.tis.level"),
    ("cap-zero", {"correction": {"tis": {"cap": 0}}}, "spec.correction.tis.cap"),
    ("guard-negative-kl", {"correction": {"guard": {"maxKL": -0.1}}}, "spec.correction.guard.maxKL"),
    (
        "guard-ess-above-one",
        {"correction": {"guard": {"minEffectiveSampleSize": 1.5}}},
        "spec.correction.guard.minEffectiveSampleSize",
    ),
    (
        "guard-ess-negative",
        {"correction": {"guard": {"minEffectiveSampleSize": -0.2}}},
        "spec.correction.guard.minEffectiveSampleSize",
    ),
    (
        "guard-zero-steps",
        {"correction": {"guard": {"consecutiveSteps": 0}}},
        "spec.correction.guard.consecutiveSteps",
    ),
    ("guard-action", {"correction": {"guard": {"action": "Stop"}}}, "spec.correction.guard.action"),
    ("nodes-string", {"resources": {"nodes": "two"}}, "spec.resources.nodes"),
    ("gpus-17", {"resources": {"gpusPerNode": 17}}, "spec.resources.gpusPerNode"),
    ("memory-pattern", {"resources": {"memory": "lots"}}, "spec.resources.memory"),
    ("rdma-missing-name", {"resources": {"rdma": {"count": 2}}}, "spec.resources.rdma.resourceName"),
    ("pull-policy", {"images": {"pullPolicy": "Sometimes"}}, "spec.images.pullPolicy"),
    ("secret-name", {"secretRefs": ["Bad_Name"]}, "spec.secretRefs[0]"),
    ("env-name", {"env": [{"name": "NCCL-IB-HCA", "value": "mlx5_0"}]}, "spec.env[0].name"),
    (
        "toleration-operator",
        {"resources": {"tolerations": [{"key": "k", "operator": "In"}]}},
        "spec.resources.tolerations[0].operator",
    ),
    (
        "toleration-effect",
        {"resources": {"tolerations": [{"key": "k", "effect": "NoRun"}]}},
        "spec.resources.tolerations[0].effect",
    ),
    (
        "node-selector-value",
        {"resources": {"nodeSelector": {"pool": "h20 pool"}}},
        "spec.resources.nodeSelector.pool",
    ),
    ("env-no-name", {"env": [{"value": "x"}]}, "spec.env[0].name"),
    ("env-unknown-key", {"env": [{"name": "A", "valueFrom": {}}]}, "spec.env[0].valueFrom"),
    ("too-many-loggers", {"training": {"loggers": ["console"] * 5}}, "spec.training.loggers"),
    ("no-loggers", {"training": {"loggers": []}}, "spec.training.loggers"),
    ("logger-enum", {"training": {"loggers": ["stdout"]}}, "spec.training.loggers[0]"),
    ("mount-relative", {"storage": {"data": {"mountPath": "data"}}}, "spec.storage.data.mountPath"),
    ("override-shape", {"overrides": ["not an override"]}, "spec.overrides[0]"),
    ("override-bare-key", {"overrides": ["a=1", "trainer.logger"]}, "spec.overrides[1]"),
    ("bool-type", {"dryRun": "yes"}, "spec.dryRun"),
    ("negative-restarts", {"lifecycle": {"maxRestarts": -1}}, "spec.lifecycle.maxRestarts"),
    # Malformed Hugging Face references: refused offline, before any staging Job exists.
    ("model-hf-one-segment", {"model": {"source": "hf://Qwen3-8B-Base"}}, "spec.model.source"),
    ("model-hf-a-dataset", {"model": {"source": "hf://datasets/o/n"}}, "spec.model.source"),
    ("model-hf-empty-revision", {"model": {"source": "hf://Qwen/Qwen3-8B-Base@"}}, "spec.model.source"),
    ("model-hf-space-in-revision", {"model": {"source": "hf://Qwen/Qwen3-8B-Base@a b"}}, "spec.model.source"),
    ("model-relative-path", {"model": {"source": "Qwen/Qwen3-8B-Base"}}, "spec.model.source"),
    ("data-hf-no-file", {"data": {"train": "hf://datasets/o/n"}}, "spec.data.train"),
    ("data-hf-a-model-repo", {"data": {"validation": "hf://o/n/x.parquet"}}, "spec.data.validation"),
    ("data-hf-empty-file", {"data": {"train": "hf://datasets/o/n@v1/"}}, "spec.data.train"),
]


@pytest.mark.parametrize(
    ("spec", "path"), [(s, p) for _, s, p in BAD_SPECS], ids=[n for n, _, _ in BAD_SPECS]
)
def test_bad_manifests_are_rejected_at_the_same_path_by_both(spec: dict[str, Any], path: str) -> None:
    raw = _job(spec)
    crd_paths = {error_path(e) for e in validator().iter_errors(apply_defaults(root_schema(), raw))}
    assert path in crd_paths, crd_paths
    with pytest.raises(SpecError) as caught:
        parse_job(raw)
    assert path in {p.path for p in caught.value.problems}


def test_unknown_top_level_field_is_rejected() -> None:
    raw = _job()
    raw["sepc"] = {}
    assert "sepc" in {error_path(e) for e in validator().iter_errors(raw)}


# --- rules and printer columns -------------------------------------------------------------------


def test_every_rule_is_a_spec_validation_reported_at_its_field() -> None:
    schema = spec_schema()
    validations = schema["x-kubernetes-validations"]
    assert len(validations) == len(RULES)
    for rule, validation in zip(RULES, validations, strict=True):
        assert validation == {
            "rule": rule.cel,
            "message": f"spec.{rule.path}: {rule.message}",
            "fieldPath": f".{rule.path}",
            "reason": "FieldValueInvalid",
        }
        node = schema
        for part in validation["fieldPath"].lstrip(".").split("."):
            assert part in node.get("properties", {}), f"{validation['fieldPath']} is not a spec field"
            node = node["properties"][part]
        # Every field a rule reads has a default or is required, or the rule asks has() first, so the
        # rule never meets a missing field.
        guarded = set(re.findall(r"has\(self\.([A-Za-z.]+)\)", rule.cel))
        for ref in _cel_field_refs(rule.cel):
            node = schema
            parts = ref.split(".")
            for depth, part in enumerate(parts):
                parent, node = node, node["properties"][part]
                if ".".join(parts[: depth + 1]) in guarded:
                    break
                assert "default" in node or part in parent.get("required", []), (
                    f"{rule.name} reads {ref}, which may be absent"
                )


def _cel_field_refs(cel: str) -> set[str]:
    import re

    refs = set()
    for match in re.finditer(r"self\.((?:[A-Za-z]+\.)*[A-Za-z]+)(\()?", cel):
        path = match.group(1)
        # ``self.env.all(...)`` reads ``env``: a trailing segment followed by "(" is a macro call.
        refs.add(path.rsplit(".", 1)[0] if match.group(2) else path)
    return refs


def test_cel_rules_iterate_only_bounded_collections() -> None:
    """The API server estimates each rule's worst-case cost from the schema and refuses the CRD when it
    is over budget: every collection a rule iterates needs maxItems, and its strings a maxLength."""
    import re

    schema = spec_schema()
    iterated = 0
    for validation in schema["x-kubernetes-validations"]:
        for match in re.finditer(
            r"self\.((?:[A-Za-z]+\.)*[A-Za-z]+)\.(all|exists|exists_one|map|filter)\(", validation["rule"]
        ):
            node = schema
            for part in match.group(1).split("."):
                node = node["properties"][part]
            iterated += 1
            assert "maxItems" in node, f"{match.group(1)} is iterated but unbounded"
            items = node["items"]
            strings = [items] if items.get("type") == "string" else list(items.get("properties", {}).values())
            for leaf in strings:
                if leaf.get("type") == "string":
                    assert "maxLength" in leaf or "enum" in leaf, f"{match.group(1)}: unbounded string"
    assert iterated >= 2  # env and tolerations are iterated


def test_cel_field_refs_skip_macro_calls() -> None:
    assert _cel_field_refs("self.env.all(e, e.name != 'A') && self.training.miniBatchSize > 0") == {
        "env",
        "training.miniBatchSize",
    }


def test_transition_rules_are_exactly_the_immutable_fields() -> None:
    """Immutability is refused at admission: ``self == oldSelf`` on every field but the lifecycle knobs
    KubeRay honours on a live RayJob; the operator's own check stays as the second line."""
    from flashrl_api.rules import MUTABLE_SPEC_FIELDS, immutable_spec_fields

    with_rule = {
        path.removeprefix("spec.")
        for path, node in walk(root_schema())
        for validation in node.get("x-kubernetes-validations", [])
        if "oldSelf" in validation["rule"]
    }
    assert with_rule == set(immutable_spec_fields())
    assert not with_rule & set(MUTABLE_SPEC_FIELDS)
    assert {"rollout", "resources", "training", "overrides", "env", "lifecycle.maxRestarts"} <= with_rule
    assert (
        "lifecycle" not in with_rule
    )  # suspend, activeDeadlineSeconds, ttlSecondsAfterFinished stay editable


def test_every_immutable_field_has_a_default_so_its_rule_always_runs() -> None:
    """A transition rule runs only when old and new objects both carry the field."""
    from flashrl_api.rules import immutable_spec_fields

    defaulted = apply_defaults(spec_schema(), {})
    for path in immutable_spec_fields():
        node: Any = defaulted
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f"spec.{path} has no default"
            node = node[part]


def test_the_name_rule_sits_on_the_whole_object() -> None:
    (validation,) = root_schema()["x-kubernetes-validations"]
    assert validation["rule"].startswith("self.metadata.name.size() <= 63")
    assert validation["message"].startswith("metadata.name: must be a DNS-1035 label")


def test_printer_columns() -> None:
    columns = _version()["additionalPrinterColumns"]
    by_name = {c["name"]: c for c in columns}
    assert list(by_name) == [
        "Phase",
        "Step",
        "Steps",
        "Checkpoint",
        "Val-Score",
        "Mismatch-KL",
        "Quantization",
        "KV-Cache",
        "Nodes",
        "Attempt",
        "Goodput",
        "Reason",
        "RayJob",
        "Age",
    ]
    visible = [c["name"] for c in columns if c.get("priority", 0) == 0]
    assert {"Phase", "Step", "Age"} <= set(visible)
    # Both rollout precisions are treatments an experiment varies (examples/flashrlexperiment-kv.yaml):
    # `kubectl get frj` must tell its four arms apart, so neither column hides behind -o wide.
    assert {"Quantization", "KV-Cache"} <= set(visible)
    assert by_name["Goodput"]["priority"] == 1  # wide only: kubectl get -o wide
    # The precision now in use (the operator's, after a FallbackToBF16), not the spec's.
    assert by_name["Quantization"]["jsonPath"] == ".status.quantization"
    assert by_name["KV-Cache"]["jsonPath"] == ".status.kvCache"
    assert by_name["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns:
        if column["jsonPath"].startswith(".metadata."):
            continue
        node = root_schema()
        # A filter (``metrics[?(@.name=="rollout_corr/kl")]``) selects an item of a list.
        for part in re.sub(r"\[\?\(.*?\)\]", "[]", column["jsonPath"]).lstrip(".").split("."):
            name = part.removesuffix("[]")
            assert name in node.get("properties", {}), (
                f"{column['name']}: {column['jsonPath']} is not a field"
            )
            node = node["properties"][name]
            if part.endswith("[]"):
                assert node["type"] == "array", column["name"]
                node = node["items"]
        assert node["type"] == column["type"], column["name"]


def test_schema_changes_follow_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CRD is derived, not copied: a model docstring change shows up in it."""
    field = FlashRLJobSpec.model_fields["dry_run"]
    monkeypatch.setattr(field, "description", "Changed text.")
    fresh = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert fresh["properties"]["dryRun"]["description"] == "Changed text."
