"""The integration tests' face of a cluster: the real control plane, or kmock's emulator for faults.

A test asks for ``cluster`` and ``start_operator`` (``conftest.py``) and gets the real control plane
(kube-apiserver, etcd, the controller-manager's garbage collector and Job controller, the scheduler):
the operator (kopf, in its own thread and loop) talks to kube-apiserver, KubeRay and the launcher are
played by status patches (``flashrl_operator.sim.KubeRayStandIn``), as envtest tests do. A module
marked ``kmock(reason=...)`` gets kmock's emulated API server instead: only where the test injects
a fault a real server cannot be made to produce (the reason says which). Every operator started by a
test is stopped in teardown, and every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from envtest.audit import TEST_NAMESPACES, AuditLog
from envtest.control_plane import OPERATOR_USER, ControlPlane
from flashrl_jobs import contract
from flashrl_operator.render.staging import JOB_NAME_LABEL
from flashrl_operator.run.handlers import OperatorConfig
from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim import (
    BATCH_JOBS_RESOURCE,
    JOBS_RESOURCE,
    PODS_RESOURCE,
    RAY_JOBS_RESOURCE,
    ApiClient,
    EmulatedApiServer,
    EmulatedCluster,
    KubeRayStandIn,
    StagingStandIn,
    eventually,
)
from flashrl_operator.sim.harness import loopback_config

NAMESPACE = TEST_NAMESPACES[0]
#: Resources whose watch an operator opens at its start: it is ready once all three are open.
WATCHED = ("flashrljobs", "rayjobs", "flashrlexperiments")
#: How long a test waits for the operator to get somewhere: a bound on waiting for a condition, never
#: a duration asserted. On a saturated machine one reconcile can take seconds, and a request that timed
#: out is only retried at the next resync (30 s).
WAIT_S = 120.0

T = TypeVar("T")


async def on_operator(op: OperatorThread, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` in the operator's own loop (its clients and intakes live there) and wait for it."""
    assert op.context.resync_task is not None
    loop = op.context.resync_task.get_loop()
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


@dataclasses.dataclass
class Cluster:
    """A user's client (``api``), KubeRay played (``kuberay``), and what the server saw.

    Exactly one of ``emulated`` (kmock's emulator) and ``plane`` (the real control plane) is set.
    """

    url: str
    api: ApiClient
    kuberay: KubeRayStandIn
    emulated: EmulatedCluster | None = None
    plane: ControlPlane | None = None
    audit: AuditLog | None = None
    #: How often a wait asks again (a real server's requests cost the machine's cores).
    poll_s: float = 0.05

    @property
    def real(self) -> ControlPlane:
        assert self.plane is not None, "this test needs the real control plane"
        return self.plane

    @property
    def emulator(self) -> EmulatedApiServer:
        assert self.emulated is not None, "this test needs kmock's emulator (mark it kmock)"
        return self.emulated.server

    def creations(self) -> Mapping[tuple[str, str, str], int]:
        """How often each ``(plural, namespace, name)`` was created during this test, by anyone."""
        if self.emulated is not None:
            return self.emulated.server.creations
        assert self.audit is not None
        return self.audit.creations()

    def operator_requests(self, plural: str) -> list[tuple[str, dict[str, list[str]]]]:
        """The operator's requests on ``plural`` during this test, as ``(verb, query parameters)``
        (the real server's audit log; watches included)."""
        assert self.audit is not None, "the request log is the real server's audit log"
        return [
            (e["verb"], parse_qs(urlsplit(e["requestURI"]).query))
            for e in self.audit.requests(OPERATOR_USER, plural)
        ]

    def operator_writes(self, plural: str, name: str) -> list[str]:
        """The verbs of the operator's writes to one object during this test that the server carried
        out (a create refused with 409 is no write; the audit log)."""
        assert self.audit is not None, "the request log is the real server's audit log"
        return [
            e["verb"]
            for e in self.audit.requests(OPERATOR_USER, plural)
            if e["verb"] not in ("get", "list", "watch")
            and e["objectRef"].get("name") == name
            and (e.get("responseStatus") or {}).get("code", 0) < 300
        ]

    async def job(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        obj = await self.api.get(JOBS_RESOURCE, namespace, name)
        assert obj is not None, f"FlashRLJob {name} is gone"
        return obj

    async def status(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        return dict((await self.job(name, namespace)).get("status") or {})

    async def wait_phase(
        self, name: str, phase: str, deadline_s: float = WAIT_S, namespace: str = NAMESPACE
    ) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        async def probe() -> dict[str, Any] | None:
            status = await self.status(name, namespace)
            seen.update(phase=status.get("phase"), reason=status.get("reason"), message=status.get("message"))
            return status if status.get("phase") == phase else None

        try:
            return await eventually(
                probe, f"FlashRLJob {name} to reach phase {phase}", deadline_s, self.poll_s
            )
        except TimeoutError as exc:  # say where the job stands instead
            raise TimeoutError(f"{exc}; it stands at {seen}") from None

    async def wait_ray_job_named(
        self, name: str, phase: str, deadline_s: float = WAIT_S, namespace: str = NAMESPACE
    ) -> dict[str, Any]:
        """The status once it names its RayJob in ``phase``: the status names it from the reconcile that
        creates it (ClusterReady "The RayJob is being created"), never while staging."""

        async def probe() -> dict[str, Any] | None:
            status = await self.status(name, namespace)
            return status if status.get("phase") == phase and status.get("rayJobName") else None

        return await eventually(
            probe, f"FlashRLJob {name} to name its RayJob in {phase}", deadline_s, self.poll_s
        )

    async def submit(self, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create the job (local sources: nothing to stage) and wait for its RayJob, which it returns."""
        await self.api.create(JOBS_RESOURCE, job_manifest(name, spec))
        return await self.wait_for(RAY_JOBS_RESOURCE, name)

    async def kuberay_says(self, name: str, ray_status: Mapping[str, Any], phase: str) -> dict[str, Any]:
        """KubeRay (played) reports ``ray_status`` on the job's RayJob; wait for the job's ``phase``."""
        await self.kuberay.set_status(NAMESPACE, name, ray_status)
        return await self.wait_phase(name, phase)

    async def wait_for(
        self, resource: str, name: str, deadline_s: float = WAIT_S, namespace: str = NAMESPACE
    ) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            return await self.api.get(resource, namespace, name)

        return await eventually(probe, f"{resource} {namespace}/{name} to exist", deadline_s, self.poll_s)

    async def gone(self, resource: str, name: str, namespace: str = NAMESPACE) -> None:
        """Until ``name`` is deleted (on the real server: by its garbage collector, once its owner is)."""
        await self.emulated_gc()

        async def probe() -> bool:
            return await self.api.get(resource, namespace, name) is None

        await eventually(probe, f"{resource} {namespace}/{name} to be deleted", WAIT_S, max(self.poll_s, 0.2))

    async def emulated_gc(self) -> None:
        """On the emulator, one pass of its garbage collector stand-in (the real server has its own)."""
        if self.emulated is not None:
            await self.emulated.garbage_collector.collect()

    async def events_for(self, name: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        events = await self.api.list("v1/events", namespace)
        return [
            e
            for e in events
            if e.get("involvedObject", {}).get("name") == name
            and e.get("source", {}).get("component") == "flashrl-operator"
        ]


class RealStaging:
    """The stage command's end on the real control plane: the Job controller made the pod; the test
    writes the pod's end as the kubelet would report it, and the real Job controller then completes
    or fails the Job (its pod failure policy reads the exit code)."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api
        self._stager = StagingStandIn(api)

    async def report_progress(
        self, namespace: str, job: str, files: int, files_total: int, done: int, total: int
    ) -> None:
        await self._stager.report_progress(namespace, job, files, files_total, done, total)

    async def succeed(self, namespace: str, name: str) -> None:
        await self._end(namespace, name, "Succeeded", {"exitCode": 0, "reason": "Completed"})

    async def fail(self, namespace: str, name: str, reason: str) -> None:
        terminated = {"exitCode": contract.EXIT_STAGING_FAILED, "reason": "Error", "message": reason}
        await self._end(namespace, name, "Failed", terminated)

    async def _end(self, namespace: str, name: str, phase: str, terminated: dict[str, Any]) -> None:
        async def the_pod() -> dict[str, Any] | None:
            # The pod of the Job now under the name: an earlier Job of that name (deleted, its pod not
            # yet collected) has a pod with the same label.
            job = await self._api.get(BATCH_JOBS_RESOURCE, namespace, name)
            uid = (job or {}).get("metadata", {}).get("uid")
            pods = await self._api.list(PODS_RESOURCE, namespace)
            mine = [
                p
                for p in pods
                if p["metadata"].get("labels", {}).get(JOB_NAME_LABEL) == name
                and any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
            ]
            return mine[0] if mine else None

        pod = await eventually(the_pod, f"the Job controller's pod of {name}", WAIT_S, 0.2)
        now = "2026-12-03T00:00:00Z"
        container = pod["spec"]["containers"][0]
        status = {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {**terminated, "startedAt": now, "finishedAt": now}},
                }
            ],
        }
        await self._api.patch(
            PODS_RESOURCE, namespace, pod["metadata"]["name"], {"status": status}, subresource="status"
        )


def real_cluster(plane: ControlPlane) -> Cluster:
    """A user's (admin's) view of the real control plane; the audit log marked at this moment."""
    context = ssl.create_default_context(cafile=str(plane.ca))
    api = ApiClient(plane.server, plane.admin_token, ssl_context=context)
    assert plane.audit_log is not None, "the session's control plane keeps an audit log"
    audit = AuditLog(plane.audit_log)
    audit.mark()
    return Cluster(plane.server, api, KubeRayStandIn(api), plane=plane, audit=audit, poll_s=0.2)


def emulated_view(emulated: EmulatedCluster) -> Cluster:
    return Cluster(emulated.url, emulated.api, emulated.kuberay, emulated=emulated)


#: What a namespace holds from its creation on (its controllers make them again when deleted): kept.
BUILT_IN_NAMES = ("default", "kube-root-ca.crt")


def fresh_namespaces(plane: ControlPlane, deadline_s: float = 180.0) -> None:
    """Every test starts from empty namespaces: the tests' namespaces emptied of all they hold.

    In place, object by object, as the namespace controller would: deleting the namespace itself costs
    five seconds a test, the controller's fixed grace before it acts on a deleted namespace. Every
    namespaced kind the server serves (its discovery, CRDs included) is deleted; a namespace that is
    missing, being deleted or does not empty within ``deadline_s`` is deleted and made anew instead.

    With no kubelet, a pod being deleted can wait forever: one bound to a node waits for its kubelet,
    a Job's pod for the Job controller to lift its tracking finalizer (it does once the pod ended).
    What a kubelet would do is done here: such pods are removed at once.
    """
    kinds = plane.kubectl("api-resources", "--namespaced=true", "--verbs=list,delete", "-o", "name")
    served = ",".join(sorted(set(kinds.stdout.split())))
    keep = ",".join(f"metadata.name!={name}" for name in BUILT_IN_NAMES)
    remake: list[str] = []
    for ns in TEST_NAMESPACES:
        found = plane.get_json("namespace", ns, check=False)
        if found is None:
            plane.kubectl("create", "namespace", ns)
        elif (found.get("metadata") or {}).get("deletionTimestamp") or not _emptied(
            plane, ns, served, keep, min(deadline_s, 60.0)
        ):
            remake.append(ns)
    if remake:
        _remade(plane, remake, deadline_s)


def _emptied(plane: ControlPlane, ns: str, served: str, keep: str, deadline_s: float) -> bool:
    """Delete everything in ``ns`` but its built-in objects; whether it was empty within ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while True:
        plane.kubectl("delete", served, "-n", ns, f"--field-selector={keep}", "--wait=false",
                      "--ignore-not-found", check=False)  # fmt: skip
        _force_delete_pods(plane, ns)
        left = plane.kubectl("get", served, "-n", ns, f"--field-selector={keep}", "-o", "name",
                             "--ignore-not-found", check=False)  # fmt: skip
        if left.returncode == 0 and not left.stdout.strip():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _force_delete_pods(plane: ControlPlane, ns: str) -> None:
    pods = plane.get_json("pods", "-n", ns, check=False) or {"items": []}
    for pod in pods["items"]:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("finalizers"):
            plane.kubectl("patch", "pod", name, "-n", ns, "--type=merge", "-p",
                          '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        plane.kubectl("delete", "pod", name, "-n", ns, "--grace-period=0", "--force",
                      "--wait=false", check=False)  # fmt: skip


def _remade(plane: ControlPlane, present: list[str], deadline_s: float) -> None:
    """Delete ``present`` (waiting until they are gone), then make them anew."""
    for ns in present:
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    deadline = time.monotonic() + deadline_s
    gone: list[str] = []
    while present:
        for ns in present:
            _force_delete_pods(plane, ns)
        gone += [ns for ns in present if plane.get_json("namespace", ns, check=False) is None]
        present = [ns for ns in present if ns not in gone]
        if present and time.monotonic() > deadline:
            raise AssertionError(f"namespaces {present} not gone after {deadline_s:.0f} s")
        if present:
            time.sleep(0.5)
    for ns in gone:
        plane.kubectl("create", "namespace", ns)


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


def real_operator_config(plane: ControlPlane, **overrides: Any) -> OperatorConfig:
    """An operator on the real server as the tests run it: its own user (the audit log tells its
    requests apart), loopback, short delays, the tests' namespaces only (other modules' jobs are left
    to their own operators)."""
    ours: dict[str, Any] = {
        "kubeconfig": str(plane.operator_kubeconfig),
        "namespaces": TEST_NAMESPACES,
        "request_timeout": 10.0,
    }
    return loopback_config(**{**ours, **overrides})  # a test's setting wins over ours


StartOperator = Callable[..., Awaitable[OperatorThread]]
