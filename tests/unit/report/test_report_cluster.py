"""The report's cluster path, pure part: runs from FlashRLJobs and their history ConfigMaps."""

from __future__ import annotations

from typing import Any

from manifests import job_object as _job

from flashrl_api import verl_metrics as vm
from flashrl_api.history import HISTORY_KEY, add_step, history_name
from flashrl_report import build_report
from flashrl_report.cluster import JobObjects, runs_from_objects
from flashrl_report.paired import PLOT_DIFFERENCE, PLOT_PROBLEMS
from flashrl_report.synthetic import records


def _history(precision: str, steps: int, stop: int | None = None, stride: int = 1) -> dict[str, Any]:
    text = ""
    for record in records(precision, steps):
        if (stop is None or record["step"] <= stop) and (
            record["step"] % stride == 0 or record["step"] > steps - 5
        ):
            text = add_step(text, record["step"], record["data"])
    return {"data": {HISTORY_KEY: text}}


def test_histories_become_runs_labelled_by_variant() -> None:
    objects = [
        JobObjects("blockwise-fp8", "x-blockwise-fp8", _job("Succeeded"), _history("blockwise-fp8", 30)),
        JobObjects("bf16", "x-bf16", _job("Succeeded"), _history("bf16", 30)),
    ]
    runs = runs_from_objects("rl", objects)
    assert [r.label for r in runs] == ["blockwise-fp8", "bf16"]
    assert runs[0].sources == ["ConfigMap rl/x-blockwise-fp8-metrics"]
    assert runs[0].training_steps() == list(range(1, 31))
    assert runs[0].notes == []
    report = build_report(runs)
    assert all(p.png is not None for p in report.plots if p.id not in (PLOT_DIFFERENCE, PLOT_PROBLEMS))
    assert report.summaries[0].speedup is not None


def test_failed_running_thinned_and_history_less_jobs_are_explained() -> None:
    metrics = [
        {"name": vm.MISMATCH_KL, "value": 0.002, "step": 12},
        {"name": vm.THROUGHPUT, "value": 480.0, "step": 12},
    ]
    objects = [
        JobObjects("failed", "x-a", _job("Failed", "TrainerFailed"), _history("channel-fp8", 30, stop=17)),
        JobObjects("running", "x-b", _job("Running"), _history("bf16", 30, stride=2)),
        JobObjects("no-history", "x-c", _job("Running", metrics=metrics), None),
        JobObjects("missing", "x-d", None, None),
    ]
    runs = runs_from_objects("rl", objects)
    notes = {r.label: " | ".join(r.notes) for r in runs}
    assert "the job failed (TrainerFailed): its run ends early" in notes["failed"]
    assert runs[0].last_step == 17
    assert "the job is still Running" in notes["running"]
    assert "older steps were thinned" in notes["running"]
    assert "no per-step history (ConfigMap rl/x-c-metrics)" in notes["no-history"]
    assert runs[2].series(vm.MISMATCH_KL) == ([12], [0.002])
    assert "FlashRLJob rl/x-d does not exist" in notes["missing"]
    assert runs[3].steps == {}
    build_report(runs)  # renders whatever there is


def test_history_name() -> None:
    assert history_name("origin-bf16") == "origin-bf16-metrics"


def test_an_experiments_replicas_are_labelled_variant_hash_replica() -> None:
    from flashrl_api.experiment import parse_experiment
    from flashrl_report.cluster import experiment_jobs

    experiment = parse_experiment(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLExperiment",
            "metadata": {"name": "x", "namespace": "rl"},
            "spec": {"replicas": 2, "template": {"images": {"trainer": "example.com/t:1"}}},
        }
    )
    assert experiment_jobs(experiment) == [
        ("blockwise-fp8#0", "x-blockwise-fp8-r0"),
        ("blockwise-fp8#1", "x-blockwise-fp8-r1"),
        ("bf16#0", "x-bf16-r0"),
        ("bf16#1", "x-bf16-r1"),
    ]
