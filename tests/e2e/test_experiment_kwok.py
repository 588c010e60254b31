"""The origin experiment on ONE 8-GPU node: every variant runs to the end, one after another.

``examples/flashrlexperiment.yaml`` as shipped (three variants, ``parallelism: 1``) on the real control
plane with KubeRay's own operator and a single kwok node of 8 H20 GPUs; each variant's run is played as
``test_kuberay_kwok.py`` plays one (the staging pod exits, the launcher reports the last step, the Ray
dashboard stand-in says SUCCEEDED, the submitter exits). A variant's RayJob needs all 8 GPUs, so the
next one can only be scheduled once the previous one's GPU workers are gone: KubeRay's deletion rules
delete them the moment the Ray job ends, and the experiment creates the next variant only then (before,
it would sit unschedulable until its startup deadline failed it). Marker ``kwok`` (part of ``make test``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_kuberay_kwok import E2E, NAMESPACE, kwok_cluster

from envtest.control_plane import REPO

pytestmark = pytest.mark.kwok

EXAMPLE = REPO / "examples" / "flashrlexperiment.yaml"
NODE = "h20-solo"


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    with kwok_cluster(Path(tmp_path_factory.mktemp("e2e-solo")), (NODE,)) as found:
        yield found


def _example() -> tuple[str, list[str], dict[str, Any]]:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    name = manifest["metadata"]["name"]
    return name, [f"{name}-{v['name']}" for v in manifest["spec"]["variants"]], manifest


def test_the_example_experiment_runs_every_variant_on_one_8_gpu_node(solo: E2E) -> None:
    plane = solo.plane
    name, jobs, manifest = _example()
    assert manifest["spec"]["parallelism"] == 1
    # The example names a Hugging Face token Secret; a user without one creates an empty one.
    if "hf-token" in manifest["spec"]["template"].get("secretRefs", []):
        plane.kubectl(
            "create", "secret", "generic", "hf-token", "-n", NAMESPACE, "--from-literal=HF_TOKEN=unused"
        )
    plane.kubectl("apply", "-f", str(EXAMPLE))

    previous_cluster: str | None = None
    for index, job in enumerate(jobs):
        solo.wait(f"FlashRLJob {job}", lambda job=job: solo.get("flashrljob", job))
        if previous_cluster is not None:
            # Created only once the previous variant's GPUs were released.
            assert solo.gpu_pods(previous_cluster) == [], "the next variant started while GPUs were held"
        for later in jobs[index + 1 :]:
            assert solo.get("flashrljob", later) is None, f"{later} created before {job} finished"
        # Staging (Hugging Face sources): the first variant stages; the others may find it staged.
        stage = f"batch.kubernetes.io/job-name={job}-stage"
        solo.wait(
            f"{job}'s staging pod running or its RayJob",
            lambda job=job, stage=stage: (
                solo.get("rayjob", job)
                or [p for p in solo.pods(stage) if p["status"].get("phase") == "Running"]
            ),
        )
        if solo.get("rayjob", job) is None:
            solo.exit_pods(stage)
        solo.wait(f"{job}'s RayJob", lambda job=job: solo.get("rayjob", job))
        status = solo.wait_phase(job, "Running")
        cluster = str(status["rayClusterName"])
        workers = solo.gpu_pods(cluster)
        assert workers and all(p["spec"]["nodeName"] == NODE for p in workers)
        total = (status.get("progress") or {}).get("totalSteps") or 150
        solo.launcher_reports(job, total, total)
        solo.dashboard.set(job, "SUCCEEDED")
        solo.wait(f"{job}'s submitter pod", lambda job=job: solo.pods(f"batch.kubernetes.io/job-name={job}"))
        solo.exit_pods(f"batch.kubernetes.io/job-name={job}")
        done = solo.wait_phase(job, "Succeeded")
        assert done["progress"]["step"] == total
        # No GPU pod of a finished variant is left; its head stays for the logs.
        solo.holds_no_gpu(job)
        previous_cluster = cluster

    experiment = solo.wait(
        "the experiment Succeeded",
        lambda: (
            (s := (solo.get("flashrlexperiment", name) or {}).get("status") or {}).get("phase") == "Succeeded"
            and s
        ),
    )
    assert experiment["finished"] == f"{len(jobs)}/{len(jobs)}"
    assert all(v["phase"] == "Succeeded" for v in experiment["variants"])
    for job in jobs:
        assert solo.job_status(job).get("reason") != "PreRunningDeadlineExceeded"
    reasons = [
        e["reason"]
        for e in (solo.get("event", "--field-selector", f"involvedObject.name={name}") or {}).get("items", [])
    ]
    assert reasons.count("VariantStarted") == len(jobs) and reasons.count("VariantFinished") == len(jobs)
    assert "VariantWaiting" in reasons
    solo.assert_nothing_refused()
