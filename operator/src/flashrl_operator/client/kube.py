"""The operator's only door to the Kubernetes API: :class:`KubeClient`, over ``kubernetes_asyncio``.

kopf watches the FlashRLJobs and RayJobs; everything else the operator reads or writes (the
children of a FlashRLJob, its status, Events) goes through :class:`KubeClient`, whose public
surface is all the reconciler uses:

========================  =============================================================
``get``                   one object, or ``None`` when it does not exist
``list_objects``          the objects matching a label (and field) selector, in one namespace or all
                          (paginated with ``limit``/``continue``)
``create``                create an object, or ``None`` when one of that name exists (409 AlreadyExists)
``apply``                 server-side apply (``application/apply-patch+yaml``) under :data:`FIELD_MANAGER`
``patch``                 JSON merge patch of an object
``patch_status``          JSON merge patch of an object's ``status`` subresource
``delete``                delete an object (``False`` when it was already gone), optionally only if its
                          UID is the one given
``create_event``          a core/v1 Event about an object (never fatal)
========================  =============================================================

Requests go through the official client family's async client (``kubernetes_asyncio``'s generic
``ApiClient.call_api``, so one code path serves every kind, custom or not), with the credentials of
:class:`~flashrl_operator.client.login.Credentials`, the same ones kopf's watches use. Failures are the
project's own types (:mod:`flashrl_operator.client.errors`), never the library's or kopf's. A 401 loads
the credentials afresh once (a rotated service-account token, an expired plugin token) and repeats
the request; requests already in flight finish on the old connection pool.

A 403 is a refusal only once the API server is settled: the client remembers when it last could not
reach the server or got a 5xx (a restart), and on a 403 within
:data:`~flashrl_operator.client.errors.UNSETTLED_SECONDS` of that, or while ``GET /readyz`` fails, raises
a :class:`TransientError` instead (a restarted kube-apiserver answers 403 until its authorizer has
synced). So a restart never fails a job as ``ChildRejected``, and a 403 that persists does.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from flashrl_api.times import now_rfc3339
from flashrl_operator.client.errors import (
    UNSETTLED_SECONDS,
    ApiError,
    ConflictError,
    RejectedError,
    TransientError,
    from_library,
    status_of,
)
from flashrl_operator.client.login import CredentialError, Credentials
from flashrl_operator.vocab.kinds import EVENT, describe, resource_of
from flashrl_operator.vocab.resource import Resource

logger = logging.getLogger(__name__)

#: Kubernetes rejects Event messages over 1 KiB in some versions; stay under it.
MAX_EVENT_MESSAGE: Final = 1024
#: The component named in Events we post, and the client's User-Agent.
COMPONENT: Final = "flashrl-operator"
#: The field manager of every write (server-side apply, patches, Events).
FIELD_MANAGER: Final = COMPONENT
#: Page size of list requests.
LIST_PAGE_SIZE: Final = 500
#: Content type of a server-side apply.
APPLY_PATCH: Final = "application/apply-patch+yaml"
MERGE_PATCH: Final = "application/merge-patch+json"
#: What the generic call deserializes a response body into: the JSON as it is.
_AS_JSON: Final = {200: "object", 201: "object", 202: "object"}

__all__ = [
    "FIELD_MANAGER",
    "ApiError",
    "ConflictError",
    "CredentialError",
    "Credentials",
    "KubeClient",
    "RejectedError",
    "TransientError",
]


class KubeClient:
    """The few calls the operator makes. Create it (:meth:`connect`) and close it in the same loop."""

    def __init__(
        self,
        api: ApiClient,
        credentials: Credentials,
        *,
        request_timeout: float = 30.0,
        retry_delay: float = 1.0,
        unsettled_seconds: float = UNSETTLED_SECONDS,
    ) -> None:
        self._api = api
        self._unsettled_seconds = unsettled_seconds
        #: ``time.monotonic()`` until which the API server counts as just restarted (see the module).
        self._unsettled_until = float("-inf")
        self._credentials = credentials
        self._request_timeout = request_timeout
        self._retry_delay = retry_delay
        self._renewals = 0
        self._renew_lock = asyncio.Lock()
        self._in_flight: dict[ApiClient, int] = {}
        self._retired: set[ApiClient] = set()

    @classmethod
    async def connect(
        cls,
        credentials: Credentials,
        *,
        request_timeout: float = 30.0,
        retry_delay: float = 1.0,
        unsettled_seconds: float = UNSETTLED_SECONDS,
    ) -> KubeClient:
        """A client with ``credentials`` loaded now (raises :class:`CredentialError` without any)."""
        api = _api_client(await credentials.configuration())
        return cls(
            api,
            credentials,
            request_timeout=request_timeout,
            retry_delay=retry_delay,
            unsettled_seconds=unsettled_seconds,
        )

    @property
    def renewals(self) -> int:
        """How many times the credentials were loaded afresh after a 401."""
        return self._renewals

    async def close(self) -> None:
        """Release the connection pools."""
        for api in (*self._retired, self._api):
            await api.close()
        self._retired.clear()

    async def _renew(self, seen: int, what: str) -> None:
        """Load the credentials afresh, unless another request already did since ``seen``."""
        async with self._renew_lock:
            if self._renewals != seen:
                return
            try:
                config = await self._credentials.configuration()
            except CredentialError as exc:
                raise TransientError(f"{what}: cannot renew credentials: {exc}", self._retry_delay) from exc
            old, self._api = self._api, _api_client(config)
            self._renewals += 1
            logger.info("Renewed the API credentials")
            if self._in_flight.get(old, 0):
                self._retired.add(old)
            else:
                await old.close()

    async def _send(
        self,
        method: str,
        path: str,
        what: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str | None,
        *,
        probe: bool = False,
    ) -> dict[str, Any]:
        api = self._api
        self._in_flight[api] = self._in_flight.get(api, 0) + 1
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            result = await api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                response_types_map=_AS_JSON,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=True,
                _request_timeout=self._request_timeout,
            )
        except Exception as exc:
            error = from_library(exc, what, self._retry_delay)
            if isinstance(error, TransientError) and status_of(exc) not in (401, 429):
                self._mark_unsettled()  # unreachable, timed out or 5xx: it may be restarting
            elif status_of(exc) == 403 and not probe and await self._unsettled():
                error = from_library(exc, what, self._retry_delay, unsettled=True)
            if status_of(exc) == 401:
                raise _UnauthorizedError(error) from exc
            if error is exc:
                raise
            raise error from exc
        finally:
            left = self._in_flight.pop(api) - 1
            if left:
                self._in_flight[api] = left
            elif api in self._retired:
                self._retired.discard(api)
                await api.close()
        return result if isinstance(result, dict) else {}

    def _mark_unsettled(self) -> None:
        """The API server may have just restarted (a request failed to reach it, timed out or got a
        5xx): a 403 in the next :data:`~flashrl_operator.client.errors.UNSETTLED_SECONDS` is retried."""
        self._unsettled_until = time.monotonic() + self._unsettled_seconds

    async def _unsettled(self) -> bool:
        """Whether a 403 now may be the API server's warm-up: within the window, or ``/readyz`` fails
        (unreachable, 5xx, or itself refused; a server that does not serve it says nothing)."""
        if time.monotonic() < self._unsettled_until:
            return True
        try:
            await self._send("GET", "/readyz", "get /readyz", None, None, None, probe=True)
        except (TransientError, RejectedError, _UnauthorizedError):
            self._mark_unsettled()
            return True
        except ApiError:
            return False
        return False

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        body: Any = None,
        content_type: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        seen = self._renewals
        try:
            return await self._send(method, path, what, query, body, content_type)
        except _UnauthorizedError:
            await self._renew(seen, what)
        try:
            return await self._send(method, path, what, query, body, content_type)
        except _UnauthorizedError as exc:
            # The operator's credentials, not the job, are at fault: never fail a job for it.
            raise TransientError(str(exc.error), self._retry_delay) from exc.error

    # --- the public surface ----------------------------------------------------------------------

    async def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist (``namespace`` ``None``: a cluster-scoped
        kind's)."""
        what = resource.describe(namespace, name) if namespace is not None else f"{resource.kind} {name}"
        try:
            return await self._request("GET", resource.path(namespace, name), f"get {what}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def read_path(self, path: str) -> dict[str, Any] | None:
        """GET any API path (a cluster-scoped object, a list), or ``None`` on 404 (``flashrl preflight``)."""
        try:
            return await self._request("GET", path, f"get {path}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list_objects(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str,
        *,
        field_selector: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> list[dict[str, Any]]:
        """Objects of one namespace (``None``: a cluster-scoped kind, or every namespace) matching
        ``label_selector`` (and ``field_selector``), every page of them."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        where = f"in {namespace}" if namespace is not None else "in the cluster"
        selectors = ", ".join(s for s in (label_selector, field_selector) if s)
        while True:
            params = {"labelSelector": label_selector, "limit": str(page_size)}
            if field_selector:
                params["fieldSelector"] = field_selector
            if token:
                params["continue"] = token
            body = await self._request(
                "GET",
                resource.path(namespace),
                f"list {resource.plural} {where} ({selectors})",
                query=params,
            )
            page = body.get("items")
            if isinstance(page, list):
                items.extend(item for item in page if isinstance(item, dict))
            token = str((body.get("metadata") or {}).get("continue") or "") or None
            if token is None:
                return items

    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create ``obj`` (``POST``) as :data:`FIELD_MANAGER`; ``None`` when an object of that name exists.

        The one write that cannot touch an existing object: the server refuses it with 409
        AlreadyExists, atomically. (An apply creates a missing object too, but merges into an existing
        one.)
        """
        meta = obj["metadata"]
        resource = resource_of(obj)
        path = resource.path(str(meta["namespace"]))
        query = {"fieldManager": FIELD_MANAGER}
        try:
            return await self._write("POST", path, f"create {describe(obj)}", dict(obj), None, query)
        except ConflictError:  # on a create, 409 is the name taken (AlreadyExists, or still being deleted)
            return None

    async def apply(self, obj: Mapping[str, Any], *, force: bool) -> dict[str, Any]:
        """Server-side apply ``obj`` as :data:`FIELD_MANAGER`: creates it, or sets the fields it names.

        Fields this manager applied before and ``obj`` no longer names are removed by the server.
        Without ``force``, a field another manager set to a different value is a
        :class:`ConflictError`; with it, the field is taken over.
        """
        resource = resource_of(obj)
        meta = obj["metadata"]
        query = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
        path = resource.path(str(meta["namespace"]), str(meta["name"]))
        return await self._write("PATCH", path, f"apply {describe(obj)}", obj, APPLY_PATCH, query)

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """JSON-merge-patch an object as :data:`FIELD_MANAGER`; with ``resource_version``, only that
        version of it (see :meth:`patch_status`)."""
        return await self._merge_patch(resource, namespace, name, _versioned(patch, resource_version), None)

    async def patch_status(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """JSON-merge-patch the object's ``status`` (only the keys in ``status`` change).

        With ``resource_version``, the patch applies only to that version of the object: the server
        compares it with the stored one and refuses any other with 409 Conflict
        (:class:`ConflictError`), atomically. A status computed from one version of the object is so
        never written over a newer one (someone else's write in between, or a stale copy).
        """
        patch = _versioned({"status": dict(status)}, resource_version)
        return await self._merge_patch(resource, namespace, name, patch, "status")

    async def delete(self, resource: Resource, namespace: str, name: str, *, uid: str | None = None) -> bool:
        """Delete an object (its dependents in the background); ``False`` if it was already gone.

        With ``uid``, only the object with that UID: another one under the name since is a
        :class:`ConflictError` (the server checks the precondition), and stays.
        """
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        try:
            await self._request(
                "DELETE",
                resource.path(namespace, name),
                f"delete {resource.describe(namespace, name)}",
                options,
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
        try:
            await self._request(
                "POST",
                EVENT.path(namespace),
                f"post Event about {describe(involved)}",
                event,
                query={"fieldManager": FIELD_MANAGER},
            )
        except (ApiError, TransientError) as exc:
            logger.warning("Event not posted: %s", exc)

    # --- helpers -----------------------------------------------------------------------------------

    async def _merge_patch(
        self, resource: Resource, namespace: str, name: str, patch: Mapping[str, Any], subresource: str | None
    ) -> dict[str, Any]:
        what = f"patch {resource.describe(namespace, name)}" + (f"/{subresource}" if subresource else "")
        path = resource.path(namespace, name, subresource)
        query = {"fieldManager": FIELD_MANAGER}
        return await self._write("PATCH", path, what, dict(patch), MERGE_PATCH, query)

    async def _write(
        self,
        method: str,
        path: str,
        what: str,
        body: Any,
        content_type: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        try:
            return await self._request(method, path, what, body, content_type, query)
        except (ConflictError, RejectedError):
            raise
        except ApiError as exc:  # 404 on a write: the object or its namespace vanished meanwhile.
            raise TransientError(str(exc), self._retry_delay) from exc


def _versioned(patch: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
    """``patch`` with ``metadata.resourceVersion`` set: the server's optimistic-concurrency precondition."""
    if resource_version is None:
        return dict(patch)
    meta = {**(patch.get("metadata") or {}), "resourceVersion": resource_version}
    return {**patch, "metadata": meta}


class _UnauthorizedError(Exception):
    """A 401, before the caller decides whether to renew and repeat."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        super().__init__(str(error))


def _api_client(config: Any) -> ApiClient:
    api = ApiClient(configuration=config)
    api.user_agent = COMPONENT
    return api
