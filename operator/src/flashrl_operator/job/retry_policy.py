"""Whether a failed attempt is retried, and what it cost (pure).

KubeRay's ``backoffLimit`` retries on a fresh cluster but knows nothing about training progress, so
the operator decides itself: every attempt runs with ``backoffLimit: 0`` and this function reads how it
ended. The rules, in order:

1. **Not retryable** (:data:`NON_RETRYABLE`): the same spec, image and volume would fail the same way
   (the launcher failures the table ``flashrl_api.status.LAUNCHER_FAILURES`` marks not retryable: an
   invalid config, a launcher usage error, a checkpoint directory that cannot be written, verl
   stopping early by itself, a failed staging Job; an invalid spec, a RayJob KubeRay refused; the
   job's own deadline having passed): Failed at once, with that reason.
2. **Budget**: ``lifecycle.maxRestarts`` retries at most; after that, Failed with the attempt's reason.
3. **Progress gate**: a retryable failure (a trainer crash, an NCCL error, a lost node or evicted pod,
   a GPU wait timeout, a deleted RayJob, ...) is retried if the attempt saved a checkpoint newer than
   the one it resumed from, or failed before completing its first step (it never got to train, so it
   could not have saved). An attempt that trained but saved nothing newer gets one more try from the
   same checkpoint (a single transient failure a few steps after a save is not a pattern). When an
   earlier attempt from that same checkpoint also trained and failed without saving, the next attempt
   would resume from there again and most likely fail at the same step: Failed with reason
   ``NoProgress`` naming that step.

The work a failure loses is the steps completed after the newest checkpoint: ``step - checkpoint``.
With a checkpoint every ``interval`` steps that is at most ``interval - 1`` completed steps (plus the
step in flight). Kueue preemption is not a failure and never reaches this function.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from flashrl_api.status import LAUNCHER_FAILURES, LauncherExit, Reason, not_retryable
from flashrl_operator.vocab.kuberay import KubeRayReason

#: Failures that are not the launcher's and that a new attempt cannot fix.
NOT_LAUNCHER_NON_RETRYABLE: Final[frozenset[str]] = frozenset(
    {KubeRayReason.VALIDATION_FAILED, Reason.INVALID_SPEC}
)


def non_retryable(rows: Iterable[LauncherExit]) -> frozenset[str]:
    """The failures a new attempt cannot fix: the launcher failure table's rows marked not retryable
    (``StagingFailed`` among them: the staging Job already retried what can be retried, its
    backoffLimit; the rest, a missing column, a gated model, a full volume, needs the user), and the
    spec's and KubeRay's refusals."""
    return not_retryable(rows) | NOT_LAUNCHER_NON_RETRYABLE


#: Failures a new attempt cannot fix.
NON_RETRYABLE: Final = non_retryable(LAUNCHER_FAILURES)

#: Backoff before attempt k+1: 30 s doubling per retry, at most 10 minutes (a new Ray cluster takes
#: minutes to come up anyway; the backoff only keeps a flapping node pool from being hammered).
BACKOFF_BASE_SECONDS: Final = 30.0
BACKOFF_CAP_SECONDS: Final = 600.0


@dataclass(frozen=True)
class AttemptEnd:
    """How one attempt ended, as the operator observed it."""

    attempt: int
    """1 for the first Ray cluster."""
    reason: str
    """Why it failed (the launcher's reason, KubeRay's, or the operator's own such as RayJobDeleted)."""
    message: str
    """The failure's detail, for the job's message."""
    start_step: int
    """The checkpoint step it resumed from (0 when there was none)."""
    step: int
    """The last training step it completed (``status.progress.step``; ``start_step`` if none)."""
    checkpoint_step: int
    """The newest checkpoint when it ended (``status.checkpoint.step``; 0 when none)."""
    deadline_left_seconds: float | None = None
    """Time left of ``lifecycle.activeDeadlineSeconds``; ``None`` without a deadline."""
    earlier_stalls: tuple[int, ...] = ()
    """Earlier attempts that resumed from this same checkpoint, trained, and failed without saving a
    newer one: their numbers (see :func:`stalls_from`)."""


@dataclass(frozen=True)
class PastAttempt:
    """What the gate needs from one ``status.attempts`` entry."""

    attempt: int
    start_step: int
    end_step: int
    checkpoint_step: int


def stalls_from(history: list[PastAttempt], start_step: int) -> tuple[int, ...]:
    """Attempts in ``history`` that resumed from ``start_step``, trained, and saved nothing newer."""
    return tuple(
        past.attempt
        for past in history
        if past.start_step == start_step
        and past.end_step > past.start_step
        and past.checkpoint_step <= past.start_step
    )


@dataclass(frozen=True)
class RetryDecision:
    """Retry (after ``backoff_seconds``) or fail the job with ``reason``; either way ``lost_steps``."""

    action: Literal["retry", "fail"]
    reason: str
    message: str
    lost_steps: int
    backoff_seconds: float = 0.0


def lost_steps(end: AttemptEnd) -> int:
    """Completed steps after the newest checkpoint: what the next attempt must redo."""
    return max(0, end.step - max(end.checkpoint_step, end.start_step))


#: Each backoff is shortened by up to this fraction. Jobs that fail together (a node pool or the API
#: server went away under all of them) would otherwise come back in lockstep, every retry after the
#: same wait, and hit whatever failed at the same instant again.
JITTER_FRACTION: Final = 0.25


def jitter(key: str, retry: int) -> float:
    """A number in [0, 1) drawn from ``key`` (a job's identity) and ``retry``.

    Drawn by hashing rather than from a global random generator: the same job's same retry always
    waits the same (the wait is written into its status, and stays what a re-run of the decision
    says), while two jobs, or two retries of one job, draw independently.
    """
    digest = hashlib.blake2b(f"{key}\0{retry}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def jittered(delay: float, key: str, retry: int) -> float:
    """``delay`` shortened by a fraction in [0, :data:`JITTER_FRACTION`) drawn for ``key`` and ``retry``:
    never longer than ``delay`` (caps stay caps), never shorter than three quarters of it."""
    return delay * (1.0 - JITTER_FRACTION * jitter(key, retry))


def backoff_seconds(attempt: int, base: float = BACKOFF_BASE_SECONDS, key: str = "") -> float:
    """Wait before starting attempt ``attempt + 1``: ``base`` doubling per retry, capped, then
    shortened by the jitter ``key`` (the job's uid) draws for this attempt."""
    return jittered(min(BACKOFF_CAP_SECONDS, base * 2.0 ** max(0, attempt - 1)), key, attempt)


def decide(
    end: AttemptEnd, max_restarts: int, backoff_base: float = BACKOFF_BASE_SECONDS, jitter_key: str = ""
) -> RetryDecision:
    """The operator's verdict on a failed attempt (see the module docstring for the rules);
    ``jitter_key`` (the job's uid) spreads the backoff of jobs that failed together."""
    lost = lost_steps(end)
    cost = f"{lost} step(s) since the checkpoint of step {max(end.checkpoint_step, end.start_step)} lost"
    if end.reason in NON_RETRYABLE:
        return RetryDecision("fail", end.reason, f"{end.message} (not retryable)", lost)
    if end.reason == KubeRayReason.DEADLINE_EXCEEDED or (
        end.deadline_left_seconds is not None and end.deadline_left_seconds <= 0
    ):
        return RetryDecision(
            "fail",
            KubeRayReason.DEADLINE_EXCEEDED,
            f"{end.message} (lifecycle.activeDeadlineSeconds has passed)",
            lost,
        )
    if end.attempt > max_restarts:
        return RetryDecision(
            "fail",
            end.reason,
            f"attempt {end.attempt} failed at step {end.step} ({end.message}); no retries left "
            f"(lifecycle.maxRestarts {max_restarts}); {cost}",
            lost,
        )
    advanced = end.checkpoint_step > end.start_step
    before_first_step = end.step <= end.start_step
    if not advanced and not before_first_step and end.earlier_stalls:
        which = ", ".join(map(str, (*end.earlier_stalls, end.attempt)))
        return RetryDecision(
            "fail",
            Reason.NO_PROGRESS,
            f"attempts {which} each resumed from step {end.start_step} and failed without saving a newer "
            f"checkpoint; attempt {end.attempt} failed after step {end.step} ({end.reason}: {end.message}). "
            f"A retry would resume from step {end.start_step} again and keep failing after step {end.step}",
            lost,
        )
    if before_first_step:
        why = "before its first step"
    elif advanced:
        why = f"after a checkpoint of step {end.checkpoint_step}"
    else:
        why = f"at step {end.step} before its first checkpoint (one more try from step {end.start_step})"
    wait = backoff_seconds(end.attempt, backoff_base, jitter_key)
    return RetryDecision(
        "retry",
        end.reason,
        f"attempt {end.attempt} failed {why} ({end.reason}: {end.message}); {cost}; attempt "
        f"{end.attempt + 1} resumes from step {max(end.checkpoint_step, end.start_step)} in {wait:.3g}s",
        lost,
        wait,
    )
