"""The operator's memory of its own status keys (pure data, no I/O).

A FlashRLJob's status is writable by more than the operator: the launcher's ServiceAccount may patch
it (its progress and metrics), and anyone with the built-in ``edit`` role can mint that
ServiceAccount's token (``serviceaccounts/token``). So the status as read cannot be the operator's
memory of what it decided: a forged ``phase: Succeeded`` would end a running job, a forged
``attempts`` ledger would change its goodput, a forged phase would free an experiment's parallelism
slot. The keys marked ``OPERATOR`` (:data:`~flashrl_operator.job.status.mapping.OWNED_KEYS`) are
kept here, as the operator last wrote them (or found them already written), by job UID; a reconcile
decides from these and writes its status over whatever someone else put in those keys.

The memory lives in the operator's process: after a restart (or a change of leader) the first
reconcile of each job reads its status as written and checks what it can against what it observes
(:func:`~flashrl_operator.job.step.distrusted`), then remembers what it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flashrl_api import FlashRLJobStatus
from flashrl_operator.job.status.mapping import OWNED_KEYS, operator_keys


class StatusMemory:
    """The operator-owned keys of each job's status as the operator last wrote them, by job UID.

    Kept as compact JSON (a few KB per job: the attempts ledger, the conditions, the goodput).
    """

    def __init__(self) -> None:
        self._kept: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def remember(self, uid: str, status: FlashRLJobStatus | Mapping[str, Any]) -> None:
        """What the status holds in the operator's keys now that the operator wrote it."""
        mine = {k: v for k, v in operator_keys(status).items() if v is not None}
        self._kept[uid] = json.dumps(mine, separators=(",", ":"))

    def recall(self, uid: str) -> dict[str, Any] | None:
        """The operator's keys as it last wrote them (``None``: nothing written since it started)."""
        kept = self._kept.get(uid)
        return None if kept is None else dict(json.loads(kept))

    def forget(self, uid: str) -> None:
        """The job is gone."""
        self._kept.pop(uid, None)

    def as_written(self, uid: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """``status`` with the operator's keys as the operator wrote them: the launcher's keys as read,
        anything else in the operator's keys dropped. Unchanged when nothing is remembered."""
        mine = self.recall(uid)
        if mine is None:
            return dict(status)
        return {**{k: v for k, v in status.items() if k not in OWNED_KEYS}, **mine}
