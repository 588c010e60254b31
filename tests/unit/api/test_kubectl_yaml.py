"""Files are read as kubectl reads them (YAML 1.1 booleans), and no CRD property is a boolean word."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flashrl_api.kubectl_yaml import BOOLEAN_WORDS, is_boolean_word, load_all
from flashrl_api.manifest import SpecError, load_job_file
from flashrl_operator.generate.crd import build_crd
from flashrl_operator.generate.crd_experiment import build_experiment_crd


@pytest.mark.parametrize("word", sorted(BOOLEAN_WORDS))
def test_a_boolean_word_key_becomes_the_json_key_kubectl_sends(word: str) -> None:
    (doc,) = load_all(f"rollout: {{{word}: 8}}\n")
    expected = "true" if word.lower() in {"y", "yes", "true", "on"} else "false"
    assert doc == {"rollout": {expected: 8}}


def test_quoted_keys_and_values_stay_strings_and_dates_stay_text() -> None:
    (doc,) = load_all("a: {'n': 'y'}\nb: [n, Y]\nc: 2024-01-02\n")
    assert doc == {"a": {"n": "y"}, "b": [False, True], "c": "2024-01-02"}


def test_validate_reports_a_boolean_key_at_its_path_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: flashrl.dev/v1alpha1\nkind: FlashRLJob\nmetadata: {name: j}\n"
        "spec:\n  rollout:\n    n: 8\n"
    )
    with pytest.raises(SpecError) as caught:
        load_job_file(path)
    (problem,) = caught.value.problems
    assert problem.path == "spec.rollout.false"
    assert "YAML 1.1" in problem.message and "kubectl" in problem.message


def _property_names(schema: Any, path: str = "") -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(schema, dict):
        for name, sub in (schema.get("properties") or {}).items():
            found.append((f"{path}.{name}", name))
            found.extend(_property_names(sub, f"{path}.{name}"))
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                found.extend(_property_names(schema[key], f"{path}[]"))
    return found


@pytest.mark.parametrize(
    "crd", [build_crd(), build_experiment_crd()], ids=["FlashRLJob", "FlashRLExperiment"]
)
def test_no_crd_property_name_is_a_yaml_boolean_word(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    names = _property_names(schema)
    assert len(names) > 100
    assert [path for path, name in names if is_boolean_word(name)] == []


#: The escapes a CEL string literal knows (cel-spec, "String and Bytes Values"); any other backslash
#: makes the API server refuse the whole CRD with a syntax error.
_CEL_ESCAPE = re.compile(
    r"\\(?:[\\'\"`?abfnrtv]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2})"
)


def _rules(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        found += [v["rule"] for v in node.get("x-kubernetes-validations", [])]
        for value in node.values():
            found += _rules(value)
    elif isinstance(node, list):
        for value in node:
            found += _rules(value)
    return found


@pytest.mark.parametrize(
    "crd", [build_crd(), build_experiment_crd()], ids=["FlashRLJob", "FlashRLExperiment"]
)
def test_every_backslash_in_a_cel_rule_is_an_escape_cel_knows(crd: dict[str, Any]) -> None:
    rules = _rules(crd)
    assert len(rules) > 20
    bad = [rule for rule in rules if "\\" in _CEL_ESCAPE.sub("", rule)]
    assert bad == []
