"""Desired children versus live ones: what to patch, and which spec edits a running job refuses. Pure.

A RayJob cannot be reshaped once KubeRay has built its cluster (the cluster spec and verl's command
are fixed at submission), so the operator records the spec a RayJob was made from in an annotation
on it and compares later specs against that record. Only the lifecycle knobs KubeRay honours on a
live RayJob (:data:`MUTABLE_SPEC_FIELDS`) are patched through; any other edit is reported by its
field path and left unapplied. The other children (RBAC, ConfigMap) are simply restored to their
rendered form when someone changes them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from flashrl_api.rules import MUTABLE_SPEC_FIELDS as API_MUTABLE_SPEC_FIELDS
from flashrl_operator.vocab import kuberay
from flashrl_operator.vocab.owners import controller_name, describe_controller, is_controlled_by

#: Annotation on the RayJob holding the (immutable part of the) spec it was rendered from.
SPEC_ANNOTATION: Final = "flashrl.dev/spec"
#: Annotation on the RayJob holding the key of the verl inputs checked and accepted before it was created
#: (:func:`flashrl_jobs.verl_args.check_key`): a restarted operator does not check them again.
VERL_CHECKED_ANNOTATION: Final = "flashrl.dev/verl-checked"
#: Annotations that record how a RayJob was made: never restored to a later spec's values.
_RECORDS: Final = frozenset({SPEC_ANNOTATION, VERL_CHECKED_ANNOTATION})

#: FlashRLJob spec fields that may change on a running job (one list, in the API: the CRD's transition
#: rules refuse changes to every other field at admission; this module is the second line).
MUTABLE_SPEC_FIELDS: Final = API_MUTABLE_SPEC_FIELDS
#: The RayJob fields they feed. ``lifecycle.suspend`` also switches the teardown fields (KubeRay
#: refuses a suspended RayJob without ``shutdownAfterJobFinishes``, and that excludes the deletion
#: rules: :func:`flashrl_operator.render.rayjob.teardown`); ``lifecycle.ttlSecondsAfterFinished`` is the
#: deletion rules' DeleteCluster TTL.
RAY_JOB_MUTABLE_KEYS: Final = (
    "suspend",
    "activeDeadlineSeconds",
    "shutdownAfterJobFinishes",
    "ttlSecondsAfterFinished",
    "deletionStrategy",
)

_METADATA_KEYS: Final = ("labels", "annotations", "ownerReferences")


def _without_mutable(spec: Mapping[str, Any]) -> dict[str, Any]:
    result = json.loads(json.dumps(spec))
    for dotted in MUTABLE_SPEC_FIELDS:
        *parents, leaf = dotted.split(".")
        node: Any = result
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return dict(result)


def _lists_digested(value: Any) -> Any:
    """``value`` with every list replaced by the sha256 of its canonical JSON.

    Lists (overrides, env, secretRefs, tolerations) are compared whole, so a digest compares exactly
    as the list did, and it keeps the annotation small: the spec's lists may hold ~200 KiB at the
    CRD's maxima, and all annotations of an object together may hold 256 KiB.
    """
    if isinstance(value, list):
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    if isinstance(value, dict):
        return {key: _lists_digested(item) for key, item in value.items()}
    return value


def spec_snapshot(spec: Mapping[str, Any]) -> str:
    """Canonical JSON of the spec's immutable part (wire form, camelCase), lists as digests."""
    return json.dumps(
        _lists_digested(_without_mutable(spec)), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{prefix}.{key}"))
        return out
    return {prefix: value}


def immutable_changes(snapshot: str | None, spec: Mapping[str, Any]) -> list[str]:
    """Field paths (``spec.rollout.samplesPerPrompt``) whose value differs from the recorded snapshot.

    Lists are compared whole (``spec.overrides``). No snapshot (a RayJob made by something else, or
    an unreadable annotation) means nothing can be said: no changes.
    """
    if not snapshot:
        return []
    try:
        old = json.loads(snapshot)
    except ValueError:
        return []
    if not isinstance(old, dict):
        return []
    # Older snapshots hold the lists themselves: digesting both sides compares either form.
    before = _leaves(_lists_digested(old), "spec")
    after = _leaves(_lists_digested(_without_mutable(spec)), "spec")
    return sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))


def is_subset(desired: Any, live: Any) -> bool:
    """Whether ``live`` already holds everything in ``desired`` (extra live keys are fine).

    Lists must have the same length and match element by element, since a merge patch replaces
    lists whole.
    """
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(
            key in live and is_subset(value, live[key]) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(is_subset(d, v) for d, v in zip(desired, live, strict=True))
        )
    return bool(desired == live)


def _metadata_patch(
    desired: Mapping[str, Any], live: Mapping[str, Any], skip: frozenset[str]
) -> dict[str, Any]:
    want = desired.get("metadata") or {}
    have = live.get("metadata") or {}
    patch: dict[str, Any] = {}
    for key in _METADATA_KEYS:
        value = want.get(key)
        if value is None:
            continue
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in skip}
            if not value:
                continue
        if not is_subset(value, have.get(key)):
            patch[key] = value
    return patch


def drift_patch(
    desired: Mapping[str, Any], live: Mapping[str, Any], *, queued: bool = False
) -> dict[str, Any]:
    """The merge patch that brings ``live`` back to ``desired``; empty when nothing drifted.

    For a RayJob only labels, ownership and the mutable lifecycle fields are considered (and
    ``suspend`` not at all when Kueue owns it, ``queued``). For other kinds every rendered field is.
    """
    patch: dict[str, Any] = {}
    is_ray_job = desired.get("kind") == kuberay.RAY_JOB.kind
    meta = _metadata_patch(desired, live, _RECORDS if is_ray_job else frozenset())
    if meta:
        patch["metadata"] = meta
    if is_ray_job:
        want = desired.get("spec") or {}
        have = live.get("spec") or {}
        spec_patch: dict[str, Any] = {}
        for key in RAY_JOB_MUTABLE_KEYS:
            if key == "suspend" and queued:
                continue
            if want.get(key) != have.get(key):
                spec_patch[key] = want.get(key)  # None removes the field (merge patch).
        if spec_patch:
            patch["spec"] = spec_patch
        return patch
    for key, value in desired.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        if not is_subset(value, live.get(key)):
            patch[key] = value
    return patch


def owner_name(ray_job: Mapping[str, Any], kind: str, label: str) -> str | None:
    """The FlashRLJob a RayJob belongs to: its controller ownerReference, else ``label``."""
    if (name := controller_name(ray_job, kind)) is not None:
        return name
    value = ((ray_job.get("metadata") or {}).get("labels") or {}).get(label)
    return str(value) if value else None


def ownership_conflict(description: str, live: Mapping[str, Any], uid: str) -> str | None:
    """Why ``live`` (an object under a child's name) is not this job's to change, or None when it is.

    Only the controller ownerReference with this FlashRLJob's UID makes an object the job's: a name
    match, our labels, or a reference to a deleted job of the same name (another UID) do not. Anything
    else is never patched, adopted or deleted (a Role's rules, a ConfigMap's data or someone's RayJob
    would otherwise be replaced, and garbage-collected with the job).
    """
    if is_controlled_by(live, uid):
        return None
    return f"{description} already exists and is not this job's ({describe_controller(live)})"
