"""README.md's quick start, read as a script: followed in order, every object the example job needs
exists before the job is applied, and every command it runs is set up by an earlier line.

The steps are parsed from the README's ``sh`` block (the one after "Quick start"); ``kubectl apply -f``
(directly or after ``sed``) creates what its files hold, ``kubectl create secret`` its Secret. What
the job needs is :func:`flashrl_operator.job.preflight.cluster_needs`, the list ``flashrl preflight``
checks on a cluster.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from flashrl_api import load_job_file
from flashrl_api.pins import load_pins
from flashrl_operator.job.preflight import cluster_needs

REPO = Path(__file__).resolve().parents[3]


def _steps() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("Quick start")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.DOTALL)
    assert block is not None, "README.md: no sh block after 'Quick start'"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _joined(steps: list[str]) -> list[str]:
    """Continuation lines (ending in a backslash) joined into one command."""
    out: list[str] = []
    pending = ""
    for line in steps:
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


def _created(command: str) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of what a step creates in the cluster."""
    words = shlex.split(command.replace("|", " | "))
    if "kubectl" in words and "apply" in words:
        source = words[words.index("-f") + 1]
        if source == "-":  # sed '...' FILE | kubectl apply -f -
            source = next(w for w in words if w.endswith((".yaml", ".yml")))
        docs = [d for d in yaml.safe_load_all((REPO / source).read_text(encoding="utf-8")) if d]
        return [(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs]
    if words[:4] == ["kubectl", "create", "secret", "generic"]:
        return [("Secret", words[words.index("-n") + 1], words[4])]
    return []


def test_the_example_jobs_needs_are_created_before_it_is_applied() -> None:
    commands = _joined(_steps())
    applied = next(i for i, c in enumerate(commands) if "kubectl apply -f examples/flashrljob.yaml" in c)
    before = {obj for c in commands[:applied] for obj in _created(c)}
    job = load_job_file(REPO / "examples" / "flashrljob.yaml")
    needs = cluster_needs(job)
    assert ("Namespace", "", needs.namespace) in before
    for claim in needs.claims:
        assert ("PersistentVolumeClaim", needs.namespace, claim) in before, claim
    for secret in [*needs.secrets, *needs.optional_secrets]:
        assert ("Secret", needs.namespace, secret) in before, secret
    # The namespace comes before what goes into it.
    order = [obj for c in commands[:applied] for obj in _created(c)]
    assert order.index(("Namespace", "", needs.namespace)) == 0


def test_the_claims_fit_the_recipe_and_name_a_storage_class_placeholder() -> None:
    docs = list(yaml.safe_load_all((REPO / "examples" / "cluster" / "storage.yaml").read_text("utf-8")))
    claims = {d["metadata"]["name"]: d["spec"] for d in docs if d}
    assert set(claims) == {"hf-cache", "rl-data", "rl-checkpoints"}
    gi = {
        name: int(spec["resources"]["requests"]["storage"].removesuffix("Gi"))
        for name, spec in claims.items()
    }
    assert gi["hf-cache"] >= 17  # Qwen3-8B-Base: 16.4 GB of bf16 safetensors
    assert gi["rl-checkpoints"] >= 300  # a few resumable Qwen3-8B checkpoints (~100 GB each)
    for spec in claims.values():
        assert spec["accessModes"] == ["ReadWriteMany"]  # the staging Job and the Ray pods on several nodes
        assert spec["storageClassName"] == "STORAGE_CLASS"
    sed = next(c for c in _joined(_steps()) if "storage.yaml" in c)
    assert "s/STORAGE_CLASS/" in sed


def test_every_command_is_set_up_by_an_earlier_step() -> None:
    commands = _joined(_steps())

    def first(predicate: str) -> int:
        return next(i for i, c in enumerate(commands) if predicate in c)

    # The CLI comes from `make install` (no `flashrl` on the PATH otherwise).
    assert all(not c.startswith("flashrl ") for c in commands)
    assert first("make install") < first(".venv/bin/flashrl")
    # KubeRay (its CRDs) before the operator, the operator before any job.
    chart = first(
        "helm upgrade --install flashrl charts/flashrl-operator"
    )  # also over a release (dev cluster)
    assert first("helm install kuberay-operator") < chart
    assert first("helm upgrade --install flashrl") < first("kubectl apply -f examples/flashrljob.yaml")
    assert (REPO / "charts" / "flashrl-operator" / "Chart.yaml").exists()
    kuberay = load_pins().versions.kuberay
    assert f"--version {kuberay}" in commands[first("helm install kuberay-operator")]
