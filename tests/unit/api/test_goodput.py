"""The goodput ledger (flashrl_api.goodput): the launcher's split and the job's ledger, from data alone."""

from __future__ import annotations

import pytest

from flashrl_api.goodput import (
    LAUNCHER_PHASES,
    TRAINING,
    AttemptSpan,
    GoodputPhase,
    LauncherClock,
    attempt_seconds,
    job_ledger,
    ledger_of,
)

P = GoodputPhase


def verl_step(gen: float, sync: float, *, testing: float = 0.0, save: float = 0.0) -> dict[str, float]:
    """A verl 0.9.1 V1-trainer record: the in-step timers, their sum plus 2 s of bookkeeping as the step."""
    parts = {
        "timing_s/gen": gen,
        "timing_s/update_weights": sync,
        "timing_s/reward": 3.0,
        "timing_s/old_log_prob": 20.0,
        "timing_s/ref": 10.0,
        "timing_s/adv": 1.0,
        "timing_s/update_actor": 60.0,
    }
    if save:
        parts["timing_s/save_checkpoint"] = save
    record = {**parts, "timing_s/step": sum(parts.values()) + 2.0}
    if testing:
        record["timing_s/testing"] = testing
    return record


def run_launcher(t0: float, steps: int, *, fail_after: float | None = None) -> tuple[LauncherClock, float]:
    """A launcher that gates 30 s (after 5 s of config), starts verl in 120 s, then runs ``steps`` steps."""
    clock = LauncherClock(launched=t0, kept_groups=32)
    clock.gate(t0 + 5, t0 + 35)
    now = t0 + 35 + 120
    for n in range(1, steps + 1):
        record = verl_step(200.0, 15.0, testing=40.0 if n % 2 == 0 else 0.0, save=25.0 if n == 2 else 0.0)
        record["training/filter_groups/evicted_samples"] = 8
        now += record["timing_s/step"] + record.get("timing_s/testing", 0.0) + 1.5
        clock.step(record, now)
    return clock, now + (fail_after or 0.0)


def test_launcher_split_adds_up_to_its_window_and_reads_verl_keys() -> None:
    clock, end = run_launcher(1000.0, 3)
    phases = clock.phases(end)
    assert sum(phases.values()) == pytest.approx(end - 1000.0)
    assert set(phases) <= LAUNCHER_PHASES
    assert phases[P.GPU_GATE] == pytest.approx(30.0)
    # Before the first step: 5 s of config, 120 s of verl start-up, then the first record's 1.5 s of
    # launcher time is part of start-up too (it precedes the step's own timers).
    assert phases[P.STARTUP] == pytest.approx(5.0 + 120.0 + 1.5)
    assert phases[P.WEIGHT_SYNC] == pytest.approx(3 * 15.0)
    assert phases[P.LOG_PROB] == pytest.approx(3 * 30.0)
    assert phases[P.ACTOR_UPDATE] == pytest.approx(3 * 61.0)
    assert phases[P.CHECKPOINT] == pytest.approx(25.0)
    assert phases[P.VALIDATION] == pytest.approx(40.0)
    # 8 of 40 generated groups were thrown away by dynamic sampling: a fifth of generation.
    assert phases[P.DISCARDED_GENERATION] == pytest.approx(3 * 200.0 * 8 / 40)
    assert phases[P.GENERATION] == pytest.approx(3 * 200.0 * 32 / 40)


def test_timings_longer_than_the_window_are_scaled_to_fit() -> None:
    clock = LauncherClock(launched=0.0)
    clock.step(verl_step(200.0, 10.0), 100.0)  # verl says ~300 s, only 100 s passed
    phases = clock.phases(100.0)
    assert sum(phases.values()) == pytest.approx(100.0)
    assert phases[P.GENERATION] > phases[P.WEIGHT_SYNC] > 0


def test_a_record_without_timing_s_step_uses_its_parts() -> None:
    clock = LauncherClock(launched=0.0)
    record = verl_step(50.0, 5.0)
    del record["timing_s/step"]
    clock.step(record, 500.0)
    phases = clock.phases(500.0)
    assert sum(phases.values()) == pytest.approx(500.0)
    assert phases[P.GENERATION] == pytest.approx(50.0)


def retried_job() -> tuple[list[AttemptSpan], float, float, float]:
    """Two 16-GPU attempts: the first fails 90 s after its third step (checkpoint at step 2), then a
    retry resumes from step 2 and finishes; staging took 300 s and the backoff 60 s."""
    first_clock, first_last = run_launcher(1200.0, 3)
    first = AttemptSpan(
        attempt=1,
        gpus=16,
        start=1000.0,
        launched=1200.0,
        reported=first_last,
        launcher=first_clock.phases(first_last),
        steps=3,
        end=first_last + 90.0,
        release=first_last + 90.0 + 20.0,
        failed=True,
        lost_steps=1,
    )
    second_start = first.release + 60.0  # type: ignore[operator]
    second_clock, second_last = run_launcher(second_start + 150.0, 4)
    second = AttemptSpan(
        attempt=2,
        gpus=16,
        start=second_start,
        launched=second_start + 150.0,
        reported=second_last,
        launcher=second_clock.phases(second_last),
        steps=4,
        end=second_last + 5.0,
        release=second_last + 35.0,
    )
    return [first, second], second.release or 0.0, 300.0, 60.0


def test_every_held_gpu_second_lands_in_one_phase() -> None:
    spans, as_of, staging, backoff = retried_job()
    ledger = job_ledger(spans, as_of, staging=staging, backoff=backoff)
    held = sum(s.gpus * ((s.release or as_of) - s.start) for s in spans)
    assert ledger.held_gpu_seconds == pytest.approx(held, rel=0.02)
    assert ledger.seconds[P.STAGING] == 300.0 and ledger.gpu_seconds[P.STAGING] == 0.0
    assert ledger.seconds[P.BACKOFF] == 60.0 and ledger.gpu_seconds[P.BACKOFF] == 0.0
    assert ledger.gpu_seconds[P.PODS_STARTING] == pytest.approx(16 * (200.0 + 150.0))
    assert ledger.gpu_seconds[P.LOST_IN_FLIGHT] == pytest.approx(16 * 90.0)
    # The launcher's newest report to the end; then the end to the workers gone, a phase of its own.
    assert ledger.gpu_seconds[P.TEARDOWN] == pytest.approx(16 * 5.0)
    assert ledger.gpu_seconds[P.HELD_AFTER_END] == pytest.approx(16 * (20.0 + 30.0))
    fraction = ledger.productive_fraction
    assert fraction is not None and 0 < fraction < 1
    assert ledger.training_gpu_seconds == pytest.approx(sum(ledger.gpu_seconds[p] for p in TRAINING))


def test_a_failed_attempt_loses_its_steps_after_the_checkpoint() -> None:
    spans, as_of, _, _ = retried_job()
    failed = spans[0]
    kept = attempt_seconds(failed.__class__(**{**failed.__dict__, "lost_steps": 0}), as_of)
    lost = attempt_seconds(failed, as_of)
    # One of three steps (step 3, after the checkpoint of step 2) moves to lost_steps, from every
    # step phase alike; the total is unchanged.
    assert lost[P.LOST_STEPS] == pytest.approx(
        sum(
            kept.get(p, 0.0)
            for p in kept
            if p in TRAINING | {P.DISCARDED_GENERATION, P.VALIDATION, P.CHECKPOINT}
        )
        / 3
    )
    assert lost[P.WEIGHT_SYNC] == pytest.approx(kept[P.WEIGHT_SYNC] * 2 / 3)
    assert sum(lost.values()) == pytest.approx(sum(kept.values()))


def test_a_live_attempt_counts_until_the_newest_observation() -> None:
    clock, last = run_launcher(100.0, 1)
    span = AttemptSpan(
        attempt=1, gpus=8, start=50.0, launched=100.0, reported=last, launcher=clock.phases(last)
    )
    ledger = job_ledger([span], as_of=last)
    assert ledger.held_gpu_seconds == pytest.approx(8 * (last - 50.0))
    # Not started yet: everything since the RayJob was created is pods starting.
    waiting = job_ledger([AttemptSpan(attempt=1, gpus=8, start=50.0)], as_of=80.0)
    assert waiting.gpu_seconds[P.PODS_STARTING] == pytest.approx(8 * 30.0)


def test_the_status_form_reads_back() -> None:
    spans, as_of, staging, backoff = retried_job()
    ledger = job_ledger(spans, as_of, staging=staging, backoff=backoff)
    wire = ledger.to_wire()
    back = ledger_of(wire["byPhase"])  # type: ignore[arg-type]
    assert back.held_gpu_seconds == pytest.approx(ledger.held_gpu_seconds, abs=1.0)
    assert [e["phase"] for e in wire["byPhase"]][:2] == ["staging", "backoff"]  # type: ignore[index]
    assert wire["productiveFraction"] == round(ledger.productive_fraction or 0, 4)


def test_gpus_held_after_the_end_are_a_phase_of_their_own() -> None:
    """A run whose GPU workers outlived its Ray job by N seconds: N x its GPUs in held_after_end."""
    for outlived in (0.0, 3600.0):
        span = AttemptSpan(
            attempt=1,
            gpus=8,
            start=0.0,
            launched=60.0,
            reported=1000.0,
            launcher={"generation": 940.0},
            steps=10,
            end=1002.0,
            release=1002.0 + outlived,
        )
        ledger = job_ledger([span], span.release or 0.0)
        assert ledger.gpu_seconds[P.HELD_AFTER_END] == pytest.approx(8 * outlived)
        assert ledger.gpu_seconds[P.TEARDOWN] == pytest.approx(8 * 2.0)
        assert ledger.held_gpu_seconds == pytest.approx(8 * (1002.0 + outlived))
        assert (P.HELD_AFTER_END.value in {e["phase"] for e in ledger.to_wire()["byPhase"]}) == (outlived > 0)
