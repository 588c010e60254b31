"""The Ray pods' security contexts and the Pod Security Standard level each example meets.

The level of every pod an example creates (head, GPU workers with the ``wait-gcs-ready`` init container
KubeRay injects, KubeRay's submitter) is computed by ``pod_security.py`` and must be the one
docs/security.md reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from manifests import job as _job
from pod_security import failures, level

from flashrl_api import FlashRLJob, load_job_file
from rendered_pods import documented_levels, pods

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples").glob("flashrljob*.yaml"))


def levels(job: FlashRLJob) -> dict[str, str]:
    return {name: level(pod) for name, pod in pods(job).items()}


def test_defaults_meet_restricted_everywhere() -> None:
    found = pods(_job())
    assert set(found) == {"head", "workers", "submitter", "staging"}  # the defaults are hf:// sources
    for name, pod in found.items():
        assert failures(pod, "restricted") == [], name


def test_every_ray_container_is_hardened() -> None:
    for pod in pods(_job({"resources": {"rdma": {"resourceName": "rdma/hca_shared_devices_a"}}})).values():
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["fsGroup"] == 1000
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_ipc_lock_only_on_rdma_workers() -> None:
    rdma = pods(_job({"resources": {"nodes": 2, "rdma": {"resourceName": "rdma/hca_shared_devices_a"}}}))
    assert rdma["workers"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert "add" not in rdma["head"]["containers"][0]["securityContext"]["capabilities"]
    assert "add" not in rdma["submitter"]["containers"][0]["securityContext"]["capabilities"]
    assert "add" not in rdma["staging"]["containers"][0]["securityContext"]["capabilities"]
    assert levels(_job({"resources": {"rdma": {"resourceName": "rdma/hca_shared_devices_a"}}})) == {
        "head": "restricted",
        "workers": "privileged",  # IPC_LOCK is allowed by neither baseline nor restricted
        "submitter": "restricted",
        "staging": "restricted",
    }


def test_an_image_that_needs_root_is_baseline() -> None:
    job = _job({"images": {"runAsUser": 0}})
    assert "runAsUser" not in pods(job)["head"]["securityContext"]
    assert set(levels(job).values()) == {"baseline"}


# --- the checker itself ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda p: p.update(hostNetwork=True), "privileged"),
        (lambda p: p["containers"][0]["securityContext"].update(privileged=True), "privileged"),
        (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "privileged"),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
            "privileged",
        ),
        (lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}), "privileged"),
        (lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"), "baseline"),
        (lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=[]), "baseline"),
        (lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["CHOWN"]), "baseline"),
        (lambda p: p["securityContext"].pop("runAsNonRoot"), "baseline"),
        (lambda p: p["containers"][0]["securityContext"].update(runAsUser=0), "baseline"),
        (lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}), "baseline"),
        (
            lambda p: (
                p["securityContext"].pop("seccompProfile"),
                p["containers"][0]["securityContext"].pop("seccompProfile"),
            ),
            "baseline",
        ),
        (lambda p: None, "restricted"),
    ],
)
def test_the_checker_tells_the_levels_apart(change: Any, expected: str) -> None:
    pod = pods(_job())["head"]
    change(pod)
    assert level(pod) == expected


# --- what the docs report ----------------------------------------------------------------------------


def test_docs_report_each_examples_level() -> None:
    documented = documented_levels()
    assert set(documented) == {f"examples/{p.name}" for p in EXAMPLES}
    for path in EXAMPLES:
        assert documented[f"examples/{path.name}"] == levels(load_job_file(path)), path.name
