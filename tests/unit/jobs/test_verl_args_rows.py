"""Issue 36: one row per generated verl key (``verl_args.VERL_KEYS``), everything else derived.

The generated overrides, the protected set and the field map are read off the rows; these tests fail
when one of them disagrees with the rows: a key written without a row, a row no spec ever writes, a
protected or attributed key that is not a row's, a field path that names no FlashRLJob field.
"""

from __future__ import annotations

import itertools
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from manifests import job
from pydantic import BaseModel

from flashrl_api import FlashRLJob, FlashRLJobSpec, parse_job
from flashrl_api.experiment import parse_experiment, variant_jobs
from flashrl_jobs.verl_args import (
    FIELD_OF_KEY,
    PROTECTED_KEYS,
    VERL_KEYS,
    generated_overrides,
    override_key,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

#: Each choice that decides which rows apply, and every combination of them below.
_CHOICES: list[list[dict[str, Any]]] = [
    [{}, {"rollout": {"quantization": "channel-fp8"}}, {"rollout": {"quantization": "bf16"}}],
    [{}, {"training": {"dynamicSampling": {"enabled": False}}}],
    [
        {},
        {"training": {"mode": "colocate-async"}},
        {
            "training": {"mode": "separate-async", "miniBatchSize": 8, "async": {"parameterSyncStep": 4}},
            "rollout": {"pool": {"nodes": 1, "gpusPerNode": 8}},
        },
    ],
]


def _merged(parts: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for part in parts:
        for section, values in part.items():
            spec.setdefault(section, {}).update(values)
    return spec


def _jobs() -> list[FlashRLJob]:
    jobs = [job(_merged(parts)) for parts in itertools.product(*_CHOICES)]
    # Each engine's own KV-cache argument (the examples' FP8 KV cache runs on SGLang).
    jobs.append(job({"rollout": {"engine": "vllm", "kvCache": "fp8-e4m3"}}))
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "FlashRLJob":
                jobs.append(parse_job(doc))
            elif isinstance(doc, dict) and doc.get("kind") == "FlashRLExperiment":
                jobs.extend(variant_jobs(parse_experiment(doc)))
    return jobs


def test_every_written_key_is_one_row_and_every_row_is_written_by_some_spec() -> None:
    rows = {row.key: row for row in VERL_KEYS}
    assert len(rows) == len(VERL_KEYS), "two rows for one key"
    written: set[str] = set()
    for j in _jobs():
        overrides = generated_overrides(j)
        keys = [override_key(o) for o in overrides]
        assert set(keys) <= set(rows), f"{j.name}: written without a row: {set(keys) - set(rows)}"
        assert keys == [row.key for row in VERL_KEYS if row.applies(j.spec)], j.name
        for override in overrides:
            assert override.startswith("+") == rows[override_key(override)].append, override
        written.update(keys)
    assert written == set(rows), f"rows no spec writes: {set(rows) - written}"


def test_protected_keys_and_field_map_are_the_rows() -> None:
    assert dict(PROTECTED_KEYS) == {row.key: row.owned_by for row in VERL_KEYS if row.protected}
    assert dict(FIELD_OF_KEY) == {row.key: row.field for row in VERL_KEYS if row.field is not None}
    # A protected key names the field that owns it; an owner is only for a key no field's value sets.
    for row in VERL_KEYS:
        assert not row.protected or (row.owner or row.field), row.key
        assert row.owner is None or (row.protected and row.field is None), row.key


def _field_type(model: type[BaseModel], wire_name: str) -> Any:
    for name, info in model.model_fields.items():
        if wire_name in (name, info.alias):
            return info.annotation
    raise AssertionError(f"{model.__name__} has no field {wire_name}")


def _resolves(path: str) -> None:
    node: Any = FlashRLJobSpec
    for segment in path.split("."):
        # An optional section (``async``, ``pool``) is its model or None.
        if isinstance(node, types.UnionType) or typing.get_origin(node) is typing.Union:
            node = next(a for a in typing.get_args(node) if isinstance(a, type) and issubclass(a, BaseModel))
        assert isinstance(node, type) and issubclass(node, BaseModel), f"{path}: {segment} is below a leaf"
        node = _field_type(node, segment)


def test_every_row_field_is_a_flashrljob_spec_field() -> None:
    for row in VERL_KEYS:
        for path in filter(None, (row.field, row.owner)):
            _resolves(path)
