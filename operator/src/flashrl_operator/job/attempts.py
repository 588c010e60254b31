"""Attempts: one Ray cluster each, a bounded history in the status, and what happens when one ends (pure).

The operator, not KubeRay, retries a FlashRLJob (KubeRay's ``backoffLimit`` cannot wait for training
progress): attempt ``k`` is its own RayJob (``backoffLimit: 0``, named by
``flashrl_operator.render.attempt_ray_job_name``, label ``flashrl.dev/attempt``, ``FLASHRL_ATTEMPT=k``
in its pods). The status carries

* ``attempt``: the current attempt, from 1;
* ``attempts``: the last :data:`MAX_HISTORY` attempts, ``{attempt, startStep, endStep, checkpointStep,
  reason, startTime, endTime}``; the current one is the last entry, without ``endTime``;
* ``lostSteps``: the steps all failures so far cost (completed after the newest checkpoint, redone);
* ``nextAttemptTime``: while waiting out the backoff before the next attempt's RayJob is created.

Everything here reads the previous status and returns the next one; the reconciler does the I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from pydantic import ValidationError

from flashrl_api.status import MAX_ATTEMPTS, AttemptRecord, Reason
from flashrl_api.times import rfc3339
from flashrl_operator.job.retry_policy import (
    BACKOFF_BASE_SECONDS,
    AttemptEnd,
    PastAttempt,
    RetryDecision,
    decide,
    stalls_from,
)
from flashrl_operator.vocab.kuberay import as_int, as_text

#: Attempts kept in ``status.attempts`` (the status model's bound).
MAX_HISTORY: Final = MAX_ATTEMPTS


def _int(value: Any, default: int = 0) -> int:
    number = as_int(value)
    return default if number is None else number


def _opt_str(value: Any) -> str | None:
    return as_text(value) or None


class Attempt(AttemptRecord):
    """One ``status.attempts`` entry: the API's :class:`~flashrl_api.status.AttemptRecord` (the one
    declaration of its fields, which the CRD's schema also comes from), read from the stored status.

    Goodput (:mod:`flashrl_operator.job.goodput`) fills in ``admitTime`` (its RayJob first seen
    unsuspended), ``releaseTime`` (its cluster seen gone), ``gpus`` and ``launcher`` (the launcher's
    newest ``status.launcherPhases`` of this attempt).
    """

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Attempt | None:
        """Read an entry as stored (camelCase); ``None`` for one the CRD's schema would not have
        admitted (someone else's write)."""
        try:
            return cls.model_validate(raw)
        except ValidationError:
            return None

    def closed(self, end_step: int, checkpoint_step: int, reason: str | None, now: str) -> Attempt:
        """The attempt ended at ``now``: its last step, its newest checkpoint, and why (``None``: it
        succeeded)."""
        return self.model_copy(
            update={
                "end_step": end_step,
                "checkpoint_step": checkpoint_step,
                "reason": reason,
                "start_time": self.start_time or now,
                "end_time": now,
            }
        )


@dataclass(frozen=True)
class Reported:
    """What the launcher reported: its last step (and which attempt completed it), the newest checkpoint."""

    step: int = 0
    step_attempt: int | None = None
    checkpoint_step: int = 0
    total_steps: int = 0
    """``status.progress.totalSteps``: verl's own count of the run's steps (0: not reported)."""

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> Reported:
        """From ``status.progress`` and ``status.checkpoint``."""
        progress = status.get("progress") or {}
        checkpoint = status.get("checkpoint") or {}
        if not isinstance(progress, Mapping):
            progress = {}
        if not isinstance(checkpoint, Mapping):
            checkpoint = {}
        return cls(
            step=_int(progress.get("step")),
            step_attempt=as_int(progress.get("attempt")),
            checkpoint_step=_int(checkpoint.get("step")),
            total_steps=_int(progress.get("totalSteps")),
        )

    def stopped_early(self, total_steps: int) -> str | None:
        """Why a run whose Ray job reported success did not finish training, or ``None`` when it did.

        Done means the launcher's step, or its newest checkpoint, reached the run's last step: the total
        the launcher reported (verl's own count, which a short data set makes smaller), else
        ``total_steps`` (``spec.training.totalSteps``). The launcher's guard (exit 70, ``StoppedEarly``)
        applies the same rule inside the pod; this one holds when KubeRay says SUCCEEDED anyway (a
        launcher that could not judge, an entrypoint that was not the launcher's).
        """
        total = self.total_steps or total_steps
        reached = max(self.step, self.checkpoint_step)
        if reached >= total:
            return None
        if self.step == 0 and self.checkpoint_step == 0 and not self.total_steps:
            return f"the launcher reported no training step of {total} (status.progress is empty)"
        saved = f"newest checkpoint {self.checkpoint_step}" if self.checkpoint_step else "no checkpoint"
        return f"training stopped at step {reached} of {total} ({saved})"

    def step_of(self, attempt: Attempt) -> int:
        """The last step ``attempt`` completed; its start step when it reported none."""
        if self.step_attempt is None or self.step_attempt != attempt.attempt:
            return attempt.start_step
        return max(attempt.start_step, self.step)


@dataclass(frozen=True)
class Attempts:
    """The attempt-owned part of the status."""

    attempt: int = 1
    history: tuple[Attempt, ...] = ()
    lost_steps: int = 0
    next_attempt_time: str | None = None

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> Attempts:
        """Read it from the previous status (a fresh job has attempt 1 and no history)."""
        raw = status.get("attempts")
        entries = (Attempt.of(e) for e in raw if isinstance(e, Mapping)) if isinstance(raw, list) else ()
        history = tuple(e for e in entries if e is not None)
        return cls(
            attempt=max(1, _int(status.get("attempt"), 1)),
            history=history,
            lost_steps=_int(status.get("lostSteps")),
            next_attempt_time=_opt_str(status.get("nextAttemptTime")),
        )

    @property
    def current(self) -> Attempt:
        """The current attempt's entry (a fresh one when it has none yet)."""
        for entry in reversed(self.history):
            if entry.attempt == self.attempt:
                return entry
        return Attempt(attempt=self.attempt)

    @property
    def created(self) -> bool:
        """The current attempt's RayJob was observed to exist (it has a start time)."""
        return self.current.start_time is not None and self.current.end_time is None

    def _with_current(self, entry: Attempt) -> tuple[Attempt, ...]:
        others = [e for e in self.history if e.attempt != entry.attempt]
        return tuple(sorted([*others, entry], key=lambda e: e.attempt))[-MAX_HISTORY:]

    def started(self, now: str, checkpoint_step: int) -> Attempts:
        """The current attempt's RayJob exists: record when, and the checkpoint it resumes from."""
        if self.created:
            return self
        entry = self.current.model_copy(
            update={"start_time": self.current.start_time or now, "end_time": None}
        )
        if self.attempt == 1 and not self.history:
            entry = entry.model_copy(update={"start_step": checkpoint_step})
        return replace(self, history=self._with_current(entry), next_attempt_time=None)

    def finished(self, now: str, reported: Reported, reason: str | None) -> Attempts:
        """The current attempt ended (succeeded, or failed for good with ``reason``)."""
        current = self.current
        if current.end_time is not None:
            return self
        entry = current.closed(reported.step_of(current), reported.checkpoint_step, reason, now)
        return replace(self, history=self._with_current(entry), next_attempt_time=None)

    def to_status(self) -> dict[str, Any]:
        """The attempt keys (``status.mapping.ATTEMPT_KEYS``; ``None`` removes one)."""
        return {
            "attempt": self.attempt,
            "attempts": [e.to_wire() for e in self.history] or None,
            "lostSteps": self.lost_steps,
            "nextAttemptTime": self.next_attempt_time,
        }


@dataclass(frozen=True)
class Failure:
    """A failed attempt: the verdict, the next attempt state, and what to tell the user."""

    decision: RetryDecision
    attempts: Attempts
    event_reason: str
    event_message: str


def on_failure(
    state: Attempts,
    reported: Reported,
    reason: str,
    message: str,
    max_restarts: int,
    now: datetime.datetime,
    deadline_left_seconds: float | None = None,
    backoff_base: float = BACKOFF_BASE_SECONDS,
    jitter_key: str = "",
) -> Failure:
    """Decide on the current attempt's failure (:func:`~flashrl_operator.job.retry_policy.decide`).

    On a retry the failed attempt is closed, the next one opened with the checkpoint it will resume
    from and a ``nextAttemptTime`` after the backoff; on a final failure the attempt is closed.
    Either way ``lostSteps`` grows by what this failure cost.
    """
    current = state.current
    step = reported.step_of(current)
    # An attempt the mismatch guard ended (FallbackToBF16) did not fail: it is no stall.
    history = [
        PastAttempt(e.attempt, e.start_step, e.end_step or e.start_step, e.checkpoint_step or 0)
        for e in state.history
        if e.end_time is not None and e.attempt != current.attempt and e.reason != Reason.FELL_BACK_TO_BF16
    ]
    end = AttemptEnd(
        attempt=current.attempt,
        reason=reason,
        message=message,
        start_step=current.start_step,
        step=step,
        checkpoint_step=reported.checkpoint_step,
        deadline_left_seconds=deadline_left_seconds,
        earlier_stalls=stalls_from(history, current.start_step),
    )
    decision = decide(end, max_restarts, backoff_base, jitter_key)
    stamp = rfc3339(now)
    closed = current.closed(step, reported.checkpoint_step, reason, stamp)
    after = replace(
        state, history=state._with_current(closed), lost_steps=state.lost_steps + decision.lost_steps
    )
    if decision.action == "retry":
        resume_from = max(reported.checkpoint_step, current.start_step)
        nxt = Attempt(attempt=current.attempt + 1, start_step=resume_from)
        after = replace(
            after,
            attempt=nxt.attempt,
            history=tuple([*after.history, nxt][-MAX_HISTORY:]),
            next_attempt_time=rfc3339(now + datetime.timedelta(seconds=decision.backoff_seconds)),
        )
        return Failure(decision, after, Reason.RETRYING, decision.message)
    return Failure(decision, after, decision.reason, decision.message)
