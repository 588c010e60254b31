"""The launcher's summaries of verl's validation dumps, for status.validationProblems."""

from __future__ import annotations

import json
from pathlib import Path

from flashrl_api.status import FlashRLJobStatus
from flashrl_api.validation_summary import STATUS_VALIDATIONS, problem_id
from flashrl_jobs.validation_watch import ValidationWatch


def dump(directory: Path, step: int, rows: list[dict[str, object]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_each_complete_dump_is_summarised_once_and_the_newest_are_reported(tmp_path: Path) -> None:
    logged: list[str] = []
    watch = ValidationWatch(tmp_path / "attempt-2", 2, logged.append)
    assert watch.poll(5) is None  # verl has not created the directory yet
    rows = [{"input": "a", "score": 1.0}, {"input": "a", "score": -1.0}, {"input": "b", "score": -1.0}]
    dump(tmp_path / "attempt-2", 0, rows)
    dump(tmp_path / "attempt-2", 5, rows)
    # At step 0's hook only step 0's dump is known to be complete.
    first = watch.poll(0)
    assert first == [
        {
            "step": 0,
            "attempt": 2,
            "measure": "score",
            "problems": dict(sorted({problem_id("a"): [2, 1], problem_id("b"): [1, 0]}.items())),
        }
    ]
    assert watch.poll(0) is None
    second = watch.poll(None)
    assert second is not None and [e["step"] for e in second] == [0, 5]
    # The entries are what the status schema accepts.
    FlashRLJobStatus.model_validate({"validationProblems": second})
    for step in range(10, 10 + 5 * STATUS_VALIDATIONS, 5):
        dump(tmp_path / "attempt-2", step, rows)
    newest = watch.poll(100)
    assert newest is not None and [e["step"] for e in newest] == [10, 15, 20]
    assert logged == []


def test_a_dump_without_usable_samples_is_logged_not_reported(tmp_path: Path) -> None:
    logged: list[str] = []
    watch = ValidationWatch(tmp_path, 1, logged.append)
    dump(tmp_path, 0, [{"output": "no prompt"}])
    assert watch.poll(None) is None
    assert "holds no sample" in logged[0]
