"""The launcher's failure, lifted from the Ray job message KubeRay copies into the RayJob."""

from __future__ import annotations

from typing import Any

import pytest
from status_wire import NOW, desired_status

from flashrl_jobs import contract
from flashrl_operator.job.status.launcher_failure import LauncherFailure, launcher_failure
from flashrl_operator.job.status.mapping import (
    Observation,
    RayJobView,
)
from flashrl_operator.vocab.kuberay import entrypoint_failed_message

GPU_TIMEOUT = (
    "timed out after 600s waiting for 8 available GPU(s): 0/8 GPUs registered on 0 node(s) (0 available); "
    "8 GPU(s) never registered: a worker pod has not joined Ray (check the GPU worker pods and their "
    "raylet logs)"
)


def ray_message(code: int, *lines: str) -> str:
    """Ray's message for a failed entrypoint (``ray/dashboard/modules/job/job_supervisor.py``)."""
    return entrypoint_failed_message(code, *lines)


@pytest.mark.parametrize(
    ("code", "last_line", "reason"),
    [
        (contract.EXIT_GPU_TIMEOUT, GPU_TIMEOUT, "GPUWaitTimeout"),
        (
            contract.EXIT_INVALID_CONFIG,
            "spec.overrides[0]: Could not override 'trainer.nope'",
            "InvalidConfig",
        ),
        (
            contract.EXIT_RAY_UNREACHABLE,
            "could not connect to the Ray head at head-svc:6379: refused",
            "RayUnreachable",
        ),
        (contract.EXIT_USAGE, "no Ray address: set RAY_ADDRESS or --ray-address", "LauncherUsage"),
        (1, "verl exited with code 1 on its own at step 17", "TrainerFailed"),
        (143, "verl exited with code 143 after forwarding signal 15 at step 3", "TrainerFailed"),
        (
            contract.EXIT_STOPPED_EARLY,
            "verl stopped early: it exited 0 at step 5 of 150 (last step line 0, newest checkpoint 5)",
            "StoppedEarly",
        ),
        (
            contract.EXIT_CHECKPOINT_UNWRITABLE,
            "checkpoint directory /checkpoints/j is not writable: Read-only file system (OSError errno 30)",
            "CheckpointUnwritable",
        ),
        # verl's own code equal to a launcher code: the launcher's line says it was verl.
        (
            contract.EXIT_CHECKPOINT_UNWRITABLE,
            "verl exited with code 73 on its own at step 2",
            "TrainerFailed",
        ),
    ],
)
def test_each_exit_code_maps_to_a_reason_with_the_launchers_last_line(
    code: int, last_line: str, reason: str
) -> None:
    message = ray_message(
        code,
        "flashrl-launch: Composing verl's config",
        "(TaskRunner pid=7) Traceback (most recent call last):",
        f"flashrl-launch: {last_line}",
    )
    assert launcher_failure(message) == LauncherFailure(code, reason, last_line)


@pytest.mark.parametrize(
    "message",
    [
        "",
        entrypoint_failed_message(1),
        ray_message(
            1, "Traceback (most recent call last):", "ModuleNotFoundError: No module named 'flashrl_jobs'"
        ),
        # Exit code 1, last launcher line not about verl: the launcher itself died; KubeRay's text is better.
        ray_message(1, "flashrl-launch: Starting verl: python3 -m verl.trainer.main_ppo", "Killed"),
        "Job was stopped by the user",
    ],
)
def test_messages_that_are_not_a_launcher_failure(message: str) -> None:
    assert launcher_failure(message) is None


def status_for(ray_job_status: dict[str, Any]) -> dict[str, Any]:
    rj = RayJobView.of({"status": {"rayClusterName": "j-abcde", **ray_job_status}})
    return desired_status(Observation(generation=1, ray_job_name="j", ray_job=rj), NOW)


def test_a_gpu_timeout_fails_the_job_with_the_launchers_reason() -> None:
    message = ray_message(
        75, "flashrl-launch: Connecting to the Ray head at j-head-svc:6379", f"flashrl-launch: {GPU_TIMEOUT}"
    )
    status = status_for(
        {"jobDeploymentStatus": "Complete", "jobStatus": "FAILED", "reason": "AppFailed", "message": message}
    )
    assert (status["phase"], status["reason"]) == ("Failed", "GPUWaitTimeout")
    assert status["message"] == f"flashrl-launch exited with 75: {GPU_TIMEOUT}"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "GPUWaitTimeout")


def test_after_the_last_retry_kuberays_failed_status_gets_the_same_reading() -> None:
    message = ray_message(1, "flashrl-launch: verl exited with code 1 on its own at step 40")
    status = status_for(
        {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed", "message": message}
    )
    assert (status["reason"], status["message"]) == (
        "TrainerFailed",
        "flashrl-launch exited with 1: verl exited with code 1 on its own at step 40",
    )


def test_a_retry_says_what_failed() -> None:
    message = ray_message(75, f"flashrl-launch: {GPU_TIMEOUT}")
    status = status_for({"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED", "message": message})
    assert status["phase"] == "Starting"
    assert (
        status["message"]
        == f"Retrying with a new Ray cluster after: flashrl-launch exited with 75: {GPU_TIMEOUT}"
    )


@pytest.mark.parametrize(
    ("ray_job_status", "reason"),
    [
        # KubeRay's own reasons win: the launcher did not cause these.
        (
            {
                "jobDeploymentStatus": "Failed",
                "reason": "DeadlineExceeded",
                "message": ray_message(75, f"flashrl-launch: {GPU_TIMEOUT}"),
            },
            "DeadlineExceeded",
        ),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED", "message": "stopped"}, "Stopped"),
        (
            {
                "jobDeploymentStatus": "Complete",
                "jobStatus": "FAILED",
                "message": entrypoint_failed_message(1),
            },
            "AppFailed",
        ),
    ],
)
def test_other_failures_keep_kuberays_reason(ray_job_status: dict[str, Any], reason: str) -> None:
    assert status_for(ray_job_status)["reason"] == reason
