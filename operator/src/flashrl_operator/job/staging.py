"""Whether a job's sources are staged, from what the operator observed (pure).

The staging Job's outcome decides the ``Staged`` condition, and the RayJob is applied only once it
holds. How the operator knows that sources are *already* staged, so a second job using the same
model on the same claim starts no Job at all: after a staging Job succeeded, the operator writes one
annotation per source on the PersistentVolumeClaim it was staged into
(``staged.flashrl.dev/<hash of source and directory>``, value: the source, its directory, the commit
the stage command resolved, when and by which job). Why the claim:

* the record lives and dies with the volume: a recreated claim (a new, empty volume) has no record,
  so its sources are staged again; nothing else has to be cleaned up;
* the operator cannot look inside a volume, and mounting it just to look would cost a pod start
  (pulling the multi-GB trainer image) per job, which is the cost skipping avoids;
* it is visible and editable with kubectl (``kubectl annotate pvc hf-cache staged.flashrl.dev/...-``
  forces a new download), and needs only ``get`` and ``patch`` on claims.

The stage command's own marker files stay the ground truth inside the volume: a Job that does run
skips every source whose marker matches, so a stale or missing annotation costs at most one quick
Job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api.staging import StagedSource
from flashrl_api.status import Reason
from flashrl_operator.job.status.conditions import Verdict
from flashrl_operator.render.names import short_hash

#: Prefix of the per-source annotations on a claim.
ANNOTATION_PREFIX: Final = "staged.flashrl.dev/"


def annotation_key(item: StagedSource) -> str:
    """``staged.flashrl.dev/<hash>`` for one source in one directory."""
    return ANNOTATION_PREFIX + short_hash(f"{item.source.uri}|{item.directory}")


def record_patches(
    plan: Sequence[StagedSource], job: str, now: str, commits: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per claim, the merge patch recording its staged sources."""
    patches: dict[str, dict[str, Any]] = {}
    for item in plan:
        if not item.claim_name:
            continue
        value = {"source": item.source.uri, "path": item.directory, "stagedAt": now, "job": job}
        commit = (commits or {}).get(item.source.uri)
        if commit:
            value["commit"] = commit
        annotations = patches.setdefault(item.claim_name, {"metadata": {"annotations": {}}})
        annotations["metadata"]["annotations"][annotation_key(item)] = json.dumps(value, sort_keys=True)
    return patches


def recorded(plan: Sequence[StagedSource], claims: Mapping[str, Mapping[str, Any] | None]) -> bool:
    """Whether every source of the plan is recorded on its claim (``claims``: name -> live claim)."""
    for item in plan:
        claim = claims.get(item.claim_name or "")
        annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
        if annotation_key(item) not in annotations:
            return False
    return bool(plan)


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
