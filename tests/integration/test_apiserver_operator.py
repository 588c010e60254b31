"""The operator as the chart runs it, on the real control plane.

The chart is installed with ``helm`` (its defaults), and ``flashrl operator`` runs as a process with the
chart's own arguments and a token of the chart's ServiceAccount: every request it makes is judged by the
real API server, under the chart's RBAC. KubeRay and the launcher are played by status patches (the
stand-ins of ``flashrl_operator.sim``, pointed at kube-apiserver), as envtest tests do; the launcher
patches with a token of the job's own ServiceAccount, so the Role the operator made for it is what
allows it. The controller-manager's garbage collector and Job controller are real.
"""

from __future__ import annotations

import asyncio
import re
import signal
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_harness import RealStaging, job_manifest

from envtest.chart import NAMESPACE as CHART_NAMESPACE
from envtest.chart import install, ready_for_jobs
from envtest.control_plane import ControlPlane
from envtest.operator import OperatorProcess
from flashrl_operator.sim import (
    CLUSTER_STARTING,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUCCEEDED,
    TRAINING,
    ApiClient,
    KubeRayStandIn,
    eventually,
    failed,
)
from flashrl_operator.vocab.kuberay import entrypoint_failed_message

NAMESPACE = "rl-real"
EXPERIMENT_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flashrlexperiment.yaml"
WAIT_S = 150.0
#: This cluster has no GPU node and no claim: the chart's fit check (tests/integration/test_operator_fits.py)
#: would fail every job at once, so these operators run without it.
NO_FIT_CHECK = ("--no-fit-check",)
BATCH_JOBS = "batch/v1/jobs"
CHILD_KINDS = ("serviceaccount", "role", "rolebinding", "configmap", "networkpolicy")


def manifest(name: str, spec: dict[str, Any] | None = None, *, hf: bool = False) -> dict[str, Any]:
    return job_manifest(name, spec, hf_sources=hf, namespace=NAMESPACE)


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions", [])}


@pytest.fixture(scope="module")
def chart(control_plane: ControlPlane) -> ControlPlane:
    """The chart with its defaults, KubeRay 1.7.0's CRDs, and the jobs' namespace."""
    plane = ready_for_jobs(control_plane)
    plane.kubectl("create", "namespace", NAMESPACE, check=False)
    return plane


@pytest.fixture(scope="module")
def operator(chart: ControlPlane) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(chart, "operator-a", extra=NO_FIT_CHECK)
    try:
        yield proc
    finally:
        proc.stop()


async def reconciles(proc: OperatorProcess) -> float:
    """The operator's own count of reconciles, from its /metrics."""
    url = f"http://127.0.0.1:{proc.metrics_port}/metrics"

    def scrape() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return str(resp.read().decode())
        except OSError:
            return None

    text = await eventually(lambda: asyncio.to_thread(scrape), f"{url} to answer", WAIT_S, 0.5)
    found = re.search(r"^flashrl_operator_reconcile_duration_seconds_count (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


class Real:
    """A user's and the stand-ins' view of the real cluster, in the test's event loop."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.ssl = ssl.create_default_context(cafile=str(plane.ca))
        self.api = ApiClient(plane.server, plane.admin_token, ssl_context=self.ssl)
        self.kuberay = KubeRayStandIn(self.api)

    async def close(self) -> None:
        await self.api.close()

    async def status(self, name: str) -> dict[str, Any]:
        obj = await self.api.get(JOBS_RESOURCE, NAMESPACE, name)
        assert obj is not None, f"FlashRLJob {name} is gone"
        return dict(obj.get("status") or {})

    async def wait_phase(self, name: str, phase: str, proc: OperatorProcess) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            status = await self.status(name)
            return status if status.get("phase") == phase else None

        try:
            return await eventually(probe, f"FlashRLJob {name} to reach {phase}", WAIT_S, 0.2)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\noperator log:\n{proc.tail()}") from None

    async def wait_for(self, resource: str, name: str) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            return await self.api.get(resource, NAMESPACE, name)

        return await eventually(probe, f"{resource} {name}", WAIT_S, 0.2)

    async def gone(self, resource: str, name: str) -> None:
        async def probe() -> bool:
            return await self.api.get(resource, NAMESPACE, name) is None

        await eventually(probe, f"{resource} {name} to be deleted", WAIT_S, 0.5)

    def launcher(self, job: str) -> ApiClient:
        """The launcher's client: a token of the job's own ServiceAccount (made by the operator)."""
        token = self.plane.kubectl("create", "token", f"{job}-launcher", "-n", NAMESPACE).stdout.strip()
        return ApiClient(self.plane.server, token, ssl_context=self.ssl)

    async def events(self, name: str) -> list[dict[str, Any]]:
        events = await self.api.list("v1/events", NAMESPACE)
        return [e for e in events if e.get("involvedObject", {}).get("name") == name]


@pytest.fixture
async def real(chart: ControlPlane) -> AsyncIterator[Real]:
    r = Real(chart)
    yield r
    await r.close()


async def test_a_job_runs_to_success_under_the_charts_rbac(real: Real, operator: OperatorProcess) -> None:
    plane = real.plane
    created = await real.api.create(JOBS_RESOURCE, manifest("alpha"))
    ray_job = await real.wait_for(RAY_JOBS_RESOURCE, "alpha")
    for kind in CHILD_KINDS:
        items = plane.get_json(kind, "-n", NAMESPACE)["items"]
        owned = [
            i
            for i in items
            if any(
                r.get("uid") == created["metadata"]["uid"] for r in i["metadata"].get("ownerReferences", [])
            )
        ]
        assert owned, f"no {kind} owned by the job"
    assert ray_job["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]

    await real.kuberay.set_status(NAMESPACE, "alpha", CLUSTER_STARTING)
    await real.wait_phase("alpha", "Starting", operator)
    await real.kuberay.set_status(NAMESPACE, "alpha", TRAINING)
    await real.wait_phase("alpha", "Running", operator)

    launcher = real.launcher("alpha")
    try:
        progress = {"step": 150, "totalSteps": 150, "updateTime": "2026-12-03T00:00:00Z"}
        await launcher.patch(JOBS_RESOURCE, NAMESPACE, "alpha", {"status": {"progress": progress}}, "status")
        await real.api.create(JOBS_RESOURCE, manifest("alpha-neighbour"))
        with pytest.raises(RuntimeError, match="HTTP 403"):
            await launcher.patch(
                JOBS_RESOURCE, NAMESPACE, "alpha-neighbour", {"status": {"progress": progress}}, "status"
            )
    finally:
        await launcher.close()
    await real.kuberay.set_status(NAMESPACE, "alpha", SUCCEEDED)
    status = await real.wait_phase("alpha", "Succeeded", operator)
    assert conditions(status)["Succeeded"] == ("True", "JobSucceeded")
    reasons = {e["reason"] for e in await real.events("alpha")}
    assert {"Starting", "Running", "Succeeded"} <= reasons


async def test_a_failed_attempt_is_retried_on_a_new_rayjob(real: Real, operator: OperatorProcess) -> None:
    await real.api.create(JOBS_RESOURCE, manifest("retry", {"lifecycle": {"maxRestarts": 1}}))
    await real.wait_for(RAY_JOBS_RESOURCE, "retry")
    await real.kuberay.set_status(NAMESPACE, "retry", TRAINING)
    await real.wait_phase("retry", "Running", operator)
    await real.kuberay.report_checkpoint(NAMESPACE, "retry", 5, "/checkpoints/DAPO-1/retry/global_step_5", 1)
    await real.kuberay.report_progress(NAMESPACE, "retry", 7, 20, 1)
    message = entrypoint_failed_message(
        1,
        "RuntimeError: NCCL watchdog timeout",
        "flashrl-launch: verl exited with code 1 on its own at step 7",
    )
    await real.kuberay.set_status(NAMESPACE, "retry", failed("AppFailed", message))
    second = await real.wait_for(RAY_JOBS_RESOURCE, "retry-2")
    assert second["metadata"]["labels"]["flashrl.dev/attempt"] == "2"
    status = await real.status("retry")
    assert status.get("attempt") == 2


async def test_suspend_and_resume_reach_the_rayjob(real: Real, operator: OperatorProcess) -> None:
    await real.api.create(JOBS_RESOURCE, manifest("pause"))
    await real.wait_for(RAY_JOBS_RESOURCE, "pause")
    await real.api.patch(JOBS_RESOURCE, NAMESPACE, "pause", {"spec": {"lifecycle": {"suspend": True}}})

    async def suspended(flag: bool) -> bool:
        obj = await real.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "pause")
        return obj is not None and bool(obj["spec"].get("suspend")) is flag

    await eventually(lambda: suspended(True), "the RayJob suspended", WAIT_S)
    await real.api.patch(JOBS_RESOURCE, NAMESPACE, "pause", {"spec": {"lifecycle": {"suspend": False}}})
    await eventually(lambda: suspended(False), "the RayJob resumed", WAIT_S)


async def test_staging_waits_for_the_real_job_controller(real: Real, operator: OperatorProcess) -> None:
    plane = real.plane
    for claim in ("hf-cache", "rl-data", "rl-checkpoints"):
        plane.apply_json(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": NAMESPACE},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
            }
        )
    await real.api.create(JOBS_RESOURCE, manifest("stage", hf=True))
    await real.wait_for(BATCH_JOBS, "stage-stage")
    await real.wait_phase("stage", "Staging", operator)
    assert await real.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "stage") is None

    # The stage command exits 0: its pod's end, as the kubelet reports it; the Job controller does the rest.
    await RealStaging(real.api).succeed(NAMESPACE, "stage-stage")
    await real.wait_for(RAY_JOBS_RESOURCE, "stage")

    async def staged() -> bool:  # the status is written after the RayJob is created
        return conditions(await real.status("stage"))["Staged"][0] == "True"

    await eventually(staged, "Staged=True", WAIT_S, 0.2)


async def test_a_foreign_object_under_a_childs_name_is_left_alone(
    real: Real, operator: OperatorProcess
) -> None:
    plane = real.plane
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "squat-spec", "namespace": NAMESPACE},
        "data": {"mine": "yes"},
    }
    plane.apply_json(foreign)
    before = plane.get_json("configmap", "squat-spec", "-n", NAMESPACE)
    await real.api.create(JOBS_RESOURCE, manifest("squat"))

    async def conflict() -> dict[str, Any] | None:
        status = await real.status("squat")
        return status if conditions(status).get("Accepted", ("", ""))[1] == "ChildConflict" else None

    await eventually(conflict, "ChildConflict", WAIT_S)
    after = plane.get_json("configmap", "squat-spec", "-n", NAMESPACE)
    assert (
        after["data"] == before["data"]
        and after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    )
    assert await real.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "squat") is None


async def test_deleting_a_job_lets_the_garbage_collector_remove_every_child(
    real: Real, operator: OperatorProcess
) -> None:
    await real.api.create(JOBS_RESOURCE, manifest("doomed"))
    await real.wait_for(RAY_JOBS_RESOURCE, "doomed")
    await real.wait_for("v1/configmaps", "doomed-spec")
    await real.api.delete(JOBS_RESOURCE, NAMESPACE, "doomed")
    await real.gone(RAY_JOBS_RESOURCE, "doomed")
    await real.gone("v1/configmaps", "doomed-spec")
    await real.gone("v1/serviceaccounts", "doomed-launcher")


async def test_the_experiment_makes_its_three_jobs(real: Real, operator: OperatorProcess) -> None:
    plane = real.plane
    # The example runs its variants one after another; without parallelism all three start at once.
    text = EXPERIMENT_EXAMPLE.read_text().replace("namespace: rl\n", f"namespace: {NAMESPACE}\n")
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("parallelism:"))
    plane.kubectl("apply", "-f", "-", stdin=text)
    experiment = plane.get_json("flashrlexperiment", "-n", NAMESPACE)["items"][0]
    name, uid = experiment["metadata"]["name"], experiment["metadata"]["uid"]

    async def three() -> list[dict[str, Any]] | None:
        jobs = plane.get_json("flashrljob", "-n", NAMESPACE, "-l", f"flashrl.dev/experiment={name}")["items"]
        return list(jobs) if len(jobs) == 3 else None

    jobs = await eventually(three, "the experiment's three FlashRLJobs", WAIT_S)
    for job in jobs:
        (owner,) = [r for r in job["metadata"]["ownerReferences"] if r.get("controller")]
        assert owner["uid"] == uid
    assert {j["spec"]["rollout"]["quantization"] for j in jobs} == {"blockwise-fp8", "channel-fp8", "bf16"}


async def test_two_replicas_share_the_work_through_a_real_lease(
    real: Real, chart: ControlPlane, operator: OperatorProcess
) -> None:
    operator.stop()  # the single replica of the tests above: only the two replicas run from here
    install(chart, "--set", "replicas=2", "--set", "leaderElection.enabled=true")
    try:
        first = OperatorProcess(chart, "replica-1", extra=NO_FIT_CHECK)
        second = OperatorProcess(chart, "replica-2", extra=NO_FIT_CHECK)
        try:
            names = [f"leased-{i}" for i in range(3)]
            for name in names:
                await real.api.create(JOBS_RESOURCE, manifest(name))
            for name in names:
                await real.wait_for(RAY_JOBS_RESOURCE, name)
            leases = chart.get_json("lease", "-n", CHART_NAMESPACE)["items"]
            (lease,) = [item for item in leases if item["metadata"]["name"] == "flashrl-operator"]
            holder = lease["spec"]["holderIdentity"]
            leader, follower = (first, second) if "replica-1" in holder else (second, first)
            # Each job was reconciled by the leader only: the follower watched but did nothing.
            assert await reconciles(leader) >= len(names)
            assert await reconciles(follower) == 0
            leader.stop(signal.SIGKILL)  # no shutdown, no Lease release: the follower waits for expiry

            gone = "replica-1" if leader is first else "replica-2"

            async def taken_over() -> bool:
                lease = chart.get_json("lease", "flashrl-operator", "-n", CHART_NAMESPACE)
                return gone not in str(lease["spec"].get("holderIdentity"))

            await eventually(taken_over, "the other replica to take the Lease", WAIT_S, 0.5)
            await real.api.create(JOBS_RESOURCE, manifest("after-failover"))
            await real.wait_for(RAY_JOBS_RESOURCE, "after-failover")
            assert follower.popen.poll() is None
            assert await reconciles(follower) >= 1
        finally:
            first.stop()
            second.stop()
    finally:
        install(chart)
