"""Each FlashRLJob's per-step history: its ``<job>-metrics`` ConfigMap (I/O).

:class:`HistoryRecorder` keeps the ConfigMap (:mod:`flashrl_api.history`), a child the job owns, up to
date from the ``status.metrics`` the launcher reports, and each validation's per-problem counts
(``status.validationProblems``, :mod:`flashrl_api.validation_summary`) under a second key: one apply
per new step at most, none when nothing new was reported. It outlives the Ray cluster, so
``flashrl report`` reads a finished job's steps from it. Besides the reconciler, the one module of
``job/`` that does I/O (the operator's handlers call it on each job event).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from flashrl_api import API_VERSION, KIND
from flashrl_api.history import HISTORY_KEY, add_metrics, history_name
from flashrl_api.status import Reason
from flashrl_api.validation_summary import VALIDATION_KEY, add_status
from flashrl_operator.client.errors import ConflictError, RejectedError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.render import JOB_LABEL
from flashrl_operator.render.children import ownership_conflict
from flashrl_operator.vocab.kinds import CONFIG_MAP
from flashrl_operator.vocab.owners import controller_of, is_referenced_by

logger = logging.getLogger(__name__)

__all__ = ["HistoryRecorder", "history_is_ours"]


def history_is_ours(live: Mapping[str, Any], uid: str) -> bool:
    """Whether a ConfigMap under a job's history name is that job's: its controller is the job (by UID),
    or, as the operator wrote it before it marked itself controller, it has no controller and a
    FlashRLJob reference with the job's UID."""
    if ownership_conflict("", live, uid) is None:
        return True
    return controller_of(live) is None and is_referenced_by(live, uid, KIND)


def _total_steps(job: Mapping[str, Any]) -> int | None:
    """``spec.training.totalSteps`` (the API server fills in its default): no real step is beyond it."""
    training = (job.get("spec") or {}).get("training") or {}
    total = training.get("totalSteps") if isinstance(training, Mapping) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


class HistoryRecorder:
    """Appends each job's reported metrics to its ``<job>-metrics`` ConfigMap.

    Ownership is proved at every write, never remembered: the first write is a ``POST`` (refused with
    409 when the name is taken), every later one an apply carrying the ``resourceVersion`` this
    recorder last wrote or read from an object it checked to be the job's (the API server refuses it
    with 409 when the object changed since: deleted and re-created by someone else, or edited). A
    refused write re-reads the object: someone else's is reported as ChildConflict and left alone.
    """

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        #: Per job, the history text last written or read and the resourceVersion it was at (None: no
        #: ConfigMap): an unchanged status costs no request, a changed one exactly one write.
        self._known: dict[tuple[str, str], tuple[dict[str, str], str | None]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def forget(self, namespace: str, name: str) -> None:
        """Drop the cached history of a deleted job."""
        self._known.pop((namespace, name), None)
        self._locks.pop((namespace, name), None)

    async def _read(self, job: Mapping[str, Any], key: tuple[str, str], uid: str) -> bool:
        """Read the live ConfigMap into the cache; False (and reported) when it is someone else's."""
        current = await self._kube.get(CONFIG_MAP, key[0], history_name(key[1]))
        if current is not None and not history_is_ours(current, uid):
            self._known.pop(key, None)
            await self._refuse(job, current)
            return False
        if current is None:
            self._known[key] = ({}, None)
        else:
            version = str((current.get("metadata") or {}).get("resourceVersion") or "") or None
            data = current.get("data") or {}
            self._known[key] = (
                {k: str(data[k]) for k in (HISTORY_KEY, VALIDATION_KEY) if data.get(k)},
                version,
            )
        return True

    async def record(self, job: Mapping[str, Any]) -> bool:
        """Merge the job's ``status.metrics`` into its history, and its ``status.validationProblems``
        into the per-problem summaries beside it; True when the ConfigMap was written."""
        status = job.get("status") or {}
        metrics = status.get("metrics") or []
        validations = status.get("validationProblems") or []
        meta = job.get("metadata") or {}
        metrics = metrics if isinstance(metrics, list) else []
        validations = validations if isinstance(validations, list) else []
        if not (metrics or validations) or not meta.get("uid"):
            return False
        key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        uid = str(meta["uid"])
        async with self._locks.setdefault(key, asyncio.Lock()):
            # Twice at most: a write refused because the job's own ConfigMap changed since is retried
            # once on the object as read again.
            for _attempt in range(2):
                if key not in self._known and not await self._read(job, key, uid):
                    return False
                known, version = self._known[key]
                history = add_metrics(known.get(HISTORY_KEY, ""), metrics, total_steps=_total_steps(job))
                summaries = add_status(known.get(VALIDATION_KEY, ""), validations)
                updated = {k: v for k, v in ((HISTORY_KEY, history), (VALIDATION_KEY, summaries)) if v}
                if updated == known:
                    return False
                written = await self._write(key, uid, updated, version)
                if written is not None:
                    new_version = str((written.get("metadata") or {}).get("resourceVersion") or "") or None
                    self._known[key] = (updated, new_version)
                    return True
                # Changed since (maybe re-created by someone else): read it again; someone else's is
                # reported and left alone.
                self._known.pop(key, None)
            return False

    async def _write(
        self, key: tuple[str, str], uid: str, data: dict[str, str], version: str | None
    ) -> Mapping[str, Any] | None:
        """Write the history, proving at the write that the object is the one last seen as the job's:
        a create when there was none, else an apply with that ``resourceVersion``. None when the API
        server refused it as changed or taken (409), or the object is gone (the apply's precondition)."""
        body = self._config_map(key[0], key[1], uid, data)
        try:
            if version is None:
                return await self._kube.create(body)  # None: 409, the name was taken meanwhile
            # Forced: the precondition already proves the object is the one checked as the job's (its
            # first write was a POST, whose fields an apply would otherwise see as another manager's).
            body["metadata"]["resourceVersion"] = version
            return await self._kube.apply(body, force=True)
        except (ConflictError, RejectedError):
            return None
        except Exception:
            self._known.pop(key, None)
            raise

    async def _refuse(self, job: Mapping[str, Any], live: Mapping[str, Any]) -> None:
        """Leave a foreign ConfigMap under the history's name untouched, and say so on the job."""
        meta = job.get("metadata") or {}
        description = f"ConfigMap {meta.get('namespace')}/{history_name(str(meta.get('name')))}"
        why = (
            ownership_conflict(description, live, str(meta.get("uid"))) or f"{description} is not this job's"
        )
        logger.warning("Metrics history not written: %s", why)
        await self._kube.create_event(
            job, "Warning", Reason.CHILD_CONFLICT, f"{why}; the metrics history is not recorded"
        )

    @staticmethod
    def _config_map(namespace: str, job: str, uid: str, data: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": history_name(job),
                "namespace": namespace,
                "labels": {JOB_LABEL: job, "app.kubernetes.io/part-of": "flashrl"},
                "ownerReferences": [
                    {
                        "apiVersion": API_VERSION,
                        "kind": KIND,
                        "name": job,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "data": dict(data),
        }
