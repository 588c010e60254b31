"""Two operator processes on one emulated API server: one reconciles, the other takes over when it dies."""

from __future__ import annotations

import re

import aiohttp
import pytest
from operator_harness import NAMESPACE, job_manifest

from flashrl_operator.sim import JOBS_RESOURCE, EmulatedCluster, eventually
from flashrl_operator.sim.harness import OperatorProcess

pytestmark = pytest.mark.kmock

LEASE = "coordination.k8s.io/v1/leases"
SYSTEM = "flashrl-system"
CHILDREN = ("serviceaccounts", "roles", "rolebindings", "configmaps", "rayjobs")


async def reconciles(op: OperatorProcess) -> float:
    """The operator's own count of reconciles, from its /metrics."""
    async with aiohttp.ClientSession() as session, session.get(op.metrics_url) as resp:
        text = await resp.text()
    found = re.search(r"^flashrl_operator_reconcile_duration_seconds_count (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def holder(emulated: EmulatedCluster) -> str | None:
    lease = await emulated.api.get(LEASE, SYSTEM, "flashrl-operator")
    return str((lease or {}).get("spec", {}).get("holderIdentity") or "") or None


async def pending(emulated: EmulatedCluster, name: str) -> bool:
    job = await emulated.api.get(JOBS_RESOURCE, NAMESPACE, name)
    return ((job or {}).get("status") or {}).get("phase") == "Pending"


async def test_one_replica_reconciles_and_the_other_takes_over_when_it_is_killed(
    emulated: EmulatedCluster,
) -> None:
    flags = ("--leader-election", "--lease-duration", "3")
    replicas = {
        name: await emulated.start_operator_process(*flags, env={"POD_NAME": name, "POD_NAMESPACE": SYSTEM})
        for name in ("replica-a", "replica-b")
    }
    leader_name = await eventually(lambda: holder(emulated), "a replica to hold the Lease", 30.0)
    leader = replicas[leader_name]
    (follower_name,) = set(replicas) - {leader_name}
    follower = replicas[follower_name]

    names = [f"job-{i}" for i in range(3)]
    for name in names:
        await emulated.api.create(JOBS_RESOURCE, job_manifest(name))
    for name in names:
        await eventually(lambda n=name: pending(emulated, n), f"{name} to be Pending", 30.0)
    # Each job was reconciled by the leader only: the follower watched but did nothing.
    assert await reconciles(leader) >= len(names)
    assert await reconciles(follower) == 0
    for name in names:
        for plural in CHILDREN:
            child = name if plural == "rayjobs" else None
            made = [k for k in emulated.server.creations if k[0] == plural and k[2].startswith(child or name)]
            assert made and all(emulated.server.creations[k] == 1 for k in made), (plural, name)

    leader.kill()  # no shutdown, no Lease release: the follower must wait for it to expire
    await emulated.api.create(JOBS_RESOURCE, job_manifest("after-failover"))
    await eventually(lambda: pending(emulated, "after-failover"), "the follower to take over", 45.0)
    assert await holder(emulated) == follower_name
    assert await reconciles(follower) >= 1
    assert emulated.server.creations[("rayjobs", NAMESPACE, "after-failover")] == 1
    assert follower.stop() == 0, follower.output()[-3000:]
