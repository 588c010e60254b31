"""flashrl_api.exported_metrics.status_metric_names: what the launcher (and the emulated one) puts in
status.metrics, and that the operator's per-step history, which copies from there, gets what the report
draws."""

from __future__ import annotations

from flashrl_api import verl_metrics as vm
from flashrl_api.exported_metrics import MAX_STATUS_METRICS, STATUS_METRICS, status_metric_names
from flashrl_api.history import kept
from flashrl_report.synthetic import records


def test_validation_means_first_then_the_curated_set_then_the_rest_the_history_keeps() -> None:
    reported = [
        "actor/entropy",
        vm.THROUGHPUT,
        "val-core/aime-2024/acc/maj@16/mean",
        "val-core/aime-2024/acc/mean@1",
        vm.RESPONSE_LENGTH_MEAN,
        "timing_s/testing",
        "critic/score/mean",
        "actor/grad_norm",  # verl reports it; the history does not keep it, so neither does the status
    ]
    names = status_metric_names(reported)
    assert names[0] == "val-core/aime-2024/acc/mean@1"
    assert names[1:3] == [n for n in STATUS_METRICS if n in reported]
    assert set(names[3:]) == {
        "actor/entropy",
        "critic/score/mean",
        "timing_s/testing",
        "val-core/aime-2024/acc/maj@16/mean",
    }
    assert "actor/grad_norm" not in names


def test_everything_the_history_keeps_of_a_step_is_reported_within_the_bound() -> None:
    data = next(r["data"] for r in records("blockwise-fp8", 30) if r["step"] == 30)
    names = status_metric_names(data)
    assert len(names) <= MAX_STATUS_METRICS
    assert set(kept(data)) <= set(names), "a metric the report draws would never reach the history"


def test_at_most_the_bound_and_the_scores_survive_the_cut() -> None:
    reported = [f"timing_s/phase_{i:03d}" for i in range(200)] + ["val-core/aime-2024/acc/mean@1"]
    names = status_metric_names(reported)
    assert len(names) == MAX_STATUS_METRICS
    assert names[0] == "val-core/aime-2024/acc/mean@1"
