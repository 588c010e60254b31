"""The launcher's /metrics: a real prometheus-client server, an HTTP scrape, ``promtool check metrics``."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flashrl_api import exported_metrics as names
from flashrl_api.goodput import LAUNCHER_PHASES, LauncherClock
from flashrl_jobs.exporter import MetricsServer, serve
from flashrl_jobs.run_metrics import Record, RunState

IDS = {"namespace": "ml", "job": "qwen3-fp8"}

#: One step as verl 0.9.1 logs it (names from trainer/ppo/metric_utils.py, rollout_corr_helper.py,
#: utils/debug/metrics.py and the v1 trainer's _validate).
STEP = {
    "timing_s/step": 412.5,
    "timing_s/gen": 250.0,
    "timing_s/update_weights": 9.5,
    "timing_s/update_actor": 120.0,
    "val-core/aime24/acc/mean@32": 0.31,
    "val-aux/aime24/reward/mean@32": 0.2,
    "response_length/mean": 4096.5,
    "response_length/max": 20480.0,
    "response_length/min": 12.0,
    "response_length/clip_ratio": 0.05,
    "perf/throughput": 1830.2,
    "rollout_corr/kl": 0.0123,
    "rollout_corr/rollout_is_eff_sample_size": 0.91,
    "rollout_corr/rollout_is_mean": 1.001,
    "rollout_corr/rollout_is_ratio_fraction_high": 0.002,
    "training/rollout_probs_diff_mean": 0.004,
    "actor/pg_loss": -0.02,
}


@pytest.fixture
def server() -> Iterator[tuple[RunState, MetricsServer]]:
    state = RunState(total_steps=150)
    running = serve(state, "ml", "qwen3-fp8", 0, address="127.0.0.1")
    try:
        yield state, running
    finally:
        running.close()


def scrape(running: MetricsServer) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert {k: sample.labels[k] for k in IDS} == IDS, sample  # every series names its job
            extra = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in IDS))
            found[(sample.name, extra)] = sample.value
    return found


def test_a_scrape_before_any_step_has_progress_only(server: tuple[RunState, MetricsServer]) -> None:
    _, running = server
    got = samples(scrape(running))
    assert got == {(names.TRAINING_STEP, ()): 0.0, (names.TRAINING_TOTAL_STEPS, ()): 150.0}


def test_every_verl_metric_is_exported_under_its_name(server: tuple[RunState, MetricsServer]) -> None:
    state, running = server
    state.add(Record(5, {**STEP, "rollout_corr/chi2_token": 0.03}), now=1_700_000_000.0)
    got = samples(scrape(running))
    assert got[(names.TRAINING_STEP, ())] == 5
    assert got[(names.TRAINING_STEP_SECONDS, ())] == 412.5
    assert got[(names.TRAINING_LAST_STEP_TIMESTAMP, ())] == 1_700_000_000.0
    assert got[(names.TRAINING_REMAINING_SECONDS, ())] == round(145 * 412.5)
    assert got[(names.PHASE_SECONDS, (("phase", "gen"),))] == 250.0
    assert got[(names.PHASE_SECONDS, (("phase", "update_weights"),))] == 9.5
    assert (names.PHASE_SECONDS, (("phase", "step"),)) not in got  # that one is the step's own series
    assert got[(names.VALIDATION_SCORE, (("data_source", "aime24"), ("metric", "acc/mean@32")))] == 0.31
    assert got[(names.RESPONSE_LENGTH, (("stat", "mean"),))] == 4096.5
    assert got[(names.RESPONSE_LENGTH, (("stat", "max"),))] == 20480.0
    assert got[(names.RESPONSE_LENGTH, (("stat", "clip_ratio"),))] == 0.05
    assert got[(names.THROUGHPUT, ())] == 1830.2
    assert got[(names.MISMATCH_KL, ())] == 0.0123
    assert got[(names.IS_ESS, ())] == 0.91
    assert got[(names.IS_MEAN, ())] == 1.001
    assert got[(names.IS_CLIPPED_FRACTION, ())] == 0.002
    assert got[(names.PROBS_DIFF_MEAN, ())] == 0.004
    # Everything else, by its verl name; nothing exported twice.
    others = {dict(labels)["key"]: v for (name, labels), v in got.items() if name == names.VERL_METRIC}
    assert others == {
        "actor/pg_loss": -0.02,
        "response_length/min": 12.0,
        "rollout_corr/chi2_token": 0.03,
        "val-aux/aime24/reward/mean@32": 0.2,
    }


def test_the_newest_checkpoint_step_is_exported_once_the_ledger_has_seen_one(
    server: tuple[RunState, MetricsServer],
) -> None:
    state, running = server
    state.add(Record(3, {"timing_s/step": 10.0}), now=1.0)
    assert (names.CHECKPOINT_STEP, ()) not in samples(scrape(running))  # no checkpoint yet: no series
    state.set_checkpoint(2)
    assert samples(scrape(running))[(names.CHECKPOINT_STEP, ())] == 2
    state.set_checkpoint(4)
    assert samples(scrape(running))[(names.CHECKPOINT_STEP, ())] == 4


def test_a_metric_verl_reported_as_nan_has_no_series(server: tuple[RunState, MetricsServer]) -> None:
    state, running = server
    # verl's debug metrics are NaN when the rollout log-probs are invalid (utils/debug/metrics.py);
    # the reader drops NaN, so the series is absent rather than zero.
    state.add(Record(1, {"rollout_corr/kl": 0.01}), now=1.0)
    text = scrape(running)
    assert names.PROBS_DIFF_MEAN not in text and names.MISMATCH_KL in text


def test_promtool_accepts_a_real_scrape(server: tuple[RunState, MetricsServer]) -> None:
    assert shutil.which("promtool"), "promtool is missing: `make tools` installs Debian's prometheus package"
    state, running = server
    state.add(Record(0, {"val-core/aime24/acc/mean@32": 0.1}), now=1.0)
    state.add(Record(1, STEP), now=2.0)
    state.set_checkpoint(1)
    text = scrape(running)
    assert names.CHECKPOINT_STEP in text
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr + text


def test_gpu_seconds_by_phase_come_from_the_launchers_clock() -> None:
    """The goodput counter: the launcher's split of its wall-clock × the attempt's 16 GPUs, at scrape time."""
    clock = LauncherClock(launched=1000.0, kept_groups=32)
    clock.gate(1000.0, 1060.0)
    state = RunState(total_steps=150, clock=clock)
    state.add(Record(1, STEP), now=1000.0 + 60.0 + 100.0 + 412.5)
    running = serve(state, "ml", "qwen3-fp8", 0, address="127.0.0.1", gpus=16, now=lambda: 1572.5 + 10.0)
    try:
        got = samples(scrape(running))
    finally:
        running.close()
    by_phase = {dict(labels)["phase"]: v for (name, labels), v in got.items() if name == names.GPU_SECONDS}
    assert set(by_phase) <= {str(p) for p in LAUNCHER_PHASES}
    assert by_phase["gpu_gate"] == 16 * 60.0
    assert by_phase["startup"] == 16 * 100.0
    assert by_phase["weight_sync"] == 16 * 9.5
    assert by_phase["generation"] == 16 * 250.0
    # The 10 s since the step (the next one under way) are step_other, with the step's untimed 33 s.
    assert by_phase["step_other"] == pytest.approx(16 * (412.5 - 250.0 - 9.5 - 120.0 + 10.0))
    assert sum(by_phase.values()) == pytest.approx(16 * (1582.5 - 1000.0))


#: A separate-async step: verl 0.9.1's V1 trainer logs the samples' staleness and the ones it dropped
#: (trainer_base.py, replay_buffer.py); its timing_s/gen is the wait for the rollout pool's samples.
ASYNC_STEP = {
    "timing_s/step": 400.0,
    "timing_s/gen": 240.0,
    "timing_s/update_weights": 20.0,
    "training/off_policy/trajectory_staleness/mean": 1.5,
    "training/off_policy/trajectory_staleness/max": 4.0,
    "training/off_policy/evicted_samples": 3.0,
    "separate_async/switch/idle": 1.0,
}


def test_the_async_figures_have_series_and_separate_async_exports_the_trainers_sample_wait() -> None:
    for separate, fraction in ((True, 0.6), (False, None)):
        state = RunState(total_steps=10)
        running = serve(state, "ml", "qwen3-fp8", 0, address="127.0.0.1", separate_pools=separate)
        try:
            state.add(Record(1, ASYNC_STEP), now=1.0)
            got = samples(scrape(running))
        finally:
            running.close()
        assert got[(names.ASYNC_STALENESS_MEAN, ())] == 1.5
        assert got[(names.ASYNC_STALENESS_MAX, ())] == 4.0
        assert got[(names.ASYNC_OFF_POLICY_EVICTED, ())] == 3.0
        assert got[(names.ASYNC_TRAINER_IDLE, ())] == 1.0
        assert got[(names.PHASE_SECONDS, (("phase", "update_weights"),))] == 20.0
        assert got.get((names.ASYNC_SAMPLE_WAIT_FRACTION, ())) == fraction
