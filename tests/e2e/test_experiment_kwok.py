"""The origin experiment on ONE 8-GPU node: every variant runs to the end, one after another.

``examples/flashrlexperiment.yaml`` as shipped (three variants, ``parallelism: 1``) on the real control
plane with KubeRay's own operator and a single kwok node of 8 H20 GPUs; each variant's run is played as
``test_kuberay_kwok.py`` plays one (the staging pod exits, the launcher reports the last step, the Ray
dashboard stand-in says SUCCEEDED, the submitter exits). A variant's RayJob needs all 8 GPUs, so the
next one can only be scheduled once the previous one's GPU workers are gone: KubeRay's deletion rules
delete them the moment the Ray job ends, and the experiment creates the next variant only then (before,
it would sit unschedulable until its startup deadline failed it). ``examples/flashrlexperiment-kv.yaml``
(four arms: BF16, FP8 weights, FP8 KV cache, both) is played the same way on the same node, and
``flashrl report --experiment`` then shows its four arms. Marker ``kwok`` (part of ``make test``).
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_kuberay_kwok import E2E, NAMESPACE, kwok_cluster

from envtest.control_plane import REPO

pytestmark = pytest.mark.kwok

EXAMPLE = REPO / "examples" / "flashrlexperiment.yaml"
KV_EXAMPLE = REPO / "examples" / "flashrlexperiment-kv.yaml"
#: Each arm's KV cache as its job's status (and its KV-CACHE column) shows it.
KV_CACHE = {"bf16": "auto", "fp8-w": "auto", "fp8-kv": "fp8-e4m3", "fp8-w-kv": "fp8-e4m3"}
NODE = "h20-solo"


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    with kwok_cluster(Path(tmp_path_factory.mktemp("e2e-solo")), (NODE,)) as found:
        yield found


def _example(path: Path = EXAMPLE) -> tuple[str, list[str], dict[str, Any]]:
    manifest = yaml.safe_load(path.read_text())
    name = manifest["metadata"]["name"]
    return name, [f"{name}-{v['name']}" for v in manifest["spec"]["variants"]], manifest


def _play_every_variant(solo: E2E, path: Path) -> tuple[str, list[str]]:
    """Apply the example experiment as shipped and play each variant's run to its end as the operator
    creates it, checking that it starts only once the previous one released its GPUs; then wait for the
    experiment to succeed with every variant."""
    plane = solo.plane
    name, jobs, manifest = _example(path)
    assert manifest["spec"]["parallelism"] == 1
    # The example names a Hugging Face token Secret; a user without one creates an empty one.
    if "hf-token" in manifest["spec"]["template"].get("secretRefs", []) and not solo.get(
        "secret", "hf-token"
    ):
        plane.kubectl(
            "create", "secret", "generic", "hf-token", "-n", NAMESPACE, "--from-literal=HF_TOKEN=unused"
        )
    plane.kubectl("apply", "-f", str(path))

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
    return name, jobs


def test_the_example_experiment_runs_every_variant_on_one_8_gpu_node(solo: E2E) -> None:
    _play_every_variant(solo, EXAMPLE)
    solo.assert_nothing_refused()


def test_the_four_arm_kv_example_runs_its_arms_one_after_another_and_reports_all_four(
    solo: E2E, tmp_path: Path
) -> None:
    """examples/flashrlexperiment-kv.yaml as shipped (BF16; FP8 weights; FP8 KV cache; both) on the
    same 8-GPU node: the arms run one after another to Succeeded, each RayJob carrying its arm's rollout
    precision, and `flashrl report --experiment` shows the four arms (a played run has no training
    metrics: each arm's line says so, with the step of its status)."""
    name, jobs = _play_every_variant(solo, KV_EXAMPLE)
    arms = [job.removeprefix(f"{name}-") for job in jobs]
    assert arms == ["bf16", "fp8-w", "fp8-kv", "fp8-w-kv"]
    # Each arm ran what it isolates: its status's precision, and the verl overrides its launcher read
    # (the spec ConfigMap its RayJob mounts) set the weights' and the KV cache's precision accordingly.
    for arm, job in zip(arms, jobs, strict=True):
        status = solo.job_status(job)
        weights = "blockwise-fp8" if "-w" in arm else "bf16"
        assert (status.get("quantization"), status.get("kvCache")) == (weights, KV_CACHE[arm]), arm
        overrides = json.loads(solo.get("configmap", f"{job}-spec")["data"]["verl-overrides.json"])
        assert ("actor_rollout_ref.rollout.quantization=fp8" in overrides) == ("-w" in arm), arm
        kv = "+actor_rollout_ref.rollout.engine_kwargs.sglang.kv_cache_dtype=fp8_e4m3"
        assert (kv in overrides) == ("kv" in arm), arm

    env = os.environ | {"KUBECONFIG": str(solo.plane.kubeconfig)}
    reported = subprocess.run(
        [sys.executable, "-m", "flashrl_operator.cli", "report", "--experiment", name, "-n", NAMESPACE,
         "--output", str(tmp_path / "report")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert reported.returncode == 0, reported.stderr
    lines = reported.stdout.splitlines()
    for arm in arms:
        assert (
            f"{arm}: no training metrics (status at step 150/150): no speed-up or accuracy verdict" in lines
        )
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path / 'report' / 'report.html'))}: 4 runs, \d+ of \d+ figures", lines[-1]
    )
    # The page says what each arm's rollout ran, beside its name.
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    for arm in arms:
        weights = "blockwise-fp8" if "-w" in arm else "bf16"
        cache = "fp8-e4m3 KV cache" if "kv" in arm else "the engine's default KV cache"
        assert html.escape(f"{weights} weights, {cache}") in page, arm
    solo.assert_nothing_refused()
