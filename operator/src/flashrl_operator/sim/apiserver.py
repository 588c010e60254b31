"""The emulated Kubernetes API server, and a user's client to it (tests, the demo, the benchmark).

Nothing here runs in a cluster. :class:`EmulatedApiServer` is kmock's in-memory Kubernetes emulator
(real HTTP on 127.0.0.1) taught what a real API server also does and kmock does not:

* assign ``uid``, ``resourceVersion``, ``generation`` (bumped on spec changes) and
  ``creationTimestamp``;
* narrow lists by an equality ``labelSelector``;
* server-side apply (``PATCH`` with ``application/apply-patch+yaml``), at the smallest scale that
  is still honest: it creates a missing object; on an existing one it removes the fields the same
  field manager applied before and no longer applies, and sets the ones it applies; a field
  another manager last set to a different value is a 409 Conflict unless ``force=true``, and is
  then taken over. Lists are atomic (a real server merges some, e.g. ``ownerReferences`` by uid).
  An apply that changes nothing stores nothing (no new resourceVersion, no watch event), as on a
  real server. Ownership is kept per leaf field inside the emulator, not in ``managedFields``;
* record who wrote what (:attr:`EmulatedApiServer.writes`): the actor is the ``X-Actor`` header of
  :class:`ApiClient` (the emulated scheduler, kubelet, KubeRay, launcher, a user), else the
  client's User-Agent (the operator's own client, kopf).

kmock is not a dependency of the operator: this package is installed with the ``sim`` extra, and
an import contract keeps the operator's core from importing it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import socket
import ssl
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import aiohttp
import attrs
import kmock
import yaml
from aiohttp import web

from flashrl_api import SINGULAR
from flashrl_api.experiment import EXPERIMENT_SINGULAR
from flashrl_api.times import now_rfc3339
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.kinds import CONFIG_MAP, EVENT, FLASHRL_EXPERIMENT, FLASHRL_JOB, POD
from flashrl_operator.vocab.resource import Resource


def resource_key(resource: Resource) -> str:
    """kmock's name for a kind: ``group/version/plural`` (``v1/plural`` for the core group)."""
    return f"{resource.api_version}/{resource.plural}"


JOBS_RESOURCE: Final = resource_key(FLASHRL_JOB)
RAY_JOBS_RESOURCE: Final = resource_key(kuberay.RAY_JOB)
RAY_CLUSTERS_RESOURCE: Final = resource_key(kuberay.RAY_CLUSTER)
PODS_RESOURCE: Final = resource_key(POD)
EVENTS_RESOURCE: Final = resource_key(EVENT)
EXPERIMENTS_RESOURCE: Final = resource_key(FLASHRL_EXPERIMENT)
CONFIG_MAPS_RESOURCE: Final = resource_key(CONFIG_MAP)
ALL_VERBS: Final = {"get", "list", "watch", "create", "patch", "update", "delete"}
#: The header :class:`ApiClient` names its actor in.
ACTOR_HEADER: Final = "X-Actor"
APPLY_PATCH: Final = "application/apply-patch+yaml"

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for the metrics and health servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


Leaf = tuple[str, ...]


def leaves(value: Any, prefix: Leaf = ()) -> dict[Leaf, Any]:
    """Every leaf field of a JSON object by path; lists and empty objects are leaves (atomic)."""
    if isinstance(value, Mapping) and value:
        out: dict[Leaf, Any] = {}
        for key, item in value.items():
            out.update(leaves(item, (*prefix, str(key))))
        return out
    return {prefix: value}


def _get(obj: Any, path: Leaf) -> Any:
    for part in path:
        if not isinstance(obj, Mapping) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


_MISSING: Final = object()

#: Fields that identify an object or that the server assigns: no manager owns them.
_IDENTITY: Final = frozenset(
    {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
    | {("metadata", key) for key in ("uid", "creationTimestamp", "generation", "resourceVersion")}
)


def owned_fields(obj: Mapping[str, Any]) -> set[Leaf]:
    """The leaf fields of ``obj`` a manager sets by writing it."""
    return set(leaves(obj)) - _IDENTITY


def merge_patch_between(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``."""
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        before = old.get(key, _MISSING)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = merge_patch_between(before, value)
            if inner:
                patch[key] = inner
        elif before is _MISSING or before != value:
            patch[key] = value
    return patch


def _set(obj: dict[str, Any], path: Leaf, value: Any) -> None:
    for part in path[:-1]:
        child = obj.get(part)
        if not isinstance(child, dict):
            child = obj[part] = {}
        obj = child
    obj[path[-1]] = value


def _remove(obj: dict[str, Any], path: Leaf) -> None:
    parents: list[tuple[dict[str, Any], str]] = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(part), dict):
            return
        parents.append((node, part))
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, part in reversed(parents):  # drop objects the removal emptied
        if parent[part] == {}:
            del parent[part]


@dataclass(frozen=True)
class Write:
    """One stored write: who, what, to which object."""

    actor: str
    verb: str
    """``create``, ``update`` (a patch), ``apply`` or ``delete``."""
    plural: str
    namespace: str
    name: str
    subresource: str | None = None


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason}
    return web.json_response({**body, "message": message, "code": code}, status=code)


class EmulatedApiServer(kmock.KubernetesEmulator):
    """kmock's emulator plus server-assigned metadata, server-side apply and a record of writes."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)
        self.creations: Counter[tuple[str, str, str]] = Counter()
        #: Every stored write, in order (the demo's timeline attributes each to its actor).
        self.writes: list[Write] = []
        #: Per object, per field manager: the leaf fields it last set.
        self.owners: dict[tuple[Any, str | None, str], dict[str, set[Leaf]]] = {}
        self._apply_lock = asyncio.Lock()
        self._in_flight: set[int] = set()
        self.resources.load_bundled()
        for resource, singular in (
            (FLASHRL_JOB, SINGULAR),
            (FLASHRL_EXPERIMENT, EXPERIMENT_SINGULAR),
            (kuberay.RAY_JOB, "rayjob"),
            (kuberay.RAY_CLUSTER, "raycluster"),
        ):
            self.resources[resource_key(resource)] = kmock.ResourceInfo(
                kind=resource.kind,
                singular=singular,
                namespaced=True,
                verbs=ALL_VERBS,
                subresources={"status"},
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

    @staticmethod
    def actor_of(request: kmock.Request) -> str:
        """Who sent ``request``: :data:`ACTOR_HEADER`, else the User-Agent's product name."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        actor = headers.get(ACTOR_HEADER.lower())
        if actor:
            return str(actor)
        return str(headers.get("user-agent", "?")).split("/", 1)[0].split(" ", 1)[0]

    def _manager(self, request: kmock.Request) -> str:
        return str(request.params.get("fieldManager") or self.actor_of(request))

    async def _handle_one(self, request: kmock.Request) -> web.StreamResponse:
        if self.accepted_tokens is not None:
            given = request.headers.get("Authorization", "")
            if given.removeprefix("Bearer ") not in self.accepted_tokens or not given.startswith("Bearer "):
                return _status(401, "Unauthorized", "Unauthorized")
        content_type = str(request.headers.get("Content-Type", ""))
        if request.method == kmock.method.PUT and request.resource is not None and request.name is not None:
            async with self._apply_lock:
                return await self._replace(request)
        if (
            request.action == kmock.action.UPDATE
            and request.name is not None
            and content_type.startswith(APPLY_PATCH)
        ):
            async with self._apply_lock:
                return await self._apply(request)
        return await self._store(request)

    async def _store(self, request: kmock.Request) -> web.StreamResponse:
        """kmock's handling of a request, plus server-assigned metadata and ownership."""
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_rfc3339())
                meta.setdefault("generation", 1)
                meta["resourceVersion"] = str(next(self._versions))
            elif request.action == kmock.action.UPDATE and request.name is not None:
                # A patch that names a resourceVersion applies to that version only, as on a real
                # server (the operator's status patches are made so: job/reconciler.py).
                key = (request.resource, request.namespace, request.name)
                given = meta.get("resourceVersion")
                if given is not None and key in self.objects and not self.objects[key].deleted:
                    stored = (self.objects[key].get("metadata") or {}).get("resourceVersion")
                    if str(given) != str(stored):
                        return _status(
                            409,
                            "Conflict",
                            "the object has been modified; please apply your changes to the latest version",
                        )
                meta["resourceVersion"] = str(next(self._versions))
                if "spec" in data and request.subresource is None:
                    key = (request.resource, request.namespace, request.name)
                    if key in self.objects and not self.objects[key].deleted:
                        current = self.objects[key].get("metadata", {}).get("generation") or 0
                        meta["generation"] = int(current) + 1
        # A conflict or a missing object raises before anything is stored; any response after that
        # (even an injected 500) means the object was stored: count it as created.
        response = await super()._handle(request)
        if request.resource is None:
            return response
        meta = data.get("metadata", {}) if isinstance(data, dict) else {}
        namespace = str(request.namespace or meta.get("namespace"))
        name = str(request.name or meta.get("name"))
        plural = str(request.resource.plural)
        verbs = {kmock.action.CREATE: "create", kmock.action.UPDATE: "update", kmock.action.DELETE: "delete"}
        verb = verbs.get(request.action) if request.action is not None else None
        if verb is None:
            return response
        actor = self.actor_of(request)
        self.writes.append(Write(actor, verb, plural, namespace, name, request.subresource))
        key = (request.resource, namespace, name)
        if request.action == kmock.action.CREATE:
            self.creations[(plural, namespace, name)] += 1
            self.owners[key] = {}
        if verb in ("create", "update") and isinstance(data, dict):
            self._take(key, self._manager(request), owned_fields(data))
        return response

    def _take(self, key: tuple[Any, str | None, str], manager: str, fields: set[Leaf]) -> None:
        """``manager`` now owns ``fields`` (an update or a forced apply takes them from the others)."""
        owners = self.owners.setdefault(key, {})
        for other, owned in owners.items():
            if other != manager:
                owned.difference_update(f for f in list(owned) if any(_overlaps(f, g) for g in fields))
        owners.setdefault(manager, set()).update(fields)

    async def _replace(self, request: kmock.Request) -> web.StreamResponse:
        """``PUT``: replace the object, refused with 409 when its ``resourceVersion`` is not current.

        kmock knows no PUT; it is served as the merge patch that turns the stored object into the new
        one. The resourceVersion check is the optimistic concurrency leader election relies on.
        """
        assert request.resource is not None and request.name is not None
        key = (request.resource, request.namespace, request.name)
        current = self.objects[key] if key in self.objects else None  # noqa: SIM401  (no .get)
        if current is None or current.deleted:
            return _status(404, "NotFound", f"{request.name} not found")
        new = request.data if isinstance(request.data, dict) else {}
        given = (new.get("metadata") or {}).get("resourceVersion")
        stored = (current.get("metadata") or {}).get("resourceVersion")
        if given is not None and str(given) != str(stored):
            return _status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version",
            )
        live: dict[str, Any] = json.loads(json.dumps(current.raw))
        wanted = {**new, "metadata": {**(live.get("metadata") or {}), **(new.get("metadata") or {})}}
        wanted.pop("status", None)
        patch = merge_patch_between({k: v for k, v in live.items() if k != "status"}, wanted)
        return await self._store(
            self._rewrite(request, action=kmock.action.UPDATE, method=kmock.method.PATCH, data=patch)
        )

    def _rewrite(self, request: kmock.Request, **changes: Any) -> kmock.Request:
        """``request`` as another one (an apply served as a create or a merge patch).

        kmock serves only requests in its history, so the rewritten one takes the original's place.
        """
        rewritten = attrs.evolve(request, **changes)
        for index in range(len(self._requests) - 1, -1, -1):
            if self._requests[index] is request:
                self._requests[index] = rewritten
                break
        return rewritten

    async def _apply(self, request: kmock.Request) -> web.StreamResponse:
        """Server-side apply (see the module docstring for how much of it)."""
        applied = request.data if isinstance(request.data, dict) else yaml.safe_load(request.text or "")
        manager = request.params.get("fieldManager")
        if not manager:
            return _status(400, "BadRequest", "PATCH with apply-patch+yaml requires fieldManager")
        if not isinstance(applied, dict):
            return _status(400, "BadRequest", "the apply configuration is not an object")
        force = request.params.get("force") == "true"
        assert request.resource is not None and request.name is not None  # an UPDATE of a named object
        key = (request.resource, request.namespace, request.name)
        current = self.objects[key] if key in self.objects else None  # noqa: SIM401  (no .get)
        if current is None or current.deleted:
            applied.setdefault("metadata", {}).setdefault("namespace", request.namespace)
            fields = owned_fields(applied)
            create = self._rewrite(
                request, action=kmock.action.CREATE, method=kmock.method.POST, data=applied
            )
            response = await self._store(create)
            self.writes[-1] = dataclasses.replace(self.writes[-1], verb="apply")
            self.owners[key] = {str(manager): fields}
            return response
        live: dict[str, Any] = json.loads(json.dumps(current.raw))
        wanted = {f: v for f, v in leaves(applied).items() if f not in _IDENTITY}
        owners = self.owners.setdefault(key, {})
        mine = owners.get(str(manager), set())
        conflicts = sorted(
            ".".join(f)
            for f, v in wanted.items()
            if _get(live, f) != v and any(f in owned for other, owned in owners.items() if other != manager)
        )
        if conflicts and not force:
            return _status(
                409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): " + ", ".join(conflicts)
            )
        result = json.loads(json.dumps(live))
        others = set().union(*(owned for other, owned in owners.items() if other != manager))
        for field in mine - set(wanted) - others:
            _remove(result, field)
        for field, value in wanted.items():
            _set(result, field, value)
        self._take(key, str(manager), set(wanted))
        patch = merge_patch_between(live, result)
        patch.pop("status", None)  # apply to the main resource never changes status
        if not patch:
            return web.json_response(live)
        update = self._rewrite(request, data=patch)
        response = await self._store(update)
        self.writes[-1] = dataclasses.replace(self.writes[-1], verb="apply")
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
        if obj is None and request.resource is not None and request.name is not None:
            # A read of a named object that is not stored: kmock's strict match is the same key
            # equality, so its scan of every object could only end in this 404. The operator reads
            # every child before creating it, so with thousands of objects these scans dominate.
            raise kmock.KubernetesObjectNotFoundError()
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


def _overlaps(a: Leaf, b: Leaf) -> bool:
    """One field path contains the other (setting ``metadata.labels`` replaces ``metadata.labels.x``)."""
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


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


#: The actors :class:`ApiClient` speaks for, as the demo's timeline names them.
USER: Final = "kubectl"
KUBERAY: Final = "KubeRay (emulated)"
SCHEDULER: Final = "scheduler (emulated)"
KUBELET: Final = "kubelet (emulated)"
LAUNCHER: Final = "launcher (emulated)"
GARBAGE_COLLECTOR: Final = "garbage collector (emulated)"


#: How often a client repeats a request the API server answered 429 (Too Many Requests) before giving up.
TOO_MANY_REQUESTS_TRIES: Final = 10


class NotFoundError(RuntimeError):
    """A write to an object that is not there (a GET of one returns ``None`` instead)."""


class ApiClient:
    """What a user's kubectl (or an emulated controller) would do, over plain HTTP against the emulator.

    Every request names its ``actor`` (:data:`ACTOR_HEADER`), so the emulator records who did what;
    :meth:`as_actor` speaks for someone else over the same connections.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        actor: str = USER,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context`` trusts a real API server's CA: the same stand-ins then play KubeRay and the
        launcher against kube-apiserver (the real-control-plane tests), where the actor header is ignored."""
        self._base = base_url.rstrip("/")
        headers = {"Connection": "close"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        connector = aiohttp.TCPConnector(ssl=ssl_context) if ssl_context is not None else None
        self._session = aiohttp.ClientSession(headers=headers, connector=connector)
        self.actor = actor

    def as_actor(self, actor: str) -> ApiClient:
        """A client for ``actor`` sharing this one's connections (close this one only)."""
        other = object.__new__(ApiClient)
        other._base, other._session, other.actor = self._base, self._session, actor
        return other

    async def close(self) -> None:
        """Close the connection pool."""
        await self._session.close()

    async def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        headers = {ACTOR_HEADER: self.actor}
        if content_type:
            headers["Content-Type"] = content_type
        for _attempt in range(TOO_MANY_REQUESTS_TRIES):
            async with self._session.request(method, self._base + path, json=body, headers=headers) as resp:
                if resp.status == 429:
                    # A real API server says 429 while a resource's watch cache (re)initialises, e.g.
                    # just after its CRD was established; clients wait as Retry-After says, as
                    # client-go does.
                    await asyncio.sleep(min(float(resp.headers.get("Retry-After", "1")), 5.0))
                    continue
                if resp.status == 404 and method == "GET":
                    return None
                if resp.status == 404:
                    raise NotFoundError(f"{method} {path}: HTTP 404: {(await resp.text())[:300]}")
                if resp.status >= 300:
                    raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {(await resp.text())[:300]}")
                return await resp.json(content_type=None)
        raise RuntimeError(f"{method} {path}: HTTP 429 {TOO_MANY_REQUESTS_TRIES} times")

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
