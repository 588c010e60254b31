"""The launcher's status reporter against a loopback HTTP server: one merge patch per step with progress,
metrics and the validation score, a token re-read per request (projected tokens rotate), failures logged."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flashrl_jobs.progress import ProgressReporter, StepReport, step_status


class Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_PATCH(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"auth": self.headers["Authorization"], "body": body})
                self.send_response(outer.status)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def api() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.server.shutdown()
    recorder.server.server_close()


REPORT = StepReport(
    step=4,
    total_steps=10,
    percent=40,
    remaining_seconds=600,
    metrics=({"name": "rollout_corr/kl", "value": 0.02, "step": 4},),
    validation_score={"name": "val-core/aime24/acc/mean@32", "value": 0.3, "step": 0},
)


def test_step_status_carries_progress_metrics_and_score() -> None:
    status = step_status(REPORT, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert status == {
        "progress": {
            "step": 4,
            "totalSteps": 10,
            "updateTime": "2026-01-02T03:04:05Z",
            "percent": 40,
            "estimatedRemainingSeconds": 600,
        },
        "metrics": [{"name": "rollout_corr/kl", "value": 0.02, "step": 4}],
        "validationScore": {"name": "val-core/aime24/acc/mean@32", "value": 0.3, "step": 0},
    }
    # Before any metric (the console fallback at step 1 of a run without numbers): progress only.
    assert set(step_status(StepReport(1, 10), datetime.now(UTC))) == {"progress"}


def test_the_token_file_is_read_for_every_request(api: Recorder, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    logs: list[str] = []
    reporter = ProgressReporter(api.url, token, "ml", "job", logs.append)
    reporter.report_step(REPORT)
    reporter.close()
    token.write_text("rotated\n")  # the kubelet replaced the projected token
    reporter = ProgressReporter(api.url, token, "ml", "job", logs.append)
    reporter.report_step(StepReport(5, 10, percent=50))
    reporter.close()
    assert [r["auth"] for r in api.requests] == ["Bearer first", "Bearer rotated"]
    assert api.requests[0]["body"]["status"]["metrics"][0]["name"] == "rollout_corr/kl"
    assert not logs


def test_a_refused_patch_is_logged_and_the_next_step_still_goes(api: Recorder, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    logs: list[str] = []
    api.status = 403
    reporter = ProgressReporter(api.url, token, "ml", "job", logs.append)
    reporter.report_step(REPORT)
    reporter.close()
    assert len(logs) == 1 and "HTTP 403" in logs[0] and "progress step 4/10" in logs[0]
    token.unlink()
    reporter = ProgressReporter(api.url, token, "ml", "job", logs.append)
    reporter.report_step(REPORT)
    reporter.close()
    assert "Cannot read the service-account token" in logs[1]
    assert len(api.requests) == 1  # no request without a token
