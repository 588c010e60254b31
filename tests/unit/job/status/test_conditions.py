"""Conditions keep their lastTransitionTime unless their status flips."""

from __future__ import annotations

import pytest

from flashrl_operator.job.status.conditions import Verdict, find_condition, merge_conditions, truncate

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


def test_new_conditions_get_now_and_come_in_canonical_order() -> None:
    merged = merge_conditions(
        [], {"Running": Verdict("False", "NotRunning"), "Accepted": Verdict("True", "Accepted")}, T0
    )
    assert [c["type"] for c in merged] == ["Accepted", "Running"]
    assert all(c["lastTransitionTime"] == T0 for c in merged)


@pytest.mark.parametrize(
    ("old_status", "new_status", "expected_time"),
    [
        ("True", "True", T0),  # same status, new reason or message: time kept
        ("False", "True", T1),  # flipped: time moves
        ("Unknown", "False", T1),
    ],
)
def test_transition_time_moves_only_on_status_change(
    old_status: str, new_status: str, expected_time: str
) -> None:
    previous = [{"type": "Running", "status": old_status, "reason": "A", "lastTransitionTime": T0}]
    merged = merge_conditions(previous, {"Running": Verdict(new_status, "B", "msg")}, T1)  # type: ignore[arg-type]
    assert merged == [
        {
            "type": "Running",
            "status": new_status,
            "reason": "B",
            "message": "msg",
            "lastTransitionTime": expected_time,
        }
    ]


def test_foreign_conditions_are_kept() -> None:
    previous = [{"type": "Custom", "status": "True", "reason": "X", "lastTransitionTime": T0}]
    merged = merge_conditions(previous, {"Accepted": Verdict("True", "Accepted")}, T1)
    assert find_condition(merged, "Custom") == previous[0]
    assert find_condition(merged, "Accepted") is not None
    assert find_condition(merged, "Missing") is None


def test_long_messages_are_truncated_with_a_marker() -> None:
    merged = merge_conditions([], {"Failed": Verdict("True", "AppFailed", "x" * 10_000)}, T0)
    assert len(merged[0]["message"]) == 4096
    assert merged[0]["message"].endswith("(truncated)")
    assert truncate("short", 10) == "short"
