"""What can be checked of the kind e2e without Docker: scripts, workflow, cluster config and manifests."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
E2E = REPO / "tests" / "e2e"
WORKFLOW = REPO / ".github" / "workflows" / "e2e.yaml"
PINS = yaml.safe_load((REPO / "images" / "pins.yaml").read_text(encoding="utf-8"))
YAMLLINT_CONFIG = (
    "{extends: default, rules: {line-length: {max: 130}, document-start: disable,"
    " truthy: {check-keys: false}}}"
)


def tool(name: str) -> str:
    found = shutil.which(name) or str(REPO / ".venv" / "bin" / name)
    if not Path(found).exists():
        pytest.fail(f"{name} not found: it comes with the dev extra (pyproject.toml)")
    return found


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A command's exit code and text output (a minute at most; the caller asserts on the code)."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_run_script_is_shellcheck_clean() -> None:
    proc = run(tool("shellcheck"), "--external-sources", "--severity=style", str(E2E / "run.sh"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_run_script_cleans_up_and_never_sleeps() -> None:
    text = (E2E / "run.sh").read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    assert "trap cleanup EXIT" in text and "kind delete cluster" in text and "KEEP_CLUSTER" in text
    assert not re.search(r"^\s*sleep\b", text, flags=re.MULTILINE), "waits use deadlines, not sleeps"
    # Every kubectl wait inside the retry loops is bounded.
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    waits = [line for line in code if "kubectl wait " in line]
    assert len(waits) >= 4
    for line in waits:
        assert "--timeout=" in line, line


def test_run_script_reads_only_existing_pins() -> None:
    text = (E2E / "run.sh").read_text(encoding="utf-8")
    keys = re.findall(r"\$\(pin ([a-z0-9_.]+)\)", text)
    assert {"e2e.kind", "versions.kuberay", "images.operator.repository"} <= set(keys)
    for key in keys:
        node: Any = PINS
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"run.sh reads {key}, absent from pins.yaml"
            node = node[part]


def test_make_e2e_runs_the_script() -> None:
    proc = run("make", "-n", "e2e", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "bash tests/e2e/run.sh" in proc.stdout.splitlines()


def test_yaml_files_pass_yamllint() -> None:
    files = [
        WORKFLOW,
        WORKFLOW.with_name("release.yaml"),
        E2E / "kind-config.yaml",
        E2E / "flashrljob-e2e.yaml",
    ]
    files += sorted((REPO / "examples" / "cluster").glob("*.yaml"))
    proc = run(sys.executable, "-m", "yamllint", "-d", YAMLLINT_CONFIG, *map(str, files))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflow_runs_the_e2e_on_pull_requests() -> None:
    workflow = load(WORKFLOW)
    triggers = workflow.get("on", workflow.get(True))  # PyYAML reads the bare key `on` as True
    assert "pull_request" in triggers
    steps = workflow["jobs"]["kind"]["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "bash tests/e2e/run.sh" in runs
    assert "scripts/get-helm.sh" in runs
    assert "sha256sum --check" in runs, "the kind binary is verified"
    assert '["e2e"]["kind"]' in runs, "the kind version comes from images/pins.yaml"
    for step in steps:
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+(\.\d+)*", step["uses"]), step["uses"]
    assert "latest" not in WORKFLOW.read_text(encoding="utf-8")
    assert workflow["jobs"]["kind"]["timeout-minutes"] <= 90


def test_kind_config_has_one_fake_h20_worker() -> None:
    config = load(E2E / "kind-config.yaml")
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    roles = [node["role"] for node in config["nodes"]]
    assert roles == ["control-plane", "worker"]
    worker = config["nodes"][1]
    assert worker["labels"] == {"nvidia.com/gpu.product": "NVIDIA-H20"}
    (patch,) = [yaml.safe_load(p) for p in worker["kubeadmConfigPatches"]]
    assert patch["kind"] == "JoinConfiguration"
    assert patch["nodeRegistration"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]


def test_pinned_kind_node_image() -> None:
    node = PINS["e2e"]["kind_node"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", node["tag"])
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", node["digest"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", PINS["e2e"]["kind"])


def test_e2e_job_validates_with_the_cli() -> None:
    proc = run(tool("flashrl"), "validate", str(E2E / "flashrljob-e2e.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dry run" in proc.stdout


def test_e2e_job_uses_the_cpu_trainer_image_and_a_dry_run() -> None:
    job = load(E2E / "flashrljob-e2e.yaml")
    trainer = PINS["images"]["trainer"]
    assert job["spec"]["images"]["trainer"] == f"{trainer['repository']}:{trainer['tag']}-cpu"
    assert job["spec"]["dryRun"] is True
    assert job["spec"]["resources"]["nodes"] == 1 and job["spec"]["resources"]["gpusPerNode"] == 1


def _rendered() -> list[dict[str, Any]]:
    proc = run(tool("flashrl"), "render", str(E2E / "flashrljob-e2e.yaml"))
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_rendered_core_objects_validate_strictly() -> None:
    docs = _rendered()
    core = [d for d in docs if d["apiVersion"] != "ray.io/v1"]
    assert {d["kind"] for d in core} >= {"ConfigMap", "ServiceAccount", "Role", "RoleBinding"}
    for doc in core:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_rendered_gpu_worker_lands_on_the_fake_h20_node() -> None:
    """The worker's selector, toleration and GPU limit match what kind-config.yaml and run.sh create."""
    (rayjob,) = [d for d in _rendered() if d["kind"] == "RayJob"]
    config = load(E2E / "kind-config.yaml")
    node_labels = config["nodes"][1]["labels"]
    (taint,) = yaml.safe_load(config["nodes"][1]["kubeadmConfigPatches"][0])["nodeRegistration"]["taints"]
    run_sh = (E2E / "run.sh").read_text(encoding="utf-8")
    fake_gpus = int(re.search(r'nvidia.com~1gpu", "value": "(\d+)"', run_sh)[1])  # type: ignore[index]
    (group,) = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    assert pod["nodeSelector"].items() <= node_labels.items()
    assert any(
        t["key"] == taint["key"] and t.get("effect") in (None, taint["effect"]) and t["operator"] == "Exists"
        for t in pod["tolerations"]
    )
    limits = pod["containers"][0]["resources"]["limits"]
    assert int(limits["nvidia.com/gpu"]) <= fake_gpus
    head_pod = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in head_pod or not set(head_pod["nodeSelector"]) & set(node_labels)
    assert rayjob["spec"]["entrypoint"].startswith("flashrl-launch check")
