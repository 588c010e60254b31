"""``flashrl report`` from a cluster: an experiment or a list of jobs, with the user's kubeconfig.

The per-step numbers come from each job's history ConfigMap, ``<job>-metrics``
(:mod:`flashrl_api.history` says why it lives there): it is owned by the FlashRLJob, so it outlives
the Ray cluster and needs neither Prometheus nor access to the checkpoint volume. The same ConfigMap
holds each validation's per-problem counts (:mod:`flashrl_api.validation_summary`), which feed the
paired per-problem verdict as the dumps given with ``--validation`` do. A job without one
(an operator that predates it, or a job that never reached its first step) contributes its latest
``status.metrics`` instead, and the report says so. This module is the pure part, turning the
objects into runs (:func:`runs_from_objects`); reading them over the API is the operator's client
layer's (:mod:`flashrl_operator.client.report_runs`), so the report imports nothing of the operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api.experiment import (
    REPLICA_LABEL,
    VARIANT_LABEL,
    ExperimentReason,
    FlashRLExperiment,
    run_label,
    variant_jobs,
)
from flashrl_api.goodput import ledger_of
from flashrl_api.history import HISTORY_KEY, add_metrics, history_name
from flashrl_api.validation_summary import VALIDATION_KEY
from flashrl_report.data import (
    RunMetrics,
    parse_lines,
    pool_gpus,
    pool_held_gpu_seconds,
    precision_stretches,
    rollout_text,
)
from flashrl_report.validation import ValidationSamples, samples_from_summaries

#: Where a run's numbers were read, as the report's header shows it.
SOURCE_HISTORY: Final = "ConfigMap {namespace}/{name}"


@dataclass(frozen=True)
class JobObjects:
    """What the cluster holds for one run: its label, the FlashRLJob and its history ConfigMap."""

    label: str
    name: str
    job: Mapping[str, Any] | None
    history: Mapping[str, Any] | None
    variant: Mapping[str, Any] | None = None
    """The experiment's ``status.variants`` entry for this run (``None``: not an experiment's, or the
    experiment has not reported it yet)."""
    parallelism: int | None = None
    """The experiment's ``spec.parallelism`` (``None``: all variants at once, or not an experiment)."""


def missing_job_note(namespace: str, item: JobObjects) -> str:
    """Why a run has no FlashRLJob: a variant waiting its turn (and for what, as the experiment's status
    says), one whose job was deleted, or a job that does not exist."""
    variant = item.variant or {}
    where = f"FlashRLJob {namespace}/{item.name}"
    if variant.get("reason") == ExperimentReason.JOB_DELETED:
        return f"variant {item.label}: its {where} was deleted (the experiment does not create it again)"
    if item.variant is not None and variant.get("phase", "Waiting") == "Waiting":
        why = ": ".join(str(part) for part in (variant.get("reason"), variant.get("message")) if part)
        if not why and item.parallelism:
            why = f"spec.parallelism is {item.parallelism}, so it starts when a running variant finishes"
        return f"variant {item.label} is waiting its turn ({where} is not created yet" + (
            f"; {why})" if why else ")"
        )
    return f"{where} does not exist (not created yet, or deleted)"


def runs_from_objects(namespace: str, objects: Sequence[JobObjects]) -> list[RunMetrics]:
    """One run per job, from its history (or its latest status metrics), with notes on what is missing."""
    runs: list[RunMetrics] = []
    for item in objects:
        run = RunMetrics(label=item.label)
        status = (item.job or {}).get("status") or {}
        if item.job is None:
            run.notes.append(missing_job_note(namespace, item))
        text = ((item.history or {}).get("data") or {}).get(HISTORY_KEY)
        if isinstance(text, str) and text.strip():
            source = SOURCE_HISTORY.format(namespace=namespace, name=history_name(item.name))
            run.sources.append(source)
            parse_lines(run, text.splitlines(), source)
            steps = run.training_steps()
            if steps and len(steps) < steps[-1] - steps[0] + 1:
                run.notes.append(
                    f"the history holds {len(steps)} of steps {steps[0]}–{steps[-1]}: older steps were "
                    "thinned to fit a ConfigMap (verl's full JSONL is on the checkpoint volume); figures "
                    "average the steps kept"
                )
        elif item.job is not None:
            metrics = status.get("metrics") or []
            run.sources.append(f"FlashRLJob {namespace}/{item.name} status.metrics")
            parse_lines(
                run, add_metrics("", metrics if isinstance(metrics, list) else []).splitlines(), "status"
            )
            run.notes.append(
                f"no per-step history (ConfigMap {namespace}/{history_name(item.name)}): only the latest "
                "status.metrics are shown"
            )
        goodput = status.get("goodput")
        if isinstance(goodput, Mapping) and isinstance(goodput.get("byPhase"), list):
            run.goodput = ledger_of(goodput["byPhase"])
        run.pools = pool_gpus((item.job or {}).get("spec") or {})
        run.pool_held_gpu_seconds = pool_held_gpu_seconds(goodput)
        run.stretches = precision_stretches(goodput, status.get("rolloutFallback"))
        run.rollout = rollout_text((item.job or {}).get("spec"))
        run.gpus = sum(run.pools.values()) or None
        phase = status.get("phase")
        run.status_phase = phase if isinstance(phase, str) else None
        progress = status.get("progress")
        if isinstance(progress, Mapping) and isinstance(progress.get("step"), int):
            total = progress.get("totalSteps")
            run.status_step = (int(progress["step"]), int(total) if isinstance(total, int) else None)
        if phase == "Failed":
            reason = status.get("reason")
            run.notes.append("the job failed" + (f" ({reason})" if reason else "") + ": its run ends early")
        elif phase not in (None, "Succeeded"):
            run.notes.append(f"the job is still {phase}: later steps are not in yet")
        runs.append(run)
    return runs


def validation_from_objects(namespace: str, objects: Sequence[JobObjects]) -> list[ValidationSamples]:
    """Each run's validation samples from the per-problem summaries in its history ConfigMap (the
    launcher writes one per validation step): the same structure ``--validation LABEL=DIR`` reads
    from the dumps, for the same paired comparison. Runs without any are left out."""
    out = []
    for item in objects:
        text = ((item.history or {}).get("data") or {}).get(VALIDATION_KEY)
        if isinstance(text, str) and text.strip():
            source = SOURCE_HISTORY.format(namespace=namespace, name=history_name(item.name))
            out.append(samples_from_summaries(item.label, text, f"{source} {VALIDATION_KEY}"))
    return out


def variant_statuses(raw: Mapping[str, Any], replicas: int = 1) -> dict[str, Mapping[str, Any]]:
    """The experiment's ``status.variants`` entries by run label (:func:`run_label`: the variant's
    name, ``<variant>#<k>`` with several replicas), as stored (a status the operator has not written
    yet, or a malformed one, gives none)."""
    status = raw.get("status")
    entries = status.get("variants") if isinstance(status, Mapping) else None
    if not isinstance(entries, list):
        return {}
    out: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping) or not entry.get("name"):
            continue
        replica = entry.get("replica", 0) if replicas > 1 else None
        out[run_label(str(entry["name"]), replica if isinstance(replica, int) else None)] = entry
    return out


def experiment_jobs(experiment: FlashRLExperiment) -> list[tuple[str, str]]:
    """``(label, job name)`` of each variant's run, in the experiment's order: the variant's name, or
    ``<variant>#<k>`` for replica k (the report pools a variant's replicas)."""
    out = []
    for job in variant_jobs(experiment):
        labels = job.metadata["labels"]
        replica = labels.get(REPLICA_LABEL)
        out.append((run_label(labels[VARIANT_LABEL], None if replica is None else int(replica)), job.name))
    return out


__all__ = [
    "JobObjects",
    "experiment_jobs",
    "history_name",
    "missing_job_note",
    "runs_from_objects",
    "validation_from_objects",
    "variant_statuses",
]
