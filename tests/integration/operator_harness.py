"""Helpers to run the real operator (kopf, own thread and loop) against kmock's emulated API server.

There is no cluster and no KubeRay here: ``kuberay`` patches RayJob status the way KubeRay would
(``flashrl_operator.sim.KubeRayStandIn``). Every operator started by a test is stopped in
teardown, and every wait has a deadline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim import (
    JOBS_RESOURCE,
    ApiClient,
    EmulatedApiServer,
    KubeRayStandIn,
    eventually,
)

NAMESPACE = "team-a"
#: How long a test waits for the operator to get somewhere: a bound on waiting for a condition, never
#: a duration asserted. The operator runs in a thread of the test process; on a saturated machine one
#: reconcile can take seconds, and a request that timed out is only retried at the next resync (30 s).
WAIT_S = 120.0


@dataclasses.dataclass
class Cluster:
    """The emulated API server, a user's client to it, and a KubeRay stand-in."""

    server: EmulatedApiServer
    url: str
    api: ApiClient
    kuberay: KubeRayStandIn

    async def job(self, name: str) -> dict[str, Any]:
        obj = await self.api.get(JOBS_RESOURCE, NAMESPACE, name)
        assert obj is not None, f"FlashRLJob {name} is gone"
        return obj

    async def status(self, name: str) -> dict[str, Any]:
        return dict((await self.job(name)).get("status") or {})

    async def wait_phase(self, name: str, phase: str, deadline_s: float = WAIT_S) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            status = await self.status(name)
            return status if status.get("phase") == phase else None

        return await eventually(probe, f"FlashRLJob {name} to reach phase {phase}", deadline_s)

    async def wait_for(self, resource: str, name: str, deadline_s: float = WAIT_S) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            return await self.api.get(resource, NAMESPACE, name)

        return await eventually(probe, f"{resource} {NAMESPACE}/{name} to exist", deadline_s)

    async def events_for(self, name: str) -> list[dict[str, Any]]:
        events = await self.api.list("v1/events", NAMESPACE)
        return [
            e
            for e in events
            if e.get("involvedObject", {}).get("name") == name
            and e.get("source", {}).get("component") == "flashrl-operator"
        ]


#: Model and data as paths on the job's volumes: nothing to stage, so the RayJob comes at once. The
#: staging tests (test_operator_staging.py) use the Hugging Face defaults instead.
LOCAL_SOURCES: dict[str, Any] = {
    "model": {"source": "/models/Qwen3-8B-Base"},
    "data": {"train": "/data/dapo-math-17k.parquet", "validation": "/data/aime-2024.parquet"},
}


def job_manifest(
    name: str, spec: dict[str, Any] | None = None, *, hf_sources: bool = False, namespace: str = NAMESPACE
) -> dict[str, Any]:
    full = dict(spec or {})
    if not hf_sources:
        for key, value in LOCAL_SOURCES.items():
            full.setdefault(key, value)
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": full,
    }


StartOperator = Callable[..., Awaitable[OperatorThread]]
