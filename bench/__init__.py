"""Benchmarks (not tests): ``python -m bench`` runs them and writes docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from flashrl_api import load_documents

EXAMPLE: Final = Path(__file__).resolve().parents[1] / "examples" / "flashrljob.yaml"

#: The example's model and data as paths on its volumes, as when they are already there: the
#: operator benchmarks measure a job's own reconcile, not the staging Job that hf:// sources run
#: first (the emulator has no Job controller here, so that Job would never finish).
LOCAL_SOURCES: Final[dict[str, Any]] = {
    "model": {"source": "/models/Qwen3-8B-Base"},
    "data": {"train": "/data/dapo-math-17k.parquet", "validation": "/data/aime-2024.parquet"},
}


def example_job() -> dict[str, Any]:
    """``examples/flashrljob.yaml`` with :data:`LOCAL_SOURCES` (nothing to stage)."""
    doc = load_documents(EXAMPLE.read_text(encoding="utf-8"), str(EXAMPLE))[0]
    spec = dict(doc["spec"])
    for key, value in LOCAL_SOURCES.items():
        spec[key] = {**(spec.get(key) or {}), **value}
    return {**doc, "spec": spec}
