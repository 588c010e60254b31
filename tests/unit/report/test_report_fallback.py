"""A run the mismatch guard fell back to BF16: the report shows both stretches (pure)."""

from __future__ import annotations

from flashrl_api import verl_metrics as vm
from flashrl_report.analysis import summarize
from flashrl_report.data import RunMetrics, precision_stretches

GOODPUT = {
    "byPrecision": [
        {"precision": "blockwise-fp8/kv-fp8-e4m3", "attempts": [1], "heldGPUSeconds": 7200, "steps": 5},
        {"precision": "bf16/kv-bf16", "attempts": [2], "heldGPUSeconds": 3600, "steps": 4},
    ]
}
FALLBACK = {"attempt": 2, "step": 5, "checkpointStep": 4, "metric": "rollout_corr/kl", "value": 0.2}


def test_both_stretches_with_their_steps_gpu_hours_and_generation_throughput() -> None:
    run = RunMetrics("kv-fp8-w-kv")
    for step in range(1, 9):
        run.steps[step] = {vm.THROUGHPUT: 2000.0 if step <= 4 else 1500.0}
    run.stretches = precision_stretches(GOODPUT, FALLBACK)
    fp8, bf16 = run.stretches
    assert (fp8.first_step, fp8.last_step, bf16.first_step, bf16.last_step) == (1, 4, 5, None)
    summary = summarize(run, None, None, 8)
    (_, fp8_speed), (_, bf16_speed) = summary.stretches
    assert fp8_speed is not None and (fp8_speed.mean, fp8_speed.n) == (2000.0, 4)
    assert bf16_speed is not None and (bf16_speed.mean, bf16_speed.n) == (1500.0, 4)
    first, second = summary.stretch_lines()
    assert first.startswith("blockwise-fp8/kv-fp8-e4m3: steps 1–4 (attempt 1), 2 GPU-h held")
    assert second.startswith("bf16/kv-bf16: steps 5– (attempt 2), 1 GPU-h held")


def test_a_run_of_one_precision_has_no_stretches() -> None:
    assert precision_stretches({"byPrecision": GOODPUT["byPrecision"][:1]}, None) == []
    assert precision_stretches(GOODPUT, None) == []
