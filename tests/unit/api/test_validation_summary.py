"""The per-problem summary of a validation dump, and its bounded ConfigMap value."""

from __future__ import annotations

import json

from flashrl_api.validation_summary import (
    StepSummary,
    add_summary,
    correctness,
    parse_summaries,
    problem_id,
    render_summaries,
    summarize_dump,
)
from flashrl_report.synthetic import validation_rows


def test_problem_id_is_the_short_sha256_of_the_prompt() -> None:
    assert problem_id("p") == "148de9c5a7a4"
    assert len({problem_id(f"problem {i}") for i in range(1000)}) == 1000


def test_correct_is_acc_when_reported_else_a_positive_score() -> None:
    assert correctness({"acc": True, "score": -1.0}) == ("acc", True)
    assert correctness({"acc": 0.0, "score": 1.0}) == ("acc", False)
    assert correctness({"score": -1.0}) == ("score", False)
    assert correctness({"score": 0.25}) == ("score", True)
    assert correctness({"score": float("nan")}) is None
    assert correctness({"input": "p"}) is None


def test_a_dump_is_counted_per_problem() -> None:
    # 8 copies of each of 5 problems, 4 responses each: 32 samples per problem.
    rows = validation_rows(10, 30, problems=5, copies=8, samples_per_row=4)
    summary = summarize_dump([json.dumps(r) for r in rows] + ["not json", '{"score": 1}'])
    assert summary.measure == "acc" and summary.skipped == 2
    assert len(summary.problems) == 5
    assert all(n == 32 for n, _ in summary.problems.values())
    for pid, (_, correct) in summary.problems.items():
        prompt = summary.prompts[pid]
        assert problem_id(prompt) == pid
        assert correct == sum(1 for r in rows if r["input"] == prompt and r["acc"])


def one(problems: dict[str, tuple[int, int]]) -> StepSummary:
    return StepSummary(problems, "acc")


def test_a_later_attempt_wins_for_the_same_step_in_either_order() -> None:
    first = add_summary("", 5, 1, one({"a": (4, 1)}))
    second = add_summary(first, 5, 2, one({"a": (4, 3)}))
    assert parse_summaries(second).steps[5][1].problems == {"a": (4, 3)}
    # The earlier attempt's summary arriving late does not replace the later one.
    assert add_summary(second, 5, 1, one({"a": (4, 0)})) == second
    both = add_summary(second, 10, 2, one({"a": (4, 4)}))
    assert sorted(parse_summaries(both).steps) == [5, 10]


def test_the_value_keeps_the_newest_steps_within_its_bound_and_says_what_it_dropped() -> None:
    problems = {f"{i:012x}": (32, i % 33) for i in range(300)}
    text = ""
    for step in range(0, 200, 5):  # 40 validations of 300 problems
        text = add_summary(text, step, 1, one(problems), max_bytes=64 * 1024)
    assert len(text.encode()) <= 64 * 1024
    parsed = parse_summaries(text)
    kept = sorted(parsed.steps)
    assert kept[-1] == 195 and kept == list(range(kept[0], 200, 5))
    assert parsed.dropped == list(range(0, kept[0], 5)) and parsed.refused == []
    # A step too large on its own is refused, and the others stay.
    huge = one({f"{i:012x}": (1, 1) for i in range(10_000)})
    refused = parse_summaries(add_summary(text, 200, 1, huge, max_bytes=64 * 1024))
    assert refused.refused == [200] and sorted(refused.steps) == kept


def test_rendering_round_trips() -> None:
    text = add_summary(add_summary("", 0, 1, one({"b": (2, 1), "a": (2, 2)})), 5, 1, one({"a": (2, 0)}))
    assert render_summaries(parse_summaries(text)) == text
    assert text.splitlines()[0] == '{"step":0,"attempt":1,"measure":"acc","problems":{"a":[2,2],"b":[2,1]}}'


def test_a_long_list_of_dropped_steps_still_fits() -> None:
    small = one({"a": (1, 1)})
    text = ""
    for step in range(2000):
        text = add_summary(text, step, 1, small, max_bytes=4096)
    assert len(text.encode()) <= 4096
    parsed = parse_summaries(text)
    kept = sorted(parsed.steps)
    assert kept == list(range(kept[0], 2000))
    # The note names the newest 100 dropped steps, and says there were more.
    assert parsed.dropped == list(range(kept[0] - 100, kept[0])) and parsed.more
