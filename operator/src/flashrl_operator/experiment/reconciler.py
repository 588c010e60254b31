"""The FlashRLExperiment controller (I/O; decisions are pure).

One reconcile of an experiment reads it and its FlashRLJobs (by the ``flashrl.dev/experiment``
label, kept only when they are owned by this experiment's uid), asks :func:`experiment_plan.plan`
what to create and what the status is, creates the missing jobs by server-side apply (owned by the
experiment: Kubernetes' garbage collector deletes them with it), and writes the status when it
changed, then posts an Event per variant transition (started, waiting, finished, failed). Triggers:
the experiment's own events, any event of one of its jobs (a variant's GPUs released starts the next
one under ``spec.parallelism``), and the operator's periodic resync.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from flashrl_api.experiment import (
    EXPERIMENT_KIND,
    EXPERIMENT_LABEL,
    EXPERIMENT_PLURAL,
    ExperimentReason,
    experiment_problems,
)
from flashrl_api.times import now_rfc3339
from flashrl_operator.client.errors import ConflictError, RejectedError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.experiment.plan import (
    controlled_by,
    invalid_status,
    job_object,
    name_taken,
    plan,
)
from flashrl_operator.job.memory import StatusMemory
from flashrl_operator.vocab.kinds import FLASHRL_EXPERIMENT, FLASHRL_JOB
from flashrl_operator.vocab.owners import controller_name

logger = logging.getLogger(__name__)


__all__ = ["EXPERIMENT_PLURAL", "ExperimentReconciler", "experiment_of", "job_object"]


def experiment_of(job: Mapping[str, Any]) -> str | None:
    """The experiment that owns a FlashRLJob (by its controller ownerReference), or None."""
    return controller_name(job, EXPERIMENT_KIND)


def _comparable(status: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(status or {})


class ExperimentReconciler:
    """Converges FlashRLExperiments; one per operator, in the operator's event loop.

    It keeps no per-experiment state, no lock and no timer: the operator's work queue
    (:mod:`flashrl_operator.run.intake`) runs one reconcile of an experiment at a time, bounds them,
    and retries a failed one.
    """

    def __init__(self, kube: KubeClient, memory: StatusMemory, now: Callable[[], str] = now_rfc3339) -> None:
        self._kube = kube
        self._now = now
        #: The job reconciler's memory of the status it wrote: a variant is counted by what the operator
        #: decided for its job, not by a phase someone else wrote (a forged Succeeded frees no slot).
        self._memory = memory

    async def reconcile(self, namespace: str, name: str) -> None:
        """Bring one experiment's jobs and status up to date (idempotent)."""
        raw = await self._kube.get(FLASHRL_EXPERIMENT, namespace, name)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            return
        experiment, problems = experiment_problems(raw)
        if experiment is None:
            refused = invalid_status(raw.get("metadata") or {}, [str(p) for p in problems], self._now())
            await self._write_status(raw, refused.to_wire())
            return
        listed = await self._kube.list_objects(FLASHRL_JOB, namespace, f"{EXPERIMENT_LABEL}={name}")
        # Only jobs this experiment controls (by UID) are its children: a user's job, or another
        # experiment's, with a variant's name and label is never adopted.
        children = {
            str(job["metadata"]["name"]): self._as_decided(job)
            for job in listed
            if controlled_by(job, experiment.uid)
        }
        template = (raw.get("spec") or {}).get("template") or {}
        decided = plan(experiment, children, self._now(), template)
        status: dict[str, Any] = decided.status.to_wire()
        for job in decided.create:
            # The same field manager's apply would take over a job it did not create (another
            # experiment's with a colliding name, or a user's): look first, and leave a foreign one be.
            live = await self._kube.get(FLASHRL_JOB, namespace, job.name)
            if live is not None and not controlled_by(live, experiment.uid):
                status = self._taken(status, job.name, live)
                continue
            try:
                await self._kube.apply(job_object(job), force=False)
                logger.info("FlashRLExperiment %s/%s: created FlashRLJob %s", namespace, name, job.name)
            except ConflictError:
                live = await self._kube.get(FLASHRL_JOB, namespace, job.name)
                status = self._taken(status, job.name, live or {})
            except RejectedError as exc:
                status = {
                    **status,
                    "reason": ExperimentReason.JOB_REJECTED,
                    "message": f"FlashRLJob {job.name}: {exc}",
                }
        await self._write_status(raw, status)
        # Events after the status: a variant's transition is posted once the status holds it.
        for event in decided.events:
            await self._kube.create_event(raw, event.type, event.reason, event.message)

    def _as_decided(self, job: Mapping[str, Any]) -> Mapping[str, Any]:
        """The variant's job with the operator's status keys as the operator wrote them."""
        uid = str((job.get("metadata") or {}).get("uid") or "")
        status = job.get("status") or {}
        if not uid or self._memory.recall(uid) is None:
            return job
        return {**job, "status": self._memory.as_written(uid, status)}

    @staticmethod
    def _taken(status: dict[str, Any], job_name: str, live: Mapping[str, Any]) -> dict[str, Any]:
        """The status with the variant shown waiting and the name's other owner named."""
        variants = [
            {**v, "phase": "Waiting"} if v.get("jobName") == job_name else v
            for v in status.get("variants") or []
        ]
        return {
            **status,
            "variants": variants,
            "reason": ExperimentReason.JOB_NAME_TAKEN,
            "message": name_taken(job_name, live),
        }

    async def _write_status(self, raw: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        if _comparable(raw.get("status")) == _comparable(status):
            return
        meta = raw.get("metadata") or {}
        # Keys the new status no longer has are removed (a merge patch sets them to null).
        patch = {key: None for key in (raw.get("status") or {}) if key not in status}
        patch.update(status)
        await self._kube.patch_status(
            FLASHRL_EXPERIMENT, str(meta.get("namespace")), str(meta.get("name")), patch
        )
