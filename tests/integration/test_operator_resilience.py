"""Deleted or edited children, operator restarts, API errors and slow answers: the operator converges.

On the real API server, except the injected faults (5xx answers, a hang, a child refused as Invalid, a
403 right after a 5xx as a restarting server answers), which only kmock's emulator can produce on demand."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import kmock
import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_operator.sim import JOBS_RESOURCE, RAY_JOBS_RESOURCE, TRAINING, eventually, free_port


async def test_deleted_and_edited_children_are_restored(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator(resync_interval=0.3)
    await cluster.submit("heal")
    config_map = await cluster.wait_for("v1/configmaps", "heal-spec")

    # A deleted RayJob is seen through the RayJob watch and recreated.
    await cluster.api.delete(RAY_JOBS_RESOURCE, NAMESPACE, "heal")
    await cluster.wait_for(RAY_JOBS_RESOURCE, "heal")
    assert cluster.creations()[("rayjobs", NAMESPACE, "heal")] == 2

    # ConfigMaps are not watched: the periodic resync restores deletions and edits.
    await cluster.api.delete("v1/configmaps", NAMESPACE, "heal-spec")
    await cluster.wait_for("v1/configmaps", "heal-spec")
    key = next(iter(config_map["data"]))
    await cluster.api.patch("v1/configmaps", NAMESPACE, "heal-spec", {"data": {key: "tampered"}})

    async def restored() -> bool:
        current = await cluster.api.get("v1/configmaps", NAMESPACE, "heal-spec")
        return current is not None and current["data"] == config_map["data"]

    await eventually(restored, "the ConfigMap's data to be restored")


async def test_restart_mid_way_creates_no_duplicates(cluster: Cluster, start_operator: StartOperator) -> None:
    first = await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("phoenix"))
    await cluster.wait_phase("phoenix", "Pending")
    await asyncio.to_thread(first.stop)

    # KubeRay moves on while the operator is down.
    await cluster.kuberay.set_status(NAMESPACE, "phoenix", TRAINING)
    await start_operator()
    status = await cluster.wait_phase("phoenix", "Running")
    assert status["rayJobName"] == "phoenix"
    # The RayCluster is KubeRay's (the stand-in's), not the operator's.
    children = {
        k: v
        for k, v in cluster.creations().items()
        if k[0] not in ("events", "flashrljobs", "rayclusters") and k[2].startswith("phoenix")
    }
    assert len(children) == 6  # with the NetworkPolicy
    assert set(children.values()) == {1}


@pytest.mark.kmock(reason="500 and 503 answers and a request that hangs past the client's timeout")
async def test_api_errors_and_slow_answers_converge(cluster: Cluster, start_operator: StartOperator) -> None:
    server = cluster.emulator
    # (An object already under a child's name is never converged: test_operator_ownership.py.)
    # The first two RayJob creations fail with 500 after the object was stored (a lost answer).
    server[kmock.action.CREATE][kmock.resource(RAY_JOBS_RESOURCE)][:2] << 500
    # The first status write is refused with 503; the first Role read hangs past the client timeout.
    server[kmock.action.UPDATE][kmock.resource(JOBS_RESOURCE)][kmock.subresource("status")][:1] << 503
    server[kmock.action.FETCH][kmock.resource("rbac.authorization.k8s.io/v1/roles")][:1] << (
        lambda: asyncio.sleep(3)
    )
    op = await start_operator(request_timeout=1.0)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("flaky"))

    status = await cluster.wait_ray_job_named("flaky", "Pending", deadline_s=20)
    assert status["rayJobName"] == "flaky"
    config_map = await cluster.api.get("v1/configmaps", NAMESPACE, "flaky-spec")
    assert config_map is not None and config_map.get("data")
    assert config_map["metadata"]["labels"]["flashrl.dev/job"] == "flaky"
    ray_jobs = [
        o for o in await cluster.api.list(RAY_JOBS_RESOURCE, NAMESPACE) if o["metadata"]["name"] == "flaky"
    ]
    assert len(ray_jobs) == 1
    assert server.creations[("rayjobs", NAMESPACE, "flaky")] == 1
    errors = op.context.metrics.registry.get_sample_value(
        "flashrl_operator_reconcile_errors_total", {"reason": "Temporary"}
    )
    # Every child is read before it is written (ownership), so the hanging Role read, the lost RayJob
    # answers and the refused status write are all transient failures, retried until they converge.
    assert errors is not None and errors >= 2


@pytest.mark.kmock(
    reason="a child the server refuses as Invalid: the operator renders only valid children, so the "
    "refusal is injected"
)
async def test_invalid_child_is_reported_without_retrying(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    (
        cluster.emulator[kmock.action.CREATE][kmock.resource("rbac.authorization.k8s.io/v1/rolebindings")]
        << 422
        << {
            "kind": "Status",
            "reason": "Invalid",
            "message": "RoleBinding.rbac.authorization.k8s.io is invalid: roleRef: Invalid value",
        }
    )
    await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("bad-child"))
    status = await cluster.wait_phase("bad-child", "Failed")
    assert status["reason"] == "ChildRejected"
    assert f"RoleBinding {NAMESPACE}/bad-child-launcher" in status["message"]
    assert "roleRef" in status["message"]
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "ChildRejected")
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "bad-child") is None


async def test_metrics_and_health_endpoints(cluster: Cluster, start_operator: StartOperator) -> None:
    health_port = free_port()
    op = await start_operator(health_port=health_port)
    await cluster.submit("metered")
    await cluster.kuberay_says("metered", TRAINING, "Running")
    assert op.metrics_url is not None

    async with aiohttp.ClientSession() as session:

        async def scrape() -> str | None:
            async with session.get(op.metrics_url or "") as resp:
                text = await resp.text()
            return text if 'flashrl_operator_jobs{phase="Running"} 1.0' in text else None

        text = await eventually(scrape, "the Running job in /metrics")
        for family in (
            "flashrl_operator_reconcile_duration_seconds_bucket",
            "flashrl_operator_reconcile_errors_total",
            'flashrl_operator_jobs{phase="Pending"} 0.0',
            "flashrl_operator_job_startup_seconds_count 1.0",
        ):
            assert family in text, family
        assert "process_resident_memory_bytes" in text and "python_info" in text
        # A scraper asking for OpenMetrics gets it (prometheus-client negotiates the format).
        headers = {"Accept": "application/openmetrics-text; version=1.0.0,text/plain;q=0.5"}
        async with session.get(op.metrics_url or "", headers=headers) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            open_metrics = await resp.text()
        assert open_metrics.rstrip().endswith("# EOF")
        assert 'flashrl_operator_jobs{phase="Running"} 1.0' in open_metrics

        async def healthy() -> dict[str, Any] | None:
            try:
                async with session.get(f"http://127.0.0.1:{health_port}/healthz") as resp:
                    return {"status": resp.status} if resp.status == 200 else None
            except aiohttp.ClientError:
                return None

        await eventually(healthy, "GET /healthz to answer 200")


@pytest.mark.kmock(
    reason="a restarting API server's answers in order: a 503, then 403 while its authorizer warms up"
)
async def test_a_403_right_after_the_server_failed_is_retried_not_a_rejection(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    server = cluster.emulator
    server[kmock.action.CREATE][kmock.resource("v1/configmaps")][:1] << 503
    forbidden = {"kind": "Status", "reason": "Forbidden", "message": 'rayjobs.ray.io is forbidden: "create"'}
    server[kmock.action.CREATE][kmock.resource(RAY_JOBS_RESOURCE)][:2] << 403 << forbidden
    await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("warmup"))

    status = await cluster.wait_ray_job_named("warmup", "Pending", deadline_s=60)
    assert status["rayJobName"] == "warmup"
    assert "ChildRejected" not in str(status)
    assert server.creations[("rayjobs", NAMESPACE, "warmup")] == 1
