"""Why the Ray cluster's pods do not start: pod objects as the scheduler and kubelet write them."""

from __future__ import annotations

from typing import Any

import pytest
from status_wire import NOW, desired_status

from flashrl_api.status import Reason
from flashrl_operator.job.status.conditions import find_condition
from flashrl_operator.job.status.mapping import (
    Observation,
    RayClusterView,
    RayJobView,
    should_read_pods,
)
from flashrl_operator.job.status.pods import (
    MAX_DETAIL,
    PodProblem,
    pod_problem,
    pod_problems,
    problems_summary,
)
from flashrl_operator.sim import unschedulable as unschedulable_status

NO_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: not eligible."


def pod(name: str, node_type: str = "worker", **status: Any) -> dict[str, Any]:
    labels = {"ray.io/cluster": "j-abcde", "ray.io/node-type": node_type}
    return {"metadata": {"name": name, "labels": labels}, "status": {"phase": "Pending", **status}}


def unschedulable(name: str, message: str = NO_GPU) -> dict[str, Any]:
    """A pod the scheduler could not place (the status the emulated scheduler also writes)."""
    return pod(name, **unschedulable_status(message))


def waiting(
    name: str, reason: str, message: str = "", node_type: str = "worker", **extra: Any
) -> dict[str, Any]:
    container = {"name": "ray-worker", "state": {"waiting": {"reason": reason, "message": message}}, **extra}
    return pod(name, node_type, containerStatuses=[container])


def test_unschedulable_worker_carries_the_schedulers_message() -> None:
    assert pod_problem(unschedulable("j-abcde-gpu-worker-1")) == PodProblem(
        "j-abcde-gpu-worker-1", "GPU worker", Reason.POD_UNSCHEDULABLE, NO_GPU
    )


@pytest.mark.parametrize(
    ("kubelet", "reason"),
    [
        ("ErrImagePull", Reason.IMAGE_PULL_FAILED),
        ("ImagePullBackOff", Reason.IMAGE_PULL_FAILED),
        ("InvalidImageName", Reason.IMAGE_PULL_FAILED),
        ("CreateContainerConfigError", Reason.CONTAINER_CONFIG_ERROR),
        ("RunContainerError", Reason.CONTAINER_CONFIG_ERROR),
    ],
)
def test_container_waiting_reasons(kubelet: str, reason: str) -> None:
    problem = pod_problem(waiting("j-abcde-head-x", kubelet, "the kubelet's words", node_type="head"))
    assert problem == PodProblem(
        "j-abcde-head-x", "head", reason, f"ray-worker: {kubelet} (the kubelet's words)"
    )


def test_crash_loop_reports_restarts_and_exit_code() -> None:
    last = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    problem = pod_problem(waiting("w", "CrashLoopBackOff", "back-off 5m0s", restartCount=4, lastState=last))
    assert problem is not None and problem.reason == Reason.CONTAINER_CRASH_LOOPING
    assert problem.detail == "ray-worker: CrashLoopBackOff (restarted 4 time(s), last exit code 137)"


def test_init_container_problems_count() -> None:
    body = pod("w")
    body["status"]["initContainerStatuses"] = [
        {"name": "wait-gcs", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
    ]
    problem = pod_problem(body)
    assert problem is not None and problem.detail == "wait-gcs: ImagePullBackOff (not found)"


@pytest.mark.parametrize(
    "body",
    [
        pod("starting"),  # scheduled, nothing reported yet
        waiting("creating", "ContainerCreating"),  # normal progress, not a problem
        waiting("pulling", "PodInitializing"),
        {**unschedulable("leaving"), "metadata": {"name": "leaving", "deletionTimestamp": NOW}},
        {"metadata": {}, "status": {"conditions": ["junk", {"type": "PodScheduled", "status": "True"}]}},
        {},
    ],
)
def test_pods_that_are_merely_starting_have_no_problem(body: dict[str, Any]) -> None:
    assert pod_problem(body) is None


def test_most_actionable_reason_first_head_before_workers_then_by_name() -> None:
    problems = pod_problems(
        [
            unschedulable("w-2"),
            waiting("w-1", "ImagePullBackOff"),
            unschedulable("h", "no cpu")
            | {"metadata": {"name": "h", "labels": {"ray.io/node-type": "head"}}},
            waiting("w-0", "CreateContainerConfigError", 'secret "hf-token" not found'),
            pod("fine"),
        ]
    )
    assert [(p.pod, p.reason) for p in problems] == [
        ("w-0", Reason.CONTAINER_CONFIG_ERROR),
        ("w-1", Reason.IMAGE_PULL_FAILED),
        ("h", Reason.POD_UNSCHEDULABLE),
        ("w-2", Reason.POD_UNSCHEDULABLE),
    ]


def test_summary_names_three_pods_and_counts_the_rest() -> None:
    problems = pod_problems([unschedulable(f"w-{i}") for i in range(5)])
    summary = problems_summary(problems)
    assert summary.count("PodUnschedulable") == 3
    assert summary.endswith("; and 2 more pod(s)")
    assert summary.startswith(f"GPU worker pod w-0: PodUnschedulable: {NO_GPU}")


def test_long_details_are_clipped_and_whitespace_folded() -> None:
    problem = pod_problem(unschedulable("w", "x\n" * 1000))
    assert problem is not None and len(problem.detail) == MAX_DETAIL and problem.detail.endswith("...")
    assert "\n" not in problem.detail


# --- the job's status ------------------------------------------------------------------------------

HEAD_READY = {"type": "HeadPodReady", "status": "True", "reason": "HeadPodRunningAndReady"}


def cluster(*conditions: dict[str, str], **status: Any) -> RayClusterView:
    """RayCluster j-abcde with its head pod ready and these further conditions."""
    return RayClusterView.of(
        {"metadata": {"name": "j-abcde"}, "status": {"conditions": [HEAD_READY, *conditions], **status}}
    )


STARTING_CLUSTER = cluster(
    {"type": "RayClusterProvisioned", "status": "False", "reason": "RayClusterPodsProvisioning"},
    desiredWorkerReplicas=1,
)


def ray_job(deployment: str) -> RayJobView:
    return RayJobView.of({"status": {"jobDeploymentStatus": deployment, "rayClusterName": "j-abcde"}})


def status_with(problems: tuple[PodProblem, ...], deployment: str = "Initializing") -> dict[str, Any]:
    obs = Observation(
        generation=1,
        ray_job_name="j",
        ray_job=ray_job(deployment),
        ray_cluster=STARTING_CLUSTER,
        pod_problems=problems,
    )
    return desired_status(obs, NOW)


def test_an_unschedulable_worker_is_the_reason_while_starting() -> None:
    status = status_with(pod_problems([unschedulable("j-abcde-gpu-worker-1")]))
    assert (status["phase"], status["reason"]) == ("Starting", Reason.POD_UNSCHEDULABLE)
    assert status["message"] == (
        "Creating the Ray cluster: head pod ready, 0/1 GPU workers ready; "
        f"GPU worker pod j-abcde-gpu-worker-1: PodUnschedulable: {NO_GPU}"
    )
    ready = find_condition(status["conditions"], "ClusterReady")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", Reason.POD_UNSCHEDULABLE)
    assert (
        ready["message"]
        == f"RayCluster j-abcde: GPU worker pod j-abcde-gpu-worker-1: PodUnschedulable: {NO_GPU}"
    )


def test_without_problems_the_status_is_plain_progress() -> None:
    status = status_with(())
    assert status["phase"] == "Starting"
    assert status["reason"] is None  # reason is kept for failures and for pods that cannot start
    assert status["message"] == "Creating the Ray cluster: head pod ready, 0/1 GPU workers ready"


def test_a_replica_failure_still_wins_over_pod_problems() -> None:
    failing = cluster({"type": "ReplicaFailure", "status": "True", "message": "quota"})
    obs = Observation(
        generation=1,
        ray_job=ray_job("Initializing"),
        ray_cluster=failing,
        pod_problems=pod_problems([unschedulable("w")]),
    )
    status = desired_status(obs, NOW)
    assert status["reason"] is None
    assert "quota" in status["message"] and "PodUnschedulable" not in status["message"]
    ready = find_condition(status["conditions"], "ClusterReady")
    assert ready is not None and ready["reason"] == "ReplicaFailure"


PRE_RUNNING = (
    "The RayJob has passed the preRunningDeadlineSeconds. StartTime: 2026-01-01 00:00:00 +0000 UTC. "
    "PreRunningDeadlineSeconds: 60"
)


def timed_out(previous: dict[str, Any], reason: str = "PreRunningDeadlineExceeded") -> dict[str, Any]:
    """KubeRay's verdict when its deadline ran out: Failed, no jobStatus, its bare sentence."""
    view = RayJobView.of(
        {"status": {"jobDeploymentStatus": "Failed", "reason": reason, "message": PRE_RUNNING}}
    )
    return desired_status(Observation(generation=1, ray_job_name="j", ray_job=view, previous=previous), NOW)


def test_a_start_that_ran_out_of_time_keeps_the_schedulers_last_cause() -> None:
    waiting = status_with(pod_problems([unschedulable("j-abcde-gpu-worker-1")]))
    status = timed_out(waiting)
    assert (status["phase"], status["reason"]) == ("Failed", "PreRunningDeadlineExceeded")
    assert status["message"] == (
        f"{PRE_RUNNING}; the Ray cluster had not started: RayCluster j-abcde: "
        f"GPU worker pod j-abcde-gpu-worker-1: PodUnschedulable: {NO_GPU}"
    )
    failed = find_condition(status["conditions"], "Failed")
    assert failed is not None and failed["message"] == status["message"]


def test_a_start_that_ran_out_of_time_says_how_far_the_pods_got() -> None:
    status = timed_out(status_with(()), "DeadlineExceeded")
    assert status["message"] == (
        f"{PRE_RUNNING}; the Ray cluster had not started: "
        "RayCluster j-abcde: head pod ready, 0/1 GPU workers ready"
    )


def test_a_deadline_that_ends_a_running_job_is_kuberays_sentence_alone() -> None:
    ran = RayJobView.of({"status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}})
    running = desired_status(Observation(generation=1, ray_job_name="j", ray_job=ran), NOW)
    assert timed_out(running, "DeadlineExceeded")["message"] == PRE_RUNNING
    assert timed_out({})["message"] == PRE_RUNNING  # nothing known about the start


@pytest.mark.parametrize(
    ("deployment", "cluster", "expected"),
    [
        ("Initializing", STARTING_CLUSTER, True),
        ("Waiting", STARTING_CLUSTER, True),
        ("Running", STARTING_CLUSTER, False),  # KubeRay already submitted: the pods were ready
        ("Complete", STARTING_CLUSTER, False),
        ("Initializing", None, False),
        (
            "Initializing",
            RayClusterView.of(
                {"status": {"conditions": [{"type": "RayClusterProvisioned", "status": "True"}]}}
            ),
            False,
        ),
        (
            "Initializing",
            RayClusterView.of(
                {"status": {"conditions": [{"type": "RayClusterSuspended", "status": "True"}]}}
            ),
            False,
        ),
    ],
)
def test_pods_are_listed_only_while_the_cluster_starts(
    deployment: str, cluster: RayClusterView | None, expected: bool
) -> None:
    assert should_read_pods(ray_job(deployment), cluster) is expected
    assert should_read_pods(None, cluster) is False
