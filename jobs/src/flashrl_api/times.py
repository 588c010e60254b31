"""The project's timestamps, written and read in one place.

Everything the operator and the launcher write into a status, a condition, an annotation or an
environment variable is RFC 3339 in UTC with whole seconds and ``Z`` (``2026-01-02T03:04:05Z``), as the
API server writes ``creationTimestamp`` and metav1.Time. The launcher's phase split alone carries
milliseconds (:func:`rfc3339_millis`), being finer than a second. Both the launcher and the operator
import this module (``flashrl_api`` is what they share).
"""

from __future__ import annotations

import datetime
from typing import Final

#: RFC 3339, UTC, whole seconds, ``Z``: the one format of the status.
FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"
#: The same instant without separators, for file names (``20260102T030405Z``).
COMPACT_FORMAT: Final = "%Y%m%dT%H%M%SZ"


def rfc3339(moment: datetime.datetime) -> str:
    """``moment`` in UTC, whole seconds, ``Z`` (a naive datetime is taken as local time)."""
    return moment.astimezone(datetime.UTC).strftime(FORMAT)


def now_rfc3339() -> str:
    """The current time as :func:`rfc3339` writes it."""
    return rfc3339(datetime.datetime.now(datetime.UTC))


def rfc3339_millis(seconds: float) -> str:
    """Unix seconds as RFC 3339 in UTC with milliseconds and ``Z``."""
    text = datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def compact(moment: datetime.datetime) -> str:
    """``moment`` in UTC for a file name, e.g. ``20260102T030405Z``."""
    return moment.astimezone(datetime.UTC).strftime(COMPACT_FORMAT)


def parse_rfc3339(value: object, *, naive_is_utc: bool = True) -> datetime.datetime | None:
    """An RFC 3339 timestamp (``Z`` or an offset, with or without fractions) as an aware datetime;
    ``None`` when it is not one. Without an offset it is UTC, or ``None`` when ``naive_is_utc`` is off."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.UTC) if naive_is_utc else None
    return moment


__all__ = [
    "COMPACT_FORMAT",
    "FORMAT",
    "compact",
    "now_rfc3339",
    "parse_rfc3339",
    "rfc3339",
    "rfc3339_millis",
]
