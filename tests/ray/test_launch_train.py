"""``flashrl-launch train`` end to end: real Ray gate, a stand-in verl, a loopback API server."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_ray import LocalRay

from flashrl_api import load_job_file
from flashrl_jobs.verl_args import verl_overrides

pytestmark = pytest.mark.ray

#: Prints what verl's console logger prints (through Ray's actor prefix), then ends as told.
FAKE_VERL = r"""
import json, os, pathlib, signal, sys
out = pathlib.Path(os.environ["FAKE_VERL_OUT"])
out.write_text(json.dumps({"argv": sys.argv[1:], "ray_address": os.environ.get("RAY_ADDRESS")}))
print("Total training steps: 3", flush=True)
print("\x1b[36m(TaskRunnerV1 pid=42)\x1b[0m step:0 - val-core/acc/mean@1:0.1", flush=True)
for step in (1, 2, 3):
    print(f"(TaskRunnerV1 pid=42) step:{step} - actor/pg_loss:0.5 - timing_s/update_weights:1.25", flush=True)
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


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "stand_in").mkdir()
    (tmp_path / "stand_in" / "fake_verl.py").write_text(FAKE_VERL)
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("test-token\n")
    job = tmp_path / "spec" / "flashrljob.yaml"
    job.parent.mkdir()
    job.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "flashrl.dev/v1alpha1",
                "kind": "FlashRLJob",
                "metadata": {"name": "train-test", "namespace": "ml"},
                "spec": {
                    "resources": {"nodes": 1, "gpusPerNode": 2},
                    "training": {"totalSteps": 3},
                    "overrides": ["trainer.test_freq=10"],
                },
            }
        )
    )
    # What the operator mounts next to the spec: the exact override list.
    (job.parent / "verl-overrides.json").write_text(json.dumps(verl_overrides(load_job_file(job))))
    env = {
        "PYTHONPATH": str(tmp_path / "stand_in"),
        "FAKE_VERL_OUT": str(tmp_path / "verl-run.json"),
        "FLASHRL_SERVICEACCOUNT_DIR": str(sa),
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
    assert seen["argv"] == verl_overrides(load_job_file(setup["job"]))
    assert seen["ray_address"] == ray_cluster.address
    assert "(TaskRunnerV1 pid=42) step:3 - actor/pg_loss:0.5" in run.output  # verl's output is passed on
    assert server.requests, run.output
    steps = [r["body"]["status"]["progress"]["step"] for r in server.requests]
    assert steps == sorted(set(steps)) and steps[-1] == 3 and 0 not in steps  # at most one per step
    last = server.requests[-1]
    assert last["path"] == "/apis/flashrl.dev/v1alpha1/namespaces/ml/flashrljobs/train-test/status"
    assert last["headers"]["Authorization"] == "Bearer test-token"
    assert last["headers"]["Content-Type"] == "application/merge-patch+json"
    progress = last["body"]["status"]["progress"]
    assert progress["totalSteps"] == 3 and progress["updateTime"].endswith("Z")
    assert set(last["body"]) == {"status"} and set(last["body"]["status"]) == {"progress"}


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
