"""``status.goodput`` from what the status already holds (pure): the attempts and the launcher's phases.

The operator's share of the goodput ledger is timestamps it writes anyway: each attempt's ``startTime``
(its RayJob observed), ``endTime`` (it ended) and, new, ``releaseTime`` (its Ray cluster seen gone). The
launcher's share is ``status.launcherPhases``, which this module copies into the attempt it belongs to
(``attempts[].launcher``) so it outlives the attempt. :func:`goodput` then hands both to the pure
arithmetic of :mod:`flashrl_api.goodput`.

Only timestamps in the data are used, never the reconcile's clock: the ledger of a live attempt runs
up to the launcher's newest report, so an unchanged job's resync computes the same ledger and writes
nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, Final

from pydantic import ValidationError

from flashrl_api.goodput import AttemptSpan, job_ledger, parse_rfc3339
from flashrl_api.pools import pool_goodput
from flashrl_api.status import ConditionType, LauncherPhases, Reason
from flashrl_operator.job.attempts import Attempt, Attempts
from flashrl_operator.job.status.conditions import find_condition

#: How far a time in the status may lie outside the job's life before it is taken as not real.
CLOCK_SKEW_SECONDS: Final = 300.0


def within_life(attempts: Attempts, created: str, now: str, gpus: int) -> Attempts:
    """The attempts as they can have been: every time between the job's creation and now, no attempt
    holding more GPUs than the job asks for, no launcher phase longer than its launcher's report.

    The status is writable by the launcher's token (which an ``edit`` user may mint), so the ledger's
    inputs are bounded by what the operator observes itself before any arithmetic: whatever was
    written, the goodput stays within the job's age times its GPUs (docs/security.md).
    """
    low, high = parse_rfc3339(created), parse_rfc3339(now)
    if low is None or high is None or high < low:
        return attempts
    # Other clocks (the launcher's pod, the API server's) may run a little ahead or behind.
    low, high = low - CLOCK_SKEW_SECONDS, high + CLOCK_SKEW_SECONDS

    def clamp(value: str | None, text_low: str = created) -> str | None:
        moment = parse_rfc3339(value)
        if moment is None:
            return value
        if moment < low:
            return text_low
        return now if moment > high else value

    history = []
    for entry in attempts.history:
        update: dict[str, Any] = {
            name: clamp(getattr(entry, name))
            for name in ("start_time", "admit_time", "end_time", "release_time")
        }
        if entry.gpus is not None and entry.gpus > gpus:
            update["gpus"] = gpus
        launcher = entry.launcher
        if launcher is not None:
            launched = clamp(launcher.launch_time) or launcher.launch_time
            reported = clamp(launcher.report_time) or launcher.report_time
            span = max(0.0, (parse_rfc3339(reported) or 0.0) - (parse_rfc3339(launched) or 0.0))
            phases = [
                p
                if p.seconds <= span and p.gpu_seconds <= span * gpus
                else p.model_copy(
                    update={"seconds": min(p.seconds, span), "gpu_seconds": min(p.gpu_seconds, span * gpus)}
                )
                for p in launcher.phases
            ]
            update["launcher"] = launcher.model_copy(
                update={"launch_time": launched, "report_time": reported, "phases": phases}
            )
        bounded = entry.model_copy(update=update)
        history.append(bounded if bounded != entry else entry)
    return replace(attempts, history=tuple(history))


def fold_attempts(
    attempts: Attempts,
    launcher: object,
    gpus: int,
    released: Iterable[int],
    now: str,
    admitted: bool = True,
) -> Attempts:
    """The attempts with their GPU count, admission, the launcher's newest phases and the release times
    seen now. ``admitted``: the current attempt's RayJob is not suspended (Kueue admitted it).

    ``launcher`` is ``status.launcherPhases`` as read (anything); it goes to the attempt it names (the
    current one when it names none) when it is newer than what that attempt holds. ``released`` are the
    ended attempts whose Ray cluster the operator found gone.
    """
    gone = set(released)
    report = _launcher_phases(launcher)
    target = attempts.attempt
    if report is not None and report.attempt is not None:
        target = report.attempt
    history = []
    for entry in attempts.history:
        if entry.start_time is not None and entry.gpus is None:
            entry = entry.model_copy(update={"gpus": gpus})
        live = entry.attempt == attempts.attempt and entry.start_time is not None and entry.end_time is None
        if live and admitted and entry.admit_time is None:
            start = parse_rfc3339(entry.start_time) or 0.0
            admit = now if (parse_rfc3339(now) or 0.0) >= start else entry.start_time
            entry = entry.model_copy(update={"admit_time": admit})
        if report is not None and entry.attempt == target and _newer(report, entry.launcher):
            entry = entry.model_copy(update={"launcher": report})
        if entry.attempt in gone and entry.end_time is not None and entry.release_time is None:
            entry = entry.model_copy(update={"release_time": now})
        history.append(entry)
    return replace(attempts, history=tuple(history))


def _launcher_phases(raw: object) -> LauncherPhases | None:
    """``status.launcherPhases`` as read, or ``None`` when absent or not what the launcher writes."""
    try:
        return LauncherPhases.model_validate(raw) if raw is not None else None
    except ValidationError:
        return None


def _newer(report: LauncherPhases, held: LauncherPhases | None) -> bool:
    new = parse_rfc3339(report.report_time)
    if new is None:
        return False
    old = parse_rfc3339(held.report_time) if held is not None else None
    return old is None or new > old


def unreleased(attempts: Attempts) -> list[Attempt]:
    """Ended attempts whose cluster has not been seen gone (the reconciler looks for their clusters)."""
    return [e for e in attempts.history if e.end_time is not None and e.release_time is None]


def held_from(entry: Attempt) -> float | None:
    """When the attempt's GPUs were requested: its admission (records written before admissions were
    kept: its RayJob's creation); ``None`` while it is queued or if it never was admitted."""
    if entry.admit_time is not None:
        return parse_rfc3339(entry.admit_time)
    if entry.launcher is not None or entry.release_time is not None:
        return parse_rfc3339(entry.start_time)
    return None


def spans(history: Sequence[Attempt]) -> list[AttemptSpan]:
    """The attempts that held GPUs, as the ledger's spans.

    An attempt whose cluster was never seen gone is taken as released when the next one started (one
    Ray cluster per job at a time). Lost steps: a failed attempt's completed steps after its checkpoint.
    """
    started = sorted((e for e in history if parse_rfc3339(e.start_time) is not None), key=lambda e: e.attempt)
    out = []
    for index, entry in enumerate(started):
        start = held_from(entry)
        if start is None:
            continue  # still queued, or ended before Kueue admitted it: no GPU was held
        release = parse_rfc3339(entry.release_time)
        if release is None and index + 1 < len(started):
            release = parse_rfc3339(started[index + 1].start_time)
        launcher = entry.launcher
        phases = {item.phase: item.seconds for item in launcher.phases} if launcher is not None else {}
        failed = entry.end_time is not None and entry.reason is not None
        end_step = entry.end_step if entry.end_step is not None else entry.start_step
        kept = max(entry.checkpoint_step or 0, entry.start_step)
        out.append(
            AttemptSpan(
                attempt=entry.attempt,
                gpus=entry.gpus or 1,
                start=start,
                launched=parse_rfc3339(launcher.launch_time) if launcher is not None else None,
                reported=parse_rfc3339(launcher.report_time) if launcher is not None else None,
                launcher=phases,
                steps=launcher.steps if launcher is not None else 0,
                end=parse_rfc3339(entry.end_time),
                release=release,
                failed=failed,
                lost_steps=max(0, end_step - kept) if failed else 0,
            )
        )
    return out


def goodput(
    attempts: Attempts, conditions: object, created: str, pools: Sequence[tuple[str, int]] = ()
) -> dict[str, Any] | None:
    """``status.goodput`` (wire form), or ``None`` while nothing has happened to account for.

    Staging runs from the job's creation to the ``Staged`` condition turning True by a staging Job;
    backoff from an attempt's release (or end) to the next one's start. ``pools``: the job's GPU pools
    (name, GPUs); with two (separate-async) each gets its share in ``pools``.
    """
    history = spans(attempts.history)
    times = [t for s in history for t in (s.start, s.launched, s.reported, s.end, s.release) if t is not None]
    staging = 0.0
    staged = find_condition(conditions if isinstance(conditions, list) else [], ConditionType.STAGED)
    created_at = parse_rfc3339(created)
    if staged is not None and staged.get("status") == "True" and staged.get("reason") == Reason.STAGED:
        done = parse_rfc3339(staged.get("lastTransitionTime"))
        if done is not None and created_at is not None:
            staging = max(0.0, done - created_at)
            times.append(done)
    queued = 0.0
    for entry in attempts.history:
        created_at = parse_rfc3339(entry.start_time)
        if created_at is None:
            continue
        held = held_from(entry)
        until = held if held is not None else parse_rfc3339(entry.end_time)
        if until is None:
            until = max([*times, created_at])
        queued += max(0.0, until - created_at)
        times.append(created_at)
    if not times:
        return None
    backoff = 0.0
    ordered = sorted(attempts.history, key=lambda e: e.attempt)
    for before, after in itertools.pairwise(ordered):
        freed = parse_rfc3339(before.release_time) or parse_rfc3339(before.end_time)
        created_next = parse_rfc3339(after.start_time)
        if freed is not None and created_next is not None:
            backoff += max(0.0, created_next - freed)
    ledger = job_ledger(history, max(times), staging=staging, backoff=backoff, queued=queued)
    wire = ledger.to_wire()
    split = pool_goodput(ledger, pools)
    if split:
        wire["pools"] = split
    return wire
