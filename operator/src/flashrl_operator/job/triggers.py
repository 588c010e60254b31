"""Which watch events of a FlashRLJob call for a reconcile: a job decision, pure, beside the others.

The kopf wiring (:mod:`flashrl_operator.run.handlers`) asks :func:`needs_reconcile` of every event of a
job and hands the job to the work queue when it says so; what a job's status means stays here, in
``job/``, with the reconcile that writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flashrl_api.status import ConditionType
from flashrl_operator.job.status.conditions import find_condition
from flashrl_operator.job.status.staging import progress_line


def needs_reconcile(event_type: str | None, body: Mapping[str, Any]) -> bool:
    """Whether a FlashRLJob watch event calls for a reconcile (pure).

    Every job listed when the operator starts (``event_type`` None) is reconciled, as is any job
    whose ``metadata.generation`` the status has not observed yet: a new job or a spec edit.
    Changes to the status (the operator's own writes, the launcher's progress) and to metadata do
    not; the RayJob's changes and the periodic resync cover the rest (the mismatch guard judges the
    launcher's ``status.metrics`` at each of those reconciles: a step takes minutes, the resync one).
    The job itself carries the only bookkeeping there is (``status.observedGeneration``): kopf stores
    nothing on it.
    """
    if event_type == "DELETED":
        return False
    if event_type is None:
        return True
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    status = body.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return True
    return staging_progress_unshown(status)


def staging_progress_unshown(status: Mapping[str, Any]) -> bool:
    """The stage command reported progress the Staged condition does not show yet (pure): the one
    status change from inside the job that the operator re-reads, so the condition tracks it."""
    if status.get("phase") != "Staging":
        return False
    line = progress_line(status.get("staging"))
    staged = find_condition(status.get("conditions") or [], ConditionType.STAGED) or {}
    return bool(line) and line not in str(staged.get("message") or "")
