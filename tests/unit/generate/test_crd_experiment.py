"""The generated FlashRLExperiment CRD (generate/crd_experiment.py): committed as generated, printed by
``flashrl crd --kind FlashRLExperiment``, strict-valid, structural, and defaulting the example as the
models do. The models and their rules: tests/unit/api/test_experiment.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from crd_schema_tools import apply_defaults, strict_json_schema, walk

from flashrl_api import FlashRLJobSpec
from flashrl_api.experiment import parse_experiment
from flashrl_operator.generate import crd_experiment
from flashrl_operator.generate.crd_experiment import build_experiment_crd, experiment_crd_yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "flashrlexperiment.yaml"


def _root() -> dict[str, Any]:
    schema: dict[str, Any] = build_experiment_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_matches_the_models() -> None:
    path = crd_experiment.CHART_EXPERIMENT_CRD_PATH
    committed = (REPO / path).read_text(encoding="utf-8")
    assert committed == experiment_crd_yaml(), f"{path} is out of date: run `make crd`"
    assert committed.startswith(crd_experiment.HEADER)
    (doc,) = list(yaml.safe_load_all(committed))
    assert doc == build_experiment_crd()


def test_flashrl_crd_kind_prints_the_same_text() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "flashrl_operator.cli", "crd", "--kind", "FlashRLExperiment"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout == experiment_crd_yaml()


def test_kubernetes_validate_strict_accepts_the_crd(tmp_path: Path) -> None:
    exe = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert exe is not None, "kubernetes-validate is part of the dev extra"
    path = tmp_path / "crd.yaml"
    path.write_text(experiment_crd_yaml(), encoding="utf-8")
    out = subprocess.run(
        [exe, "--strict", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_names_and_printer_columns() -> None:
    crd = build_experiment_crd()
    assert crd["metadata"]["name"] == "flashrlexperiments.flashrl.dev"
    assert crd["spec"]["names"]["shortNames"] == ["frx"]
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["Phase", "Finished", "Parallelism", "Reason", "Age"]
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Finished"]["jsonPath"] == ".status.finished"


def test_schema_is_structural_and_variant_specs_default_nothing() -> None:
    root = _root()
    for path, node in walk(root):
        assert "type" in node, f"{path} has no type"
        if "properties" in node:
            assert node["type"] == "object", path
    variant_spec = root["properties"]["spec"]["properties"]["variants"]["items"]["properties"]["spec"]
    for path, node in walk(variant_spec):
        assert path == "" or "default" not in node, (
            f"variant spec {path} has a default: it would override the template"
        )
    # The template is a whole FlashRLJob spec: defaults and the job's rules, reported under spec.template.
    template = root["properties"]["spec"]["properties"]["template"]
    assert template["properties"]["rollout"]["properties"]["quantization"]["default"] == "blockwise-fp8"
    messages = [v["message"] for v in template["x-kubernetes-validations"]]
    assert all(m.startswith(("spec.template.", "spec.template: ")) for m in messages)


def test_schema_accepts_the_example_and_defaults_it_like_the_models() -> None:
    import jsonschema

    raw = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    root = _root()
    jsonschema.Draft4Validator(strict_json_schema(root)).validate(apply_defaults(root, raw))
    experiment = parse_experiment(raw)
    defaulted = apply_defaults(root, raw)
    assert FlashRLJobSpec.model_validate(defaulted["spec"]["template"]) == experiment.spec.template
