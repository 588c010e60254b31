"""``flashrl-launch train`` end to end: real Ray gate, a stand-in verl, a loopback API server."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_ray import LocalRay
from prometheus_client.parser import text_string_to_metric_families

from flashrl_api import load_job_file
from flashrl_api.validation_summary import problem_id
from flashrl_jobs import contract
from flashrl_jobs.deadline import RUNTIME_ENV_KEY
from flashrl_jobs.verl_args import verl_overrides
from flashrl_operator.job.status.launcher_failure import launcher_failure
from flashrl_operator.vocab.kuberay import entrypoint_failed_message

pytestmark = pytest.mark.ray

#: Prints what verl's console logger prints (through Ray's actor prefix), saves checkpoints in verl's
#: layout where verl would (trainer.default_local_dir, every trainer.save_freq steps and the last one,
#: before the step's line), then ends as told. With FAKE_VERL_RAY=1 it also does what verl's
#: main_ppo.run_ppo does with the config: ray.init with ray_kwargs.ray_init.runtime_env, then an actor
#: (verl's trainer runs in the TaskRunner actor), and records what that actor's environment holds; the
#: actor also writes verl's file-logger lines (FileLogger in verl/utils/tracking.py: opened "wb" at
#: $VERL_FILE_LOGGER_PATH, one {"step": n, "data": {...}} line per step, step 0 the validation before
#: training), which is where real verl writes them from. Metric names are verl 0.9.1's.
FAKE_VERL = r"""
import json, os, pathlib, signal, sys, time
out = pathlib.Path(os.environ["FAKE_VERL_OUT"])
args = dict(a.lstrip("+").split("=", 1) for a in sys.argv[1:])
seen = {"argv": sys.argv[1:], "ray_address": os.environ.get("RAY_ADDRESS"),
        "driver_esi": os.environ.get("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP")}
ray = runner = None
if os.environ.get("FAKE_VERL_RAY") == "1":
    import ray
    from omegaconf import OmegaConf
    from flashrl_jobs.verl_config import compose_config
    config = compose_config(sys.argv[1:])
    ray.init(runtime_env=OmegaConf.to_container(config.ray_kwargs.ray_init.runtime_env))

    @ray.remote(num_cpus=0)
    class TaskRunner:
        def env(self, name):
            return os.environ.get(name)

        def log(self, line):
            # FileLogger: opened once with "wb", unbuffered, one line per Tracking.log call.
            if not hasattr(self, "fp"):
                self.fp = open(os.environ["VERL_FILE_LOGGER_PATH"], "wb", buffering=0)
            self.fp.write(line)

    runner = TaskRunner.remote()
    seen["actor_esi"] = ray.get(runner.env.remote("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"))
    seen["actor_file_logger_path"] = ray.get(runner.env.remote("VERL_FILE_LOGGER_PATH"))
out.write_text(json.dumps(seen))


def metrics(step):
    # One step's metrics as verl 0.9.1 logs them; the mismatch drifts upward with the step.
    return {"actor/pg_loss": 0.5, "timing_s/step": 100.0 + step, "timing_s/gen": 60.0,
            "timing_s/update_weights": 1.25, "response_length/mean": 1000.0 + step,
            "response_length/max": 4096, "response_length/clip_ratio": 0.01, "perf/throughput": 1500.5,
            "rollout_corr/kl": 0.01 * step, "rollout_corr/rollout_is_eff_sample_size": 0.9,
            "rollout_corr/rollout_is_mean": 1.0, "rollout_corr/rollout_is_ratio_fraction_high": 0.001,
            "training/rollout_probs_diff_mean": None}  # verl logs NaN here; orjson writes NaN as null


def file_log(line):
    if runner is not None:
        ray.get(runner.log.remote(line))


def wait_for(path):
    # A real step takes minutes; wait (bounded) until the test has looked at the run.
    for _ in range(1200):
        if path.exists():
            return
        time.sleep(0.1)


ckpt = pathlib.Path(args["trainer.default_local_dir"])
save_freq = int(args["trainer.save_freq"])
last = int(os.environ.get("FAKE_VERL_LAST_STEP", "3"))
gate = os.environ.get("FAKE_VERL_GATE")
print("Total training steps: 3", flush=True)
# verl's _dump_generations: the validation's samples, written before the step is logged.
dumps = pathlib.Path(args["trainer.validation_data_dir"])
dumps.mkdir(parents=True, exist_ok=True)
rows = [{"input": "p1", "output": "x", "gts": "1", "score": 1.0, "acc": True, "step": 0},
        {"input": "p1", "output": "y", "gts": "1", "score": -1.0, "acc": False, "step": 0},
        {"input": "p2", "output": "z", "gts": "2", "score": -1.0, "acc": False, "step": 0}]
(dumps / "0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
print("\x1b[36m(TaskRunnerV1 pid=42)\x1b[0m step:0 - val-core/aime24/acc/mean@32:0.1", flush=True)
file_log(json.dumps({"step": 0, "data": {"val-core/aime24/acc/mean@32": 0.1}}).encode() + b"\n")
for step in range(1, last + 1):
    if step % save_freq == 0 or step == 3:
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True, exist_ok=True)
        (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))
    data = metrics(step)
    shown = " - ".join(f"{k}:{'nan' if v is None else v}" for k, v in data.items())
    print(f"(TaskRunnerV1 pid=42) step:{step} - {shown}", flush=True)
    file_log(json.dumps({"step": step, "data": data}).encode() + b"\n")
    if gate and step == last - 1:
        file_log(b'{"step": 99, "data": {"rollout_corr/kl": 9') # a line cut short...
        file_log(b"\n not json\n")                             # ...and garbage: both skipped
        wait_for(pathlib.Path(gate))
    sync = os.environ.get("FAKE_VERL_SYNC_URL")
    if sync and step % save_freq == 0:
        # A real step takes minutes; wait (bounded) until the launcher has reported this checkpoint.
        import urllib.request
        for _ in range(600):
            if step in json.loads(urllib.request.urlopen(sync).read()):
                break
            time.sleep(0.1)
if ray is not None:
    ray.shutdown()
if os.environ.get("FAKE_VERL_MODE") == "wait-for-signal":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    print("waiting for a signal", flush=True)
    got = signal.sigtimedwait({signal.SIGTERM}, 120)
    (out.parent / "signal").write_text(str(got.si_signo if got else "none"))
    sys.exit(143 if got else 99)
sys.exit(int(os.environ.get("FAKE_VERL_EXIT", "0")))
"""


class ApiServer:
    """Plays the Kubernetes API for the status subresource: records every request."""

    def __init__(self, status: int) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_PATCH(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
                )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_GET(self) -> None:
                # The checkpoint steps received so far (the stand-in verl waits on them).
                steps = [r["body"]["status"].get("checkpoint", {}).get("step") for r in outer.requests]
                body = json.dumps([s for s in steps if s is not None]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[Callable[[int], ApiServer]]:
    servers: list[ApiServer] = []

    def start(status: int = 200) -> ApiServer:
        servers.append(ApiServer(status))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def write_job(job: Path, checkpoints: Path, **extra: Any) -> None:
    """The mounted FlashRLJob and, next to it, the exact override list the operator renders."""
    job.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "flashrl.dev/v1alpha1",
                "kind": "FlashRLJob",
                "metadata": {"name": "train-test", "namespace": "ml"},
                "spec": {
                    "resources": {"nodes": 1, "gpusPerNode": 2},
                    "training": {"totalSteps": 3},
                    "storage": {"checkpoints": {"mountPath": str(checkpoints)}},
                    "overrides": ["trainer.test_freq=10"],
                    **extra,
                },
            }
        )
    )
    (job.parent / "verl-overrides.json").write_text(json.dumps(verl_overrides(load_job_file(job))))


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "stand_in").mkdir()
    (tmp_path / "stand_in" / "fake_verl.py").write_text(FAKE_VERL)
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("test-token\n")
    job = tmp_path / "spec" / "flashrljob.yaml"
    job.parent.mkdir()
    write_job(job, tmp_path / "checkpoints")
    env = {
        # The stand-in verl first, then whatever the test run imports the launcher from.
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(tmp_path / "stand_in"), os.environ.get("PYTHONPATH")) if p
        ),
        "FAKE_VERL_OUT": str(tmp_path / "verl-run.json"),
        "FLASHRL_SERVICEACCOUNT_DIR": str(sa),
        # Any free port for /metrics: tests running side by side must not fight over the default.
        "FLASHRL_METRICS_PORT": "0",
    }
    return {"job": job, "env": env, "out": tmp_path / "verl-run.json", "tmp": tmp_path}


def start_train(launch: Callable[..., Any], cluster: LocalRay, setup: dict[str, Any], **env: str) -> Any:
    return launch(
        "train",
        "--spec",
        str(setup["job"]),
        "--entry-module",
        "fake_verl",
        env={**setup["env"], "RAY_ADDRESS": cluster.address, **env},
    )


def test_train_runs_verl_with_the_overrides_and_reports_each_step(
    ray_cluster: LocalRay, launch: Callable[..., Any], api: Callable[[int], ApiServer], setup: dict[str, Any]
) -> None:
    server = api(200)
    run = start_train(launch, ray_cluster, setup, FLASHRL_API_SERVER=server.url)
    assert run.wait() == 0, run.output
    seen = json.loads(setup["out"].read_text())
    # The job's overrides, then where verl's file logger writes (per attempt, so only known at launch);
    # the validation dumps go to the attempt's own directory on the claim, in place of the job's.
    checkpoints = setup["tmp"] / "checkpoints" / "DAPO-1" / "train-test"
    metrics_file = checkpoints / "metrics" / "attempt-1.jsonl"
    expected = [
        f"trainer.validation_data_dir={checkpoints}/validation/attempt-1"
        if o.startswith("trainer.validation_data_dir=")
        else o
        for o in verl_overrides(load_job_file(setup["job"]))
    ]
    assert seen["argv"] == [
        *expected,
        f"++ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='{metrics_file}'",
    ]
    assert seen["ray_address"] == ray_cluster.address
    assert "(TaskRunnerV1 pid=42) step:3 - actor/pg_loss:0.5" in run.output  # verl's output is passed on
    assert server.requests, run.output
    # The launcher's last word after verl exited: its goodput phases up to then (alone, or merged with
    # the last step's report when that one had not been sent yet).
    final_phases = server.requests[-1]["body"]["status"]["launcherPhases"]
    requests = [r for r in server.requests if "progress" in r["body"]["status"]]
    assert final_phases["steps"] == 3 and final_phases["launchTime"] < final_phases["reportTime"]
    assert {"gpu_gate", "startup"} <= {p["phase"] for p in final_phases["phases"]}
    steps = [r["body"]["status"]["progress"]["step"] for r in requests]
    assert steps == sorted(set(steps)) and steps[-1] == 3 and 0 not in steps  # at most one per step
    assert all("launcherPhases" in r["body"]["status"] for r in requests)  # with every step
    last = requests[-1]
    assert last["path"] == "/apis/flashrl.dev/v1alpha1/namespaces/ml/flashrljobs/train-test/status"
    assert last["headers"]["Authorization"] == "Bearer test-token"
    assert last["headers"]["Content-Type"] == "application/merge-patch+json"
    progress = last["body"]["status"]["progress"]
    assert progress["totalSteps"] == 3 and progress["updateTime"].endswith("Z")
    # Only the launcher's own fields: progress and metrics, and the checkpoint of the last step.
    assert set(last["body"]) == {"status"}
    assert set(last["body"]["status"]) <= {
        "progress",
        "checkpoint",
        "metrics",
        "validationScore",
        "launcherPhases",
        "validationProblems",
    }
    assert last["body"]["status"]["validationScore"]["name"] == "val-core/aime24/acc/mean@32"
    # The validation dump of step 0, summarised per problem once verl had logged a step after it.
    (validations,) = {
        json.dumps(r["body"]["status"]["validationProblems"])
        for r in server.requests
        if "validationProblems" in r["body"]["status"]
    }
    assert json.loads(validations) == [
        {
            "step": 0,
            "attempt": 1,
            "measure": "acc",
            "problems": dict(sorted({problem_id("p1"): [2, 1], problem_id("p2"): [1, 0]}.items())),
        }
    ]


def test_verl_exit_code_propagates_and_a_failing_api_does_not_stop_training(
    ray_cluster: LocalRay, launch: Callable[..., Any], api: Callable[[int], ApiServer], setup: dict[str, Any]
) -> None:
    server = api(403)
    run = start_train(launch, ray_cluster, setup, FLASHRL_API_SERVER=server.url, FAKE_VERL_EXIT="3")
    assert run.wait() == 3, run.output
    assert server.requests
    assert "Could not report progress" in run.output and "HTTP 403" in run.output
    message = (setup["tmp"] / "termination-log").read_text()
    assert message.startswith("verl exited with code 3 on its own at step 3")


def test_sigterm_is_forwarded_to_verl_and_its_exit_code_returned(
    ray_cluster: LocalRay, launch: Callable[..., Any], setup: dict[str, Any]
) -> None:
    run = start_train(launch, ray_cluster, setup, FAKE_VERL_MODE="wait-for-signal")
    run.wait_for_line("waiting for a signal")
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait() == 143, run.output
    assert (setup["tmp"] / "signal").read_text() == str(int(signal.SIGTERM))
    assert "after forwarding signal 15" in (setup["tmp"] / "termination-log").read_text()
    assert "progress reporting is off" in run.output  # no API server configured: reported once, not fatal


def test_train_reports_each_new_checkpoint_once_through_the_status(
    ray_cluster: LocalRay, launch: Callable[..., Any], api: Callable[[int], ApiServer], setup: dict[str, Any]
) -> None:
    checkpoints = setup["tmp"] / "checkpoints"
    write_job(setup["job"], checkpoints, checkpoint={"interval": 2})
    server = api(200)
    run = start_train(
        launch,
        ray_cluster,
        setup,
        FLASHRL_API_SERVER=server.url,
        FLASHRL_ATTEMPT="2",
        FAKE_VERL_SYNC_URL=server.url,
    )
    assert run.wait() == 0, run.output
    reported = [
        r["body"]["status"]["checkpoint"] for r in server.requests if "checkpoint" in r["body"]["status"]
    ]
    # verl saved at step 2 (the interval) and 3 (the last step): one PATCH each, in order.
    assert [c["step"] for c in reported] == [2, 3], run.output
    experiment = checkpoints / "DAPO-1" / "train-test"
    assert reported[-1]["path"] == str(experiment / "global_step_3")
    assert reported[-1]["attempt"] == 2 and reported[-1]["time"].endswith("Z")
    assert {
        r["body"]["status"]["progress"]["attempt"]
        for r in server.requests
        if "progress" in r["body"]["status"]
    } == {2}
    assert "Checkpoint of step 3 saved" in run.output and "(attempt 2)" in run.output
    assert json.loads(setup["out"].read_text())["driver_esi"] is None  # no deadline, no variable


def test_a_resume_that_runs_no_step_is_stopped_early_not_success(
    ray_cluster: LocalRay, launch: Callable[..., Any], api: Callable[[int], ApiServer], setup: dict[str, Any]
) -> None:
    experiment = setup["tmp"] / "checkpoints" / "DAPO-1" / "train-test"
    (experiment / "global_step_1").mkdir(parents=True)
    (experiment / "latest_checkpointed_iteration.txt").write_text("1")
    server = api(200)
    run = start_train(
        launch,
        ray_cluster,
        setup,
        FAKE_VERL_LAST_STEP="0",
        FLASHRL_API_SERVER=server.url,
        FLASHRL_ATTEMPT="2",
    )
    assert run.wait() == contract.EXIT_STOPPED_EARLY, run.output
    assert "Checkpoint of step 1 found" in run.output
    # The checkpoint verl resumes from is in the status before any step: the attempt that saved it may
    # have died before its launcher reported it.
    reported = [
        r["body"]["status"]["checkpoint"] for r in server.requests if "checkpoint" in r["body"]["status"]
    ]
    assert reported and reported[0]["step"] == 1 and reported[0]["attempt"] == 2, reported
    assert reported[0]["path"] == str(experiment / "global_step_1")
    ray_message = entrypoint_failed_message(contract.EXIT_STOPPED_EARLY, *run.lines[-10:])
    failure = launcher_failure(ray_message)
    assert failure is not None and failure.reason == "StoppedEarly"
    assert failure.detail.startswith("verl stopped early: it exited 0 at step 1 of 3")


def test_a_read_only_checkpoint_directory_fails_before_verl_starts(
    ray_cluster: LocalRay, launch: Callable[..., Any], setup: dict[str, Any]
) -> None:
    # Under a regular file: not writable even for root (a spec may not mount anything under /proc).
    blocker = setup["tmp"] / "a-file"
    blocker.write_text("not a directory\n")
    write_job(setup["job"], blocker / "checkpoints")
    run = start_train(launch, ray_cluster, setup)
    assert run.wait() == contract.EXIT_CHECKPOINT_UNWRITABLE, run.output
    assert not setup["out"].exists()  # verl never ran
    said = (setup["tmp"] / "termination-log").read_text()
    assert said.startswith(f"checkpoint directory {blocker}/checkpoints/DAPO-1/train-test is not writable")


def test_with_a_deadline_the_variable_reaches_the_actor_through_verls_runtime_env(
    ray_cluster: LocalRay, launch: Callable[..., Any], setup: dict[str, Any]
) -> None:
    write_job(setup["job"], setup["tmp"] / "checkpoints", lifecycle={"activeDeadlineSeconds": 7200})
    start = "2026-01-02T03:00:00Z"
    run = start_train(launch, ray_cluster, setup, FLASHRL_JOB_START_TIME=start, FAKE_VERL_RAY="1")
    assert run.wait() == 0, run.output
    expected = str(int(datetime(2026, 1, 2, 5, 0, 0, tzinfo=UTC).timestamp()))
    seen = json.loads(setup["out"].read_text())
    assert seen["actor_esi"] == expected, run.output  # what should_save_ckpt_esi would read in the actor
    assert seen["driver_esi"] == expected
    assert seen["argv"][-2] == f"++{RUNTIME_ENV_KEY}='{expected}'"
    assert f"Deadline 2026-01-02T05:00:00Z (from $FLASHRL_JOB_START_TIME ({start}))" in run.output


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One real scrape of the launcher's /metrics, as {(name, labels without namespace/job): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert (sample.labels["namespace"], sample.labels["job"]) == ("ml", "train-test"), sample
            extra = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in {"namespace", "job"}))
            found[(sample.name, extra)] = sample.value
    return found


def test_verls_file_logger_feeds_metrics_and_status_from_the_trainer_actor(
    ray_cluster: LocalRay, launch: Callable[..., Any], api: Callable[[int], ApiServer], setup: dict[str, Any]
) -> None:
    write_job(setup["job"], setup["tmp"] / "checkpoints", checkpoint={"interval": 2})
    server = api(200)
    gate = setup["tmp"] / "go"
    run = start_train(
        launch, ray_cluster, setup, FLASHRL_API_SERVER=server.url, FAKE_VERL_RAY="1", FAKE_VERL_GATE=str(gate)
    )
    port = int(re.search(r":(\d+)/metrics", run.wait_for_line("for Prometheus on")).group(1))  # type: ignore[union-attr]
    # verl is now held after step 2 and its checkpoint: scrape until the launcher has read both.
    deadline = time.monotonic() + 120
    while (got := scrape(port)).get(("flashrl_training_step", ())) != 2 or got.get(
        ("flashrl_checkpoint_step", ())
    ) != 2:
        assert time.monotonic() < deadline, (got, run.lines)
        time.sleep(0.2)
    assert got[("flashrl_training_total_steps", ())] == 3
    assert got[("flashrl_training_step_seconds", ())] == 102.0
    assert got[("flashrl_phase_seconds", (("phase", "gen"),))] == 60.0
    assert got[("flashrl_phase_seconds", (("phase", "update_weights"),))] == 1.25
    assert got[("flashrl_validation_score", (("data_source", "aime24"), ("metric", "acc/mean@32")))] == 0.1
    assert got[("flashrl_response_length_tokens", (("stat", "mean"),))] == 1002.0
    assert got[("flashrl_throughput_tokens_per_second_per_gpu", ())] == 1500.5
    assert got[("flashrl_rollout_mismatch_kl", ())] == 0.02
    assert got[("flashrl_rollout_is_effective_sample_size", ())] == 0.9
    assert got[("flashrl_verl_metric", (("key", "actor/pg_loss"),))] == 0.5
    assert not any(name == "flashrl_rollout_probs_diff_mean" for name, _ in got)  # verl's NaN: no series
    # The launcher sends step 2's PATCH from its reporter thread. Let it arrive before verl goes on:
    # a step 3 read while it is still queued would replace it (the newest step wins), as it should.
    deadline = time.monotonic() + 120
    while not any(r["body"]["status"].get("progress", {}).get("step") == 2 for r in list(server.requests)):
        assert time.monotonic() < deadline, (server.requests, run.lines)
        time.sleep(0.2)
    gate.touch()
    assert run.wait() == 0, run.output

    seen = json.loads(setup["out"].read_text())
    path = setup["tmp"] / "checkpoints" / "DAPO-1" / "train-test" / "metrics" / "attempt-1.jsonl"
    assert seen["actor_file_logger_path"] == str(path)  # reached verl's TaskRunner actor via runtime_env
    assert "trainer.logger=[console,file]" in seen["argv"]
    assert json.loads(path.read_text().splitlines()[-1])["step"] == 3  # the file is verl's, untouched
    assert "Skipping a malformed line" in run.output and "Skipped 2 malformed line(s)" in run.output

    bodies = [r["body"]["status"] for r in server.requests]
    steps = [b["progress"]["step"] for b in bodies if "progress" in b]
    assert steps == sorted(set(steps)) and steps[-1] == 3  # at most one PATCH per step
    last = [b for b in bodies if "progress" in b][-1]
    assert last["progress"]["percent"] == 100 and last["progress"]["estimatedRemainingSeconds"] == 0
    by_name = {m["name"]: m for m in last["metrics"]}
    assert by_name["rollout_corr/kl"] == {"name": "rollout_corr/kl", "value": 0.03, "step": 3}
    assert by_name["val-core/aime24/acc/mean@32"] == {
        "name": "val-core/aime24/acc/mean@32",
        "value": 0.1,
        "step": 0,
    }
    assert "training/rollout_probs_diff_mean" not in by_name
    assert last["validationScore"] == by_name["val-core/aime24/acc/mean@32"]
    second = next(b for b in bodies if b.get("progress", {}).get("step") == 2)
    assert second["progress"]["percent"] == 66
    assert second["progress"]["estimatedRemainingSeconds"] == round((101.0 + 102.0) / 2)
