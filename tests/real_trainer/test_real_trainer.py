"""verl 0.9.1's own trainer (``python -m verl.trainer.main_ppo``) on CPU, driven by the product's launcher,
reporting to the real kube-apiserver while the real operator runs.

Each job is a FlashRLJob with ``rollout.engine: vllm`` (vLLM's CPU build) and ``bf16``; the settings only a
CPU needs are its ``spec.overrides`` and ``spec.env``, as a user would write them (none is a key the product
protects). It is created on the integration layer's control plane; the operator renders and creates its
RayJob, spec ConfigMap, ServiceAccount and RBAC; the head pod's part is done here (:mod:`on_cluster`: the
mounted ConfigMap, the container's environment, a TokenRequest token of the job's own ServiceAccount) and
``flashrl-launch train --spec`` runs as the RayJob's entrypoint against a local Ray head with one declared
GPU. Nothing of verl is stood in for: the metric names, checkpoints, validation dumps and exit codes are
verl's own, and what is asserted is what the operator computed from them (status, ``<job>-metrics``, the
retry ledger, its exporter), what the launcher served while verl ran, and what ``flashrl report`` makes of
two real runs.

Four verl launches in all, each its own Ray head: scenario (a) (seed 1), scenario (b)'s two attempts
(seed 2; its resumed run is (d)'s second run), scenario (c) (fails at start).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from on_cluster import Attempt, run_attempt, scrape
from operator_harness import NAMESPACE, WAIT_S, Cluster
from prometheus_client.parser import text_string_to_metric_families
from trainer_env import REPO, plugin_path, python

from envtest.control_plane import ControlPlane
from flashrl_api import exported_metrics as names
from flashrl_api import verl_metrics as vm
from flashrl_api.history import HISTORY_KEY, history_name
from flashrl_api.validation_summary import VALIDATION_KEY
from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim import CONFIG_MAPS_RESOURCE, JOBS_RESOURCE, RAY_JOBS_RESOURCE, eventually
from flashrl_report import build_report, load_run, load_validation
from flashrl_report.analysis import score_key

pytestmark = pytest.mark.real_trainer
ON_CLUSTER = pytest.mark.asyncio(loop_scope="module")

#: What only a CPU needs (docs/testing.md says why each one).
CPU_OVERRIDES = [
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
    "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "+actor_rollout_ref.rollout.enable_sleep_mode=False",
    "actor_rollout_ref.rollout.free_cache_engine=False",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "data.dataloader_num_workers=0",
]
CPU_ENV = {
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}
SCORE = "val-core/openai/gsm8k/acc/mean@2"


#: A guard that only the probability difference can trip, and at once: verl's vLLM rollout and its FSDP
#: trainer never agree to the last bit, so the operator must see it drift from the real metric's name.
PROBS_DIFF_GUARD = {
    "maxKL": None,
    "minEffectiveSampleSize": None,
    "maxProbsDiffMean": 0.0,
    "consecutiveSteps": 1,
    "action": "Alert",
}


def job_manifest(
    name: str,
    tiny: Path,
    storage: Path,
    seed: int,
    train: Path | None = None,
    max_restarts: int = 0,
    guard: dict[str, Any] | None = None,
) -> dict[str, Any]:
    extra: dict[str, Any] = {"correction": {"guard": guard}} if guard is not None else {}
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "model": {"source": str(tiny / "model")},
            "data": {
                "train": str(train or tiny / "data" / "train.parquet"),
                "validation": str(tiny / "data" / "validation.parquet"),
            },
            "validation": {"samplesPerProblem": 2},
            "rollout": {"engine": "vllm", "quantization": "bf16", "samplesPerPrompt": 2},
            "resources": {"nodes": 1, "gpusPerNode": 1},
            "training": {
                "promptBatchSize": 4,
                "generationBatchSize": 4,
                "miniBatchSize": 4,
                "maxPromptLength": 64,
                "maxResponseLength": 32,
                "totalSteps": 3,
                "ulyssesSequenceParallelSize": 1,
                "testFrequency": 1,
                "warmupSteps": 0,
                "seed": seed,
                "dynamicSampling": {"enabled": False},
                "overlongBuffer": {"enabled": False},
                "loggers": ["console"],
            },
            "checkpoint": {"interval": 1},
            "lifecycle": {"maxRestarts": max_restarts},
            "storage": {
                "modelCache": {"mountPath": str(storage / "models")},
                "data": {"mountPath": str(storage / "data")},
                "checkpoints": {"mountPath": str(storage / "checkpoints")},
            },
            "env": [{"name": k, "value": v} for k, v in CPU_ENV.items()],
            "overrides": CPU_OVERRIDES,
            **extra,
        },
    }


@dataclass
class Run:
    """A job run to its end on the cluster: its attempts, its final status, its files."""

    name: str
    attempts: list[Attempt]
    status: dict[str, Any]
    #: ``<checkpoints>/DAPO-1/<job>``: verl's checkpoints, the launcher's metrics and validation dumps.
    root: Path


def checkpoint_root(storage: Path, name: str) -> Path:
    return storage / "checkpoints" / "DAPO-1" / name


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def steps_trained(metrics_file: Path) -> list[int]:
    """The steps verl trained in one attempt (its file logger's records that carry a step's timing)."""
    records = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return sorted(r["step"] for r in records if "timing_s/step" in r["data"])


async def settled(cluster: Cluster, name: str, phase: str) -> dict[str, Any]:
    """The status once the job is in ``phase`` with its last attempt's end folded in (its endTime)."""

    async def probe() -> dict[str, Any] | None:
        status = await cluster.status(name)
        attempts = status.get("attempts") or []
        ended = attempts and all(a.get("endTime") for a in attempts)
        return status if status.get("phase") == phase and ended else None

    return await eventually(probe, f"{name} to be {phase} with its attempts ended", WAIT_S, 0.5)


def report_command(output: Path, args: list[str], env: dict[str, str] | None) -> str:
    """``flashrl report --output OUTPUT ARGS`` with the suite's own install; its output."""
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "flashrl"), "report", "--output", str(output), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def run_a(
    tiny: Path, kube: Cluster, trainer_plane: ControlPlane, operator: OperatorThread, tmp_path_factory: Any
) -> Run:
    """Scenario (a): three steps, a checkpoint and a validation every step, seed 1."""
    work = tmp_path_factory.mktemp("run-a")
    manifest = job_manifest("rt-a", tiny, work / "volumes", seed=1, guard=PROBS_DIFF_GUARD)
    await kube.api.create(JOBS_RESOURCE, manifest)
    attempt = await run_attempt(kube, trainer_plane, "rt-a", "rt-a", work / "attempt-1")
    assert attempt.code == 0, attempt.log[-6000:]
    status = await settled(kube, "rt-a", "Succeeded")
    return Run("rt-a", [attempt], status, checkpoint_root(work / "volumes", "rt-a"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def run_b(
    tiny: Path, kube: Cluster, trainer_plane: ControlPlane, operator: OperatorThread, tmp_path_factory: Any
) -> Run:
    """Scenario (b), seed 2: attempt 1's pod is killed once verl wrote step 2's checkpoint; KubeRay
    reports the Ray job failed, the operator starts attempt 2 (its own RayJob), which verl resumes."""
    work = tmp_path_factory.mktemp("run-b")
    root = checkpoint_root(work / "volumes", "rt-b")
    tracker = root / "latest_checkpointed_iteration.txt"
    manifest = job_manifest("rt-b", tiny, work / "volumes", seed=2, max_restarts=1)
    await kube.api.create(JOBS_RESOURCE, manifest)

    def step_2_saved() -> bool:
        return tracker.exists() and tracker.read_text().strip() == "2"

    first = await run_attempt(kube, trainer_plane, "rt-b", "rt-b", work / "attempt-1", stop_when=step_2_saved)
    assert step_2_saved(), f"attempt 1 ended before step 2's checkpoint:\n{first.log[-6000:]}"
    assert first.code != 0, "attempt 1 was killed"
    second = await run_attempt(kube, trainer_plane, "rt-b", "rt-b-2", work / "attempt-2")
    assert second.code == 0, second.log[-6000:]
    status = await settled(kube, "rt-b", "Succeeded")
    return Run("rt-b", [first, second], status, root)


@ON_CLUSTER
async def test_three_real_steps_reach_the_operators_status_history_and_exporters(
    run_a: Run, kube: Cluster, operator: OperatorThread
) -> None:
    status, root = run_a.status, run_a.root
    (attempt,) = run_a.attempts
    # What the operator computed from the launcher's reports of real verl output.
    assert status["progress"]["step"] == 3 and status["progress"]["totalSteps"] == 3, status
    assert status["checkpoint"]["step"] == 3, status
    names_reported = {m["name"] for m in status.get("metrics") or []}
    assert {vm.MISMATCH_KL, "timing_s/step"} <= names_reported, sorted(names_reported)
    assert status["validationScore"]["name"] == SCORE, status["validationScore"]
    assert status.get("validationProblems"), status
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Succeeded"] == "True", status["conditions"]
    # Every report came with the job's own ServiceAccount token, and the API server's RBAC (the Role
    # the operator rendered) let each through: its audit log of the writes in the namespace.
    assert kube.audit is not None
    reports = [
        e
        for e in kube.audit.entries()
        if e["user"]["username"] == f"system:serviceaccount:{NAMESPACE}:rt-a-launcher"
        and e.get("stage") == "ResponseComplete"
    ]
    assert reports, "no request of the job's ServiceAccount reached the API server"
    assert {(e["verb"], e["objectRef"]["resource"], e["objectRef"].get("subresource")) for e in reports} == {
        ("patch", "flashrljobs", "status")
    }
    assert all(e["responseStatus"]["code"] == 200 for e in reports), [e["responseStatus"] for e in reports]
    # The mismatch guard read verl's real probability difference: a Warning Event naming it.
    drift = [e for e in await kube.events_for("rt-a") if e["reason"] == "MismatchDrift"]
    assert drift and vm.PROBS_DIFF_MEAN in drift[0]["message"], drift
    assert drift[0]["type"] == "Warning"
    # verl's own files, where the spec the operator rendered put them.
    assert (root / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert {p.name for p in root.glob("global_step_*")} >= {"global_step_3"}
    dumps = root / "validation" / "attempt-1"
    assert {p.name for p in dumps.glob("*.jsonl")} >= {"0.jsonl", "3.jsonl"}
    first = json.loads((dumps / "0.jsonl").read_text().splitlines()[0])
    assert {"input", "output", "gts", "score", "step", "acc"} <= set(first)
    verl_lines = (root / "metrics" / "attempt-1.jsonl").read_text()
    assert "val-core/openai/gsm8k/acc/best@2/mean" in verl_lines  # logged by verl, not the score

    # The operator's history ConfigMap: each step's metrics and each validation's per-problem counts.
    history = await kube.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, history_name("rt-a"))
    assert history is not None
    rows = [json.loads(line) for line in history["data"][HISTORY_KEY].splitlines() if line.strip()]
    trained = [r["step"] for r in rows if "timing_s/step" in r["data"]]
    assert trained == [1, 2, 3], rows
    assert any(SCORE in r["data"] for r in rows), rows
    validations = [json.loads(line) for line in history["data"][VALIDATION_KEY].splitlines() if line]
    assert {v["step"] for v in validations} >= {1, 2, 3}, validations

    # The launcher's /metrics answered while verl trained, with verl's values.
    during = [text for text in attempt.scrapes if any(v >= 1 for _, v in samples(text, names.TRAINING_STEP))]
    assert during, f"no scrape of the launcher's /metrics after a step ({len(attempt.scrapes)} scrapes)"
    last = during[-1]
    assert [lbl["job"] for lbl, _ in samples(last, names.TRAINING_STEP)] == ["rt-a"]
    scores = {(lbl["data_source"], lbl["metric"]) for lbl, _ in samples(last, names.VALIDATION_SCORE)}
    assert ("openai/gsm8k", "acc/mean@2") in scores, scores
    assert {lbl["phase"] for lbl, _ in samples(last, names.PHASE_SECONDS)} >= {"gen", "update_actor"}
    assert samples(last, names.TRAINING_STEP_SECONDS), "verl's timing_s/step is not exported"

    # The operator's exporter after the end: its GPU-second phases of the job are the status's ledger.
    by_phase = {e["phase"]: e["gpuSeconds"] for e in (status.get("goodput") or {}).get("byPhase") or []}
    assert by_phase.get("actor_update", 0) > 0 and by_phase.get("generation", 0) > 0, status.get("goodput")
    url = operator.metrics_url
    assert url is not None

    async def exported() -> list[tuple[dict[str, str], float]] | None:
        text = await asyncio.to_thread(scrape, url)
        found = [s for s in samples(text or "", names.GPU_SECONDS) if s[0].get("job") == "rt-a"]
        now = await kube.status("rt-a")
        ledger = {e["phase"]: e["gpuSeconds"] for e in now["goodput"]["byPhase"]}
        agree = all(abs(value - ledger.get(labels["phase"], 0.0)) <= 0.1 for labels, value in found)
        return found if found and agree else None

    await eventually(exported, "the operator's exported GPU-seconds of rt-a to be its status's", WAIT_S)


@ON_CLUSTER
async def test_a_killed_attempt_is_retried_by_the_operator_and_verl_resumes_from_its_checkpoint(
    run_b: Run, kube: Cluster
) -> None:
    status, root = run_b.status, run_b.root
    first, second = run_b.attempts
    assert await kube.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "rt-b-2") is not None
    # verl resumed from step 2: attempt 2 trained step 3 only, and the job ends at 3/3.
    assert steps_trained(root / "metrics" / "attempt-2.jsonl") == [3], second.log[-6000:]
    assert (root / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert status["progress"]["step"] == 3 and status["progress"]["totalSteps"] == 3
    assert status["checkpoint"]["step"] == 3 and status["checkpoint"]["attempt"] == 2
    # The operator's own ledger: attempt 1 ended at the step its launcher last reported, with the
    # checkpoint it last reported; the steps counted lost are the ones attempt 2 trained again.
    assert status["attempt"] == 2
    one, two = status["attempts"]
    reported_step = first.status_at_end["progress"]["step"]
    reported_ckpt = first.status_at_end["checkpoint"]["step"]
    assert (one["attempt"], one["endStep"], one["checkpointStep"]) == (1, reported_step, reported_ckpt), one
    assert two["attempt"] == 2 and two["startStep"] == reported_ckpt, two
    redone = [s for s in steps_trained(root / "metrics" / "attempt-2.jsonl") if s <= reported_step]
    assert status["lostSteps"] == len(redone), (status["lostSteps"], redone, one)
    # Attempt 2 reported the checkpoint verl resumed from before its first step's.
    mine = [c for c in second.checkpoints_seen if c.get("attempt") == 2]
    assert mine and mine[0]["step"] == 2 and mine[-1]["step"] == 3, second.checkpoints_seen
    retrying = [e for e in await kube.events_for("rt-b") if e["reason"] == "Retrying"]
    assert len(retrying) == 1, retrying


@ON_CLUSTER
async def test_verl_failing_on_a_missing_data_file_fails_the_job_with_its_reason(
    tiny: Path, kube: Cluster, trainer_plane: ControlPlane, operator: OperatorThread, tmp_path: Path
) -> None:
    absent = tmp_path / "absent" / "train.parquet"
    manifest = job_manifest("rt-c", tiny, tmp_path / "volumes", seed=3, train=absent)
    await kube.api.create(JOBS_RESOURCE, manifest)
    attempt = await run_attempt(kube, trainer_plane, "rt-c", "rt-c", tmp_path / "attempt-1")
    assert attempt.code == 1, attempt.log[-6000:]  # verl's own exit code, passed on
    message = (tmp_path / "attempt-1" / "termination-log").read_text()
    assert message.startswith("verl exited with code 1 on its own at step 0"), message
    assert "FileNotFoundError" in message and "absent/train.parquet" in message, message
    # What the operator makes of Ray's message: the documented reason, verl's code and its words.
    status = await settled(kube, "rt-c", "Failed")
    assert status["reason"] == "TrainerFailed", status
    assert "verl exited with code 1" in status["message"], status["message"]
    assert status["attempt"] == 1


@ON_CLUSTER
async def test_two_real_runs_are_compared_by_the_report_from_files_and_from_the_cluster(
    run_a: Run, run_b: Run, trainer_plane: ControlPlane, tmp_path: Path
) -> None:
    """Scenario (d): seed 1 (run a) against seed 2 (run b, resumed), problem by problem."""
    from flashrl_operator.client.report_runs import load_cluster_runs

    runs = [load_run("seed-1", run_a.root / "metrics"), load_run("seed-2", run_b.root / "metrics")]
    dumps = [
        load_validation("seed-1", run_a.root / "validation"),
        load_validation("seed-2", run_b.root / "validation"),
    ]
    report = build_report(runs, baseline="seed-1", validation=dumps)
    (paired,) = report.paired
    assert (paired.variant, paired.baseline) == ("seed-2", "seed-1")
    assert [s for s, _ in paired.per_step] == [0, 1, 2, 3], paired.per_step
    assert paired.per_problem, "no per-problem rows from the real dumps"
    assert score_key(runs) == SCORE
    line = report.verdicts[1]
    assert line.startswith("seed-2 vs seed-1: ") and "(paired, per problem)" in line, report.verdicts

    # From the cluster: the FlashRLJobs and their history ConfigMaps, as `flashrl report --job` reads.
    env = trainer_plane.env()
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = env["KUBECONFIG"]
    try:
        cluster_runs, summaries, _ = await asyncio.to_thread(
            load_cluster_runs, NAMESPACE, None, ["rt-a", "rt-b"]
        )
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG")
        else:
            os.environ["KUBECONFIG"] = previous
    assert [r.label for r in cluster_runs] == ["rt-a", "rt-b"]
    assert score_key(cluster_runs) == SCORE
    assert {s.label for s in summaries} == {"rt-a", "rt-b"}
    from_cluster = build_report(cluster_runs, baseline="rt-a", validation=summaries)
    (paired_cluster,) = from_cluster.paired
    assert [s for s, _ in paired_cluster.per_step] == [s for s, _ in paired.per_step]
    assert len(paired_cluster.per_problem) == len(paired.per_problem)

    # The command itself, both ways, as a user runs it.
    files = [
        *("--metrics", f"seed-1={run_a.root / 'metrics'}", "--metrics", f"seed-2={run_b.root / 'metrics'}"),
        *("--validation", f"seed-1={run_a.root / 'validation'}"),
        *("--validation", f"seed-2={run_b.root / 'validation'}"),
        *("--baseline", "seed-1"),
    ]
    printed = await asyncio.to_thread(report_command, tmp_path / "files", files, None)
    assert "seed-2 vs seed-1: " in printed and "(paired, per problem)" in printed, printed
    jobs = ["-n", NAMESPACE, "--job", "rt-a", "--job", "rt-b", "--baseline", "rt-a"]
    printed = await asyncio.to_thread(report_command, tmp_path / "jobs", jobs, env)
    assert "rt-b vs rt-a: " in printed and "(paired, per problem)" in printed, printed
    for out in (tmp_path / "files", tmp_path / "jobs"):
        assert f"Validation score: {SCORE}." in (out / "report.html").read_text()


def test_flashrl_validate_passes_where_verl_torch_and_ray_are_installed(tiny: Path, tmp_path: Path) -> None:
    """verl's checks run in their sandbox here too: torch (which imports dill, which test-writes a
    temporary file) and ray (which loads its library through ctypes) are preloaded before the sandbox's
    file-size limit and audit hook, so the job's checks run and answer."""
    path = tmp_path / "flashrljob.yaml"
    path.write_text(yaml.safe_dump(job_manifest("rt-v", tiny, tmp_path / "volumes", seed=1)))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(plugin_path(tmp_path / "plugins"))}
    done = subprocess.run(
        [str(python()), "-m", "flashrl_operator.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'valid FlashRLJob "rt-v"' in done.stdout, done.stdout
    assert "sandbox" not in done.stdout + done.stderr
