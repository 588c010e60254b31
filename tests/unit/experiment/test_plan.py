"""The experiment controller's pure part: which variants to create now, and the experiment's status."""

from __future__ import annotations

from typing import Any

from manifests import job_object

from flashrl_api import API_VERSION
from flashrl_api.experiment import EXPERIMENT_KIND, FlashRLExperiment, parse_experiment
from flashrl_operator.experiment.plan import invalid_status, plan

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T01:00:00Z"


def _experiment(
    parallelism: int | None = None, status: dict[str, Any] | None = None, queue: str | None = None
) -> FlashRLExperiment:
    spec: dict[str, Any] = {}
    if queue is not None:
        spec["template"] = {"scheduling": {"queueName": queue}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    raw: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "metadata": {"name": "x", "namespace": "rl", "uid": "u", "generation": 3},
        "spec": spec,
    }
    if status is not None:
        raw["status"] = status
    return parse_experiment(raw)


def _child(
    phase: str, step: int = 0, reason: str | None = None, metrics: list[Any] | None = None
) -> dict[str, Any]:
    progress = {"step": step, "totalSteps": 150}
    return job_object(phase, reason, metrics, name="ignored", progress=progress)


def test_without_parallelism_every_variant_is_created_at_once() -> None:
    p = plan(_experiment(), {}, T0)
    assert [j.name for j in p.create] == ["x-blockwise-fp8", "x-channel-fp8", "x-bf16"]
    assert p.status.phase == "Pending"
    assert [v.phase for v in p.status.variants] == ["Pending"] * 3
    assert p.status.finished == "0/3"
    assert p.status.observed_generation == 3
    assert all(j.metadata["ownerReferences"][0]["uid"] == "u" for j in p.create)


def test_parallelism_one_runs_them_one_after_another() -> None:
    first = plan(_experiment(1), {}, T0)
    assert [j.name for j in first.create] == ["x-blockwise-fp8"]
    assert [v.phase for v in first.status.variants] == ["Pending", "Waiting", "Waiting"]
    running = plan(_experiment(1), {"x-blockwise-fp8": _child("Running", 40)}, T0)
    assert running.create == []
    assert running.status.phase == "Running"
    assert running.status.variants[0].step == 40
    assert "blockwise-fp8 Running 40/150" in (running.status.message or "")
    # A failed variant frees its slot too: the others still answer the comparison.
    after = plan(_experiment(1), {"x-blockwise-fp8": _child("Failed", 12, "TrainerFailed")}, T0)
    assert [j.name for j in after.create] == ["x-channel-fp8"]
    assert after.status.finished == "1/3"
    assert after.status.phase == "Running"
    assert after.status.reason == "VariantFailed"


def test_parallelism_two_keeps_two_busy() -> None:
    p = plan(
        _experiment(2), {"x-blockwise-fp8": _child("Succeeded", 150), "x-channel-fp8": _child("Starting")}, T0
    )
    assert [j.name for j in p.create] == ["x-bf16"]


def test_all_finished_is_succeeded_or_failed_with_the_failed_named() -> None:
    done = {n: _child("Succeeded", 150) for n in ("x-blockwise-fp8", "x-channel-fp8", "x-bf16")}
    ok = plan(_experiment(), done, T0)
    assert (ok.status.phase, ok.status.finished, ok.create) == ("Succeeded", "3/3", [])
    conditions = {c.type: c for c in ok.status.conditions}
    assert conditions["Succeeded"].status == "True" and conditions["Failed"].status == "False"
    done["x-channel-fp8"] = _child("Failed", 63, "GPUWaitTimeout")
    bad = plan(_experiment(), done, T0)
    assert bad.status.phase == "Failed"
    assert bad.status.reason == "VariantFailed"
    assert bad.status.message == "channel-fp8 failed (GPUWaitTimeout)"


def test_latest_metrics_are_copied_and_malformed_ones_skipped() -> None:
    metrics = [
        {"name": "rollout_corr/kl", "value": 0.002, "step": 40},
        {"name": "perf/throughput", "value": "fast"},
        "junk",
    ]
    p = plan(_experiment(), {"x-bf16": _child("Running", 40, metrics=metrics)}, T0)
    (bf16,) = [v for v in p.status.variants if v.name == "bf16"]
    assert [(m.name, m.value, m.step) for m in bf16.metrics] == [("rollout_corr/kl", 0.002, 40)]


def test_condition_times_move_only_when_the_status_flips() -> None:
    first = plan(_experiment(), {}, T0).status
    pending = {n: _child("Pending") for n in ("x-blockwise-fp8", "x-channel-fp8", "x-bf16")}
    again = plan(_experiment(status=first.to_wire()), pending, T1).status
    assert {c.type: c.last_transition_time for c in again.conditions} == {
        "Accepted": T0,
        "Succeeded": T0,
        "Failed": T0,
    }


def test_an_invalid_experiment_is_failed_with_every_problem() -> None:
    status = invalid_status({"generation": 2}, ["spec.variants[1]: a", "spec.template.x: b"], T0)
    assert status.phase == "Failed" and status.reason == "InvalidSpec"
    assert status.message == "spec.variants[1]: a; spec.template.x: b"
    assert status.conditions[0].status == "False"


def test_a_deleted_variant_job_is_reported_not_run_again() -> None:
    earlier = plan(_experiment(), {"x-bf16": _child("Running", 30)}, T0).status.to_wire()
    p = plan(_experiment(status=earlier), {}, T1)
    (bf16,) = [v for v in p.status.variants if v.name == "bf16"]
    assert (bf16.phase, bf16.reason, bf16.step) == ("Failed", "JobDeleted", 30)
    assert "x-bf16" not in [j.name for j in p.create]


def test_each_variant_reports_its_goodput_and_speed_ups_over_bf16() -> None:
    """FP8 halves generation but spends 300 more GPU-s per step on weight sync: 1.33x end to end against
    2x in generation, and the status names weight_sync as the phase in between."""

    def child(gen: float, sync: float, steps: int) -> dict[str, Any]:
        raw = _child("Succeeded", steps)
        by_phase = [
            {"phase": "pods_starting", "seconds": 60.0, "gpuSeconds": 480.0},
            {"phase": "generation", "seconds": gen * steps / 8, "gpuSeconds": gen * steps},
            {"phase": "weight_sync", "seconds": sync * steps / 8, "gpuSeconds": sync * steps},
            {"phase": "actor_update", "seconds": 100.0 * steps / 8, "gpuSeconds": 100.0 * steps},
        ]
        raw["status"]["goodput"] = {"heldGPUSeconds": 0.0, "byPhase": by_phase}
        return raw

    children = {
        "x-blockwise-fp8": child(gen=600.0, sync=350.0, steps=100),
        "x-channel-fp8": _child("Running", 3),  # no ledger yet: no goodput fields
        "x-bf16": child(gen=1200.0, sync=50.0, steps=100),
    }
    fp8, channel, bf16 = plan(_experiment(), children, T0).status.variants
    assert fp8.generation_speedup == 2.0
    assert fp8.end_to_end_speedup == round((4.8 + 1200 + 50 + 100) / (4.8 + 600 + 350 + 100), 3)
    assert fp8.speedup_phase == "weight_sync"
    assert fp8.held_gpu_hours == round((480 + 100 * 1050) / 3600, 3)
    assert fp8.productive_fraction is not None and 0 < fp8.productive_fraction < 1
    assert bf16.end_to_end_speedup is None and bf16.held_gpu_hours is not None  # the baseline itself
    assert channel.held_gpu_hours is None and channel.end_to_end_speedup is None
    wire = plan(_experiment(), children, T0).status.to_wire()
    assert wire["variants"][0]["heldGPUHours"] == fp8.held_gpu_hours


def test_replicas_render_jobs_per_variant_with_seeds_paired_replica_by_replica() -> None:
    """spec.replicas: 3 makes 3 jobs per variant; replica k of every variant has the same seed (so the
    same data order and sampling as verl renders them), and replicas differ from one another."""
    from flashrl_api.experiment import REPLICA_LABEL, VARIANT_LABEL, variant_jobs
    from flashrl_jobs.verl_args import verl_overrides

    raw: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "metadata": {"name": "x", "namespace": "rl", "uid": "u"},
        "spec": {"replicas": 3, "template": {"training": {"seed": 10}}},
    }
    experiment = parse_experiment(raw)
    jobs = variant_jobs(experiment)
    variants = ("blockwise-fp8", "channel-fp8", "bf16")
    assert [j.name for j in jobs] == [f"x-{v}-r{k}" for v in variants for k in range(3)]
    seeds: dict[tuple[str, str], dict[str, str]] = {}
    for job in jobs:
        labels = job.metadata["labels"]
        args = dict(o.split("=", 1) for o in verl_overrides(job))
        seeds[(labels[VARIANT_LABEL], labels[REPLICA_LABEL])] = {
            key: args[key]
            for key in (
                "data.seed",
                "actor_rollout_ref.rollout.seed",
                "actor_rollout_ref.actor.data_loader_seed",
            )
        }
        assert job.spec.training.experiment_name == job.name  # its own checkpoint directory
    for k in ("0", "1", "2"):
        assert seeds[("blockwise-fp8", k)] == seeds[("channel-fp8", k)] == seeds[("bf16", k)]
        assert set(seeds[("bf16", k)].values()) == {str(10 + int(k))}
    assert len({seeds[("bf16", k)]["data.seed"] for k in ("0", "1", "2")}) == 3
    # The status lists every job, each with its variant and replica, and all are created at once.
    p = plan(experiment, {}, T0)
    assert len(p.create) == 9
    assert [(v.name, v.replica) for v in p.status.variants] == [(v, k) for v in variants for k in range(3)]
    assert p.status.finished == "0/9"


def test_replica_job_names_must_fit() -> None:
    name = "e" * 40
    raw: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "metadata": {"name": name, "namespace": "rl"},
        "spec": {"replicas": 2, "variants": [{"name": "a" * 20, "spec": {}}, {"name": "b", "spec": {}}]},
    }
    from flashrl_api.experiment import experiment_problems

    _, problems = experiment_problems(raw)
    assert any(
        p.path == "spec.variants[0].name" and "-r<k> must be at most 63" in p.message for p in problems
    ), problems


def _ended(phase: str, released: bool) -> dict[str, Any]:
    """A finished variant whose one attempt ended; its GPU workers seen gone (released) or not yet."""
    child = _child(
        phase, 150 if phase == "Succeeded" else 12, None if phase == "Succeeded" else "TrainerFailed"
    )
    attempt = {"attempt": 1, "startTime": T0, "endTime": T1}
    if released:
        attempt["releaseTime"] = T1
    child["status"]["attempts"] = [attempt]
    return child


def test_the_next_variant_waits_until_the_previous_ones_gpus_are_released() -> None:
    running = plan(_experiment(1), {"x-blockwise-fp8": _child("Running", 40)}, T0)
    waiting = running.status.variants[1]
    assert (waiting.phase, waiting.reason) == ("Waiting", "WaitingForSlot")
    assert "x-blockwise-fp8" in (waiting.message or "")
    for phase in ("Succeeded", "Failed"):
        # The run ended, its GPU workers are still there: the next variant is not created (it could
        # not be scheduled, and its startup deadline would count the wait).
        held = plan(_experiment(1, running.status.to_wire()), {"x-blockwise-fp8": _ended(phase, False)}, T1)
        assert held.create == []
        blocked = held.status.variants[1]
        assert (blocked.phase, blocked.reason) == ("Waiting", "WaitingForGPUs")
        assert "GPUs of blockwise-fp8 (x-blockwise-fp8)" in (blocked.message or "")
        assert "channel-fp8 waits for the GPUs of blockwise-fp8" in (held.status.message or "")
        # Its GPU workers seen gone: the next variant starts.
        freed = plan(_experiment(1, held.status.to_wire()), {"x-blockwise-fp8": _ended(phase, True)}, T1)
        assert [j.name for j in freed.create] == ["x-channel-fp8"]


def test_with_a_queue_kueue_orders_the_variants_not_the_gpu_release() -> None:
    """A queue in the template: variants are created up to spec.parallelism and each waits, queued and
    holding nothing, for Kueue; a finished one's GPUs are not waited for (Kueue decides, and the job
    reconciler suspends a queued job's ended workers)."""
    first = plan(_experiment(2, queue="h20-training"), {}, T0)
    assert [j.name for j in first.create] == ["x-blockwise-fp8", "x-channel-fp8"]
    assert all(j.spec.scheduling.queue_name == "h20-training" for j in first.create)
    queued = _child("Pending", 0, "Queued")
    both = {"x-blockwise-fp8": _child("Running", 40), "x-channel-fp8": queued}
    assert plan(_experiment(2, first.status.to_wire(), "h20-training"), both, T0).create == []
    ended = {"x-blockwise-fp8": _ended("Succeeded", False), "x-channel-fp8": queued}
    after = plan(_experiment(2, first.status.to_wire(), "h20-training"), ended, T1)
    assert [j.name for j in after.create] == ["x-bf16"]


def test_variant_transitions_are_events() -> None:
    first = plan(_experiment(1), {}, T0)
    assert [(e.type, e.reason, e.message.split(":")[0]) for e in first.events] == [
        ("Normal", "VariantStarted", "blockwise-fp8"),
        ("Normal", "VariantWaiting", "channel-fp8"),
        ("Normal", "VariantWaiting", "bf16"),
    ]
    assert "x-blockwise-fp8" in first.events[0].message
    assert (
        first.status.variants[1].message
        == "waits for a slot (spec.parallelism 1): blockwise-fp8 (x-blockwise-fp8) runs"
    )
    running = plan(_experiment(1, first.status.to_wire()), {"x-blockwise-fp8": _child("Running", 4)}, T0)
    assert running.events == ()  # still waiting for the same thing: no new Event
    again = plan(_experiment(1, running.status.to_wire()), {"x-blockwise-fp8": _child("Running", 5)}, T0)
    assert again.events == ()  # nothing changed: no Event
    held = plan(_experiment(1, again.status.to_wire()), {"x-blockwise-fp8": _ended("Succeeded", False)}, T1)
    reasons = sorted(e.reason for e in held.events)
    assert reasons == ["VariantFinished", "VariantWaiting", "VariantWaiting"]
    freed = plan(_experiment(1, held.status.to_wire()), {"x-blockwise-fp8": _ended("Succeeded", True)}, T1)
    assert [e.reason for e in freed.events] == ["VariantStarted", "VariantWaiting"]
    failed = plan(
        _experiment(1, freed.status.to_wire()),
        {"x-blockwise-fp8": _ended("Succeeded", True), "x-channel-fp8": _ended("Failed", False)},
        T1,
    )
    assert [(e.type, e.reason) for e in failed.events if e.reason == "VariantFailed"] == [
        ("Warning", "VariantFailed")
    ]
