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

Only the kopf handlers translate :class:`TransientError` into kopf's retry (``kopf.TemporaryError``).
"""

from __future__ import annotations


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
