"""One tenant's hostile status does not slow the operator for anyone else, on the real control plane.

The operator runs as the chart runs it (a process, the chart's arguments and token). One job's
"launcher" (a token of the job's own ServiceAccount, which any user with the built-in ``edit`` role can
mint) patches ``status.metrics`` every 0.2 s with 64 validation scores, long names, each at its own
step near the largest step the CRD allows (the job asks for that many steps, so none is dropped as
beyond its total): every patch reports 64 new lines for the job's history, which the operator folds
at its own pace (at most once per job per interval, in a worker thread), not once per patch. A step
near 2**62 is refused by the API server itself. Beside it, in another
namespace, plain jobs are created: the time from the create to their RayJob, and the operator's
``/healthz`` latency, are measured without the attack and under it, side by side in this run, and
asserted as ratios with generous room for noise (docs/benchmarks.md has the figures).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from operator_harness import job_manifest

from envtest.chart import ready_for_jobs, room_for_jobs
from envtest.control_plane import ControlPlane
from envtest.operator import OperatorProcess
from flashrl_api.history import HISTORY_KEY, MAX_HISTORY_BYTES, MAX_STEP, parse_history
from flashrl_operator.sim import (
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    TRAINING,
    ApiClient,
    KubeRayStandIn,
    eventually,
)

ATTACKER_NS = "rl-hostile"
CALM_NS = "rl-calm"
WAIT_S = 150.0
#: The attack: one patch every PERIOD_S until the measurements under it are done, at most PATCHES; the
#: measurements start after WARM_UP patches (the operator folds the newest at most once per interval).
PATCHES = 600
PERIOD_S = 0.2
WARM_UP = 55
NAMES = [f"val-core/{'s' * 200}-{i:02d}/acc/mean@1" for i in range(64)]
#: Plain jobs timed per phase, and /healthz samples per phase.
PLAIN_JOBS = 3
HEALTH_SAMPLES = 25


@pytest.fixture(scope="module")
def chart(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    plane = ready_for_jobs(control_plane)
    nodes = set()
    for namespace in (ATTACKER_NS, CALM_NS):
        plane.kubectl("create", "namespace", namespace, check=False)
        nodes.add(room_for_jobs(plane, namespace))  # the claims and a GPU node the fit check asks for
    try:
        yield plane
    finally:  # the run's control plane is shared: later modules count the GPU nodes they make
        plane.kubectl("delete", "node", *sorted(nodes), "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(chart: ControlPlane) -> Iterator[OperatorProcess]:
    # Another checkout's operator (its operator/src and jobs/src) instead of this one: the "before" of
    # docs/benchmarks.md. The test then fails, as that operator is slowed by the attack.
    source = os.environ.get("HOSTILE_OPERATOR_SOURCE")
    proc = OperatorProcess(chart, "operator-hostile", source=Path(source) if source else None)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
async def admin(chart: ControlPlane) -> AsyncIterator[ApiClient]:
    api = ApiClient(
        chart.server, chart.admin_token, ssl_context=ssl.create_default_context(cafile=str(chart.ca))
    )
    yield api
    await api.close()


def _hostile_status(round_: int) -> dict[str, Any]:
    """64 kept validation scores, each at a step of its own, all new in each round."""
    metrics = [
        {"name": name, "value": 0.5, "step": MAX_STEP - 3 * (round_ * len(NAMES) + i)}
        for i, name in enumerate(NAMES)
    ]
    return {"status": {"metrics": metrics}}


async def _healthz(session: aiohttp.ClientSession, port: int) -> list[float]:
    """HEALTH_SAMPLES sequential ``/healthz`` round trips (seconds), 0.1 s apart."""
    out = []
    for _ in range(HEALTH_SAMPLES):
        start = time.monotonic()
        async with session.get(
            f"http://127.0.0.1:{port}/healthz", timeout=aiohttp.ClientTimeout(total=30)
        ) as r:
            assert r.status == 200
        out.append(time.monotonic() - start)
        await asyncio.sleep(0.1)
    return out


async def _to_ray_job(api: ApiClient, name: str, proc: OperatorProcess) -> float:
    """Seconds from a plain job's create to its RayJob, in the calm namespace."""
    start = time.monotonic()
    await api.create(JOBS_RESOURCE, job_manifest(name, namespace=CALM_NS))

    async def probe() -> dict[str, Any] | None:
        return await api.get(RAY_JOBS_RESOURCE, CALM_NS, name)

    try:
        await eventually(probe, f"RayJob {CALM_NS}/{name}", WAIT_S, 0.02)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{proc.tail()}") from None
    return time.monotonic() - start


async def _plain_jobs(api: ApiClient, prefix: str, proc: OperatorProcess) -> list[float]:
    return [await _to_ray_job(api, f"{prefix}-{k}", proc) for k in range(PLAIN_JOBS)]


async def test_a_hostile_status_leaves_healthz_and_another_namespaces_job_alone(
    chart: ControlPlane, operator: OperatorProcess, admin: ApiClient
) -> None:
    kuberay = KubeRayStandIn(admin)
    # The attacker's job asks for the most steps there are, so its steps pass the operator's check.
    await admin.create(
        JOBS_RESOURCE, job_manifest("attacker", {"training": {"totalSteps": MAX_STEP}}, namespace=ATTACKER_NS)
    )

    async def ray_job() -> dict[str, Any] | None:
        return await admin.get(RAY_JOBS_RESOURCE, ATTACKER_NS, "attacker")

    try:
        await eventually(ray_job, "the attacker's RayJob", WAIT_S, 0.2)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{operator.tail()}") from None
    await kuberay.set_status(ATTACKER_NS, "attacker", TRAINING)
    token = (
        await asyncio.to_thread(chart.kubectl, "create", "token", "attacker-launcher", "-n", ATTACKER_NS)
    ).stdout.strip()
    launcher = ApiClient(chart.server, token, ssl_context=ssl.create_default_context(cafile=str(chart.ca)))
    # A first plain job pays the verl check of the plain spec; the timed ones are alike.
    await _to_ray_job(admin, "warm-up", operator)

    async with aiohttp.ClientSession() as session:
        calm_health = await _healthz(session, operator.health_port)
        calm_jobs = await _plain_jobs(admin, "calm", operator)

        # The CRD refuses a step beyond any job's total.
        far = {"status": {"metrics": [{"name": NAMES[0], "value": 0.5, "step": 2**62}]}}
        with pytest.raises(RuntimeError, match="HTTP 422"):
            await launcher.patch(JOBS_RESOURCE, ATTACKER_NS, "attacker", far, "status")

        sent = 0
        warmed = asyncio.Event()

        async def attack() -> None:
            nonlocal sent
            for round_ in range(PATCHES):
                await launcher.patch(
                    JOBS_RESOURCE, ATTACKER_NS, "attacker", _hostile_status(round_), "status"
                )
                sent += 1
                if sent == WARM_UP:
                    warmed.set()
                await asyncio.sleep(PERIOD_S)

        attacking = asyncio.create_task(attack())
        try:
            await asyncio.wait_for(warmed.wait(), WAIT_S)
            attacked_health = await _healthz(session, operator.health_port)
            attacked_jobs = await _plain_jobs(admin, "attacked", operator)
            still_attacking = not attacking.done()
        finally:
            attacking.cancel()
            await asyncio.gather(attacking, return_exceptions=True)
            await launcher.close()

    # The operator did fold the attack into the history, at its own pace (one fold per job per interval,
    # not one per patch: far fewer lines than were sent), within its bound.
    async def folded() -> dict[str, Any] | None:
        found = await admin.get("v1/configmaps", ATTACKER_NS, "attacker-metrics")
        text = ((found or {}).get("data") or {}).get(HISTORY_KEY, "")
        return found if len(parse_history(text)) >= len(NAMES) else None

    history = await eventually(folded, "the attacker's history folded", WAIT_S, 0.5)
    text = history["data"][HISTORY_KEY]
    assert len(text.encode()) <= MAX_HISTORY_BYTES
    assert len(parse_history(text)) < sent * len(NAMES)  # not a fold per patch

    figures = {
        "healthz median calm": statistics.median(calm_health),
        "healthz median attacked": statistics.median(attacked_health),
        "healthz max calm": max(calm_health),
        "healthz max attacked": max(attacked_health),
        "to RayJob median calm": statistics.median(calm_jobs),
        "to RayJob median attacked": statistics.median(attacked_jobs),
        "patches sent": float(sent),
    }
    print("hostile status figures (s):", {k: round(v, 4) for k, v in figures.items()})
    assert still_attacking, "the attack ended before the measurements under it did"
    # Ratios with generous room for a shared 2-core machine, and floors for figures too small to divide.
    assert figures["healthz median attacked"] <= max(3 * figures["healthz median calm"], 0.05), figures
    assert figures["healthz max attacked"] <= max(3 * figures["healthz max calm"], 1.0), figures
    assert figures["to RayJob median attacked"] <= max(3 * figures["to RayJob median calm"], 3.0), figures
