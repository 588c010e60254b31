"""The goodput ledger of a run with one retry and a checkpoint saved at the end, against the real operator.

A stand-in launcher runs the launcher's own goodput clock on the wall-clock and reports a stand-in verl's
``timing_s/*`` (verl 0.9.1's keys, each a share of the time the step really took); KubeRay is played, on
the real API server (its garbage collector deletes the failed attempt's RayCluster; the finished
attempt's GPU workers outlive its Ray job by over a second before KubeRay's deletion rules delete them).
Every GPU-second from each attempt's RayJob to its GPU workers' deletion must land in exactly one phase,
the seconds held after the end in ``held_after_end``, and the status, the operator's /metrics and the
launcher's /metrics must agree.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from typing import Any

import pytest
from operator_harness import NAMESPACE, WAIT_S, Cluster, StartOperator, job_manifest
from prometheus_client.parser import text_string_to_metric_families

from flashrl_api import exported_metrics as names
from flashrl_api.goodput import LAUNCHER_PHASES, OPERATOR_PHASES, UNHELD, LauncherClock, parse_rfc3339
from flashrl_jobs.exporter import serve
from flashrl_jobs.run_metrics import Record, RunState
from flashrl_operator.sim import (
    JOBS_RESOURCE,
    RAY_CLUSTERS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUCCEEDED,
    TRAINING,
    eventually,
    failed,
    timed_verl_step,
)
from flashrl_operator.vocab.kuberay import ORIGINATED_FROM_NAME, DeletionPolicy
from flashrl_report import build_report
from flashrl_report.cluster import JobObjects, runs_from_objects

GPUS = 8  # the default spec: one node of 8 GPUs
CKPT = "/checkpoints/DAPO-1/{job}/global_step_{step}"


async def attempt(
    cluster: Cluster,
    job: str,
    ray_job: str,
    number: int,
    steps: range,
    saves: set[int],
    gpus: int = GPUS,
    separate_async: bool = False,
) -> RunState:
    """The attempt's cluster comes up, the launcher gates and starts verl, verl runs ``steps``."""
    await cluster.kuberay.set_status(NAMESPACE, ray_job, TRAINING)
    await cluster.wait_phase(job, "Running")
    clock = LauncherClock(launched=time.time(), kept_groups=32)
    await asyncio.sleep(0.05)  # config composition
    gate = time.time()
    await asyncio.sleep(0.1)
    clock.gate(gate, time.time())
    await asyncio.sleep(0.15)  # verl start-up: model load, engines, checkpoint load
    state = RunState(total_steps=steps.stop - 1, clock=clock)
    last = time.time()
    for step in steps:
        # Long enough that the smallest phase (reward, 2 % of a step) is above the status's rounding
        # (0.1 GPU-second) even with only two of the eight kept steps: 0.3 s x 0.02 x 8 GPUs each.
        await asyncio.sleep(0.3)
        now = time.time()
        values = timed_verl_step(
            now - last, save=step in saves, validate=step % 4 == 0, separate_async=separate_async
        )
        state.add(Record(step, values), now)
        checkpoint = None
        if step in saves:
            checkpoint = {
                "step": step,
                "time": "2026-01-01T00:00:00Z",
                "path": CKPT.format(job=job, step=step),
            }
        await cluster.kuberay.report_goodput_step(NAMESPACE, job, state, now, number, gpus, checkpoint)
        last = now
    return state


def held_seconds(status: dict[str, Any], since: str = "start") -> float:
    """GPUs × (RayJob admitted, or ended with ``since="end"`` → GPU workers gone), summed over the
    attempts, from the status timestamps."""
    total = 0.0
    for entry in status["attempts"]:
        begin = entry["endTime"] if since == "end" else entry.get("admitTime") or entry["startTime"]
        start = parse_rfc3339(begin)
        release = parse_rfc3339(entry["releaseTime"])
        assert start is not None and release is not None
        total += entry["gpus"] * (release - start)
    return total


def scrape(url: str, name: str = names.GPU_SECONDS, label: str = "phase") -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[(sample.labels["job"], sample.labels[label])] = sample.value
    return found


async def clusters_of(cluster: Cluster, ray_job: str) -> list[str]:
    return [
        item["metadata"]["name"]
        for item in await cluster.api.list(RAY_CLUSTERS_RESOURCE, NAMESPACE)
        if item["metadata"]["labels"].get(ORIGINATED_FROM_NAME) == ray_job
    ]


async def test_a_retried_run_accounts_for_every_gpu_second(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    operator = await start_operator(retry_backoff=0.2)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("gp", {"lifecycle": {"maxRestarts": 2}}))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "gp")

    # Attempt 1: checkpoint at step 2, fails during step 4 (step 3 is lost, redone by attempt 2).
    await attempt(cluster, "gp", "gp", 1, range(1, 4), saves={2})
    await asyncio.sleep(1.2)  # the step in flight (over a second: the operator's endTime has whole seconds)
    await cluster.kuberay.set_status(
        NAMESPACE, "gp", failed("AppFailed", "verl exited with code 1 at step 3")
    )
    await cluster.wait_for(RAY_JOBS_RESOURCE, "gp-2")

    async def first_cluster_gone() -> bool:  # the failed attempt's RayCluster follows its RayJob
        return not await clusters_of(cluster, "gp")

    await eventually(first_cluster_gone, "the first attempt's RayCluster to be collected", WAIT_S, 0.2)

    # Attempt 2 resumes from step 2 and saves at its last step (the save before the deadline).
    state = await attempt(cluster, "gp", "gp-2", 2, range(3, 9), saves={4, 8})
    # The Ray job ends; its GPU workers outlive it (the deletion rules held back), then KubeRay runs the
    # RayJob's DeleteWorkers rule: over a second later, as the operator's endTime and releaseTime have
    # whole seconds (a hold inside one second would count as none). The head (the RayCluster) stays.
    await cluster.kuberay.set_status(NAMESPACE, "gp-2", SUCCEEDED, teardown=False)
    await cluster.wait_phase("gp", "Succeeded")
    await asyncio.sleep(1.2)
    assert await cluster.kuberay.teardown(NAMESPACE, "gp-2", 0.0) == DeletionPolicy.DELETE_WORKERS
    assert await clusters_of(cluster, "gp-2"), "the head stays for the TTL"

    async def released() -> dict[str, Any] | None:
        status = await cluster.status("gp")
        entries = status.get("attempts") or []
        done = len(entries) == 2 and all(e.get("releaseTime") for e in entries)
        steps = [(e.get("launcher") or {}).get("steps") for e in entries]
        return status if done and steps == [3, 6] else None

    status = await eventually(
        released, "both attempts' clusters seen gone and their last launcher reports folded", WAIT_S
    )
    goodput = status["goodput"]
    by_phase = {e["phase"]: e["gpuSeconds"] for e in goodput["byPhase"]}
    held = sum(v for p, v in by_phase.items() if p not in UNHELD)
    assert held == pytest.approx(goodput["heldGPUSeconds"], abs=0.5)
    assert goodput["heldGPUSeconds"] == pytest.approx(held_seconds(status), rel=0.02)
    for phase in ("pods_starting", "gpu_gate", "startup", "generation", "discarded_generation",
                  "weight_sync", "log_prob", "actor_update", "reward", "validation", "checkpoint",
                  "lost_steps", "lost_in_flight", "held_after_end"):  # fmt: skip
        assert by_phase.get(phase, 0) > 0, f"{phase} has no GPU-seconds: {by_phase}"
    # The GPUs held after each attempt's end, until its workers were gone, are that phase exactly.
    assert by_phase["held_after_end"] == pytest.approx(held_seconds(status, since="end"), abs=1.0)
    assert by_phase["held_after_end"] >= GPUS * 1.0
    assert 0 < goodput["productiveFraction"] < 1
    assert goodput["trainingGPUSeconds"] < goodput["heldGPUSeconds"]
    one, two = status["attempts"]
    assert one["launcher"]["steps"] == 3 and two["launcher"]["steps"] == 6
    assert one["gpus"] == two["gpus"] == GPUS

    # Prometheus: the operator's counters are its phases of the status; the launcher's, its own.
    assert operator.metrics_url is not None

    async def exported() -> dict[tuple[str, str], float] | None:
        found = await asyncio.to_thread(scrape, operator.metrics_url or "")
        return found if found.get(("gp", "held_after_end"), 0) == by_phase["held_after_end"] else None

    from_operator = await eventually(exported, "the operator's counters to match the status", WAIT_S)
    for phase in OPERATOR_PHASES:
        assert from_operator[("gp", str(phase))] == pytest.approx(by_phase.get(str(phase), 0.0), abs=0.1)
    reported = parse_rfc3339(two["launcher"]["reportTime"]) or 0.0
    launcher = serve(state, NAMESPACE, "gp", 0, address="127.0.0.1", gpus=GPUS, now=lambda: reported)
    try:
        from_launcher = await asyncio.to_thread(scrape, f"http://127.0.0.1:{launcher.port}/metrics")
    finally:
        launcher.close()
    assert {p for _, p in from_launcher} <= {str(p) for p in LAUNCHER_PHASES}
    attempt_two = {e["phase"]: e["gpuSeconds"] for e in two["launcher"]["phases"]}
    for (_, phase), value in from_launcher.items():
        assert value == pytest.approx(attempt_two[phase], abs=0.01)

    # The report reads the same ledger from the FlashRLJob (as `flashrl report --experiment` does).
    job = await cluster.job("gp")
    runs = runs_from_objects(NAMESPACE, [JobObjects("gp", "gp", job, None)])
    (summary,) = build_report(runs).goodput
    assert summary.whole and summary.held_hours * 3600 == pytest.approx(held_seconds(status), rel=0.02)
    # byPhase is rounded to 0.1 GPU-s: the fraction read back agrees within that rounding.
    assert summary.ledger.productive_fraction == pytest.approx(goodput["productiveFraction"], rel=0.02)


#: The example's separate-async job: 8 trainer GPUs and a rollout pool of 8.
SEPARATE_ASYNC = {
    "training": {
        "mode": "separate-async",
        "promptBatchSize": 32,
        "generationBatchSize": 32,
        "miniBatchSize": 8,
        "async": {"parameterSyncStep": 4},
    },
    "rollout": {"pool": {"nodes": 1, "gpusPerNode": 8}},
}


async def test_a_separate_async_run_shows_each_pools_gpu_seconds(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """One attempt of a separate-async job played by the stand-in launcher: both pools' 16 GPUs are held,
    status.goodput.pools splits them (the trainer waiting for samples, the rollout pool for weights),
    status.metrics carries verl's async figures and the operator exports the per-pool counters."""
    operator = await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("sa", SEPARATE_ASYNC))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "sa")
    await attempt(cluster, "sa", "sa", 1, range(1, 4), saves=set(), gpus=16, separate_async=True)
    await cluster.kuberay.set_status(NAMESPACE, "sa", SUCCEEDED)
    await cluster.wait_phase("sa", "Succeeded")

    async def split() -> dict[str, Any] | None:
        status = await cluster.status("sa")
        entries = status.get("attempts") or []
        folded = entries and (entries[0].get("launcher") or {}).get("steps") == 3
        # Settled: until the attempt's cluster is seen gone, each reconcile adds the GPU-seconds held
        # after the end, and the status read here would be older than the exporter's counters.
        settled = entries and entries[0].get("releaseTime")
        return status if folded and settled and (status.get("goodput") or {}).get("pools") else None

    status = await eventually(
        split, "status.goodput.pools with the launcher's three steps, the cluster released", WAIT_S
    )
    goodput = status["goodput"]
    assert status["attempts"][0]["gpus"] == 16
    trainer, rollout = goodput["pools"]
    by_phase = {e["phase"]: e["gpuSeconds"] for e in goodput["byPhase"]}
    assert (trainer["name"], trainer["gpus"], trainer["waitingFor"]) == ("trainer", 8, "samples")
    assert (rollout["name"], rollout["gpus"], rollout["waitingFor"]) == ("rollout", 8, "weights")
    assert trainer["heldGPUSeconds"] + rollout["heldGPUSeconds"] == pytest.approx(
        goodput["heldGPUSeconds"], abs=0.2
    )
    generation = by_phase["generation"] + by_phase.get("discarded_generation", 0.0)
    assert trainer["waitingGPUSeconds"] == pytest.approx(generation / 2, abs=0.2) and generation > 0
    assert rollout["waitingGPUSeconds"] == pytest.approx(by_phase["weight_sync"] / 2, abs=0.2)
    metrics = {e["name"]: e["value"] for e in status["metrics"]}
    assert metrics["training/off_policy/trajectory_staleness/mean"] == 1.4
    assert metrics["training/off_policy/evicted_samples"] == 2.0

    assert operator.metrics_url is not None
    url = operator.metrics_url

    async def exported() -> dict[tuple[str, str], float] | None:
        found = await asyncio.to_thread(scrape, url, names.POOL_GPU_SECONDS, names.POOL_LABEL)
        return found if found.get(("sa", "rollout")) == rollout["heldGPUSeconds"] else None

    held = await eventually(exported, "the operator's per-pool counters to match the status", WAIT_S)
    assert held[("sa", "trainer")] == trainer["heldGPUSeconds"]
    waiting = await asyncio.to_thread(scrape, url, names.POOL_WAITING_GPU_SECONDS, names.WAITING_FOR_LABEL)
    assert waiting[("sa", "samples")] == trainer["waitingGPUSeconds"]
    assert waiting[("sa", "weights")] == rollout["waitingGPUSeconds"]
