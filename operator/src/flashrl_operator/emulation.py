"""An emulated Kubernetes API server and a KubeRay stand-in, for the demo, benchmark and tests.

Nothing here runs in a cluster. :class:`EmulatedApiServer` is kmock's in-memory Kubernetes emulator
(real HTTP on 127.0.0.1) taught to assign what a real API server assigns: ``uid``,
``resourceVersion``, ``generation`` (bumped on spec changes) and ``creationTimestamp``. There is no
KubeRay either: :class:`KubeRayStandIn` patches RayJob status the way KubeRay would
(``jobDeploymentStatus``, ``jobStatus``, ``reason``, ``message``), creates the RayJob's RayCluster
and walks its status through pod startup (conditions, replica counts, mirrored into the RayJob's
``status.rayClusterStatus``), and reports training progress the way the launcher in the head pod
would, so the operator's reactions can be watched end to end. The RayCluster status is made up step
by step by whoever drives the stand-in; pods exist only when it is told to make one that cannot start
(:meth:`KubeRayStandIn.stuck_pod`, with the status the scheduler or kubelet would have written).

kmock is a test dependency (the ``dev`` extra); this module imports it and is only imported by
``flashrl demo``, ``python -m bench`` and the integration tests.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import socket
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

import aiohttp
import kmock
from aiohttp import web

from flashrl_api import GROUP, KIND, PLURAL, SINGULAR, VERSION
from flashrl_operator.kube import now_rfc3339

JOBS_RESOURCE: Final = f"{GROUP}/{VERSION}/{PLURAL}"
RAY_JOBS_RESOURCE: Final = "ray.io/v1/rayjobs"
RAY_CLUSTERS_RESOURCE: Final = "ray.io/v1/rayclusters"
PODS_RESOURCE: Final = "v1/pods"
ALL_VERBS: Final = {"get", "list", "watch", "create", "patch", "update", "delete"}

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for the metrics and health servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmulatedApiServer(kmock.KubernetesEmulator):
    """kmock's emulator plus server-assigned metadata and a count of stored creations per object."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)
        self.creations: Counter[tuple[str, str, str]] = Counter()
        self._in_flight: set[int] = set()
        self.resources.load_bundled()
        for resource, kind, singular in (
            (JOBS_RESOURCE, KIND, SINGULAR),
            (RAY_JOBS_RESOURCE, "RayJob", "rayjob"),
            (RAY_CLUSTERS_RESOURCE, "RayCluster", "raycluster"),
        ):
            self.resources[resource] = kmock.ResourceInfo(
                kind=kind, singular=singular, namespaced=True, verbs=ALL_VERBS, subresources={"status"}
            )

    #: Keep only this many recent requests (None: all). kmock matches every request against its
    #: reactions by scanning the request history, so the cost per request grows with the history;
    #: the benchmark bounds it, tests keep everything for their assertions.
    keep_requests: int | None = None

    #: Bearer tokens the emulator accepts (None: it checks nothing, like kmock). With a set, any
    #: other request is answered 401 as an API server answers an expired or unknown token.
    accepted_tokens: frozenset[str] | None = None

    async def _handle(self, request: kmock.Request) -> web.StreamResponse:
        if self.keep_requests is None:
            return await self._handle_one(request)
        self._in_flight.add(id(request))
        try:
            if len(self._requests) > 2 * self.keep_requests + len(self._in_flight):
                # Requests still being served (watches, this one) must stay: matching needs them.
                old = self._requests[: -self.keep_requests]
                self._requests[: -self.keep_requests] = [r for r in old if id(r) in self._in_flight]
            return await self._handle_one(request)
        finally:
            self._in_flight.discard(id(request))

    async def _handle_one(self, request: kmock.Request) -> web.StreamResponse:
        if self.accepted_tokens is not None:
            given = request.headers.get("Authorization", "")
            if given.removeprefix("Bearer ") not in self.accepted_tokens or not given.startswith("Bearer "):
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Unauthorized"}
                return web.json_response({**status, "message": "Unauthorized", "code": 401}, status=401)
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_rfc3339())
                meta.setdefault("generation", 1)
                meta["resourceVersion"] = str(next(self._versions))
            elif request.action == kmock.action.UPDATE and request.name is not None:
                meta["resourceVersion"] = str(next(self._versions))
                if "spec" in data and request.subresource is None:
                    key = (request.resource, request.namespace, request.name)
                    if key in self.objects and not self.objects[key].deleted:
                        current = self.objects[key].get("metadata", {}).get("generation") or 0
                        meta["generation"] = int(current) + 1
        # A conflict or a missing object raises before anything is stored; any response after that
        # (even an injected 500) means the object was stored: count it as created.
        response = await super()._handle(request)
        if request.action == kmock.action.CREATE and isinstance(data, dict):
            meta = data.get("metadata", {})
            plural = str(request.resource.plural) if request.resource is not None else "?"
            namespace = str(meta.get("namespace") or request.namespace)
            self.creations[(plural, namespace, str(meta.get("name")))] += 1
        return response

    # kmock finds an object by scanning all of them; with thousands of objects (the benchmark) that
    # dominates. The objects are stored in a dict keyed by (resource, namespace, name), so look the
    # request's key up directly and defer to kmock whenever it is not an exact hit.

    def _exact(self, request: kmock.Request) -> kmock.Object | None:
        data = request.data if isinstance(request.data, dict) else {}
        namespace = request.namespace or data.get("metadata", {}).get("namespace")
        name = request.name or data.get("metadata", {}).get("name")
        if request.resource is None or not isinstance(name, str):
            return None
        key = (request.resource, namespace if isinstance(namespace, str) else None, name)
        if key not in self.objects:
            return None
        obj: kmock.Object = self.objects[key]
        return obj

    async def _serve_fetch(self, request: kmock.Request) -> kmock.Payload:
        obj = self._exact(request)
        if obj is None or obj.deleted:
            return await super()._serve_fetch(request)
        return obj.raw

    async def _serve_create(self, request: kmock.Request) -> kmock.Payload:
        obj = self._exact(request)
        return obj.raw if obj is not None and not obj.deleted else await super()._serve_create(request)

    async def _serve_update(self, request: kmock.Request) -> kmock.Payload:
        obj = self._exact(request)
        return obj.last.raw if obj is not None else await super()._serve_update(request)

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        """kmock's list, narrowed by an equality ``labelSelector`` (``a=b,c=d``) as the API server does."""
        payload = await super()._serve_list(request)
        selector = request.params.get("labelSelector") or ""
        wanted = dict(term.split("=", 1) for term in selector.split(",") if "=" in term)
        if not wanted or not isinstance(payload, dict):
            return payload
        items = [
            item
            for item in payload.get("items") or []
            if all(((item.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]
        return {**payload, "items": items}


def object_path(
    resource: str, namespace: str, name: str | None = None, subresource: str | None = None
) -> str:
    """REST path for ``group/version/plural`` (or ``v1/plural``) in a namespace."""
    parts = resource.split("/")
    base = f"/api/{parts[0]}" if len(parts) == 2 else f"/apis/{parts[0]}/{parts[1]}"
    path = f"{base}/namespaces/{namespace}/{parts[-1]}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


class ApiClient:
    """What a user's kubectl would do, over plain HTTP against the emulator."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self._base = base_url.rstrip("/")
        headers = {"Connection": "close"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self._session = aiohttp.ClientSession(headers=headers)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._session.close()

    async def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        headers = {"Content-Type": content_type} if content_type else {}
        async with self._session.request(method, self._base + path, json=body, headers=headers) as resp:
            if resp.status == 404 and method == "GET":
                return None
            if resp.status >= 300:
                raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {(await resp.text())[:300]}")
            return await resp.json(content_type=None)

    async def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or ``None``."""
        result = await self._call("GET", object_path(resource, namespace, name))
        return result if isinstance(result, dict) else None

    async def list(self, resource: str, namespace: str) -> list[dict[str, Any]]:
        """All objects of a resource in a namespace."""
        result = await self._call("GET", object_path(resource, namespace))
        return list(result.get("items", [])) if isinstance(result, dict) else []

    async def create(self, resource: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST an object (its namespace comes from its metadata)."""
        namespace = str(obj["metadata"].get("namespace") or "default")
        body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        result = await self._call("POST", object_path(resource, namespace), body)
        return dict(result)

    async def patch(
        self,
        resource: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON-merge-patch an object."""
        path = object_path(resource, namespace, name, subresource)
        return dict(await self._call("PATCH", path, dict(patch), "application/merge-patch+json"))

    async def delete(self, resource: str, namespace: str, name: str) -> None:
        """Delete an object."""
        await self._call("DELETE", object_path(resource, namespace, name))


#: KubeRay's RayJob status at each step of a normal run (see docs/operator.md for the mapping).
CLUSTER_STARTING: Final = {"jobDeploymentStatus": "Initializing", "jobStatus": ""}
SUBMITTED: Final = {"jobDeploymentStatus": "Running", "jobStatus": "PENDING"}
TRAINING: Final = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
SUCCEEDED: Final = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
SUSPENDED: Final = {"jobDeploymentStatus": "Suspended", "jobStatus": ""}


def failed(reason: str, message: str) -> dict[str, Any]:
    """KubeRay's status for a failed RayJob."""
    return {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": reason, "message": message}


#: KubeRay labels the RayCluster it creates for a RayJob with these (``ray.io/originated-from-*``).
ORIGINATED_FROM_NAME: Final = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD: Final = "ray.io/originated-from-crd"
#: The characters Kubernetes' ``rand.String`` (and so KubeRay's cluster-name suffix) draws from.
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"


def _condition(ctype: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_rfc3339(),
    }


def cluster_status(
    desired_workers: int,
    *,
    head_created: bool = False,
    head_ready: bool = False,
    ready_workers: int = 0,
    provisioned: bool = False,
    replica_failure: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A RayCluster ``status`` as KubeRay writes it during startup (emulated, no pods behind it).

    ``provisioned`` is sticky in KubeRay (``RayClusterProvisioned`` never flips back); callers pass
    it along once every pod was ready. ``replica_failure`` is ``(reason, message)`` of a pod KubeRay
    could not create.
    """
    all_ready = head_ready and ready_workers >= desired_workers
    if not head_created:
        head = _condition("HeadPodReady", False, "HeadPodNotFound", "Head Pod not found")
    elif head_ready:
        head = _condition("HeadPodReady", True, "HeadPodRunningAndReady", "")
    else:
        head = _condition(
            "HeadPodReady", False, "ContainersNotReady", "containers with unready status: [ray-head]"
        )
    if provisioned or all_ready:
        prov = _condition(
            "RayClusterProvisioned",
            True,
            "AllPodRunningAndReadyFirstTime",
            "All Ray Pods are ready for the first time",
        )
    else:
        prov = _condition(
            "RayClusterProvisioned",
            False,
            "RayClusterPodsProvisioning",
            "RayCluster Pods are being provisioned for first time",
        )
    conditions = [head, prov]
    if replica_failure is not None:
        conditions.append(_condition("ReplicaFailure", True, *replica_failure))
    status: dict[str, Any] = {
        "desiredWorkerReplicas": desired_workers,
        "minWorkerReplicas": desired_workers,
        "maxWorkerReplicas": desired_workers,
        "readyWorkerReplicas": ready_workers,
        "availableWorkerReplicas": ready_workers,
        "conditions": conditions,
        "lastUpdateTime": now_rfc3339(),
    }
    if all_ready:
        status["state"] = "ready"
    return status


def desired_worker_replicas(ray_job: Mapping[str, Any]) -> int:
    """KubeRay's ``desiredWorkerReplicas``: the sum of replicas x numOfHosts over worker groups."""
    cluster_spec = (ray_job.get("spec") or {}).get("rayClusterSpec") or {}
    return sum(
        int(group.get("replicas") or 0) * int(group.get("numOfHosts") or 1)
        for group in cluster_spec.get("workerGroupSpecs") or []
    )


def unschedulable(message: str) -> dict[str, Any]:
    """A pod status as the scheduler leaves it when no node fits."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": now_rfc3339(),
    }
    return {"phase": "Pending", "conditions": [condition]}


def image_pull_backoff(container: str, image: str) -> dict[str, Any]:
    """A pod status as the kubelet leaves it when the image cannot be pulled."""
    message = f'Back-off pulling image "{image}"'
    waiting = {"reason": "ImagePullBackOff", "message": message}
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": container, "ready": False, "restartCount": 0, "state": {"waiting": waiting}}
        ],
    }


class KubeRayStandIn:
    """Plays KubeRay's (and the launcher's) part: tests patch RayJob status the way KubeRay would.

    Like KubeRay, it creates a RayCluster named ``<rayjob>-<5 random characters>`` labelled with the
    RayJob it came from, reports its pods' startup in the RayCluster's status, and mirrors that
    status into the RayJob's ``status.rayClusterStatus`` (which is what makes the RayJob change, and
    so reach the operator, while the cluster starts).
    """

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    async def set_status(self, namespace: str, ray_job: str, status: Mapping[str, Any]) -> None:
        """Patch a RayJob's status; cluster name, dashboard and times are filled in as KubeRay does.

        ``Initializing`` creates the RayCluster (no pods ready yet); ``Running`` first makes all its
        pods ready (KubeRay submits only then); ``Suspended`` deletes it, as KubeRay does.
        """
        full = dict(status)
        deployment = full.get("jobDeploymentStatus")
        cluster: dict[str, Any] | None = None
        if deployment in ("Initializing", "Running"):
            cluster = await self._ensure_cluster(namespace, ray_job)
            if deployment == "Running" and (cluster.get("status") or {}).get("state") != "ready":
                workers = int((cluster.get("status") or {}).get("desiredWorkerReplicas") or 0)
                cluster = await self._patch_cluster(
                    namespace,
                    cluster,
                    cluster_status(workers, head_created=True, head_ready=True, ready_workers=workers),
                )
        elif deployment in ("Complete", "Failed"):
            cluster = await self._find_cluster(namespace, ray_job)
        elif deployment == "Suspended":
            found = await self._find_cluster(namespace, ray_job)
            if found is not None:
                await self._api.delete(RAY_CLUSTERS_RESOURCE, namespace, found["metadata"]["name"])
            full.update({"rayClusterName": None, "dashboardURL": None, "rayClusterStatus": None})
        if cluster is not None:
            name = cluster["metadata"]["name"]
            full.setdefault("rayClusterName", name)
            full.setdefault("dashboardURL", f"{name}-head-svc.{namespace}.svc.cluster.local:8265")
            full.setdefault("rayClusterStatus", cluster.get("status") or {})
        if deployment == "Running":
            full.setdefault("startTime", now_rfc3339())
        if deployment in ("Complete", "Failed"):
            full.setdefault("endTime", now_rfc3339())
        await self._api.patch(RAY_JOBS_RESOURCE, namespace, ray_job, {"status": full}, subresource="status")

    async def cluster_pods(
        self, namespace: str, ray_job: str, *, head_ready: bool, ready_workers: int
    ) -> dict[str, Any]:
        """Report the RayJob's cluster pods as KubeRay would: the head and ``ready_workers`` ready.

        Returns the RayCluster. Clears any ReplicaFailure (KubeRay removes it once pods are created).
        """
        cluster = await self._ensure_cluster(namespace, ray_job)
        old = cluster.get("status") or {}
        workers = int(old.get("desiredWorkerReplicas") or 0)
        provisioned = any(
            c.get("type") == "RayClusterProvisioned" and c.get("status") == "True"
            for c in old.get("conditions") or []
        )
        new = cluster_status(
            workers,
            head_created=True,
            head_ready=head_ready,
            ready_workers=ready_workers,
            provisioned=provisioned,
        )
        return await self._patch_cluster(namespace, cluster, new, ray_job)

    async def replica_failure(
        self, namespace: str, ray_job: str, reason: str, message: str
    ) -> dict[str, Any]:
        """KubeRay could not create a pod (quota, admission webhook, ...): ``ReplicaFailure`` True."""
        cluster = await self._ensure_cluster(namespace, ray_job)
        old = cluster.get("status") or {}
        head_ready = any(
            c.get("type") == "HeadPodReady" and c.get("status") == "True" for c in old.get("conditions") or []
        )
        new = cluster_status(
            int(old.get("desiredWorkerReplicas") or 0),
            head_created=head_ready,
            head_ready=head_ready,
            ready_workers=int(old.get("readyWorkerReplicas") or 0),
            replica_failure=(reason, message),
        )
        return await self._patch_cluster(namespace, cluster, new, ray_job)

    async def stuck_pod(
        self, namespace: str, ray_job: str, pod_status: Mapping[str, Any], *, node_type: str = "worker"
    ) -> str:
        """A pod of the RayJob's cluster that cannot start, as KubeRay names and labels it.

        ``pod_status`` is what the scheduler or the kubelet wrote (see :func:`unschedulable` and
        :func:`image_pull_backoff`); neither exists here, so the stand-in writes it. Returns the name.
        """
        cluster = await self._ensure_cluster(namespace, ray_job)
        cluster_name = cluster["metadata"]["name"]
        suffix = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
        group = "head" if node_type == "head" else "gpu-worker"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{cluster_name}-{group}-{suffix}",
                "namespace": namespace,
                "labels": {
                    "ray.io/cluster": cluster_name,
                    "ray.io/node-type": node_type,
                    "ray.io/group": "headgroup" if node_type == "head" else "gpu",
                },
            },
            "spec": {"containers": [{"name": f"ray-{node_type}", "image": "trainer"}]},
        }
        created = await self._api.create(PODS_RESOURCE, pod)
        name = str(created["metadata"]["name"])
        await self._api.patch(
            PODS_RESOURCE, namespace, name, {"status": dict(pod_status)}, subresource="status"
        )
        return name

    async def delete_pods(self, namespace: str, ray_job: str) -> None:
        """Delete every pod of the RayJob's cluster (e.g. once the cause is fixed KubeRay recreates them)."""
        cluster = await self._find_cluster(namespace, ray_job)
        if cluster is None:
            return
        for pod in await self._api.list(PODS_RESOURCE, namespace):
            if ((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/cluster") == cluster["metadata"][
                "name"
            ]:
                await self._api.delete(PODS_RESOURCE, namespace, pod["metadata"]["name"])

    async def _find_cluster(self, namespace: str, ray_job: str) -> dict[str, Any] | None:
        for item in await self._api.list(RAY_CLUSTERS_RESOURCE, namespace):
            labels = (item.get("metadata") or {}).get("labels") or {}
            if labels.get(ORIGINATED_FROM_NAME) == ray_job and labels.get(ORIGINATED_FROM_CRD) == "RayJob":
                return item
        return None

    async def _ensure_cluster(self, namespace: str, ray_job: str) -> dict[str, Any]:
        """The RayJob's RayCluster, created from its ``rayClusterSpec`` the way KubeRay does."""
        found = await self._find_cluster(namespace, ray_job)
        if found is not None:
            return found
        owner = await self._api.get(RAY_JOBS_RESOURCE, namespace, ray_job)
        if owner is None:
            raise LookupError(f"RayJob {namespace}/{ray_job} does not exist")
        meta = owner.get("metadata") or {}
        suffix = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
        cluster = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {
                "name": f"{ray_job}-{suffix}",
                "namespace": namespace,
                "labels": {
                    **(meta.get("labels") or {}),
                    ORIGINATED_FROM_NAME: ray_job,
                    ORIGINATED_FROM_CRD: "RayJob",
                },
                "ownerReferences": [
                    {
                        "apiVersion": "ray.io/v1",
                        "kind": "RayJob",
                        "name": ray_job,
                        "uid": meta.get("uid"),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": (owner.get("spec") or {}).get("rayClusterSpec") or {},
        }
        created = await self._api.create(RAY_CLUSTERS_RESOURCE, cluster)
        return await self._patch_cluster(namespace, created, cluster_status(desired_worker_replicas(owner)))

    async def _patch_cluster(
        self,
        namespace: str,
        cluster: Mapping[str, Any],
        status: Mapping[str, Any],
        mirror_to: str | None = None,
    ) -> dict[str, Any]:
        """Write the RayCluster's status; with ``mirror_to``, copy it into that RayJob's status too."""
        name = cluster["metadata"]["name"]
        # A merge patch would keep keys the new status drops (state, the ReplicaFailure condition):
        # null them explicitly, as a full status update by KubeRay would.
        old = cluster.get("status") or {}
        patch = {**{k: None for k in old if k not in status}, **status}
        updated = await self._api.patch(
            RAY_CLUSTERS_RESOURCE, namespace, name, {"status": patch}, subresource="status"
        )
        if mirror_to is not None:
            mirrored = {"rayClusterName": name, "rayClusterStatus": {**patch}}
            await self._api.patch(
                RAY_JOBS_RESOURCE, namespace, mirror_to, {"status": mirrored}, subresource="status"
            )
        return updated

    async def report_progress(self, namespace: str, job: str, step: int, total: int) -> None:
        """What the launcher does after each training step: patch ``status.progress`` only."""
        progress = {"step": step, "totalSteps": total, "updateTime": now_rfc3339()}
        patch = {"status": {"progress": progress}}
        await self._api.patch(JOBS_RESOURCE, namespace, job, patch, subresource="status")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    deadline_s: float = 15.0,
    interval: float = 0.05,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``deadline_s`` saying what was awaited."""
    deadline = time.monotonic() + deadline_s
    last: T | None = None
    while True:
        last = await probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {deadline_s:.0f}s waiting for {what} (last seen: {last!r})")
        await asyncio.sleep(interval)


async def watch_started(server: EmulatedApiServer, resource: str, deadline_s: float = 15.0) -> None:
    """Wait until the operator has opened its watch on ``resource`` (objects created earlier would
    reach it twice: once listed, once replayed by the emulator's watch)."""
    watches = server[kmock.action.WATCH][kmock.resource(resource)]

    async def opened() -> bool:
        return len(list(watches)) > 0

    await eventually(opened, f"the operator's watch on {resource}", deadline_s)
