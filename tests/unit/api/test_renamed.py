"""An unknown field that is an old name points at its new one (flashrl_api.renamed), row by row."""

from __future__ import annotations

from typing import Any

import pytest

from flashrl_api import spec_problems
from flashrl_api.renamed import RENAMED_FIELDS, RenamedField, renamed_hint


def _nested(path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    return {head: _nested(rest, value) if rest else value}


def test_model_path_names_model_source() -> None:
    _, problems = spec_problems({"model": {"path": "/models/qwen"}})
    assert [str(p) for p in problems] == [
        "spec.model.path: renamed: use spec.model.source (hf://ORG/NAME or a path)"
    ]


@pytest.mark.parametrize("row", RENAMED_FIELDS, ids=[r.old for r in RENAMED_FIELDS])
def test_each_old_field_gets_its_hint_at_its_path(row: RenamedField) -> None:
    _, problems = spec_problems(_nested(row.old, 1))
    assert [p.path for p in problems] == [f"spec.{row.old}"]
    message = problems[0].message
    if row.new is None:
        assert message == f"removed: {row.hint}"
    else:
        assert message == f"renamed: use spec.{row.new} ({row.hint})"


@pytest.mark.parametrize("row", [r for r in RENAMED_FIELDS if r.new], ids=lambda r: r.old)
def test_each_new_field_exists(row: RenamedField) -> None:
    # The new path is a field of today's spec: setting it alone raises no unknown-field problem.
    assert row.new is not None
    _, problems = spec_problems(_nested(row.new, {}))
    assert all("unknown field" not in p.message for p in problems)
    assert all(not p.message.startswith(("renamed", "removed")) for p in problems)


def test_a_variant_spec_is_named_with_its_own_prefix() -> None:
    assert renamed_hint("model.path", "spec.variants[1].spec") == (
        "renamed: use spec.variants[1].spec.model.source (hf://ORG/NAME or a path)"
    )


def test_other_unknown_fields_keep_the_generic_message() -> None:
    _, problems = spec_problems({"model": {"sorce": "hf://a/b"}})
    assert problems[0].message.startswith("unknown field")
