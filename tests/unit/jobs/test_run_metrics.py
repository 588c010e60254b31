"""Reading verl's metrics: the file logger's JSONL (robust to whatever a crash or a restart leaves) and the
console fallback, into the run state that status and /metrics are built from."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from flashrl_jobs.run_metrics import JsonlTail, Record, RunState, parse_console, parse_record


def line(step: int, **data: object) -> bytes:
    """A line as verl's FileLogger writes it (orjson: compact, one object per line)."""
    return json.dumps({"step": step, "data": data}, separators=(",", ":")).encode() + b"\n"


def test_a_record_keeps_numbers_and_drops_nan_infinities_bools_and_strings() -> None:
    raw = b'{"step":3,"data":{"a":1,"b":0.5,"c":NaN,"d":Infinity,"e":true,"f":"x","g":[1],"h":-2.5e-3}}'
    record, problem = parse_record(raw)
    assert problem is None and record == Record(3, {"a": 1.0, "b": 0.5, "h": -0.0025})


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"step":3,"data":{"a":1', "not JSON"),
        (b"[1,2]", "not a"),
        (b'{"step":"3","data":{}}', "not a non-negative integer"),
        (b'{"step":-1,"data":{}}', "not a non-negative integer"),
        (b'{"step":true,"data":{}}', "not a non-negative integer"),
        (b'{"step":1,"data":[]}', "not a"),
    ],
)
def test_malformed_lines_are_refused_with_a_reason(raw: bytes, problem: str) -> None:
    record, said = parse_record(raw)
    assert record is None and said is not None and problem in said


def test_console_fallback_reads_verls_line_through_rays_prefix_and_numpy_reprs() -> None:
    text = (
        "\x1b[36m(TaskRunnerV1 pid=42)\x1b[0m step:7 - actor/pg_loss:np.float64(0.25) - "
        "rollout_corr/kl:0.011 - training/rollout_probs_diff_mean:nan - perf/throughput:1234 - odd:abc"
    )
    assert parse_console(text) == Record(
        7, {"actor/pg_loss": 0.25, "rollout_corr/kl": 0.011, "perf/throughput": 1234.0}
    )
    assert parse_console("Total training steps: 3") is None
    assert parse_console("restep:4 - a:1") is None


def test_tail_reads_only_complete_lines_and_continues_where_it_stopped(tmp_path: Path) -> None:
    path = tmp_path / "attempt-1.jsonl"
    logs: list[str] = []
    tail = JsonlTail(path, logs.append)
    assert tail.poll() == [] and tail.poll() == []
    assert len(logs) == 1 and "not there yet" in logs[0]  # said once
    whole = line(1, a=1.0)
    path.write_bytes(line(0, v=0.5) + whole[:9])  # verl is in the middle of writing step 1
    assert tail.poll() == [Record(0, {"v": 0.5})]
    with path.open("ab") as handle:
        handle.write(whole[9:] + line(2, a=2.0))
    assert tail.poll() == [Record(1, {"a": 1.0}), Record(2, {"a": 2.0})]
    assert tail.poll() == []


def test_tail_skips_bad_lines_once_logged_and_keeps_reading(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"garbage\n" + line(1, a=1) + b'{"step":2,"data":\n' + line(3, a=3))
    logs: list[str] = []
    tail = JsonlTail(path, logs.append)
    assert [r.step for r in tail.poll()] == [1, 3]
    assert tail.skipped == 2
    assert len([m for m in logs if "malformed" in m]) == 1


def test_a_truncated_or_replaced_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(line(1, a=1) + line(2, a=2))
    logs: list[str] = []
    tail = JsonlTail(path, logs.append)
    assert [r.step for r in tail.poll()] == [1, 2]
    path.write_bytes(line(1, a=10))  # verl reopened it with "wb": shorter than what was read
    assert tail.poll() == [Record(1, {"a": 10.0})]
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(line(1, a=1) + line(2, a=2) + line(3, a=3))
    replacement.replace(path)  # rotated: a new inode at the same path
    assert [r.step for r in tail.poll()] == [1, 2, 3]
    assert len([m for m in logs if "replaced or truncated" in m]) == 1


def test_state_keeps_the_newest_value_per_metric_and_its_step() -> None:
    state = RunState(total_steps=10)
    assert not state.add(Record(0, {"val-core/aime24/acc/mean@32": 0.1}), now=100.0)  # validation only
    assert state.add(Record(1, {"rollout_corr/kl": 0.01, "timing_s/step": 60.0}), now=160.0)
    assert not state.add(Record(1, {"rollout_corr/kl": 0.01}), now=161.0)  # the same step again
    assert state.add(Record(2, {"rollout_corr/kl": 0.02, "timing_s/step": 80.0}), now=240.0)
    step, total, last, latest = state.snapshot()
    assert (step, total, last) == (2, 10, 240.0)
    assert latest["rollout_corr/kl"] == (0.02, 2)
    assert latest["val-core/aime24/acc/mean@32"] == (0.1, 0)
    assert state.percent() == 20
    assert state.remaining_seconds() == 8 * 70  # mean of verl's step durations times steps left
    names = [m.name for m in state.status_metrics()]
    assert names == ["val-core/aime24/acc/mean@32", "timing_s/step", "rollout_corr/kl"]
    score = state.validation_score()
    assert score is not None and score.to_wire() == {
        "name": "val-core/aime24/acc/mean@32",
        "value": 0.1,
        "step": 0,
    }


def test_without_verls_step_time_the_estimate_uses_the_time_between_steps() -> None:
    state = RunState(total_steps=4)
    assert state.remaining_seconds() is None and state.percent() == 0
    state.add(Record(1, {}), now=0.0)
    state.add(Record(2, {}), now=30.0)
    assert state.remaining_seconds() == 60
    state.add(Record(4, {}), now=31.0)  # a gap (resume): not a step duration
    assert state.remaining_seconds() == 0 and state.percent() == 100
    assert math.isclose(state.durations[0], 30.0)
