"""Reading an object's ``metadata.ownerReferences``: the one place that walks them.

Only the reference marked ``controller: true`` (at most one, as the API server enforces) makes an
object someone's, in the sense of controller-runtime's ``SetControllerReference``; a name, a label or
a plain reference does not. Malformed entries (not mappings) are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def owner_references(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The object's ownerReferences that are mappings, in their order."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [ref for ref in refs if isinstance(ref, Mapping)] if isinstance(refs, list) else []


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference marked ``controller: true``, if any."""
    return next((ref for ref in owner_references(obj) if ref.get("controller") is True), None)


def is_controlled_by(obj: Mapping[str, Any], uid: str | None, kind: str | None = None) -> bool:
    """Whether the object's controller is the owner with this UID (and, when given, of this kind)."""
    ref = controller_of(obj)
    return (
        uid is not None
        and ref is not None
        and str(ref.get("uid")) == uid
        and (kind is None or ref.get("kind") == kind)
    )


def controller_name(obj: Mapping[str, Any], kind: str) -> str | None:
    """The name of the object's controller when it is of ``kind``, else None."""
    ref = controller_of(obj)
    return str(ref.get("name")) if ref is not None and ref.get("kind") == kind else None


def is_referenced_by(obj: Mapping[str, Any], uid: str, kind: str) -> bool:
    """Whether any ownerReference (controller or not) names the ``kind`` owner with this UID."""
    return any(ref.get("kind") == kind and str(ref.get("uid")) == uid for ref in owner_references(obj))


def owner_uids(obj: Mapping[str, Any]) -> set[str]:
    """The UIDs of every owner the object references."""
    return {str(ref.get("uid")) for ref in owner_references(obj)}


def describe_controller(obj: Mapping[str, Any]) -> str:
    """``its controller is <kind> <name> (uid <uid>)`` or ``it has no controller``, for messages."""
    ref = controller_of(obj)
    if ref is None:
        return "it has no controller"
    return f"its controller is {ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})"


__all__ = [
    "controller_name",
    "controller_of",
    "describe_controller",
    "is_controlled_by",
    "is_referenced_by",
    "owner_references",
    "owner_uids",
]
