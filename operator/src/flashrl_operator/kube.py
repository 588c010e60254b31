"""The operator's only door to the Kubernetes API: :class:`KubeClient`, a small typed async client.

kopf watches the FlashRLJobs and RayJobs; everything else the operator reads or writes (the
children of a FlashRLJob, its status, Events) goes through :class:`KubeClient`, whose public
surface is all the reconciler uses:

========================  =============================================================
``get``                   one object, or ``None`` when it does not exist
``list_objects``          the objects matching a label selector (paginated with ``limit``/``continue``)
``apply``                 server-side apply (``application/apply-patch+yaml``) under :data:`FIELD_MANAGER`
``patch``                 JSON merge patch of an object
``patch_status``          JSON merge patch of an object's ``status`` subresource
``delete``                delete an object (``False`` when it was already gone)
``create_event``          a core/v1 Event about an object (never fatal)
========================  =============================================================

Failures are the project's own types (:mod:`flashrl_operator.errors`), never the transport's or
kopf's. Credentials come from the same place kopf's login takes them (:func:`resolve_credentials`):
an explicit server (tests, the demo), else the pod's service account, else ``$KUBECONFIG`` and its
current context (running its ``exec`` credential plugin, if it names one), read when called so a
changed environment or a rotated token is honoured; a 401 or an expiry renews them once.
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
from typing import Any, Final

import aiohttp
import kopf

from flashrl_operator.credentials import CredentialError, load_exec_config, run_exec_plugin
from flashrl_operator.errors import ApiError, ConflictError, RejectedError, TransientError, classify
from flashrl_operator.kinds import EVENT, describe, resource_of
from flashrl_operator.resource import Resource

logger = logging.getLogger(__name__)

#: Kubernetes rejects Event messages over 1 KiB in some versions; stay under it.
MAX_EVENT_MESSAGE: Final = 1024
#: The component named in Events we post.
COMPONENT: Final = "flashrl-operator"


#: The field manager of every write (server-side apply, patches, Events).
FIELD_MANAGER: Final = COMPONENT
#: Page size of list requests.
LIST_PAGE_SIZE: Final = 500
#: Content type of a server-side apply.
APPLY_PATCH: Final = "application/apply-patch+yaml"
MERGE_PATCH: Final = "application/merge-patch+json"

__all__ = [
    "FIELD_MANAGER",
    "ApiError",
    "ConflictError",
    "KubeClient",
    "RejectedError",
    "TransientError",
    "resolve_credentials",
]


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
                raise TransientError(f"{what}: cannot renew credentials: {exc}", self._retry_delay) from exc
            if info is None:
                raise TransientError(f"{what}: no credentials to renew with", self._retry_delay)
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
            raise TransientError(
                f"{what}: the API server did not answer in time", self._retry_delay
            ) from None
        except aiohttp.ClientError as exc:
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}", self._retry_delay) from exc
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
        raise classify(what, status, reason, message, retry_after, self._retry_delay)

    # --- the public surface ----------------------------------------------------------------------

    async def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        try:
            return await self._request(
                "GET", resource.path(namespace, name), f"get {resource.describe(namespace, name)}"
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list_objects(
        self, resource: Resource, namespace: str, label_selector: str, *, page_size: int = LIST_PAGE_SIZE
    ) -> list[dict[str, Any]]:
        """Objects of one namespace matching ``label_selector``, every page of them."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            params = {"labelSelector": label_selector, "limit": str(page_size)}
            if token:
                params["continue"] = token
            body = await self._request(
                "GET",
                f"{resource.path(namespace)}?{urllib.parse.urlencode(params)}",
                f"list {resource.plural} in {namespace} ({label_selector})",
            )
            page = body.get("items")
            if isinstance(page, list):
                items.extend(item for item in page if isinstance(item, dict))
            token = str((body.get("metadata") or {}).get("continue") or "") or None
            if token is None:
                return items

    async def apply(self, obj: Mapping[str, Any], *, force: bool) -> dict[str, Any]:
        """Server-side apply ``obj`` as :data:`FIELD_MANAGER`: creates it, or sets the fields it names.

        Fields this manager applied before and ``obj`` no longer names are removed by the server.
        Without ``force``, a field another manager set to a different value is a
        :class:`ConflictError`; with it, the field is taken over.
        """
        resource = resource_of(obj)
        meta = obj["metadata"]
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"})
        path = f"{resource.path(str(meta['namespace']), str(meta['name']))}?{query}"
        return await self._write("PATCH", path, f"apply {describe(obj)}", obj, APPLY_PATCH)

    async def patch(
        self, resource: Resource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """JSON-merge-patch an object as :data:`FIELD_MANAGER`."""
        return await self._merge_patch(resource, namespace, name, patch, None)

    async def patch_status(
        self, resource: Resource, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """JSON-merge-patch the object's ``status`` (only the keys in ``status`` change)."""
        return await self._merge_patch(resource, namespace, name, {"status": dict(status)}, "status")

    async def delete(self, resource: Resource, namespace: str, name: str) -> bool:
        """Delete an object; ``False`` if it was already gone."""
        try:
            await self._request(
                "DELETE", resource.path(namespace, name), f"delete {resource.describe(namespace, name)}"
            )
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def create_event(
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
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER})
        try:
            await self._request(
                "POST", f"{EVENT.path(namespace)}?{query}", f"post Event about {describe(involved)}", event
            )
        except (ApiError, TransientError) as exc:
            logger.warning("Event not posted: %s", exc)

    # --- helpers -----------------------------------------------------------------------------------

    async def _merge_patch(
        self, resource: Resource, namespace: str, name: str, patch: Mapping[str, Any], subresource: str | None
    ) -> dict[str, Any]:
        what = f"patch {resource.describe(namespace, name)}" + (f"/{subresource}" if subresource else "")
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER})
        path = f"{resource.path(namespace, name, subresource)}?{query}"
        return await self._write("PATCH", path, what, dict(patch), MERGE_PATCH)

    async def _write(
        self, method: str, path: str, what: str, body: Any, content_type: str | None = None
    ) -> dict[str, Any]:
        try:
            return await self._request(method, path, what, body, content_type)
        except (ConflictError, RejectedError):
            raise
        except ApiError as exc:  # 404 on a write: the object or its namespace vanished meanwhile.
            raise TransientError(str(exc), self._retry_delay) from exc


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
