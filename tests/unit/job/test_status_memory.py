"""The operator decides from its own status keys as it wrote them, and writes over anyone else's values
in them; without a memory (a restart) a Succeeded its RayJob contradicts is judged again."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from test_step import as_live, make_job, observe, ray_status, running

from flashrl_operator.job.goodput import CLOCK_SKEW_SECONDS
from flashrl_operator.job.memory import StatusMemory
from flashrl_operator.job.status.mapping import OWNED_KEYS
from flashrl_operator.job.step import distrusted, next_step

UID = "uid-1"
FORGED: dict[str, Any] = {
    "phase": "Succeeded",
    "reason": "Forged",
    "message": "nothing to see here",
    "completionTime": "2026-01-01T00:00:00Z",
    "goodput": {"heldGPUSeconds": 1e308},
    "attempts": [{"attempt": 1, "startTime": "2020-01-01T00:00:00Z", "endTime": "2020-01-02T00:00:00Z"}],
}


def test_the_memory_keeps_the_operators_keys_and_the_launchers_as_read() -> None:
    memory = StatusMemory()
    assert memory.as_written(UID, {"phase": "Succeeded"}) == {"phase": "Succeeded"}  # nothing remembered
    memory.remember(UID, running())
    progress = {"step": 3, "totalSteps": 10}
    read = {**running(), **FORGED, "progress": progress, "goodput": {"heldGPUSeconds": 1e308}}
    seen = memory.as_written(UID, read)
    assert seen == {**running(), "progress": progress}
    assert set(seen) - {"progress"} <= set(OWNED_KEYS)
    memory.forget(UID)
    assert memory.recall(UID) is None and len(memory) == 0


def test_a_forged_final_status_is_written_over_from_the_operators_memory() -> None:
    """The reconcile decides from the remembered status (still running) and patches the server's."""
    job = make_job()
    live = as_live(job, running(), RayJob=ray_status("Running", "RUNNING"))
    first = next_step(observe(job, running(), live=live))
    memory = StatusMemory()
    memory.remember(UID, first.status)
    on_server = {**first.status.model_dump(mode="json", by_alias=True, exclude_none=True), **FORGED}
    seen = replace(observe(job, memory.as_written(UID, on_server), live=live), on_server=on_server)
    step = next_step(seen)
    assert step.status.phase == "Running"
    assert step.status_patch["phase"] == "Running"
    assert step.status_patch["reason"] is None and step.status_patch["completionTime"] is None
    assert step.status_patch["message"] != FORGED["message"]
    assert step.status_patch["attempts"] == [a.to_wire() for a in first.status.attempts or []]
    held = step.status_patch["goodput"]["heldGPUSeconds"]
    assert 0 <= held <= 3600 * 8  # at most the job's age x its GPUs
    assert step.events == ()  # nothing the operator decided changed: no transition to announce


def test_the_same_forgery_read_as_the_operators_own_would_end_the_job() -> None:
    """Why the memory: from the forged status alone the job is final and stays Succeeded."""
    job = make_job()
    live = as_live(job, running(), RayJob=ray_status("Running", "RUNNING"))
    step = next_step(observe(job, {**running(), **FORGED}, live=live))
    assert (step.status.phase, step.status.message) == ("Succeeded", FORGED["message"])


def test_without_memory_a_succeeded_the_rayjob_contradicts_is_dropped() -> None:
    job = make_job()
    previous = {**running(), **FORGED}
    starting = as_live(job, running(), RayJob=ray_status("Initializing"))["RayJob"]
    kept = distrusted(previous, starting)
    assert not {"phase", "reason", "message", "completionTime"} & set(kept)
    assert kept["attempts"] == previous["attempts"]
    step = next_step(observe(job, kept, live={"RayJob": starting}))
    assert step.status.phase == "Starting"
    # The RayJob's own success, or no RayJob to ask (a finished job's may be deleted): it stands.
    done = as_live(job, running(), RayJob=ray_status("Complete", "SUCCEEDED"))["RayJob"]
    assert distrusted(previous, done) is previous
    assert distrusted(previous, None) is previous
    failed = {**previous, "phase": "Failed"}
    assert distrusted(failed, starting) is failed


def test_whatever_the_ledger_holds_the_goodput_stays_within_the_jobs_age_times_its_gpus() -> None:
    """No memory (a restart) and a forged ledger: times long before the job, an attempt holding a
    million GPUs, a launcher phase of 1e308 seconds reported in the year 9999."""
    job = make_job()
    launcher = {
        "attempt": 1,
        "launchTime": "2020-01-01T00:00:00Z",
        "reportTime": "9999-01-01T00:00:00Z",
        "steps": 3,
        "phases": [{"phase": "training", "seconds": 1e308, "gpuSeconds": 1e308}],
    }
    forged = running(
        attempts=[
            {
                "attempt": 1,
                "startStep": 0,
                "startTime": "2000-01-01T00:00:00Z",
                "admitTime": "2000-01-01T00:00:00Z",
                "gpus": 1000000,
            }
        ],
        launcherPhases=launcher,
    )
    live = as_live(job, running(), RayJob=ray_status("Running", "RUNNING"))
    step = next_step(observe(job, forged, live=live))
    gpus = 8
    age = 3600  # the test job was created an hour before the reconcile
    ledger = step.status_patch["goodput"]
    assert 0 < ledger["heldGPUSeconds"] <= (age + 2 * CLOCK_SKEW_SECONDS) * gpus
    assert ledger["trainingGPUSeconds"] <= ledger["heldGPUSeconds"]
    assert step.status_patch["attempts"][0]["gpus"] == gpus
