"""What a FlashRLExperiment needs next, and what its status says (pure).

Given the experiment and the variants' FlashRLJobs as last read from the API server, :func:`plan`
returns the jobs to create now (all of them, or as many as ``spec.parallelism`` leaves room for,
in the variants' order) and the experiment's status. A finished variant frees its slot whether it
succeeded or failed (the others still answer the comparison, and the status says which failed), but
only once its GPUs are released: its FlashRLJob's ended attempts all carry ``releaseTime`` (the job
reconciler saw their GPU worker pods gone). A variant created while the previous one's workers still
hold the GPUs could not be scheduled, and its startup deadline (``startupTimeoutSeconds``, KubeRay's
``preRunningDeadlineSeconds``) would count a queue instead of a start: it would fail for lack of
capacity. Waiting variants say what they wait for (reason and message), and each variant's
transitions become Events on the experiment (:func:`variant_events`).

With Kueue (``scheduling.queueName`` in the template) the jobs are created up to ``spec.parallelism``
(all at once without it) and each waits, suspended and holding no GPU, for Kueue to admit it; Kueue
decides what runs together and in which order, so a finished variant's GPUs are not waited for here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api import API_VERSION, KIND, FlashRLJob
from flashrl_api.experiment import (
    EXPERIMENT_KIND,
    ExperimentPhase,
    ExperimentReason,
    FlashRLExperiment,
    FlashRLExperimentStatus,
    VariantMetric,
    VariantPhase,
    VariantStatus,
    experiment_runs,
    variant_jobs,
)
from flashrl_api.status import Condition
from flashrl_operator.experiment.goodput import with_goodput
from flashrl_operator.vocab.owners import describe_controller, is_controlled_by

TERMINAL: Final = frozenset({"Succeeded", "Failed"})
ACTIVE: Final = frozenset({"Starting", "Running"})


def job_object(job: FlashRLJob) -> dict[str, Any]:
    """A variant's FlashRLJob as sent to the API server (by the reconciler, and as ``flashrl render``
    prints it)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": dict(job.metadata),
        "spec": job.spec.to_wire(),
    }


@dataclass(frozen=True)
class VariantEvent:
    """An Event to post on the experiment about one variant's transition."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """The jobs to create now, the status to write, and the Events to post after it is written."""

    create: list[FlashRLJob]
    status: FlashRLExperimentStatus
    events: tuple[VariantEvent, ...] = ()


def gpus_held(child: Mapping[str, Any] | None) -> bool:
    """Whether a variant's FlashRLJob has an ended attempt whose GPU workers were not seen gone yet
    (``status.attempts[]`` with ``endTime`` and no ``releaseTime``)."""
    attempts = ((child or {}).get("status") or {}).get("attempts") or []
    return any(isinstance(a, Mapping) and a.get("endTime") and not a.get("releaseTime") for a in attempts)


def _names(statuses: Sequence[VariantStatus]) -> str:
    return ", ".join(f"{s.name} ({s.job_name})" for s in statuses)


def variant_events(
    before: Sequence[VariantStatus], after: Sequence[VariantStatus], created: set[str]
) -> tuple[VariantEvent, ...]:
    """The variants' transitions between the status last written and the new one, as Events: started
    (its FlashRLJob created), waiting (a new reason to wait), finished, failed."""
    old = {v.name: v for v in before}
    events = []
    for now in after:
        was = old.get(now.name)
        if now.job_name in created:
            events.append(
                VariantEvent(
                    "Normal",
                    ExperimentReason.VARIANT_STARTED,
                    f"{now.name}: created FlashRLJob {now.job_name}",
                )
            )
        elif now.phase == "Waiting" and now.reason and (was is None or was.reason != now.reason):
            events.append(
                VariantEvent(
                    "Normal", ExperimentReason.VARIANT_WAITING, f"{now.name}: {now.message or now.reason}"
                )
            )
        elif was is not None and was.phase != now.phase and now.phase == "Succeeded":
            events.append(
                VariantEvent(
                    "Normal",
                    ExperimentReason.VARIANT_FINISHED,
                    f"{now.name}: FlashRLJob {now.job_name} Succeeded"
                    + (
                        f" at step {now.step}/{now.total_steps}"
                        if now.step is not None and now.total_steps
                        else ""
                    ),
                )
            )
        elif was is not None and was.phase != now.phase and now.phase == "Failed":
            events.append(
                VariantEvent(
                    "Warning",
                    ExperimentReason.VARIANT_FAILED,
                    f"{now.name}: FlashRLJob {now.job_name} Failed"
                    + (f" ({now.reason})" if now.reason else ""),
                )
            )
    return tuple(events)


def _variant_status(name: str, replica: int, job_name: str, child: Mapping[str, Any] | None) -> VariantStatus:
    if child is None:
        return VariantStatus(name=name, replica=replica, job_name=job_name, phase="Waiting")
    status = child.get("status") or {}
    phase: VariantPhase = status.get("phase") or "Pending"
    progress = status.get("progress") or {}
    metrics = [
        VariantMetric.model_validate(m)
        for m in status.get("metrics") or []
        if isinstance(m, Mapping)
        and isinstance(m.get("name"), str)
        and isinstance(m.get("value"), int | float)
    ]
    return VariantStatus(
        name=name,
        replica=replica,
        job_name=job_name,
        phase=phase,
        step=progress.get("step"),
        total_steps=progress.get("totalSteps"),
        reason=status.get("reason"),
        metrics=metrics,
    )


def _condition(
    kind: str, holds: bool, reason: str, message: str, now: str, previous: Sequence[Condition]
) -> Condition:
    status = "True" if holds else "False"
    before = next((c for c in previous if c.type == kind), None)
    since = before.last_transition_time if before is not None and before.status == status else now
    return Condition(type=kind, status=status, reason=reason, message=message, last_transition_time=since)


def experiment_status(
    experiment: FlashRLExperiment, variants: Sequence[VariantStatus], now: str
) -> FlashRLExperimentStatus:
    """Phase, finished count, conditions and message from the variants' states."""
    finished = [v for v in variants if v.phase in TERMINAL]
    failed = [v for v in variants if v.phase == "Failed"]
    phase: ExperimentPhase
    if len(finished) == len(variants):
        phase = "Failed" if failed else "Succeeded"
    elif any(v.phase in ACTIVE for v in variants) or finished:
        phase = "Running"
    else:
        phase = "Pending"
    if phase == "Succeeded":
        reason, message = ExperimentReason.ALL_VARIANTS_SUCCEEDED, f"all {len(variants)} variants succeeded"
    elif failed:
        reason = ExperimentReason.VARIANT_FAILED
        message = "; ".join(f"{v.name} failed" + (f" ({v.reason})" if v.reason else "") for v in failed)
    elif phase == "Running":
        reason = ExperimentReason.VARIANTS_RUNNING
        message = ", ".join(
            f"{v.name} {v.phase}"
            + (f" {v.step}/{v.total_steps}" if v.step is not None and v.total_steps else "")
            for v in variants
        )
    else:
        reason, message = ExperimentReason.WAITING_FOR_VARIANTS, "no variant is running yet"
    waiting = next((v for v in variants if v.phase == "Waiting" and v.message), None)
    if waiting is not None:
        message += f"; {waiting.name} {waiting.message}"
    previous = experiment.status.conditions if experiment.status is not None else []
    conditions = [
        _condition("Accepted", True, ExperimentReason.ACCEPTED, f"{len(variants)} variants", now, previous)
    ] + [
        # True with the phase's reason in that phase, else False with its Not... reason.
        _condition(
            ctype,
            phase == ctype,
            reason if phase == ctype else otherwise,
            message if phase == ctype else "",
            now,
            previous,
        )
        for ctype, otherwise in (
            ("Succeeded", ExperimentReason.NOT_SUCCEEDED),
            ("Failed", ExperimentReason.NOT_FAILED),
        )
    ]
    return FlashRLExperimentStatus(
        phase=phase,
        finished=f"{len(finished)}/{len(variants)}",
        variants=list(variants),
        reason=reason if phase in ("Failed", "Pending") or failed else None,
        message=message,
        conditions=conditions,
        observed_generation=experiment.metadata.get("generation"),
    )


def plan(
    experiment: FlashRLExperiment,
    children: Mapping[str, Mapping[str, Any]],
    now: str,
    raw_template: Mapping[str, Any] | None = None,
) -> Plan:
    """The jobs to create now (respecting ``spec.parallelism``) and the experiment's status.

    ``children`` maps job names to the FlashRLJobs that exist (as read from the API server).
    """
    jobs = variant_jobs(experiment, raw_template)
    runs = [(v.name, replica or 0) for v, replica in experiment_runs(experiment.spec)]
    before = {
        v.job_name or v.name: v for v in (experiment.status.variants if experiment.status is not None else [])
    }
    statuses = []
    for (variant, replica), job in zip(runs, jobs, strict=True):
        status = _variant_status(variant, replica, job.name, children.get(job.name))
        earlier = before.get(job.name)
        if status.phase == "Waiting" and earlier is not None and earlier.phase != "Waiting":
            # Created before and gone now: someone deleted it. Re-running a whole training run is not
            # the controller's call; the variant is reported failed, with its last known progress.
            status = earlier.model_copy(update={"phase": "Failed", "reason": ExperimentReason.JOB_DELETED})
        statuses.append(status)
    statuses = with_goodput(statuses, jobs, children)
    limit = experiment.spec.parallelism or len(jobs)
    running = [s for s in statuses if s.phase not in TERMINAL and s.phase != "Waiting"]
    # A finished variant whose GPU workers are not gone yet still occupies its slot; with a queue,
    # Kueue decides what runs (a created variant waits suspended, holding nothing, until admitted).
    queued = bool(jobs) and all(job.spec.scheduling.queue_name is not None for job in jobs)
    holding = [
        s
        for s in statuses
        if not queued
        and s.phase in TERMINAL
        and s.job_name is not None
        and gpus_held(children.get(s.job_name))
    ]
    busy = len(running) + len(holding)
    create: list[FlashRLJob] = []
    waits: dict[str, tuple[str, str]] = {}
    starting: list[VariantStatus] = []
    for job, status in zip(jobs, statuses, strict=True):
        if status.phase != "Waiting":
            continue
        if busy + len(create) < limit:
            create.append(job)
            starting.append(status)
        elif len(running) + len(create) < limit:
            waits[status.name] = (
                ExperimentReason.WAITING_FOR_GPUS,
                f"waits for the GPUs of {_names(holding)}: its Ray job ended and its GPU workers are not "
                "deleted yet",
            )
        else:
            waits[status.name] = (
                ExperimentReason.WAITING_FOR_SLOT,
                f"waits for a slot (spec.parallelism {limit}): {_names(running + starting + holding)} "
                + ("runs" if len(running + starting + holding) == 1 else "run"),
            )
    # A job about to be created is Pending, not Waiting, in the status written with it.
    created = {job.name for job in create}
    shown = []
    for s in statuses:
        if s.job_name in created:
            s = s.model_copy(update={"phase": "Pending"})
        elif s.name in waits and s.phase == "Waiting" and s.reason != ExperimentReason.JOB_NAME_TAKEN:
            reason, message = waits[s.name]
            s = s.model_copy(update={"reason": reason, "message": message})
        shown.append(s)
    previous = experiment.status.variants if experiment.status is not None else []
    return Plan(create, experiment_status(experiment, shown, now), variant_events(previous, shown, created))


def controlled_by(job: Mapping[str, Any], uid: str | None) -> bool:
    """Whether ``job``'s controller ownerReference is the experiment with this UID (a name, a label or
    a non-controller reference does not make a FlashRLJob the experiment's)."""
    return is_controlled_by(job, uid, EXPERIMENT_KIND)


def name_taken(job_name: str, live: Mapping[str, Any]) -> str:
    """The status message for a variant whose FlashRLJob name is held by ``live``, naming its owner."""
    return (
        f"a FlashRLJob named {job_name} exists and is not this experiment's ({describe_controller(live)}); "
        "it is left "
        "alone: rename the experiment or the variant"
    )


def invalid_status(
    experiment_meta: Mapping[str, Any], problems: Sequence[str], now: str
) -> FlashRLExperimentStatus:
    """The status of an experiment whose spec was refused: Failed, InvalidSpec, every problem listed."""
    message = "; ".join(problems)
    return FlashRLExperimentStatus(
        phase="Failed",
        reason=ExperimentReason.INVALID_SPEC,
        message=message,
        conditions=[
            Condition(
                type="Accepted",
                status="False",
                reason=ExperimentReason.INVALID_SPEC,
                message=message,
                last_transition_time=now,
            )
        ],
        observed_generation=experiment_meta.get("generation"),
    )


__all__ = [
    "Plan",
    "VariantEvent",
    "controlled_by",
    "experiment_status",
    "gpus_held",
    "invalid_status",
    "name_taken",
    "plan",
    "variant_events",
]
