"""Which spec edits a running job refuses, and which child drift gets patched back."""

from __future__ import annotations

from typing import Any

from flashrl_operator.render.children import (
    SPEC_ANNOTATION,
    drift_patch,
    immutable_changes,
    is_subset,
    owner_name,
    spec_snapshot,
)

SPEC: dict[str, Any] = {
    "rollout": {"samplesPerPrompt": 16, "quantization": "blockwise-fp8"},
    "lifecycle": {"suspend": False, "ttlSecondsAfterFinished": 3600},
    "overrides": ["a=1"],
}


def edited(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in SPEC.items()}
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        spec[section][key] = value
    return spec


def test_mutable_lifecycle_fields_are_not_changes() -> None:
    snap = spec_snapshot(SPEC)
    assert immutable_changes(snap, SPEC) == []
    assert immutable_changes(snap, edited(lifecycle__suspend=True, lifecycle__activeDeadlineSeconds=60)) == []


def test_immutable_changes_are_named_by_path() -> None:
    snap = spec_snapshot(SPEC)
    assert immutable_changes(snap, edited(rollout__samplesPerPrompt=8)) == ["spec.rollout.samplesPerPrompt"]
    changed = {**SPEC, "overrides": ["a=2"], "model": {"path": "x"}}
    assert immutable_changes(snap, changed) == ["spec.model.path", "spec.overrides"]


def test_no_or_broken_snapshot_means_no_verdict() -> None:
    assert immutable_changes(None, SPEC) == []
    assert immutable_changes("{not json", SPEC) == []


def test_subset_allows_extra_live_keys_but_lists_must_match() -> None:
    assert is_subset({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3})
    assert not is_subset({"a": {"b": 1}}, {"a": {"b": 2}})
    assert is_subset([{"x": 1}], [{"x": 1, "y": 2}])
    assert not is_subset([{"x": 1}], [{"x": 1}, {"x": 2}])


def ray_job(
    suspend: bool, deadline: int | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"suspend": suspend, "entrypoint": "python3 -m x", "ttlSecondsAfterFinished": 60}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "j", "labels": labels or {"l": "1"}, "annotations": {SPEC_ANNOTATION: "{}"}},
        "spec": spec,
    }


def test_ray_job_patch_touches_only_mutable_fields() -> None:
    desired = ray_job(suspend=True, deadline=100)
    live = ray_job(suspend=False)
    live["spec"]["entrypoint"] = "something else"
    live["metadata"]["annotations"][SPEC_ANNOTATION] = "old"
    assert drift_patch(desired, live) == {"spec": {"suspend": True, "activeDeadlineSeconds": 100}}
    # A removed deadline is removed (null in a merge patch).
    assert drift_patch(ray_job(False), ray_job(False, deadline=5)) == {
        "spec": {"activeDeadlineSeconds": None}
    }


def test_kueue_owned_suspend_is_never_patched() -> None:
    assert drift_patch(ray_job(suspend=True), ray_job(suspend=False), queued=True) == {}


def test_other_children_are_restored_whole() -> None:
    desired = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"labels": {"a": "1"}},
        "data": {"k": "v"},
    }
    live = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"labels": {"a": "2", "x": "y"}},
        "data": {"k": "w"},
    }
    assert drift_patch(desired, live) == {"metadata": {"labels": {"a": "1"}}, "data": {"k": "v"}}
    assert drift_patch(desired, {**desired, "metadata": {"labels": {"a": "1", "extra": "ok"}}}) == {}


def test_owner_from_controller_reference_then_label() -> None:
    owned = {"metadata": {"ownerReferences": [{"kind": "FlashRLJob", "name": "a", "controller": True}]}}
    assert owner_name(owned, "FlashRLJob", "flashrl.dev/job") == "a"
    labelled = {"metadata": {"labels": {"flashrl.dev/job": "b"}}}
    assert owner_name(labelled, "FlashRLJob", "flashrl.dev/job") == "b"
    assert owner_name({"metadata": {}}, "FlashRLJob", "flashrl.dev/job") is None
