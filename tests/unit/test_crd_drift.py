"""The CRD committed to the Helm chart is exactly what `flashrl crd` generates from the models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from flashrl_operator.crd import CHART_CRD_PATH, HEADER, build_crd, crd_yaml

REPO = Path(__file__).resolve().parents[2]


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
