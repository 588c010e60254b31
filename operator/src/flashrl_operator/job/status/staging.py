"""Whether a job's sources are staged, from what the operator observed (pure): the ``Staged`` verdict.

The staging Job's state (its conditions, its pod's termination message, the stage command's progress in
``status.staging``) decides the ``Staged`` condition, and the RayJob is applied only once it holds. How
sources staged by an earlier job are known is :mod:`flashrl_operator.job.staging` (records on the claims).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flashrl_api.staging import StagedSource
from flashrl_api.status import Reason
from flashrl_operator.job.status.conditions import Verdict


@dataclass(frozen=True)
class JobOutcome:
    """A batch/v1 Job's state as far as staging cares."""

    succeeded: bool = False
    failed: bool = False
    #: The Job controller's reason for a failure (BackoffLimitExceeded, PodFailurePolicy, ...).
    reason: str = ""
    message: str = ""


def job_outcome(job: Mapping[str, Any] | None) -> JobOutcome | None:
    """Read a live Job's conditions (``Complete`` / ``Failed``); None when it does not exist."""
    if job is None:
        return None
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return JobOutcome(succeeded=True)
        if cond.get("type") == "Failed":
            return JobOutcome(
                failed=True, reason=str(cond.get("reason") or ""), message=str(cond.get("message") or "")
            )
    return JobOutcome()


def termination_message(pods: Sequence[Mapping[str, Any]], container: str) -> str:
    """The newest terminated ``container``'s message among the Job's pods (the stage command's reason)."""
    best: tuple[str, str] = ("", "")
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") != container:
                continue
            terminated = (cs.get("state") or {}).get("terminated") or {}
            message = str(terminated.get("message") or "").strip()
            finished = str(terminated.get("finishedAt") or "")
            if message and finished >= best[0]:
                best = (finished, message)
    return best[1]


def progress_line(progress: Mapping[str, Any] | None) -> str:
    """``3/7 files, 1.20/16.40 GB`` from ``status.staging``, or empty."""
    if not progress:
        return ""
    try:
        return (
            f"{int(progress.get('files', 0))}/{int(progress.get('filesTotal', 0))} files, "
            f"{int(progress.get('bytes', 0)) / 1e9:.2f}/{int(progress.get('bytesTotal', 0)) / 1e9:.2f} GB"
        )
    except (TypeError, ValueError):
        return ""


@dataclass(frozen=True)
class StagingObservation:
    """What one reconcile learned about staging."""

    #: The sources to stage (empty: nothing to stage).
    plan: tuple[StagedSource, ...] = ()
    #: Every source was recorded on its claim before this job (no Job needed).
    already: bool = False
    #: The staging Job's state (None: not created yet).
    outcome: JobOutcome | None = None
    #: The stage command's last line when its pod failed.
    failure: str = ""
    #: ``status.staging`` as the stage command reported it.
    progress: Mapping[str, Any] | None = None


def staged_verdict(obs: StagingObservation) -> Verdict:
    """The ``Staged`` condition."""
    if not obs.plan:
        return Verdict("True", Reason.NOTHING_TO_STAGE, "The model and data are paths on the job's volumes")
    sources = ", ".join(item.source.uri for item in obs.plan)
    if obs.already:
        return Verdict("True", Reason.ALREADY_STAGED, f"Already staged on the job's claims: {sources}")
    outcome = obs.outcome
    if outcome is not None and outcome.succeeded:
        return Verdict("True", Reason.STAGED, f"Staged {sources}")
    if outcome is not None and outcome.failed:
        detail = obs.failure or outcome.message or outcome.reason or "the staging Job failed"
        return Verdict("False", Reason.STAGING_FAILED, detail)
    progress = progress_line(obs.progress)
    return Verdict(
        "False",
        Reason.STAGING,
        f"Downloading {sources}"
        + (f": {progress}" if progress else " (no GPU is requested until it is done)"),
    )


def is_staged(obs: StagingObservation) -> bool:
    """Whether the RayJob may be applied."""
    return staged_verdict(obs).status == "True"
