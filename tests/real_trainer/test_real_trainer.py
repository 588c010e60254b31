"""verl 0.9.1's own trainer (``python -m verl.trainer.main_ppo``) on CPU, driven by the product's launcher.

The job is a FlashRLJob with ``rollout.engine: vllm`` (vLLM's CPU build) and ``bf16``; the settings only a
CPU needs are its ``spec.overrides`` and ``spec.env``, as a user would write them (none is a key the product
protects). ``flashrl render`` makes the objects; the launcher gets what the head pod gets: the rendered
ConfigMap's files (the mounted spec and verl overrides) and the head container's environment, plus what
KubeRay and the kubelet add (``RAY_ADDRESS``, the ServiceAccount directory). A local Ray head started from
that environment declares one GPU, which is what the launcher's GPU gate counts and verl's worker pools ask
for. Nothing of verl is stood in for: the metric names, checkpoints, validation dumps and exit codes the
status reads are verl's own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainer_env import REPO, TrainerRun, plugin_path, python

from conftest import ApiServer
from flashrl_api import verl_metrics as vm
from flashrl_operator.job.retry_policy import AttemptEnd, lost_steps
from flashrl_operator.job.status.launcher_failure import launcher_failure
from flashrl_operator.vocab.kuberay import ClusterConditionReason, entrypoint_failed_message

pytestmark = pytest.mark.real_trainer

#: Seconds a whole run may take before it is killed and the test fails (a run takes 2-5 min here).
WATCHDOG_S = 900.0
NAME = "tiny"
NAMESPACE = "rl"
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


def job_manifest(tiny: Path, storage: Path, seed: int = 0, train: Path | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
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
            "storage": {
                "modelCache": {"mountPath": str(storage / "models")},
                "data": {"mountPath": str(storage / "data")},
                "checkpoints": {"mountPath": str(storage / "checkpoints")},
            },
            "env": [{"name": k, "value": v} for k, v in CPU_ENV.items()],
            "overrides": CPU_OVERRIDES,
        },
    }


def flashrl(*args: str) -> str:
    import subprocess

    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "flashrl"), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rendered_pod(manifest: dict[str, Any], workdir: Path) -> tuple[Path, dict[str, str]]:
    """``flashrl render``'s ConfigMap files where the head mounts them, and the head container's env."""
    path = workdir / "flashrljob.yaml"
    path.write_text(yaml.safe_dump(manifest))
    docs = [d for d in yaml.safe_load_all(flashrl("render", str(path))) if d]
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (rayjob,) = [d for d in docs if d["kind"] == "RayJob"]
    mounted = workdir / "etc-flashrl"
    mounted.mkdir()
    for name, text in config_map["data"].items():
        (mounted / name).write_text(text)
    entrypoint = rayjob["spec"]["entrypoint"].split()
    assert entrypoint[:3] == ["flashrl-launch", "train", "--spec"]
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in head["env"] if "value" in e}
    return mounted / Path(entrypoint[3]).name, env


def pod_env(tmp: Path, head_env: dict[str, str], api: ApiServer) -> dict[str, str]:
    """The head container's environment, with what the kubelet and KubeRay add, on this machine."""
    sa = tmp / "serviceaccount"
    sa.mkdir(parents=True)
    (sa / "token").write_text("test-token\n")
    (sa / "namespace").write_text(NAMESPACE)
    base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    return {
        **base,
        **head_env,
        "PATH": f"{REPO / '.trainer-env' / 'bin'}{os.pathsep}{base.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(plugin_path(tmp / "plugins")),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "FLASHRL_SERVICEACCOUNT_DIR": str(sa),
        "FLASHRL_API_SERVER": api.url,
        "FLASHRL_METRICS_PORT": "0",
        "FLASHRL_TERMINATION_LOG": str(tmp / "termination-log"),
    }


def test_three_real_steps_report_verls_own_names_checkpoints_and_validation(
    tiny: Path, tmp_path: Path, api: ApiServer
) -> None:
    storage = tmp_path / "volumes"
    spec, head_env = rendered_pod(job_manifest(tiny, storage), tmp_path)
    run = TrainerRun(tmp_path / "run", pod_env(tmp_path, head_env, api))
    try:
        run.start_head()
        launcher = run.launch("train", "--spec", str(spec))
        code = run.wait(launcher, WATCHDOG_S)
    finally:
        run.stop()
    assert code == 0, run.tail()
    statuses = api.statuses()
    progress = [s["progress"] for s in statuses if "progress" in s]
    assert progress and progress[-1]["step"] == 3 and progress[-1]["totalSteps"] == 3, run.tail()
    checkpoints = [s["checkpoint"] for s in statuses if "checkpoint" in s]
    assert checkpoints and checkpoints[-1]["step"] == 3, statuses
    root = storage / "checkpoints" / "DAPO-1" / NAME
    assert (root / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert {p.name for p in root.glob("global_step_*")} >= {"global_step_3"}
    # verl's real metric names reach status.metrics; with two samples per problem the score is mean@2.
    names = {m["name"] for s in statuses for m in s.get("metrics", [])}
    assert {vm.MISMATCH_KL, "timing_s/step"} <= names, sorted(names)
    scores = [s["validationScore"]["name"] for s in statuses if "validationScore" in s]
    assert scores and set(scores) == {"val-core/openai/gsm8k/acc/mean@2"}, scores
    assert any("validationProblems" in s for s in statuses), statuses
    dumps = root / "validation" / "attempt-1"
    assert {p.name for p in dumps.glob("*.jsonl")} >= {"0.jsonl", "3.jsonl"}
    first = json.loads((dumps / "0.jsonl").read_text().splitlines()[0])
    assert {"input", "output", "gts", "score", "step", "acc"} <= set(first)
    metrics = (root / "metrics" / "attempt-1.jsonl").read_text().splitlines()
    assert any("val-core/openai/gsm8k/acc/best@2/mean" in line for line in metrics)


def test_verl_failing_on_a_missing_data_file_ends_the_launcher_with_its_reason(
    tiny: Path, tmp_path: Path, api: ApiServer
) -> None:
    storage = tmp_path / "volumes"
    manifest = job_manifest(tiny, storage, train=tmp_path / "absent" / "train.parquet")
    spec, head_env = rendered_pod(manifest, tmp_path)
    run = TrainerRun(tmp_path / "run", pod_env(tmp_path, head_env, api))
    try:
        run.start_head()
        launcher = run.launch("train", "--spec", str(spec))
        code = run.wait(launcher, WATCHDOG_S)
    finally:
        run.stop()
    assert code == 1, run.tail()  # verl's own exit code, passed on
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith("verl exited with code 1 on its own at step 0"), message
    assert "FileNotFoundError" in message and "absent/train.parquet" in message, message
    # What the operator makes of it, from the Ray job's message as KubeRay reports it: the documented reason
    # with verl's exit code and its last words.
    lines = run.tail().splitlines()
    failure = launcher_failure(entrypoint_failed_message(code, *lines[-10:]))
    assert failure is not None and failure.reason == "TrainerFailed", failure
    assert failure.exit_code == 1


def test_flashrl_validate_passes_where_verl_torch_and_ray_are_installed(tiny: Path, tmp_path: Path) -> None:
    """verl's checks run in their sandbox here too: torch (which imports dill, which test-writes a
    temporary file) and ray (which loads its library through ctypes) are preloaded before the sandbox's
    file-size limit and audit hook, so the job's checks run and answer."""
    import subprocess

    path = tmp_path / "flashrljob.yaml"
    path.write_text(yaml.safe_dump(job_manifest(tiny, tmp_path / "volumes")))
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
    assert f'valid FlashRLJob "{NAME}"' in done.stdout, done.stdout
    assert "sandbox" not in done.stdout + done.stderr


def steps_trained(metrics_file: Path) -> list[int]:
    """The steps verl trained in one attempt (its file logger's records that carry a step's timing)."""
    records = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return sorted(r["step"] for r in records if "timing_s/step" in r["data"])


def test_a_killed_attempt_resumes_from_its_last_checkpoint_in_the_next(
    tiny: Path, tmp_path: Path, api: ApiServer
) -> None:
    """The launcher is killed (with verl and the Ray head: the pod goes away) once step 2's checkpoint is
    written; attempt 2 starts as the operator's retry starts it (a new Ray head, ``FLASHRL_ATTEMPT=2``,
    the same volumes) and verl resumes from step 2: it trains step 3 only and the job ends at 3/3."""
    storage = tmp_path / "volumes"
    spec, head_env = rendered_pod(job_manifest(tiny, storage), tmp_path)
    root = storage / "checkpoints" / "DAPO-1" / NAME
    tracker = root / "latest_checkpointed_iteration.txt"
    first = TrainerRun(tmp_path / "attempt-1", pod_env(tmp_path, head_env, api))
    try:
        first.start_head()
        launcher = first.launch("train", "--spec", str(spec))
        deadline = time.monotonic() + WATCHDOG_S
        while not (tracker.exists() and tracker.read_text().strip() == "2"):
            assert launcher.poll() is None, f"attempt 1 ended before step 2's checkpoint:\n{first.tail()}"
            assert time.monotonic() < deadline, f"no checkpoint of step 2 in time:\n{first.tail()}"
            time.sleep(1)
    finally:
        first.stop()
    assert (root / "global_step_2").is_dir()
    killed = api.statuses()
    env = {**pod_env(tmp_path / "second", head_env, api), "FLASHRL_ATTEMPT": "2"}
    second = TrainerRun(tmp_path / "attempt-2", env)
    try:
        second.start_head()
        code = second.wait(second.launch("train", "--spec", str(spec)), WATCHDOG_S)
    finally:
        second.stop()
    assert code == 0, second.tail()
    assert steps_trained(root / "metrics" / "attempt-2.jsonl") == [3], second.tail()
    # verl writes a step's checkpoint before it logs the step: attempt 1 may have logged step 1 only.
    assert steps_trained(root / "metrics" / "attempt-1.jsonl")[0] == 1
    assert tracker.read_text().strip() == "3"
    progress = [s["progress"] for s in api.statuses() if "progress" in s]
    assert progress[-1]["step"] == 3 and progress[-1]["totalSteps"] == 3
    # The operator's ledger, from what attempt 1's launcher reported before it died: the steps it counts
    # lost are the ones attempt 2 redid (the kill may come between verl's save and the launcher's report).
    end = AttemptEnd(
        attempt=1,
        reason=ClusterConditionReason.HEAD_POD_NOT_FOUND,
        message="the head pod went away",
        start_step=0,
        step=max((s["progress"]["step"] for s in killed if "progress" in s), default=0),
        checkpoint_step=max((s["checkpoint"]["step"] for s in killed if "checkpoint" in s), default=0),
    )
    redone = [s for s in steps_trained(root / "metrics" / "attempt-2.jsonl") if s <= end.step]
    assert lost_steps(end) == len(redone) == 0, (end, redone)
    # Attempt 2 names the checkpoint verl resumed from before its first step, whatever attempt 1 got out.
    resumed = [s["checkpoint"] for s in api.statuses()[len(killed) :] if "checkpoint" in s]
    assert resumed[0]["step"] == 2 and resumed[0]["attempt"] == 2, resumed
