"""The operator's metrics: its own registry, jobs per phase, startup latency once per job."""

from __future__ import annotations

import datetime

from flashrl_operator.vocab.metrics import OperatorMetrics, parse_time


def test_registries_are_per_operator() -> None:
    a, b = OperatorMetrics(), OperatorMetrics()
    a.reconcile_errors.labels(reason="Temporary").inc()
    assert (
        a.registry.get_sample_value("flashrl_operator_reconcile_errors_total", {"reason": "Temporary"}) == 1
    )
    assert (
        b.registry.get_sample_value("flashrl_operator_reconcile_errors_total", {"reason": "Temporary"})
        is None
    )


def test_jobs_by_phase_follow_transitions_and_deletion() -> None:
    m = OperatorMetrics()
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=30)

    def count(phase: str) -> float | None:
        return m.registry.get_sample_value("flashrl_operator_jobs", {"phase": phase})

    m.observe_phase("u1", "Pending", created)
    m.observe_phase("u2", "Pending", created)
    m.observe_phase("u1", "Running", created)
    m.observe_phase("u1", "Running", created)
    assert (count("Pending"), count("Running"), count("Failed")) == (1, 1, 0)
    startup = m.registry.get_sample_value("flashrl_operator_job_startup_seconds_count")
    assert startup == 1
    assert (m.registry.get_sample_value("flashrl_operator_job_startup_seconds_sum") or 0) >= 30
    m.forget("u1")
    assert count("Running") == 0
    assert b"flashrl_operator_reconcile_duration_seconds" in m.exposition()


def test_parse_time() -> None:
    assert parse_time("2026-01-01T00:00:00Z") == datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert parse_time("nonsense") is None
    assert parse_time(None) is None


def test_job_info_has_one_series_per_job_that_follows_its_phase() -> None:
    m = OperatorMetrics()

    def info(job: str, phase: str, quantization: str = "blockwise-fp8") -> float | None:
        labels = {"namespace": "ml", "job": job, "phase": phase, "quantization": quantization}
        return m.registry.get_sample_value("flashrl_job_info", labels)

    m.observe_phase("u1", "Pending", None, ("ml", "fp8", "blockwise-fp8"))
    m.observe_phase("u2", "Running", None, ("ml", "bf16", "bf16"))
    m.observe_phase("u1", "Failed", None, ("ml", "fp8", "blockwise-fp8"))
    assert info("fp8", "Failed") == 1 and info("fp8", "Pending") is None  # the old phase's series is gone
    assert info("bf16", "Running", "bf16") == 1
    m.forget("u2")
    assert info("bf16", "Running", "bf16") is None


def test_pool_series_follow_status_goodput_pools_and_go_with_the_job() -> None:
    m = OperatorMetrics()
    pools = [
        {
            "name": "trainer",
            "gpus": 8,
            "heldGPUSeconds": 800.0,
            "waitingFor": "samples",
            "waitingGPUSeconds": 300.0,
        },
        {
            "name": "rollout",
            "gpus": 8,
            "heldGPUSeconds": 800.0,
            "waitingFor": "weights",
            "waitingGPUSeconds": 40.0,
        },
    ]
    m.observe_goodput("ml", "sa", {"byPhase": [], "pools": pools})
    m.observe_goodput("ml", "sync", {"byPhase": []})
    value = m.registry.get_sample_value
    ids = {"namespace": "ml", "job": "sa"}
    assert value("flashrl_pool_gpu_seconds_total", {**ids, "pool": "rollout"}) == 800.0
    assert (
        value("flashrl_pool_waiting_gpu_seconds_total", {**ids, "pool": "trainer", "waiting_for": "samples"})
        == 300
    )
    assert (
        value("flashrl_pool_waiting_gpu_seconds_total", {**ids, "pool": "rollout", "waiting_for": "weights"})
        == 40
    )
    assert (
        value("flashrl_pool_gpu_seconds_total", {"namespace": "ml", "job": "sync", "pool": "trainer"}) is None
    )
    m.forget_goodput("ml", "sa")
    assert value("flashrl_pool_gpu_seconds_total", {**ids, "pool": "rollout"}) is None
