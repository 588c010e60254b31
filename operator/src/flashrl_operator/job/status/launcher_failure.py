"""Why the launcher failed, read back from the RayJob's message (pure).

The launcher (``flashrl-launch``) runs as the Ray job's entrypoint: a driver process inside the head
pod, not a container's main process, so a container termination message never reaches Kubernetes
while the cluster lives. What does reach it: when the entrypoint exits non-zero, Ray's job
supervisor (``ray/dashboard/modules/job/job_supervisor.py``) sets the job's message to

    Job entrypoint command failed with exit code 75, last available logs (truncated to 20,000 chars):
    <the last lines of the driver's output>

and KubeRay copies it into the RayJob's ``status.message`` with reason ``AppFailed`` (v1.7.0
``ray-operator/controllers/ray/rayjob_controller.go``: ``Status.Message = jobInfo.Message``; in
K8sJobMode a failed submitter keeps that message when the Ray job itself failed). The launcher's last
line of output is always its reason, prefixed ``flashrl-launch: ``, and its exit code is one of the
table :data:`flashrl_api.status.LAUNCHER_FAILURES`, so the FlashRLJob can say ``GPUWaitTimeout`` and
the launcher's own words instead of KubeRay's generic ``AppFailed`` and a page of log tail.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from flashrl_api.status import LAUNCHER_FAILURES, Reason, reasons_by_exit_code
from flashrl_operator.vocab.kuberay import ENTRYPOINT_FAILED

#: How every launcher log line starts (``flashrl_jobs.cli.log``).
LAUNCHER_PREFIX: Final = "flashrl-launch: "
#: The launcher's line when verl itself failed (``flashrl_jobs.cli.train``).
VERL_FAILED_PREFIX: Final = "verl exited with code "


#: Reason per launcher exit code, from the launcher failure table; any other non-zero code is verl's own.
REASONS: Final[Mapping[int, Reason]] = MappingProxyType(reasons_by_exit_code(LAUNCHER_FAILURES))

_EXIT_CODE = re.compile(re.escape(ENTRYPOINT_FAILED) + r" (-?\d+)")


@dataclass(frozen=True)
class LauncherFailure:
    """The launcher's exit code, the reason it maps to, and the launcher's last line."""

    exit_code: int
    reason: Reason
    detail: str

    def describe(self) -> str:
        """E.g. ``flashrl-launch exited with 75: timed out after 600s waiting for 8 available GPU(s)``."""
        return f"flashrl-launch exited with {self.exit_code}: {self.detail}"


def launcher_failure(message: str) -> LauncherFailure | None:
    """The launcher's failure in a Ray job message, or ``None`` when the message is not one.

    ``None`` also when the exit code is not the launcher's and its last line is not about verl (the
    process died some other way): then KubeRay's message is the better account.
    """
    found = _EXIT_CODE.search(message)
    if found is None:
        return None
    code = int(found.group(1))
    said = [
        line.strip()[len(LAUNCHER_PREFIX) :]
        for line in message.splitlines()
        if line.strip().startswith(LAUNCHER_PREFIX)
    ]
    if not said:
        return None
    last = said[-1].strip()
    # verl's own exit code may collide with one of the launcher's: the launcher's line tells them apart.
    if last.startswith(VERL_FAILED_PREFIX):
        return LauncherFailure(code, Reason.TRAINER_FAILED, last)
    if code in REASONS:
        return LauncherFailure(code, REASONS[code], last)
    return None
