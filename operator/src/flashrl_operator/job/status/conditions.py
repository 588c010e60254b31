"""Kubernetes-style conditions: small pure checks and the merge that keeps transition times honest.

A check is a function from what the operator observed to a :class:`Verdict` (status, reason,
message) for one condition type, in the style of cert-manager's policy chains: each decision is
small, named and table-tested. :func:`merge_conditions` turns verdicts into the wire form and keeps
``lastTransitionTime`` unchanged unless the condition's status actually flipped, as the API
conventions require (a changing timestamp on every reconcile would also make every status patch a
write).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from flashrl_api.status import ConditionType

ConditionStatus = Literal["True", "False", "Unknown"]

#: The condition types the operator maintains, in the order they are written.
CONDITION_TYPES: tuple[str, ...] = tuple(ConditionType)

#: Kubernetes caps condition messages at 32768 characters; keep ours well inside it.
MAX_CONDITION_MESSAGE = 4096


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check: whether a condition holds, a CamelCase reason and a human message."""

    status: ConditionStatus
    reason: str
    message: str = ""

    @property
    def holds(self) -> bool:
        """``status == "True"``."""
        return self.status == "True"


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut so a reader knows there was more."""
    if len(text) <= limit:
        return text
    marker = "... (truncated)"
    return text[: max(0, limit - len(marker))] + marker


def merge_conditions(
    previous: Iterable[Mapping[str, Any]],
    verdicts: Mapping[str, Verdict],
    now: str,
) -> list[dict[str, Any]]:
    """Return the new conditions list, one entry per type in ``verdicts``.

    ``lastTransitionTime`` is carried over from ``previous`` when the status did not change, and set
    to ``now`` when it did (or when the condition is new). Conditions of other types that someone
    else wrote are kept after ours, untouched.
    """
    old_by_type: dict[str, Mapping[str, Any]] = {}
    for cond in previous:
        ctype = cond.get("type")
        if isinstance(ctype, str):
            old_by_type[ctype] = cond
    ordered = [t for t in CONDITION_TYPES if t in verdicts] + sorted(set(verdicts) - set(CONDITION_TYPES))
    result: list[dict[str, Any]] = []
    for ctype in ordered:
        verdict = verdicts[ctype]
        old = old_by_type.get(ctype)
        transition = now
        if old is not None and old.get("status") == verdict.status and old.get("lastTransitionTime"):
            transition = str(old["lastTransitionTime"])
        result.append(
            {
                "type": str(ctype),
                "status": verdict.status,
                "reason": str(verdict.reason),
                "message": truncate(verdict.message, MAX_CONDITION_MESSAGE),
                "lastTransitionTime": transition,
            }
        )
    result.extend(dict(c) for t, c in old_by_type.items() if t not in verdicts)
    return result


def find_condition(conditions: Sequence[Mapping[str, Any]], ctype: str) -> Mapping[str, Any] | None:
    """The condition of type ``ctype``, or ``None``."""
    for cond in conditions:
        if cond.get("type") == ctype:
            return cond
    return None
