"""FlashRLJobs for unit tests, from a spec alone: what several test folders would otherwise each write out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flashrl_api import FlashRLJob, parse_job


def job_manifest(
    spec: Mapping[str, Any] | None = None, name: str = "j", namespace: str | None = None
) -> dict[str, Any]:
    """The manifest a user would apply: ``spec`` (the defaults where absent) under ``name``."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": metadata,
        "spec": dict(spec or {}),
    }


def job(spec: Mapping[str, Any] | None = None, name: str = "j", namespace: str | None = None) -> FlashRLJob:
    """The parsed job (raises :class:`~flashrl_api.SpecError` as the operator would)."""
    return parse_job(job_manifest(spec, name, namespace))


def job_object(
    phase: str, reason: str | None = None, metrics: list[Any] | None = None, name: str = "j", **status: Any
) -> dict[str, Any]:
    """A FlashRLJob as a controller reads it back, only its name and status: ``phase``, any other
    ``status`` fields, and ``reason`` and ``metrics`` where given."""
    body: dict[str, Any] = {"phase": phase, **status}
    if reason:
        body["reason"] = reason
    if metrics is not None:
        body["metrics"] = metrics
    return {"metadata": {"name": name}, "status": body}
