"""The pod specs a FlashRLJob's objects create, as KubeRay v1.7.0 and the Job controller complete them:
what the Pod Security tests judge, by the table of controls (tests/unit) and by the real API server's
admission (tests/integration)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from flashrl_api import FlashRLJob
from flashrl_operator.render import render

REPO = Path(__file__).resolve().parents[1]


def pods(job: FlashRLJob) -> dict[str, dict[str, Any]]:
    """Each pod spec the job's RayJob creates, as KubeRay v1.7.0 completes them."""
    ray_job = next(o for o in render(job) if o["kind"] == "RayJob")
    cluster = ray_job["spec"]["rayClusterSpec"]
    head = copy.deepcopy(cluster["headGroupSpec"]["template"]["spec"])
    worker = copy.deepcopy(cluster["workerGroupSpecs"][0]["template"]["spec"])
    # KubeRay injects wait-gcs-ready into workers with container 0's securityContext (common/pod.go).
    ray = worker["containers"][0]
    init = {
        "name": "wait-gcs-ready",
        "image": ray["image"],
        "securityContext": copy.deepcopy(ray["securityContext"]),
    }
    worker.setdefault("initContainers", []).append(init)
    submitter = copy.deepcopy(ray_job["spec"]["submitterPodTemplate"]["spec"])
    found = {"head": head, "workers": worker, "submitter": submitter}
    stage = next((o for o in render(job) if o["kind"] == "Job"), None)
    if stage is not None:
        found["staging"] = copy.deepcopy(stage["spec"]["template"]["spec"])
    return found


def documented_levels() -> dict[str, dict[str, str]]:
    """docs/security.md's table: the Pod Security level of each example's pods, by role."""
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(examples/[^`]+)` \| (\w+) \| (\w+) \| (\w+) \| (\w+|-) \|", text, re.MULTILINE)
    return {
        path: {"head": h, "workers": w, "submitter": s, **({"staging": st} if st != "-" else {})}
        for path, h, w, s, st in rows
    }
