"""Pure parts of the launcher: verl step lines, the status patch, the GPU wait loop."""

from __future__ import annotations

import io
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flashrl_jobs import cli, contract
from flashrl_jobs.engine_env import pod_env
from flashrl_jobs.process import shell_exit_code
from flashrl_jobs.progress import StepParser, progress_patch, status_path
from flashrl_jobs.ray_gate import (
    GpuCount,
    PoolCounts,
    PoolNeed,
    one_pool,
    parse_address,
    wait_for_gpus,
)
from flashrl_jobs.termination import LaunchError


def test_step_parser_follows_verl_console_lines() -> None:
    parser = StepParser(total_steps=150)
    assert parser.feed("Total training steps: 40\n") is None
    assert parser.total_steps == 40
    # Validation before training logs step 0: nothing is completed yet.
    assert parser.feed("(TaskRunnerV1 pid=7) step:0 - val-core/acc:0.2\n") is None
    assert parser.feed("\x1b[36m(TaskRunnerV1 pid=7)\x1b[0m step:1 - actor/pg_loss:0.1 - x:2\n") == 1
    assert parser.feed("step:2 - actor/pg_loss:0.1\n") == 2
    assert parser.feed("(TaskRunnerV1 pid=7) step:2 - val-core/acc:0.3\n") is None  # same step again
    assert parser.feed("step:3\n") == 3
    assert parser.feed("Training Progress:  10%|#  | 4/40 [00:10<01:30]\n") is None
    assert parser.feed("resumed_step:9 - x:1\n") is None
    assert parser.feed("timing_s/step:12.5\n") is None
    assert parser.step == 3


def test_progress_patch_touches_only_status_progress() -> None:
    body = json.loads(progress_patch(5, 150, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)))
    assert body == {
        "status": {"progress": {"step": 5, "totalSteps": 150, "updateTime": "2026-01-02T03:04:05Z"}}
    }
    with_attempt = json.loads(progress_patch(5, 150, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), attempt=2))
    assert with_attempt["status"]["progress"]["attempt"] == 2
    assert status_path("ml", "job") == "/apis/flashrl.dev/v1alpha1/namespaces/ml/flashrljobs/job/status"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def _one(count: GpuCount, gpus: int) -> PoolCounts:
    return PoolCounts(one_pool(gpus), (count,))


def test_wait_for_gpus_logs_changes_and_proceeds_on_available() -> None:
    clock = FakeClock()
    counts = iter([GpuCount(0, 0, 0), GpuCount(0, 0, 0), GpuCount(6, 6, 1), GpuCount(8, 8, 2)])
    lines: list[str] = []
    result = wait_for_gpus(lambda: _one(next(counts), 8), 60, lines.append, clock=clock, pause=clock.pause)
    assert result.counts.available == 8
    assert lines == [
        "0/8 GPUs registered on 0 node(s) (0 available), waiting up to 60s more",
        "6/8 GPUs registered on 1 node(s) (6 available), waiting up to 58s more",
        "8/8 GPUs registered on 2 node(s) (8 available), proceeding",
    ]


def test_available_gpus_of_a_node_not_yet_listed_alive_do_not_open_the_gate() -> None:
    """Ray's resource view can run ahead of its node table: wait until both agree."""
    clock = FakeClock()
    counts = iter([GpuCount(2, 4, 1), GpuCount(4, 4, 2)])
    lines: list[str] = []
    result = wait_for_gpus(lambda: _one(next(counts), 4), 60, lines.append, clock=clock, pause=clock.pause)
    assert result.counts.counts == (GpuCount(4, 4, 2),)
    assert lines == [
        "2/4 GPUs registered on 1 node(s) (4 available), waiting up to 60s more",
        "4/4 GPUs registered on 2 node(s) (4 available), proceeding",
    ]


def test_launcher_log_lines_are_written_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """One write per line, so another thread's output cannot split a progress line."""
    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stderr", Recorder())
    cli.log("4/4 GPUs registered on 2 node(s) (4 available), proceeding")
    assert writes == ["flashrl-launch: 4/4 GPUs registered on 2 node(s) (4 available), proceeding\n"]


def test_registered_but_busy_gpus_time_out_with_a_distinct_reason() -> None:
    clock = FakeClock()
    with pytest.raises(LaunchError) as error:
        wait_for_gpus(lambda: _one(GpuCount(8, 6, 1), 8), 5, lambda _: None, clock=clock, pause=clock.pause)
    assert error.value.exit_code == contract.EXIT_GPU_TIMEOUT
    assert "held by other Ray tasks" in error.value.reason
    assert "8/8 GPUs registered on 1 node(s) (6 available)" in error.value.reason


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("head-svc:6379", ("head-svc", 6379)),
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("[fd00::1]:6379", ("fd00::1", 6379)),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


def test_signal_deaths_become_shell_exit_codes() -> None:
    assert shell_exit_code(-15) == 143
    assert shell_exit_code(3) == 3


def test_pod_env_sets_only_variables_something_reads() -> None:
    from flashrl_api import FlashRLJobSpec

    env = pod_env(FlashRLJobSpec())
    assert "SGLANG_PATCH" not in env and "SGLANG_PORT" not in env
    assert env["HF_HOME"] == "/models"


def test_the_reporter_reads_the_rotating_token_file_for_every_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet rotates the projected service-account token; a long run must follow it."""
    import http.server
    import threading

    from flashrl_jobs import progress

    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (tmp_path / "token").write_text("token-1\n")
        monkeypatch.setenv(progress.SERVICE_ACCOUNT_DIR_ENV, str(tmp_path))
        monkeypatch.setenv(progress.API_SERVER_ENV, f"http://127.0.0.1:{server.server_address[1]}")
        reporter = progress.from_environment("ns", "job", lambda _line: None)
        assert reporter is not None
        reporter.report(1, 10)
        reporter.close()
        (tmp_path / "token").write_text("token-2\n")
        reporter = progress.from_environment("ns", "job", lambda _line: None)
        assert reporter is not None
        reporter.report(2, 10)
        (tmp_path / "token").write_text("token-3\n")  # rotated while the reporter runs
        reporter.report(3, 10)
        reporter.close()
    finally:
        server.shutdown()
        server.server_close()
    assert seen[0] == "Bearer token-1"
    assert seen[-1] == "Bearer token-3"


def test_a_step_carries_the_launchers_goodput_phases() -> None:
    """status.launcherPhases rides in the step's PATCH: the operator folds it into status.goodput."""
    from datetime import UTC, datetime

    from flashrl_api.goodput import LauncherClock, launcher_phases
    from flashrl_api.status import LauncherPhases
    from flashrl_jobs.progress import StepReport, step_status

    clock = LauncherClock(launched=1_700_000_000.0)
    clock.gate(1_700_000_000.0, 1_700_000_030.5)
    phases = launcher_phases(clock, 1_700_000_100.25, attempt=2, gpus=8)
    status = step_status(StepReport(1, 10, phases=phases), datetime(2026, 1, 1, tzinfo=UTC))
    parsed = LauncherPhases.model_validate(status["launcherPhases"])
    assert parsed.attempt == 2 and parsed.launch_time == "2023-11-14T22:13:20.000Z"
    assert parsed.report_time == "2023-11-14T22:15:00.250Z"
    assert {p.phase: p.gpu_seconds for p in parsed.phases} == {"gpu_gate": 244.0, "startup": 558.0}


def test_two_pools_each_need_their_own_gpus_and_the_reason_names_both() -> None:
    """A rollout pool short of GPUs keeps the gate closed however many the trainer's pool has."""
    needs = (PoolNeed("trainer", "gpu", 8), PoolNeed("rollout", "rollout", 8))
    clock = FakeClock()
    with pytest.raises(LaunchError) as error:
        wait_for_gpus(
            lambda: PoolCounts(needs, (GpuCount(16, 16, 2), GpuCount(3, 3, 1))),
            5,
            lambda _: None,
            clock=clock,
            pause=clock.pause,
        )
    assert error.value.reason == (
        "timed out after 5s waiting for 16 available GPU(s): trainer pool: 16/8 GPUs registered on 2 node(s) "
        "(16 available); rollout pool: 3/8 GPUs registered on 1 node(s) (3 available); 5 GPU(s) of the "
        "rollout pool (worker group rollout) never registered: a worker pod has not joined Ray (check the "
        "GPU worker pods and their raylet logs)"
    )
