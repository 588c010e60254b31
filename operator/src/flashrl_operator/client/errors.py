"""The operator's own API error types: the one retry policy, independent of any client library.

The I/O layer (:mod:`flashrl_operator.client.kube`) maps every failure of the Kubernetes client onto these,
so the reconciler decides with ``except`` clauses and never sees HTTP or library types:

* 404 on read is an answer (``None``), not an error;
* :class:`ConflictError` (409): the object exists, or a server-side apply met a field another
  manager owns; the caller reads the object and converges on what is there;
* :class:`TransientError`: timeouts, connection errors, 404 on write (the namespace or object
  vanished meanwhile), 401 (the operator's credentials, not the job, are at fault), 429 and 5xx;
  retried after :attr:`TransientError.delay`, never reported on the job;
* :class:`RejectedError`: any other 4xx (422 validation, 403 RBAC, 400): retrying cannot help, so
  the caller reports which object and why in a condition. Except a 403 while the API server is
  *unsettled* (:data:`UNSETTLED_SECONDS` after the client last failed to reach it or got a 5xx, or while
  its ``/readyz`` fails): a restarted kube-apiserver answers 403 for a moment before its authorizer has
  synced the RBAC objects, so that 403 is a :class:`TransientError`; one that persists past the window
  is a refusal.

:func:`from_library` is the one place that knows the client library's failures
(``kubernetes_asyncio``'s ``ApiException``, aiohttp's connection errors, timeouts). What a
:class:`TransientError` leads to is decided in one place: the retry of ``run.intake`` (jobs and
experiments alike).
"""

from __future__ import annotations

import datetime
import json
from email.utils import parsedate_to_datetime
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


#: Seconds after the API server was last unreachable or answered 5xx (a restart) during which a 403 is
#: taken for its authorizer still warming up, and retried, rather than for RBAC refusing the request.
UNSETTLED_SECONDS = 30.0

#: Longest wait a Retry-After may ask for: a broken or hostile clock must not park a reconcile for days.
MAX_RETRY_AFTER_SECONDS = 3600.0


def retry_after_seconds(value: str | None, now: datetime.datetime | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in either of its forms (RFC 9110, section 10.2.3):
    delta-seconds (``120``) or an HTTP-date (``Wed, 21 Oct 2026 07:28:00 GMT``), measured from ``now``.

    ``None`` for a missing or unreadable value; a date in the past is 0; at most
    :data:`MAX_RETRY_AFTER_SECONDS`.
    """
    text = (value or "").strip()
    if not text:
        return None
    if text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_SECONDS)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; an obsolete form without a zone is read so
        when = when.replace(tzinfo=datetime.UTC)
    now = now or datetime.datetime.now(datetime.UTC)
    return min(max(0.0, (when - now).total_seconds()), MAX_RETRY_AFTER_SECONDS)


def classify(
    what: str,
    status: int,
    reason: str,
    message: str,
    retry_after: str | None,
    delay: float,
    now: datetime.datetime | None = None,
    *,
    unsettled: bool = False,
) -> Exception:
    """The project's exception for an HTTP error status (never called for 2xx); a 429 or 5xx waits at
    least what its ``Retry-After`` asks (either form, see :func:`retry_after_seconds`); a 403 while the
    server is ``unsettled`` (just restarted, not ready) is transient."""
    if status == 403 and unsettled:
        return TransientError(
            f"{what}: HTTP 403 {reason or 'Forbidden'} while the API server is not settled "
            f"(restarted or not ready: its authorizer may still be warming up): {message}",
            delay,
        )
    if status == 409:
        return ConflictError(what, status, reason or "AlreadyExists", message)
    if status == 404:
        return ApiError(what, status, reason or "NotFound", message)
    if status == 401:
        return TransientError(
            f"{what}: the API server refused the operator's credentials (HTTP 401): {message}", delay
        )
    if status == 429 or status >= 500:
        asked = retry_after_seconds(retry_after, now)
        if asked is not None:
            delay = max(delay, asked)
        return TransientError(f"{what}: HTTP {status} {reason}: {message}", delay)
    return RejectedError(what, status, reason or "Invalid", message)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a library error, if it is one."""
    return exc.status if isinstance(exc, ApiException) and isinstance(exc.status, int) else None


def from_library(exc: BaseException, what: str, delay: float, *, unsettled: bool = False) -> BaseException:
    """The project's exception for a failure of the client library (anything else unchanged);
    ``unsettled`` as in :func:`classify`."""
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
        return classify(what, exc.status, reason, message, retry_after, delay, unsettled=unsettled)
    if isinstance(exc, TimeoutError):
        return TransientError(f"{what}: the API server did not answer in time", delay)
    if isinstance(exc, aiohttp.ClientError):
        return TransientError(f"{what}: {type(exc).__name__}: {exc}", delay)
    return exc
