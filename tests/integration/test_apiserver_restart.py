"""kube-apiserver restarts while the operator reconciles: every job converges, none is failed.

The operator runs as the chart runs it (a process, the chart's arguments, a token of the chart's
ServiceAccount), so the restarted server judges its requests under RBAC: for a moment after it
listens, before its authorizer has synced the RBAC objects, it can answer 403 to requests the chart
allows. The server is killed (a crash, not a graceful stop) and started again on the same etcd and
port while new jobs are being reconciled; then KubeRay moves every job on. Every job must then
reach Running with no ``ChildRejected``, and the operator's log must hold no traceback: each refused
connection, 5xx and warm-up 403 is a transient failure, retried with backoff.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from operator_harness import job_manifest

from envtest.chart import ready_for_jobs
from envtest.control_plane import ControlPlane
from envtest.operator import OperatorProcess
from flashrl_operator.sim import (
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    TRAINING,
    ApiClient,
    KubeRayStandIn,
    eventually,
)

NAMESPACE = "rl-restart"
WAIT_S = 150.0


@pytest.fixture(scope="module")
def chart(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The chart with its defaults, KubeRay 1.7.0's CRDs, and this module's namespace (deleted after)."""
    plane = ready_for_jobs(control_plane)
    plane.kubectl("create", "namespace", NAMESPACE, check=False)
    yield plane
    plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


@pytest.fixture
def operator(chart: ControlPlane) -> Iterator[OperatorProcess]:
    # No GPU node or claim here: the fit check (tests/integration/test_operator_fits.py) would fail the jobs.
    proc = OperatorProcess(chart, "operator-restart", extra=(f"--namespace={NAMESPACE}", "--no-fit-check"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
async def api(chart: ControlPlane) -> AsyncIterator[ApiClient]:
    client = ApiClient(
        chart.server, chart.admin_token, ssl_context=ssl.create_default_context(cafile=str(chart.ca))
    )
    yield client
    await client.close()


async def phase(api: ApiClient, name: str, wanted: str, proc: OperatorProcess) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        try:
            job = await api.get(JOBS_RESOURCE, NAMESPACE, name)
        except Exception:  # the server restarting: ask again
            return None
        status = dict((job or {}).get("status") or {})
        assert status.get("reason") != "ChildRejected", f"{name}: {status.get('message')}"
        return status if status.get("phase") == wanted else None

    try:
        return await eventually(probe, f"FlashRLJob {name} to reach {wanted}", WAIT_S, 0.3)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{proc.tail()}") from None


async def test_jobs_converge_across_api_server_restarts(
    chart: ControlPlane, operator: OperatorProcess, api: ApiClient
) -> None:
    kuberay = KubeRayStandIn(api)
    first = ["before"]
    during = [f"during-{i}" for i in range(3)]
    for name in first:
        await api.create(JOBS_RESOURCE, job_manifest(name, namespace=NAMESPACE))
    for name in first:
        await phase(api, name, "Pending", operator)

    # New jobs whose reconciles are under way when the server goes down, and comes back.
    for name in during:
        await api.create(JOBS_RESOURCE, job_manifest(name, namespace=NAMESPACE))
    await asyncio.to_thread(chart.restart_apiserver)
    for name in during:
        await phase(api, name, "Pending", operator)

    # KubeRay moves every job on; the operator follows on the restarted server.
    for name in (*first, *during):
        await kuberay.set_status(NAMESPACE, name, TRAINING)
    for name in (*first, *during):
        await phase(api, name, "Running", operator)
        ray_jobs = [r for r in await api.list(RAY_JOBS_RESOURCE, NAMESPACE) if r["metadata"]["name"] == name]
        assert len(ray_jobs) == 1

    log = operator.process.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-4000:]
    assert "ChildRejected" not in log
