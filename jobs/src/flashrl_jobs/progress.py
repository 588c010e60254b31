"""Training progress: read verl's console lines, report ``status.progress`` to the FlashRLJob.

verl's console logger prints one line per training step,
``concat_dict_to_str`` in ``verl/utils/logger/aggregate_logger.py``: ``step:<n> - key:value - ...``,
with ``<n>`` the step just completed (``ray_trainer.py`` logs, then increments ``global_steps``).
The trainer runs inside a Ray actor, so the driver's copy of the line carries Ray's prefix, e.g.
``(TaskRunnerV1 pid=123) step:5 - ...``, possibly wrapped in ANSI colours. Validation before
training logs ``step:0``, which is not a completed step. ``Total training steps: <n>`` is printed once.

The step and every metric come from verl's file logger when it writes (:mod:`flashrl_jobs.run_metrics`);
this parser is the fallback for a run whose ``trainer.logger`` has no ``file``, and it still learns the
total from the console.

Reporting is best effort and stdlib only (urllib): a merge patch of
``/apis/flashrl.dev/v1alpha1/namespaces/<ns>/flashrljobs/<name>/status`` with the pod's service
account (the renderer grants exactly ``get, patch`` on ``flashrljobs/status``). It runs on a
background thread holding only the newest value of each field (``progress`` with ``metrics`` and
``validationScore``, ``checkpoint`` from :mod:`flashrl_jobs.ledger`, ``validationProblems`` from
:mod:`flashrl_jobs.validation_watch`), so a slow API server never
stalls verl's output, and it sends at most one request per step. The token file is read again for
every request: projected service-account tokens are rotated by the kubelet (every hour or so) and a
token read once at start would expire during a long run. A failed request is logged and training
goes on.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from flashrl_api import GROUP, PLURAL, VERSION
from flashrl_api.times import rfc3339

Log = Callable[[str], None]

SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Overrides of the in-cluster defaults, for non-standard mounts and for tests against a local server.
SERVICE_ACCOUNT_DIR_ENV: Final = "FLASHRL_SERVICEACCOUNT_DIR"
API_SERVER_ENV: Final = "FLASHRL_API_SERVER"
REQUEST_TIMEOUT_SECONDS: Final = 10.0

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP = re.compile(r"(?:^|[\s)])step:(\d+)(?:\s+-\s|\s*$)")
_TOTAL = re.compile(r"Total training steps: (\d+)")


@dataclass
class StepParser:
    """Pure: feed lines, learn the last completed step and the total (when verl prints it)."""

    total_steps: int
    step: int = 0

    def feed(self, line: str) -> int | None:
        """The newly completed step this line reports, or None."""
        text = _ANSI.sub("", line)
        total = _TOTAL.search(text)
        if total is not None:
            self.total_steps = int(total.group(1))
            return None
        match = _STEP.search(text)
        if match is None:
            return None
        step = int(match.group(1))
        if step <= self.step:
            return None
        self.step = step
        return step


def status_path(namespace: str, name: str) -> str:
    """The FlashRLJob's status subresource."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"


def progress_patch(step: int, total_steps: int, now: datetime, attempt: int | None = None) -> bytes:
    """The JSON merge patch body: only ``status.progress``, so the operator's fields stay untouched.

    ``attempt`` (``$FLASHRL_ATTEMPT``) tells the operator which attempt completed the step: a step
    reported by an earlier attempt says nothing about whether the current one trained.
    """
    body = {"status": {"progress": progress_fields(StepReport(step, total_steps, attempt=attempt), now)}}
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True)
class StepReport:
    """What the launcher reports about one completed step; ``metrics`` holds ``{name, value, step}``."""

    step: int
    total_steps: int
    percent: int | None = None
    remaining_seconds: int | None = None
    metrics: tuple[dict[str, Any], ...] | None = None
    validation_score: dict[str, Any] | None = None
    attempt: int | None = None
    #: ``status.launcherPhases``: the launcher's wall-clock split by goodput phase up to this step.
    phases: dict[str, Any] | None = None


def progress_fields(report: StepReport, now: datetime) -> dict[str, Any]:
    """``status.progress`` for one step."""
    progress: dict[str, Any] = {
        "step": report.step,
        "totalSteps": report.total_steps,
        "updateTime": rfc3339(now),
    }
    if report.attempt is not None:
        progress["attempt"] = report.attempt
    if report.percent is not None:
        progress["percent"] = report.percent
    if report.remaining_seconds is not None:
        progress["estimatedRemainingSeconds"] = report.remaining_seconds
    return progress


def step_status(report: StepReport, now: datetime) -> dict[str, Any]:
    """The launcher's status fields for one step: progress, and the metrics when there are any (a merge
    patch replaces a list whole, so ``metrics`` is always the complete curated set)."""
    status: dict[str, Any] = {"progress": progress_fields(report, now)}
    if report.metrics:
        status["metrics"] = list(report.metrics)
    if report.validation_score is not None:
        status["validationScore"] = report.validation_score
    if report.phases is not None:
        status["launcherPhases"] = report.phases
    return status


class ProgressReporter:
    """Sends the newest step to the API server from a background thread."""

    def __init__(
        self,
        base_url: str,
        token_file: Path,
        namespace: str,
        name: str,
        log: Log,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + status_path(namespace, name)
        self._token_file = token_file
        self._ssl = ssl_context
        self._log = log
        self._cond = threading.Condition()
        # Status fields waiting to be sent, newest value per field: one merge patch carries them all.
        self._pending: dict[str, Any] = {}
        self._closed = False
        self._failures = 0
        #: ``$FLASHRL_ATTEMPT``, sent with every progress report (set before the first report).
        self.attempt: int | None = None
        self._thread = threading.Thread(target=self._run, name="progress-reporter", daemon=True)
        self._thread.start()

    def report(self, step: int, total_steps: int) -> None:
        """Queue a step; an older one not yet sent is replaced (at most one request per step)."""
        self._queue("progress", StepReport(step, total_steps))

    def report_step(self, report: StepReport, checkpoint: dict[str, Any] | None = None) -> None:
        """Queue a step with its percentage, remaining time and metrics (replaces one not yet sent), and
        the checkpoint verl saved with it: both in one request."""
        with self._cond:
            self._pending["progress"] = report
            if report.phases is not None:
                self._pending.pop("launcherPhases", None)  # the step carries newer ones
            if checkpoint is not None:
                self._pending["checkpoint"] = checkpoint
            self._cond.notify()

    def report_checkpoint(self, record: dict[str, Any]) -> None:
        """Queue ``status.checkpoint`` (the ledger calls this once per new checkpoint)."""
        self._queue("checkpoint", record)

    def report_phases(self, record: dict[str, Any]) -> None:
        """Queue ``status.launcherPhases`` alone (the launcher's last word when verl has exited)."""
        self._queue("launcherPhases", record)

    def report_validation(self, entries: list[dict[str, Any]]) -> None:
        """Queue ``status.validationProblems``: the newest validations' per-problem counts."""
        self._queue("validationProblems", entries)

    def report_staging(self, record: dict[str, Any]) -> None:
        """Queue ``status.staging`` (``flashrl-launch stage`` after each verified file)."""
        self._queue("staging", record)

    def _queue(self, field: str, value: Any) -> None:
        with self._cond:
            self._pending[field] = value
            self._cond.notify()

    def close(self, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        """Send what is pending, then stop the thread (bounded by ``timeout``)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                pending, self._pending = self._pending, {}
            self._send(pending)

    def _send(self, pending: dict[str, Any]) -> None:
        status: dict[str, Any] = {}
        if "progress" in pending:
            report = pending["progress"]
            if self.attempt is not None and report.attempt is None:
                report = replace(report, attempt=self.attempt)
            status.update(step_status(report, datetime.now(UTC)))
        if "checkpoint" in pending:
            status["checkpoint"] = pending["checkpoint"]
        if "staging" in pending:
            status["staging"] = pending["staging"]
        if "launcherPhases" in pending:
            status["launcherPhases"] = pending["launcherPhases"]
        if "validationProblems" in pending:
            status["validationProblems"] = pending["validationProblems"]
        try:
            token = self._token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            self._failures += 1
            self._log(
                f"Cannot read the service-account token {self._token_file} ({exc}); status not reported"
            )
            return
        request = urllib.request.Request(  # noqa: S310 - the URL is the in-cluster API server
            self._url,
            data=json.dumps({"status": status}, separators=(",", ":")).encode(),
            method="PATCH",
            headers={
                "Content-Type": "application/merge-patch+json",
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, timeout=REQUEST_TIMEOUT_SECONDS, context=self._ssl
            ) as response:
                response.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self._failures += 1
            detail = f"HTTP {exc.code}" if isinstance(exc, urllib.error.HTTPError) else str(exc)
            what = []
            if "progress" in pending:
                report = pending["progress"]
                what.append(f"progress step {report.step}/{report.total_steps}")
            if "checkpoint" in pending:
                what.append(f"checkpoint step {pending['checkpoint'].get('step')}")
            if "staging" in pending:
                what.append("staging progress")
            if "launcherPhases" in pending:
                what.append("goodput phases")
            if "validationProblems" in pending:
                what.append("validation per problem")
            self._log(
                f"Could not report {' and '.join(what)} to the FlashRLJob ({detail}); training continues"
            )


def from_environment(namespace: str | None, name: str, log: Log) -> ProgressReporter | None:
    """A reporter for the in-cluster API server, or None (with one log line) outside a cluster."""
    sa_dir = Path(os.environ.get(SERVICE_ACCOUNT_DIR_ENV) or SERVICE_ACCOUNT_DIR)
    token_file = sa_dir / "token"
    try:
        token_file.read_text(encoding="utf-8")
    except OSError:
        log(f"No service-account token under {sa_dir}: not in a cluster, progress reporting is off")
        return None
    base_url = os.environ.get(API_SERVER_ENV)
    if not base_url:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            log("KUBERNETES_SERVICE_HOST is not set: progress reporting is off")
            return None
        base_url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    context: ssl.SSLContext | None = None
    if base_url.startswith("https://"):
        ca = sa_dir / "ca.crt"
        try:
            context = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as exc:
            log(f"Cannot load the cluster CA {ca} ({exc}): progress reporting is off")
            return None
    if not namespace:
        try:
            namespace = (sa_dir / "namespace").read_text(encoding="utf-8").strip()
        except OSError:
            namespace = "default"
    log(f"Reporting training progress to FlashRLJob {namespace}/{name}")
    return ProgressReporter(base_url, token_file, namespace, name, log, context)
