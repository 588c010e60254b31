"""Sync against separate-async in one report (issue 35): time per step, hours to the common validation
score and GPU-hours held, split by pool, side by side in the summary table."""

from __future__ import annotations

from typing import Any

import pytest

from flashrl_api.history import HISTORY_KEY, add_step
from flashrl_report import build_report
from flashrl_report.analysis import wall_hours
from flashrl_report.cluster import JobObjects, runs_from_objects
from flashrl_report.data import ROLLOUT_POOL, TRAINER_POOL, pool_gpus, pool_held_gpu_seconds
from flashrl_report.html import HEADERS
from flashrl_report.synthetic import records

POOL = {"nodes": 1, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H20"}
STEPS = 40


def _history(precision: str) -> dict[str, Any]:
    text = ""
    for record in records(precision, STEPS):
        text = add_step(text, record["step"], record["data"])
    return {"data": {HISTORY_KEY: text}}


def _job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    base = {"resources": {"nodes": 1, "gpusPerNode": 8}}
    return {"metadata": {"name": name}, "spec": {**base, **spec}, "status": {"phase": "Succeeded"}}


SEPARATE = {"training": {"mode": "separate-async"}, "rollout": {"pool": POOL}}


def _report() -> Any:
    objects = [
        JobObjects("async-fp8", "x-async-fp8", _job("x-async-fp8", SEPARATE), _history("blockwise-fp8")),
        JobObjects("sync-fp8", "x-sync-fp8", _job("x-sync-fp8", {}), _history("blockwise-fp8")),
    ]
    runs = runs_from_objects("rl", objects)
    return runs, build_report(runs, baseline="sync-fp8")


def test_pool_gpus_reads_both_pools_of_a_separate_async_spec() -> None:
    assert pool_gpus({"resources": {"nodes": 2, "gpusPerNode": 8}}) == {TRAINER_POOL: 16}
    assert pool_gpus({"resources": {"nodes": 1, "gpusPerNode": 8}, "rollout": {"pool": POOL}}) == {
        TRAINER_POOL: 8,
        ROLLOUT_POOL: 8,
    }
    assert pool_gpus({"resources": {"nodes": "1"}, "rollout": {"pool": None}}) == {}


def test_a_separate_async_run_holds_both_pools_gpus_and_its_hours_split_by_pool() -> None:
    runs, report = _report()
    assert [r.gpus for r in runs] == [16, 8], "the rollout pool's GPUs are held too"
    separate, sync = report.summaries
    assert separate.cost is not None and sync.cost is not None
    # Same steps, twice the GPUs: twice the GPU-hours, half of them the rollout pool's.
    assert separate.cost.held_gpu_hours == pytest.approx(2 * sync.cost.held_gpu_hours)
    assert separate.cost.by_pool == {
        TRAINER_POOL: pytest.approx(sync.cost.held_gpu_hours),
        ROLLOUT_POOL: pytest.approx(sync.cost.held_gpu_hours),
    }
    assert sync.cost.by_pool == {}, "one pool: nothing to split"


def test_time_per_step_and_hours_to_the_common_score_are_the_runs_own() -> None:
    runs, report = _report()
    for run, summary, goodput in zip(runs, report.summaries, report.goodput, strict=True):
        _, seconds = run.series("timing_s/step", training_only=True)
        assert summary.step_seconds is not None
        assert summary.step_seconds.mean == pytest.approx(sum(seconds) / len(seconds))
        assert summary.step_seconds.n == STEPS
        assert summary.cost is not None and goodput.reached is not None
        hours, step = summary.cost.hours_to_score or (None, None)
        assert step == goodput.reached.last_step and hours == pytest.approx(wall_hours(run)[step])
        assert summary.cost.gpu_hours_to_score == goodput.hours_to_score


def test_the_summary_table_shows_the_columns_side_by_side() -> None:
    _, report = _report()
    for header in ("time per step, s", "GPU-hours held (by pool)"):
        assert f"<th>{header}</th>" in report.html
    assert HEADERS[-3:] == (
        "time per step, s",
        "hours to the common validation score (training + validation)",
        "GPU-hours held (by pool)",
    )
    separate = report.summaries[0]
    assert separate.cost is not None
    held = separate.cost.held_gpu_hours
    half = separate.cost.by_pool[ROLLOUT_POOL]
    assert (
        f'<td>{held:.1f}<span class="sub">trainer {half:.1f}</span>'
        f'<span class="sub">rollout pool {half:.1f}</span></td>'
    ) in report.html


def test_a_ledger_counting_only_the_trainers_gpus_still_splits_by_the_time_held() -> None:
    """The operator's status.goodput counts the trainer's GPUs only until it accounts per pool: an hour
    held on the trainer's 8 GPUs. The hour is held by both groups: 8 GPU-hours each, 16 in all."""
    goodput = {
        "byPhase": [
            {"phase": "generation", "seconds": 2400.0, "gpuSeconds": 2400.0 * 8},
            {"phase": "actor_update", "seconds": 1200.0, "gpuSeconds": 1200.0 * 8},
        ]
    }
    raw = _job("x-async", SEPARATE)
    raw["status"]["goodput"] = goodput
    objects = [
        JobObjects("async", "x-async", raw, _history("blockwise-fp8")),
        JobObjects("sync", "x-sync", _job("x-sync", {}), _history("blockwise-fp8")),
    ]
    report = build_report(runs_from_objects("rl", objects), baseline="sync")
    separate = report.summaries[0].cost
    assert separate is not None
    assert separate.by_pool == {TRAINER_POOL: pytest.approx(8.0), ROLLOUT_POOL: pytest.approx(8.0)}
    assert separate.held_gpu_hours == pytest.approx(16.0)
    (held_by_ledger,) = [g.held_hours for g in report.goodput if g.label == "async"]
    assert held_by_ledger == pytest.approx(8.0), "the goodput section shows the ledger as it is"


def test_the_operators_per_pool_goodput_is_the_split_when_the_status_has_it() -> None:
    """status.goodput.pools (an operator that accounts per pool) gives each pool's GPU-hours as it
    states them; a status without it, or with an entry the report cannot read, falls back to time held
    x the pool's GPUs."""
    ledger = [{"phase": "actor_update", "seconds": 3600.0, "gpuSeconds": 3600.0 * 16}]
    pools = [
        {"name": "trainer", "gpus": 8, "heldGPUSeconds": 36000.0, "trainingGPUSeconds": 36000.0},
        {"name": "rollout", "gpus": 8, "heldGPUSeconds": 21600.0, "waitingFor": "weights"},
    ]
    assert pool_held_gpu_seconds({"byPhase": ledger, "pools": pools}) == {
        TRAINER_POOL: 36000.0,
        ROLLOUT_POOL: 21600.0,
    }
    assert pool_held_gpu_seconds({"byPhase": ledger}) == {}
    assert pool_held_gpu_seconds({"pools": [*pools[:1], {"name": "rollout"}]}) == {}, "all or none"
    assert pool_held_gpu_seconds({"pools": [{"name": "other", "heldGPUSeconds": 1.0}]}) == {}

    def by_pool(goodput: dict[str, Any]) -> dict[str, float]:
        raw = _job("x-async", SEPARATE)
        raw["status"]["goodput"] = goodput
        objects = [
            JobObjects("async", "x-async", raw, _history("blockwise-fp8")),
            JobObjects("sync", "x-sync", _job("x-sync", {}), _history("blockwise-fp8")),
        ]
        runs = runs_from_objects("rl", objects)
        cost = build_report(runs, baseline="sync").summaries[0].cost
        assert cost is not None
        assert cost.held_gpu_hours == pytest.approx(sum(cost.by_pool.values()))
        return cost.by_pool

    stated = by_pool({"byPhase": ledger, "pools": pools})
    assert stated == {TRAINER_POOL: pytest.approx(10.0), ROLLOUT_POOL: pytest.approx(6.0)}
    computed = by_pool({"byPhase": ledger})
    assert computed == {TRAINER_POOL: pytest.approx(8.0), ROLLOUT_POOL: pytest.approx(8.0)}
