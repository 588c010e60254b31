"""One timestamp helper (flashrl_api.times) for the launcher and the operator."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

from flashrl_api import times
from flashrl_jobs.deadline import parse_rfc3339 as deadline_start
from flashrl_jobs.progress import StepReport, progress_fields
from flashrl_operator.vocab.metrics import parse_time

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [ROOT / "jobs" / "src", ROOT / "operator" / "src"]
#: Writing or reading a timestamp format by hand.
BY_HAND = re.compile(r"strftime|strptime|isoformat|%Y-%m-%dT|%Y%m%dT")


def test_nothing_else_writes_the_format() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for source in SOURCES
        for path in sorted(source.rglob("*.py"))
        if path.name != "times.py" or path.parent.name != "flashrl_api"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BY_HAND.search(line)
    ]
    assert offenders == []


def test_rfc3339_is_utc_whole_seconds_z() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    moment = datetime.datetime(2026, 1, 2, 5, 4, 5, 987654, tzinfo=plus_two)
    assert times.rfc3339(moment) == "2026-01-02T03:04:05Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", times.now_rfc3339())
    assert times.compact(moment) == "20260102T030405Z"
    assert times.rfc3339_millis(moment.timestamp()) == "2026-01-02T03:04:05.987Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)),
        ("2026-01-02T05:04:05.5+02:00", datetime.datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=datetime.UTC)),
        ("2026-01-02T03:04:05", datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)),
        ("yesterday", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_reads_what_the_api_server_and_the_launcher_write(
    text: str | None, expected: datetime.datetime | None
) -> None:
    assert times.parse_rfc3339(text) == expected
    assert parse_time(text) == expected


def test_the_deadline_start_must_carry_its_zone() -> None:
    assert deadline_start("2026-01-02T03:04:05") is None
    assert deadline_start(" 2026-01-02T03:04:05Z ") == datetime.datetime(
        2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC
    )


def test_the_launchers_progress_uses_it() -> None:
    report = StepReport(step=3, total_steps=10)
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, 123, tzinfo=datetime.UTC)
    assert progress_fields(report, moment)["updateTime"] == "2026-01-02T03:04:05Z"
    assert times.rfc3339(times.parse_rfc3339(times.rfc3339(moment)) or moment) == times.rfc3339(moment)
