"""The bounded per-step history kept in each job's ConfigMap."""

from __future__ import annotations

import json

from flashrl_api import verl_metrics as vm
from flashrl_api.history import add_metrics, add_step, kept, parse_history, render_history
from flashrl_report.synthetic import records


def test_only_the_reports_metrics_are_kept_and_only_numbers() -> None:
    data = {
        vm.THROUGHPUT: 500,
        "timing_s/gen": 12.5,
        "val-core/aime/acc/mean@1": 0.3,
        "actor/pg_loss": 0.1,  # not drawn by the report
        vm.MISMATCH_KL: float("nan"),
        vm.IS_ESS: "high",
        vm.PROBS_DIFF_MEAN: True,
    }
    assert kept(data) == {vm.THROUGHPUT: 500.0, "timing_s/gen": 12.5, "val-core/aime/acc/mean@1": 0.3}


def test_steps_accumulate_in_verls_line_format() -> None:
    text = ""
    for record in records("blockwise-fp8", 20):
        text = add_step(text, record["step"], record["data"])
    lines = text.splitlines()
    assert len(lines) == 21
    assert json.loads(lines[3])["step"] == 3
    history = parse_history(text)
    assert sorted(history) == list(range(21))
    assert vm.GEN_MS_PER_TOKEN in history[5] and vm.MISMATCH_KL in history[5]
    # A repeated step (a retried attempt) updates that step.
    again = add_step(text, 5, {vm.THROUGHPUT: 1.0})
    assert parse_history(again)[5][vm.THROUGHPUT] == 1.0
    assert vm.MISMATCH_KL in parse_history(again)[5]


def test_a_long_run_is_thinned_under_the_bound_keeping_recent_steps_and_validations() -> None:
    text = ""
    for record in records("bf16", 400):
        text = add_step(text, record["step"], record["data"], max_bytes=200_000)
    assert len(text.encode()) <= 200_000
    steps = sorted(parse_history(text))
    assert steps[0] == 0 and steps[-1] == 400
    assert len(steps) < 401
    # Recent steps are kept at full resolution; every validation step is kept.
    assert set(range(380, 401)) <= set(steps)
    validations = [r["step"] for r in records("bf16", 400) if "val-core/aime-2024/acc/mean@1" in r["data"]]
    assert set(validations) <= set(steps)


def test_status_metrics_are_recorded_at_their_steps() -> None:
    metrics = [
        {"name": vm.MISMATCH_KL, "value": 0.002, "step": 7},
        {"name": "val-core/aime/acc/mean@1", "value": 0.25, "step": 5},
        {"name": vm.THROUGHPUT, "value": 480.0},  # no step: not placeable
    ]
    assert parse_history(add_metrics("", metrics)) == {
        5: {"val-core/aime/acc/mean@1": 0.25},
        7: {vm.MISMATCH_KL: 0.002},
    }


def test_render_is_deterministic() -> None:
    records_ = {2: {"b": 1.0, "a": 2.0}, 1: {"a": 1.0}}
    assert render_history(records_) == '{"step":1,"data":{"a":1.0}}\n{"step":2,"data":{"a":2.0,"b":1.0}}\n'
