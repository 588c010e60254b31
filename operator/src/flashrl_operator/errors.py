"""The operator's own API error types: the one retry policy, independent of any client library.

The I/O layer (:mod:`flashrl_operator.kube`) maps every failure of the Kubernetes client onto these,
so the reconciler decides with ``except`` clauses and never sees HTTP or library types:

* 404 on read is an answer (``None``), not an error;
* :class:`ConflictError` (409): the object exists, or a server-side apply met a field another
  manager owns; the caller reads the object and converges on what is there;
* :class:`TransientError`: timeouts, connection errors, 404 on write (the namespace or object
  vanished meanwhile), 401 (the operator's credentials, not the job, are at fault), 429 and 5xx;
  retried after :attr:`TransientError.delay`, never reported on the job;
* :class:`RejectedError`: any other 4xx (422 validation, 403 RBAC, 400): retrying cannot help, so
  the caller reports which object and why in a condition.

:func:`from_library` is the one place that knows the client library's failures
(``kubernetes_asyncio``'s ``ApiException``, aiohttp's connection errors, timeouts). Only the kopf
handlers decide what a :class:`TransientError` means to kopf (``handlers.reconcile_with_retries``).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException


class ApiError(Exception):
    """An API request failed with an HTTP status."""

    def __init__(self, what: str, status: int, reason: str, message: str) -> None:
        self.what = what
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{what}: HTTP {status} {reason}: {message}".rstrip(": "))


class ConflictError(ApiError):
    """409: the object already exists, changed underneath, or an apply conflicts with another manager."""


class RejectedError(ApiError):
    """A 4xx that retrying cannot fix: invalid object (422), forbidden (403), bad request (400)."""


class TransientError(Exception):
    """A failure worth retrying after ``delay`` seconds (the server's Retry-After is a floor)."""

    def __init__(self, message: str, delay: float = 1.0) -> None:
        self.delay = delay
        super().__init__(message)


def classify(
    what: str, status: int, reason: str, message: str, retry_after: str | None, delay: float
) -> Exception:
    """The project's exception for an HTTP error status (never called for 2xx)."""
    if status == 409:
        return ConflictError(what, status, reason or "AlreadyExists", message)
    if status == 404:
        return ApiError(what, status, reason or "NotFound", message)
    if status == 401:
        return TransientError(
            f"{what}: the API server refused the operator's credentials (HTTP 401): {message}", delay
        )
    if status == 429 or status >= 500:
        if retry_after and retry_after.isdigit():
            delay = max(delay, float(retry_after))
        return TransientError(f"{what}: HTTP {status} {reason}: {message}", delay)
    return RejectedError(what, status, reason or "Invalid", message)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a library error, if it is one."""
    return exc.status if isinstance(exc, ApiException) and isinstance(exc.status, int) else None


def from_library(exc: BaseException, what: str, delay: float) -> BaseException:
    """The project's exception for a failure of the client library (anything else unchanged)."""
    if isinstance(exc, ApiException) and isinstance(exc.status, int) and exc.status >= 300:
        payload: Any = {}
        body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else str(exc.body or "")
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {}
        headers: Any = exc.headers
        retry_after = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
        reason = str(payload.get("reason") or "")
        message = str(payload.get("message") or body[:200])
        return classify(what, exc.status, reason, message, retry_after, delay)
    if isinstance(exc, TimeoutError):
        return TransientError(f"{what}: the API server did not answer in time", delay)
    if isinstance(exc, aiohttp.ClientError):
        return TransientError(f"{what}: {type(exc).__name__}: {exc}", delay)
    return exc
