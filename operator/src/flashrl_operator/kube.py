"""The operator's only door to the Kubernetes API: a small typed async client over aiohttp.

kopf watches and patches its own bookkeeping; everything else the operator reads or writes (the
children of a FlashRLJob, its status, Events) goes through :class:`KubeClient`. Keeping all I/O here
keeps the rest of the operator pure and makes the retry policy one decision instead of many:

* 404 on read is an answer (``None``); 409 on create is :class:`ConflictError` (the caller fetches and
  patches, which makes creation idempotent);
* timeouts, connection errors, 404 on write, 429 and 5xx are transient: :class:`kopf.TemporaryError`,
  which kopf retries with backoff;
* any other 4xx (422 validation, 403 RBAC, 400) is :class:`RejectedError`: retrying cannot help, so the
  caller reports which object and why in a condition.
* 401 renews the credentials once and repeats the request (see :class:`KubeClient`); a second 401 is
  transient too: the operator's credentials are at fault, not the job.

Credentials come from the same place kopf's login takes them (:func:`resolve_credentials`): an
explicit server (tests, the demo), else the pod's service account, else ``$KUBECONFIG`` and its
current context (running its ``exec`` credential plugin, if it names one), read when called so a
changed environment or a rotated token is honoured.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import os
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import kopf

from flashrl_api import GROUP, KIND, PLURAL, VERSION
from flashrl_operator.credentials import CredentialError, load_exec_config, run_exec_plugin

logger = logging.getLogger(__name__)

#: Kubernetes rejects Event messages over 1 KiB in some versions; stay under it.
MAX_EVENT_MESSAGE: Final = 1024
#: The component named in Events we post.
COMPONENT: Final = "flashrl-operator"


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    api_version: str
    kind: str
    plural: str

    def path(self, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path of the collection, an object, or one of its subresources."""
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        path = f"{base}/namespaces/{namespace}/{self.plural}"
        if name is not None:
            path += f"/{name}"
            if subresource is not None:
                path += f"/{subresource}"
        return path


FLASHRL_JOB: Final = Resource(f"{GROUP}/{VERSION}", KIND, PLURAL)
RAY_JOB: Final = Resource("ray.io/v1", "RayJob", "rayjobs")
#: Created by KubeRay for a RayJob; the operator only reads it (``get``) for ClusterReady.
RAY_CLUSTER: Final = Resource("ray.io/v1", "RayCluster", "rayclusters")
EVENT: Final = Resource("v1", "Event", "events")
#: The RayCluster's pods; the operator only lists them (``list``) while a cluster is starting.
POD: Final = Resource("v1", "Pod", "pods")

#: Every kind the operator reads or writes (the RBAC in docs/operator.md lists the same).
RESOURCES: Final[dict[tuple[str, str], Resource]] = {
    (r.api_version, r.kind): r
    for r in (
        Resource("v1", "ServiceAccount", "serviceaccounts"),
        Resource("v1", "ConfigMap", "configmaps"),
        Resource("rbac.authorization.k8s.io/v1", "Role", "roles"),
        Resource("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        RAY_JOB,
        RAY_CLUSTER,
        FLASHRL_JOB,
        EVENT,
        POD,
    )
}


def resource_of(obj: Mapping[str, Any]) -> Resource:
    """The :class:`Resource` of a rendered object (by apiVersion and kind)."""
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    try:
        return RESOURCES[key]
    except KeyError:
        raise ValueError(f"the operator does not manage {key[1]} ({key[0]})") from None


def describe(obj: Mapping[str, Any]) -> str:
    """``Kind namespace/name`` for messages."""
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}"


class ApiError(Exception):
    """An API request failed with an HTTP status."""

    def __init__(self, what: str, status: int, reason: str, message: str) -> None:
        self.what = what
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{what}: HTTP {status} {reason}: {message}".rstrip(": "))


class ConflictError(ApiError):
    """409: the object already exists (on create) or changed underneath (on update)."""


class RejectedError(ApiError):
    """A 4xx that retrying cannot fix: invalid object (422), forbidden (403), bad request (400)."""


def resolve_credentials(
    settings: kopf.OperatorSettings, server: str | None = None, environ: Mapping[str, str] | None = None
) -> kopf.ConnectionInfo | None:
    """Credentials like kubectl's: explicit server, else in-cluster service account, else kubeconfig.

    A kubeconfig user with an ``exec`` credential plugin (EKS, GKE, AKS) gets its token or client
    certificate, and their expiry, from running the plugin (:mod:`flashrl_operator.credentials`).
    Blocking (it may read files and run a command): call it off the event loop.
    Raises :class:`~flashrl_operator.credentials.CredentialError` when the plugin fails.
    """
    if server is not None:
        return kopf.ConnectionInfo(server=server)
    info = kopf.login_with_service_account(settings=settings)
    if info is not None:
        return info
    info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        return None
    env = os.environ if environ is None else environ
    plugin = load_exec_config(env)
    if plugin is None:
        return info
    issued = run_exec_plugin(plugin, env)
    if issued.client_certificate_data is not None:
        info = dataclasses.replace(
            info,
            certificate_path=None,
            private_key_path=None,
            certificate_data=issued.client_certificate_data,
            private_key_data=issued.client_key_data,
        )
    return dataclasses.replace(info, token=issued.token or info.token, expiration=issued.expiration)


#: Credentials are renewed this long before they expire, so no request goes out with a stale token.
RENEW_BEFORE_EXPIRY: Final = datetime.timedelta(seconds=60)


def _session_for(info: kopf.ConnectionInfo, request_timeout: float) -> aiohttp.ClientSession:
    ssl_context = info.as_ssl_context() if info.server.startswith("https") else None
    connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else False, limit=64)
    return aiohttp.ClientSession(
        connector=connector,
        headers={**info.as_http_headers(), "User-Agent": COMPONENT},
        timeout=aiohttp.ClientTimeout(total=request_timeout),
        trust_env=info.trust_env,
    )


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes it (second precision, ``Z``)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeClient:
    """Typed helpers for the few calls the operator makes. Create and close it in the same loop.

    With a ``credentials`` source (see :meth:`connect`) the client renews its credentials shortly
    before they expire and once after an HTTP 401 (a rotated service-account token, an expired
    plugin token), then repeats the request once. Requests already in flight finish on the old
    connection pool, which is closed when the last of them is done.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        server: str,
        retry_delay: float = 1.0,
        *,
        credentials: Callable[[], kopf.ConnectionInfo | None] | None = None,
        expiration: datetime.datetime | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        self._session = session
        self._server = server.rstrip("/")
        self._retry_delay = retry_delay
        self._credentials = credentials
        self._expiration = _aware(expiration)
        self._request_timeout = request_timeout
        self._renewals = 0
        self._renew_lock = asyncio.Lock()
        self._in_flight: dict[aiohttp.ClientSession, int] = {}
        self._retired: set[aiohttp.ClientSession] = set()

    @classmethod
    def connect(
        cls,
        info: kopf.ConnectionInfo,
        request_timeout: float = 30.0,
        retry_delay: float = 1.0,
        credentials: Callable[[], kopf.ConnectionInfo | None] | None = None,
    ) -> KubeClient:
        """A client for ``info`` (server, CA, client certificate and key, token or basic auth).

        ``credentials`` (blocking; run in a thread) gives fresh credentials when these expire or are
        refused; typically :func:`resolve_credentials` bound to the operator's settings.
        """
        return cls(
            _session_for(info, request_timeout),
            info.server,
            retry_delay,
            credentials=credentials,
            expiration=info.expiration,
            request_timeout=request_timeout,
        )

    @property
    def renewals(self) -> int:
        """How many times the credentials were renewed."""
        return self._renewals

    async def close(self) -> None:
        """Release the connection pools."""
        for session in (*self._retired, self._session):
            await session.close()
        self._retired.clear()

    async def _renew(self, seen: int, what: str) -> None:
        """Fetch fresh credentials, unless another request already did since ``seen``."""
        if self._credentials is None:
            return
        async with self._renew_lock:
            if self._renewals != seen:
                return
            try:
                info = await asyncio.to_thread(self._credentials)
            except CredentialError as exc:
                raise kopf.TemporaryError(
                    f"{what}: cannot renew credentials: {exc}", delay=self._retry_delay
                ) from exc
            if info is None:
                raise kopf.TemporaryError(f"{what}: no credentials to renew with", delay=self._retry_delay)
            old, self._session = self._session, _session_for(info, self._request_timeout)
            self._expiration = _aware(info.expiration)
            self._renewals += 1
            logger.info(
                "Renewed the API credentials%s",
                f" (valid until {info.expiration})" if info.expiration else "",
            )
            if self._in_flight.get(old, 0):
                self._retired.add(old)
            else:
                await old.close()

    def _expiring(self) -> bool:
        return self._expiration is not None and (
            datetime.datetime.now(datetime.UTC) >= self._expiration - RENEW_BEFORE_EXPIRY
        )

    async def _send(
        self, method: str, path: str, what: str, body: Any, headers: Mapping[str, str]
    ) -> tuple[int, str, str | None]:
        session = self._session
        self._in_flight[session] = self._in_flight.get(session, 0) + 1
        try:
            async with session.request(method, self._server + path, json=body, headers=dict(headers)) as resp:
                return resp.status, await resp.text(), resp.headers.get("Retry-After")
        except TimeoutError:
            raise kopf.TemporaryError(
                f"{what}: the API server did not answer in time", delay=self._retry_delay
            ) from None
        except aiohttp.ClientError as exc:
            raise kopf.TemporaryError(
                f"{what}: {type(exc).__name__}: {exc}", delay=self._retry_delay
            ) from exc
        finally:
            left = self._in_flight.pop(session) - 1
            if left:
                self._in_flight[session] = left
            elif session in self._retired:
                self._retired.discard(session)
                await session.close()

    async def _request(
        self, method: str, path: str, what: str, body: Any = None, content_type: str | None = None
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if content_type else {}
        if self._expiring():
            await self._renew(self._renewals, what)
        seen = self._renewals
        status, text, retry_after = await self._send(method, path, what, body, headers)
        if status == 401 and self._credentials is not None:
            await self._renew(seen, what)
            status, text, retry_after = await self._send(method, path, what, body, headers)
        if status < 300:
            return _json_object(text)
        payload = _json_object(text)
        reason = str(payload.get("reason") or "")
        message = str(payload.get("message") or text[:200])
        if status == 404:
            raise ApiError(what, status, reason or "NotFound", message)
        if status == 409:
            raise ConflictError(what, status, reason or "AlreadyExists", message)
        if status == 401:
            # The operator's credentials, not the job, are at fault: never fail a job for it.
            raise kopf.TemporaryError(
                f"{what}: the API server refused the operator's credentials (HTTP 401): {message}",
                delay=self._retry_delay,
            )
        if status == 429 or status >= 500:
            delay = self._retry_delay
            if retry_after and retry_after.isdigit():
                delay = max(delay, float(retry_after))
            raise kopf.TemporaryError(f"{what}: HTTP {status} {reason}: {message}", delay=delay)
        raise RejectedError(what, status, reason or "Invalid", message)

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        try:
            return await self._request(
                "GET", resource.path(namespace, name), f"get {resource.kind} {namespace}/{name}"
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list_objects(
        self, resource: Resource, namespace: str, label_selector: str
    ) -> list[dict[str, Any]]:
        """Objects of one namespace matching ``label_selector`` (an empty list when there are none)."""
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        body = await self._request(
            "GET",
            f"{resource.path(namespace)}?{query}",
            f"list {resource.plural} in {namespace} ({label_selector})",
        )
        items = body.get("items")
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj``; raises :class:`ConflictError` if it exists."""
        resource = resource_of(obj)
        namespace = str(obj["metadata"]["namespace"])
        return await self._write("POST", resource.path(namespace), f"create {describe(obj)}", obj)

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON-merge-patch an object (or its ``status`` subresource)."""
        what = f"patch {resource.kind} {namespace}/{name}" + (f"/{subresource}" if subresource else "")
        return await self._write(
            "PATCH",
            resource.path(namespace, name, subresource),
            what,
            patch,
            "application/merge-patch+json",
        )

    async def delete(self, resource: Resource, namespace: str, name: str) -> bool:
        """Delete an object; ``False`` if it was already gone."""
        try:
            await self._request(
                "DELETE", resource.path(namespace, name), f"delete {resource.kind} {namespace}/{name}"
            )
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def _write(
        self, method: str, path: str, what: str, body: Any, content_type: str | None = None
    ) -> dict[str, Any]:
        try:
            return await self._request(method, path, what, body, content_type)
        except (ConflictError, RejectedError):
            raise
        except ApiError as exc:  # 404 on a write: the object or its namespace vanished meanwhile.
            raise kopf.TemporaryError(str(exc), delay=self._retry_delay) from exc

    async def patch_job_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the FlashRLJob's ``status`` (only the keys in ``patch`` change)."""
        return await self.patch(FLASHRL_JOB, namespace, name, {"status": dict(patch)}, subresource="status")

    async def post_event(
        self, involved: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        """Post a core/v1 Event about ``involved``. Failure to post is logged, never fatal."""
        meta = involved.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        now = now_rfc3339()
        text = message if len(message) <= MAX_EVENT_MESSAGE else message[: MAX_EVENT_MESSAGE - 3] + "..."
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": text,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self._request(
                "POST", EVENT.path(namespace), f"post Event about {describe(involved)}", event
            )
        except (ApiError, kopf.TemporaryError) as exc:
            logger.warning("Event not posted: %s", exc)


def _aware(moment: datetime.datetime | None) -> datetime.datetime | None:
    """kopf allows naive expiry times, meaning UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=datetime.UTC)


def _json_object(text: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
