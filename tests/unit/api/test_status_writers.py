"""Who writes each FlashRLJob status key, marked on the status model (flashrl_api.status.WrittenBy).

The operator's status patch carries only its own keys (derived from these marks), so a field with no
mark, or two, would be written by nobody or fought over: every field carries exactly one.
"""

from __future__ import annotations

from flashrl_api import FlashRLJobStatus
from flashrl_api.status import LAUNCHER, OPERATOR, WrittenBy


def test_every_status_field_is_written_by_the_operator_or_the_launcher() -> None:
    for name, field in FlashRLJobStatus.model_fields.items():
        marks = [m for m in field.metadata if isinstance(m, WrittenBy)]
        assert marks in ([OPERATOR], [LAUNCHER]), f"status.{field.alias or name}: marked {marks}"


def test_the_two_writers_split_the_status_keys() -> None:
    aliases = [field.alias or name for name, field in FlashRLJobStatus.model_fields.items()]
    operator = FlashRLJobStatus.keys_written_by("operator")
    launcher = FlashRLJobStatus.keys_written_by("launcher")
    assert not set(operator) & set(launcher)
    assert sorted([*operator, *launcher]) == sorted(aliases)
    # The launcher's reports (docs/launcher.md) are never the operator's to write.
    assert {"progress", "checkpoint", "metrics", "launcherPhases", "staging"} <= set(launcher)
    assert {"phase", "conditions", "attempts", "goodput"} <= set(operator)


def test_the_marks_leave_the_generated_schema_alone() -> None:
    """A mark is Python metadata only: the CRD's status schema has no trace of it."""
    schema = FlashRLJobStatus.model_json_schema(by_alias=True)
    assert "operator" not in str(schema["properties"]["phase"])
    assert "launcher" not in str(schema["properties"]["progress"])
