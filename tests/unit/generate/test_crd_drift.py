"""The CRD committed to the Helm chart is exactly what `flashrl crd` generates from the models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from flashrl_operator.generate.crd import CHART_CRD_PATH, HEADER, build_crd, crd_yaml

REPO = Path(__file__).resolve().parents[3]


def test_committed_crd_matches_the_models() -> None:
    committed = (REPO / CHART_CRD_PATH).read_text(encoding="utf-8")
    assert committed == crd_yaml(), (
        f"{CHART_CRD_PATH} is out of date with the flashrl_api models: run `make crd` and commit it"
    )


def test_generation_is_deterministic_and_parses_back() -> None:
    text = crd_yaml()
    assert text == crd_yaml()
    assert text.startswith(HEADER)
    assert "Do not edit by hand" in HEADER and "make crd" in HEADER
    (doc,) = list(yaml.safe_load_all(text))
    assert doc == build_crd()


def test_flashrl_crd_command_prints_the_same_text() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "flashrl_operator.cli", "crd"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout == crd_yaml()
    assert out.stderr == ""


class _GoYaml11Loader(yaml.SafeLoader):
    """Resolves plain scalars like the YAML 1.1 decoder in helm and kubectl (sigs.k8s.io/yaml)."""


_GoYaml11Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
    list("yYnNtTfFoO"),
)
_GoYaml11Loader.add_constructor(
    "tag:yaml.org,2002:bool",
    lambda loader, node: loader.construct_scalar(node).lower() in {"y", "yes", "true", "on"},
)


def test_crd_reads_the_same_to_a_yaml_1_1_decoder() -> None:
    """An unquoted `n` or `y` (a key or a value) would reach the API server as the boolean false or true."""
    committed = (REPO / CHART_CRD_PATH).read_text(encoding="utf-8")
    assert yaml.load(committed, Loader=_GoYaml11Loader) == build_crd()
