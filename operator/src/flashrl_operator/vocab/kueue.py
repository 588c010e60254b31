"""Kueue's names the operator reads (``kueue.x-k8s.io/v1beta2``), in one place, and a view of a
Workload that says why a queued job waits (pure).

Kueue makes one Workload per queued RayJob (labelled with the RayJob's UID) and writes there why it
has not admitted it: its ``QuotaReserved`` condition (False, reason ``Pending`` or ``Inadmissible``,
with a message such as "couldn't assign flavors to pod set workers: insufficient unused quota for
nvidia.com/gpu in flavor nvidia-h20, 8 more needed").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from flashrl_operator.vocab.resource import Resource

API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
WORKLOAD: Final = Resource(API_VERSION, "Workload", "workloads")
#: The label Kueue puts on a Workload: the UID of the job (the RayJob) it queues.
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
#: The Workload's conditions (Kueue's ``workload_types.go``).
QUOTA_RESERVED: Final = "QuotaReserved"
ADMITTED: Final = "Admitted"
EVICTED: Final = "Evicted"
#: Why a queued job waits when the API server does not serve Workloads at all.
NOT_SERVED: Final = f"the API server does not serve Kueue's Workloads ({API_VERSION}): is Kueue installed?"


def workload_selector(ray_job_uid: str) -> str:
    """The label selector of the Workload that queues the RayJob with this UID."""
    return f"{JOB_UID_LABEL}={ray_job_uid}"


@dataclass(frozen=True)
class WorkloadView:
    """What the operator reads of a Workload: its name, queue, and why it is not admitted."""

    name: str
    queue: str = ""
    admitted: bool = False
    waiting: str = ""
    """The message of the condition that keeps it waiting (QuotaReserved False, or Evicted)."""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> WorkloadView:
        """The view of one Workload object."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        conditions = {
            str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type")
        }
        admitted = (conditions.get(ADMITTED) or {}).get("status") == "True"
        waiting = ""
        for kind in (QUOTA_RESERVED, EVICTED):
            found = conditions.get(kind) or {}
            wanted = "False" if kind == QUOTA_RESERVED else "True"
            if found.get("status") == wanted and found.get("message"):
                waiting = str(found["message"])
                break
        return cls(str(meta.get("name") or ""), str(spec.get("queueName") or ""), admitted, waiting)

    def describe(self) -> str:
        """``Kueue workload NAME (LocalQueue Q): why it waits``."""
        where = f" (LocalQueue {self.queue})" if self.queue else ""
        why = self.waiting or "not admitted yet"
        return f"Kueue workload {self.name}{where}: {why}" if self.name else f"Kueue: {why}"
