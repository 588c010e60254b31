"""Helpers shared by the chart tests: run the real helm binary, pick objects out of its output."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "flashrl-operator"
CRD_FILE = CHART / "files" / "crds" / "flashrljobs.flashrl.dev.yaml"
EXPERIMENT_CRD_FILE = CHART / "files" / "crds" / "flashrlexperiments.flashrl.dev.yaml"
CRD_FILES = (CRD_FILE, EXPERIMENT_CRD_FILE)
PINS_FILE = REPO / "images" / "pins.yaml"
RELEASE = "frl"
NAMESPACE = "flashrl-system"


def helm_binary() -> str:
    """The helm on PATH (``make test`` puts .tools/bin first), else the repository's .tools/bin/helm."""
    found = shutil.which("helm")
    if found:
        return found
    local = REPO / ".tools" / "bin" / "helm"
    if local.is_file():
        return str(local)
    pytest.fail("helm not found: run `make tools` (it unpacks helm into .tools/bin)")


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run helm offline; on unexpected failure show its stderr."""
    proc = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def set_args(values: dict[str, str] | None) -> list[str]:
    """``--set`` arguments, one per key (keys may be dotted paths)."""
    out: list[str] = []
    for key, value in (values or {}).items():
        out += ["--set", f"{key}={value}"]
    return out


def template(values: dict[str, str] | None = None, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``helm template`` the chart and return its documents (tests hooks included)."""
    proc = run_helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values), *extra)
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def require_crd_file() -> None:
    """The generated CRD is part of the chart; fail (not skip) when it is missing."""
    if not CRD_FILE.is_file():
        pytest.fail(f"{CRD_FILE.relative_to(REPO)} is missing: run `make crd`")


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """Documents of a kind (and name)."""
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """Exactly one document of a kind (and name)."""
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
