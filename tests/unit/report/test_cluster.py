"""The report's cluster path, pure part: runs from FlashRLJobs and their history ConfigMaps."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

from manifests import job_object as _job

from flashrl_api import verl_metrics as vm
from flashrl_api.history import HISTORY_KEY, add_step, history_name
from flashrl_operator.client.report_runs import fetch_runs
from flashrl_report import build_report, write_report
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


def test_a_variant_waiting_its_turn_is_called_waiting_with_what_it_waits_for() -> None:
    waiting = {"name": "bf16", "jobName": "x-bf16", "phase": "Waiting"}
    told = {**waiting, "reason": "WaitingForGPUs", "message": "x-blockwise-fp8 still holds 8 GPUs"}
    deleted = {"name": "gone", "jobName": "x-gone", "phase": "Failed", "reason": "JobDeleted"}
    objects = [
        JobObjects("bf16", "x-bf16", None, None, waiting, 1),
        JobObjects("told", "x-told", None, None, told, 1),
        JobObjects("gone", "x-gone", None, None, deleted, 1),
        JobObjects("alone", "alone", None, None),  # --job: no experiment to ask
    ]
    notes = [" | ".join(r.notes) for r in runs_from_objects("rl", objects)]
    assert notes[0] == (
        "variant bf16 is waiting its turn (FlashRLJob rl/x-bf16 is not created yet; spec.parallelism is 1, "
        "so it starts when a running variant finishes)"
    )
    assert notes[1] == (
        "variant told is waiting its turn (FlashRLJob rl/x-told is not created yet; WaitingForGPUs: "
        "x-blockwise-fp8 still holds 8 GPUs)"
    )
    assert (
        notes[2]
        == "variant gone: its FlashRLJob rl/x-gone was deleted (the experiment does not create it again)"
    )
    assert notes[3] == "FlashRLJob rl/alone does not exist (not created yet, or deleted)"
    assert not any("does not exist" in note for note in notes[:3])


class _Client:
    """The objects ``flashrl report --experiment`` reads, as the API server returns them."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    async def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((resource.kind, name))


def test_the_experiment_status_tells_the_report_who_waits() -> None:
    experiment = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLExperiment",
        "metadata": {"name": "x", "namespace": "rl"},
        "spec": {"parallelism": 1},
        "status": {
            "variants": [
                {"name": "blockwise-fp8", "jobName": "x-blockwise-fp8", "phase": "Running"},
                {"name": "bf16", "jobName": "x-bf16", "phase": "Waiting"},
            ]
        },
    }
    experiment["spec"]["variants"] = [
        {"name": "blockwise-fp8", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
        {"name": "bf16", "spec": {"rollout": {"quantization": "bf16"}}},
    ]
    client = _Client(
        {
            ("FlashRLExperiment", "x"): experiment,
            ("FlashRLJob", "x-blockwise-fp8"): _job("Running"),
            ("ConfigMap", "x-blockwise-fp8-metrics"): _history("blockwise-fp8", 30, stop=5),
        }
    )
    runs, validation, title = asyncio.run(fetch_runs(client, "rl", "x", []))
    assert validation == []
    assert title == "FlashRL experiment rl/x"
    assert runs[1].notes == [
        "variant bf16 is waiting its turn (FlashRLJob rl/x-bf16 is not created yet; spec.parallelism is 1, "
        "so it starts when a running variant finishes)"
    ]


def test_a_report_of_variants_that_hold_no_gpu_yet_prints_no_library_warning(tmp_path: Path) -> None:
    """A staging variant's ledger has no GPU-second in it: no bar to draw, so no matplotlib legend
    warning on the terminal, and the page says why the figure is missing."""
    staging = _job("Staging")
    staging["status"]["goodput"] = {
        "heldGPUSeconds": 0,
        "trainingGPUSeconds": 0,
        "byPhase": [{"phase": "staging", "seconds": 30.0, "gpuSeconds": 0.0}],
    }
    objects = [
        JobObjects("blockwise-fp8", "x-blockwise-fp8", staging, None),
        JobObjects("bf16", "x-bf16", None, None, {"name": "bf16", "phase": "Waiting"}, 1),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = build_report(runs_from_objects("rl", objects))
        write_report(report, tmp_path)
    assert [str(w.message) for w in caught] == []
    goodput = next(p for p in report.plots if p.id == "goodput-phases")
    assert goodput.png is None
    assert "no run has held a GPU yet" in report.html


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


def test_with_replicas_each_runs_status_is_found_by_its_run_label() -> None:
    from flashrl_report.cluster import variant_statuses

    raw = {
        "status": {
            "variants": [
                {"name": "bf16", "replica": 0, "phase": "Running"},
                {"name": "bf16", "replica": 1, "phase": "Waiting"},
            ]
        }
    }
    assert {k: v["phase"] for k, v in variant_statuses(raw, 2).items()} == {
        "bf16#0": "Running",
        "bf16#1": "Waiting",
    }
    assert list(variant_statuses({"status": {"variants": [{"name": "bf16", "phase": "Running"}]}})) == [
        "bf16"
    ]


def test_each_arm_says_what_its_rollout_ran_from_its_jobs_spec() -> None:
    """An experiment's arms are named by the user (``fp8-kv``): the page says what each one's rollout
    ran, from its FlashRLJob's spec (weights and KV cache), beside the name in the summary table."""

    def arm(quantization: str, kv_cache: str) -> dict[str, Any]:
        return {**_job("Succeeded"), "spec": {"rollout": {"quantization": quantization, "kvCache": kv_cache}}}

    objects = [
        JobObjects("bf16", "x-bf16", arm("bf16", "auto"), _history("bf16", 12)),
        JobObjects("fp8-kv", "x-fp8-kv", arm("bf16", "fp8-e4m3"), _history("bf16", 12)),
        JobObjects("fp8-w-kv", "x-fp8-w-kv", arm("blockwise-fp8", "fp8-e4m3"), _history("blockwise-fp8", 12)),
        JobObjects("gone", "x-gone", None, None),
    ]
    runs = runs_from_objects("rl", objects)
    assert [r.rollout for r in runs] == [
        "bf16 weights, the engine's default KV cache",
        "bf16 weights, fp8-e4m3 KV cache",
        "blockwise-fp8 weights, fp8-e4m3 KV cache",
        None,
    ]
    page = build_report(runs).html
    for label, rollout in (
        ("fp8-kv", "bf16 weights, fp8-e4m3 KV cache"),
        ("bf16", "bf16 weights, the engine"),
    ):
        row = next(r for r in page.split("<tr>") if f"</span>{label} " in r or f"</span>{label}<" in r)
        assert rollout in row, row
