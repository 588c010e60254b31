"""status.goodput from the status's own data (flashrl_operator.job.goodput): no clock, no I/O."""

from __future__ import annotations

from typing import Any

import pytest

from flashrl_api.goodput import LauncherClock, launcher_phases, parse_rfc3339
from flashrl_api.times import rfc3339_millis as rfc3339
from flashrl_operator.job.attempts import Attempts
from flashrl_operator.job.goodput import fold_attempts, goodput, unreleased

T0 = parse_rfc3339("2026-01-01T00:00:00Z") or 0.0


def at(seconds: float) -> str:
    return rfc3339(T0 + seconds).replace(".000Z", "Z")


def report(attempt: int, launched: float, steps: int, until: float) -> dict[str, Any]:
    """The launcher's status.launcherPhases: 60 s gate, then ``steps`` 100 s steps."""
    clock = LauncherClock(launched=T0 + launched)
    clock.gate(T0 + launched, T0 + launched + 60)
    now = T0 + launched + 60 + 200  # start-up
    for _ in range(steps):
        now += 100
        clock.step({"timing_s/step": 95.0, "timing_s/gen": 60.0, "timing_s/update_weights": 10.0}, now)
    return launcher_phases(clock, T0 + until, attempt, 16)


def test_a_retried_job_from_its_status_alone() -> None:
    status: dict[str, Any] = {
        "attempt": 2,
        "attempts": [
            {
                "attempt": 1,
                "startStep": 0,
                "endStep": 3,
                "checkpointStep": 2,
                "reason": "TrainerFailed",
                "startTime": at(100),
                "endTime": at(800),
            },
            {"attempt": 2, "startStep": 2, "startTime": at(900)},
        ],
    }
    attempts = Attempts.of(status)
    # Attempt 1's launcher reported before the failure; its cluster is gone now. Attempt 2's RayJob
    # waits for Kueue until 950 s.
    first = fold_attempts(attempts, report(1, 250, 3, 760), 16, released=[1], now=at(830), admitted=False)
    assert [e.attempt for e in unreleased(first)] == []
    assert first.history[0].release_time == at(830) and first.history[0].gpus == 16
    assert first.history[0].launcher is not None and first.history[0].launcher.steps == 3
    queued = fold_attempts(first, None, 16, released=[], now=at(920), admitted=False)
    assert queued.history[1].admit_time is None
    assert goodput(queued, [], at(0)) is not None
    admitted = fold_attempts(queued, None, 16, released=[], now=at(950))
    assert admitted.history[1].admit_time == at(950)
    # Attempt 2's launcher: folded into attempt 2, attempt 1's copy kept.
    second = fold_attempts(admitted, report(2, 1000, 2, 1500), 16, released=[], now=at(1500))
    assert second.history[0].launcher == first.history[0].launcher
    assert second.history[1].launcher is not None and second.history[1].launcher.attempt == 2
    # An older report never replaces a newer one.
    assert fold_attempts(second, report(2, 1000, 1, 1300), 16, [], at(1500)) == second

    conditions = [{"type": "Staged", "status": "True", "reason": "Staged", "lastTransitionTime": at(90)}]
    wire = goodput(second, conditions, at(0))
    assert wire is not None
    by_phase = {e["phase"]: e for e in wire["byPhase"]}
    assert by_phase["staging"]["seconds"] == 90 and by_phase["staging"]["gpuSeconds"] == 0
    assert by_phase["backoff"]["seconds"] == 70 and by_phase["backoff"]["gpuSeconds"] == 0
    assert by_phase["queued"]["seconds"] == 50 and by_phase["queued"]["gpuSeconds"] == 0
    # Held: attempt 1 from 100 s to its release at 830 s, attempt 2 from its admission at 950 s to its
    # launcher's report at 1500 s.
    assert wire["heldGPUSeconds"] == pytest.approx(16 * ((830 - 100) + (1500 - 950)), abs=0.5)
    assert by_phase["pods_starting"]["gpuSeconds"] == pytest.approx(16 * (150 + 50), abs=0.5)
    assert by_phase["lost_in_flight"]["gpuSeconds"] == pytest.approx(16 * 40, abs=0.5)
    # Attempt 1's end to its workers seen gone: GPUs held after the run, a phase of its own.
    assert by_phase["held_after_end"]["gpuSeconds"] == pytest.approx(16 * 30, abs=0.5)
    assert by_phase["lost_steps"]["gpuSeconds"] > 0  # step 3, after the checkpoint of step 2
    # The same data, the same ledger: a resync writes nothing.
    assert goodput(second, conditions, at(0)) == wire


def test_nothing_to_account_for_before_the_first_attempt() -> None:
    assert goodput(Attempts.of({}), [], at(0)) is None


def test_a_separate_async_job_splits_its_gpu_seconds_per_pool() -> None:
    """8 trainer GPUs and 8 rollout GPUs: each pool holds half; the trainer waits for samples in
    timing_s/gen (60 of each 100 s step), the rollout pool for weights in timing_s/update_weights (10)."""
    status = {"attempt": 1, "attempts": [{"attempt": 1, "startStep": 0, "startTime": at(0)}]}
    folded = fold_attempts(Attempts.of(status), report(1, 50, 4, 710), 16, released=[], now=at(10))
    wire = goodput(folded, [], at(0), [("trainer", 8), ("rollout", 8)])
    assert wire is not None
    trainer, rollout = wire["pools"]
    by_phase = {e["phase"]: e["gpuSeconds"] for e in wire["byPhase"]}
    assert (trainer["name"], trainer["gpus"], trainer["waitingFor"]) == ("trainer", 8, "samples")
    assert (rollout["name"], rollout["gpus"], rollout["waitingFor"]) == ("rollout", 8, "weights")
    assert (
        trainer["heldGPUSeconds"]
        == rollout["heldGPUSeconds"]
        == pytest.approx(wire["heldGPUSeconds"] / 2, abs=0.1)
    )
    generation = by_phase["generation"] + by_phase.get("discarded_generation", 0.0)
    assert trainer["waitingGPUSeconds"] == pytest.approx(generation / 2, abs=0.1)
    assert rollout["waitingGPUSeconds"] == pytest.approx(by_phase["weight_sync"] / 2, abs=0.1)
    assert 0 < rollout["waitingGPUSeconds"] < trainer["waitingGPUSeconds"]
    # One pool: nothing waits for another pool, no split is written.
    assert "pools" not in (goodput(folded, [], at(0), [("trainer", 16)]) or {})


def test_a_fallen_back_job_splits_its_gpu_seconds_and_steps_by_precision() -> None:
    status: dict[str, Any] = {
        "attempt": 2,
        "attempts": [
            {
                "attempt": 1,
                "startStep": 0,
                "endStep": 3,
                "checkpointStep": 2,
                "reason": "FellBackToBF16",
                "startTime": at(100),
                "endTime": at(800),
                "quantization": "blockwise-fp8",
                "kvCache": "fp8-e4m3",
            },
            {"attempt": 2, "startStep": 2, "startTime": at(900), "quantization": "bf16", "kvCache": "bf16"},
        ],
    }
    first = fold_attempts(Attempts.of(status), report(1, 250, 3, 760), 16, released=[1], now=at(830))
    both = fold_attempts(first, report(2, 1000, 2, 1500), 16, released=[], now=at(1500))
    wire = goodput(both, [], at(0))
    assert wire is not None
    fp8, bf16 = wire["byPrecision"]
    assert (fp8["precision"], fp8["attempts"], fp8["steps"]) == ("blockwise-fp8/kv-fp8-e4m3", [1], 3)
    assert (bf16["precision"], bf16["attempts"], bf16["steps"]) == ("bf16/kv-bf16", [2], 2)
    assert fp8["heldGPUSeconds"] == pytest.approx(16 * (830 - 100), abs=0.5)
    assert bf16["heldGPUSeconds"] == pytest.approx(16 * (1500 - 900), abs=0.5)
    # The split adds up to the job's ledger.
    assert fp8["heldGPUSeconds"] + bf16["heldGPUSeconds"] == pytest.approx(wire["heldGPUSeconds"], abs=1)
    assert fp8["trainingGPUSeconds"] + bf16["trainingGPUSeconds"] == pytest.approx(
        wire["trainingGPUSeconds"], abs=1
    )
