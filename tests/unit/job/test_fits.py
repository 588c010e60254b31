"""Whether a job can ever start on the cluster as it is (``flashrl_operator.job.fits``, pure): the one
judgement the operator (``NeverFits``, ``ClaimNotFound``, ``PriorityClassNotFound``) and ``flashrl
preflight`` share, and whose
pods hold the GPUs a job that fits waits for (``WaitingForGPUs``)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from flashrl_api import FlashRLJob, parse_job
from flashrl_api.pools import gpu_pools
from flashrl_api.status import Reason
from flashrl_operator.job.fits import (
    LATER_NODES,
    capacity,
    claims_message,
    gpu_holders,
    missing_claims,
    missing_priority_classes,
    priority_classes_message,
)
from flashrl_operator.job.preflight import ClusterFacts, cluster_needs, cluster_notes, cluster_problems
from flashrl_operator.job.status.mapping import Decided, Observation, decide_phase, status_of
from flashrl_operator.job.status.pods import PodProblem
from flashrl_operator.job.step import Reads, attempt_context, fit_due, next_step, waits_for_gpus
from flashrl_operator.render import render
from flashrl_operator.vocab.kuberay import RayClusterView, RayJobView

H20 = "NVIDIA-H20"
LOCAL = {
    "model": {"source": "/models/Qwen3-8B-Base"},
    "data": {"train": "/data/train.parquet", "validation": "/data/val.parquet"},
}


def job(resources: Mapping[str, Any] | None = None, **spec: Any) -> FlashRLJob:
    body = {**LOCAL, **spec, **({"resources": dict(resources)} if resources else {})}
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": "j", "namespace": "rl", "uid": "u-1", "generation": 1},
            "spec": body,
        }
    )


def separate_async(pool: Mapping[str, Any], **resources: Any) -> FlashRLJob:
    return job(
        resources or None,
        training={"mode": "separate-async", "async": {"parameterSyncStep": 1}},
        rollout={"pool": dict(pool)},
    )


def node(
    name: str,
    gpus: int = 8,
    product: str = H20,
    *,
    taints: list[dict[str, str]] | None = None,
    cordoned: bool = False,
    **labels: str,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, **labels}},
        "spec": spec,
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def verdict(j: FlashRLJob, nodes: list[dict[str, Any]]) -> str | None:
    return capacity(gpu_pools(j.spec), nodes).message()


def lines(j: FlashRLJob, nodes: list[dict[str, Any]]) -> list[str]:
    return capacity(gpu_pools(j.spec), nodes).problems()


# --- never fits -------------------------------------------------------------------------------------


def test_two_nodes_on_a_one_node_cluster_never_fit_and_the_message_says_needs_and_offers() -> None:
    message = verdict(job({"nodes": 2}), [node("h20-0")])
    assert message == (
        "The cluster can never hold this job: needs 2 nodes x 8 NVIDIA-H20; 1 node matches, with 8. "
        "Only the nodes there now count: nodes that join later are yours to add before applying the job "
        "(or ask for fewer or smaller GPU pods); delete this FlashRLJob and apply it again then"
    )
    assert message.endswith(LATER_NODES[1:])
    assert verdict(job({"nodes": 2}), [node("h20-0"), node("h20-1")]) is None


def test_more_gpus_per_pod_than_any_node_has_never_fit() -> None:
    assert lines(job(), [node("a", 4), node("b", 4)]) == [
        "needs 1 node x 8 NVIDIA-H20; 2 nodes match, with 4 each"
    ]
    assert lines(job(), [node("a", 4), node("b", 2), node("c", 6)]) == [
        "needs 1 node x 8 NVIDIA-H20; 3 nodes match, with 6, 4 and 2"
    ]


def test_several_pods_may_share_a_node_whose_gpus_allow() -> None:
    four = job({"nodes": 2, "gpusPerNode": 4})
    assert verdict(four, [node("big", 8)]) is None
    assert lines(four, [node("big", 6)]) == ["needs 2 nodes x 4 NVIDIA-H20; 1 node matches, with 6"]


def test_no_node_of_the_product_lists_the_products_the_nodes_carry() -> None:
    (line,) = lines(job(), [node("a", product="NVIDIA-A100-SXM4-80GB"), node("b", product="NVIDIA-L40S")])
    assert line == (
        "needs 1 node x 8 NVIDIA-H20; no node matches (the nodes carry nvidia.com/gpu.product: "
        "NVIDIA-A100-SXM4-80GB (1 node), NVIDIA-L40S (1 node); set resources.gpuProduct to one)"
    )
    (empty,) = lines(job(), [])
    assert empty.startswith("needs 1 node x 8 NVIDIA-H20; no node matches (the nodes carry")


def test_the_node_selector_must_match() -> None:
    picky = job({"nodeSelector": {"pool": "train"}})
    (line,) = lines(picky, [node("a"), node("b", pool="infer")])
    assert line == "needs 1 node x 8 NVIDIA-H20 labelled pool=train; no node matches"
    assert verdict(picky, [node("a", pool="train")]) is None


def test_taints_the_pods_do_not_tolerate_keep_them_off_and_are_named() -> None:
    team = {"key": "team", "value": "infer", "effect": "NoSchedule"}
    (line,) = lines(job(), [node("a", taints=[team])])
    assert line == (
        "needs 1 node x 8 NVIDIA-H20; no node matches (1 more node with its labels has taints its pods "
        "do not tolerate: a: team=infer:NoSchedule; add tolerations in resources.tolerations)"
    )
    tolerant = job({"tolerations": [{"key": "team", "operator": "Equal", "value": "infer"}]})
    assert verdict(tolerant, [node("a", taints=[team])]) is None
    # The GPU taint is the one every GPU worker tolerates; PreferNoSchedule only discourages.
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    prefer = {"key": "team", "value": "x", "effect": "PreferNoSchedule"}
    assert verdict(job(), [node("a", taints=[gpu, prefer])]) is None


def test_a_cordoned_or_not_ready_node_still_counts() -> None:
    """A cordon and the taints Kubernetes sets while a node is not ready pass: the job waits, it is not
    failed for them."""
    passing = [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    ]
    assert verdict(job(), [node("a", cordoned=True, taints=passing)]) is None


def test_gpus_other_pods_hold_are_not_the_judgements() -> None:
    """The judgement reads no pod: a node full of someone's pods still fits (that is a wait)."""
    judged = capacity(gpu_pools(job().spec), [node("a")])
    assert judged.fits


def test_both_pools_of_a_separate_async_job_are_counted_together() -> None:
    sa = separate_async({"nodes": 1, "gpusPerNode": 8})
    assert lines(sa, [node("a")]) == [
        "the trainer pool needs 1 node x 8 NVIDIA-H20 and the rollout pool needs 1 node x 8 NVIDIA-H20, "
        "at once; 1 node matches, with 8"
    ]
    assert verdict(sa, [node("a"), node("b")]) is None
    assert verdict(sa, [node("a", 16)]) is None  # both pods on one 16-GPU node
    # A pool on its own nodes is named with its field.
    apart = separate_async({"nodes": 1, "gpusPerNode": 8, "nodeSelector": {"pool": "rollout"}})
    assert lines(apart, [node("a"), node("b")]) == [
        "rollout pool (rollout.pool) needs 1 node x 8 NVIDIA-H20 labelled pool=rollout; no node matches"
    ]


def test_the_two_pools_judgement_is_exact_on_mixed_nodes() -> None:
    """Trainer 2 x 4, rollout 1 x 8 on nodes of 8 and 8: the trainer's two pods share one node, the
    rollout takes the other; on 8 and 4 they cannot (the rollout needs the 8)."""
    sa = separate_async({"nodes": 1, "gpusPerNode": 8}, nodes=2, gpusPerNode=4)
    assert verdict(sa, [node("a", 8), node("b", 8)]) is None
    assert verdict(sa, [node("a", 8), node("b", 4)]) is not None
    assert verdict(sa, [node("a", 8), node("b", 4), node("c", 4)]) is None


# --- claims --------------------------------------------------------------------------------------------


def test_a_missing_claim_is_named_with_its_use_and_a_refused_read_is_not_a_missing_claim() -> None:
    needs = cluster_needs(job()).claims
    found: dict[str, Mapping[str, Any] | None] = {"hf-cache": None, "rl-data": {"metadata": {}}}
    missing = missing_claims(needs, found, "rl")
    assert [m.name for m in missing] == ["hf-cache"]  # rl-checkpoints was not read: not judged
    message = claims_message(missing)
    assert message is not None and message.startswith(
        "claim hf-cache (storage.modelCache) does not exist in rl: no pod of the job (the staging Job's "
        "neither) can start without it"
    )
    assert claims_message(missing_claims(needs, {"hf-cache": {}}, "rl")) is None


# --- PriorityClasses -----------------------------------------------------------------------------------

RL_BATCH = {"scheduling": {"priorityClassName": "rl-batch"}}


def test_the_priority_class_the_pods_name_is_judged_and_a_refused_read_judges_nothing() -> None:
    assert cluster_needs(job()).priority_classes == {}  # none named: nothing to read
    named = cluster_needs(job(**RL_BATCH)).priority_classes
    assert named == {"rl-batch": ("spec.scheduling.priorityClassName",)}
    missing = missing_priority_classes(named, {"rl-batch": None})
    message = priority_classes_message(missing)
    assert message is not None and message.startswith(
        "PriorityClass rl-batch (spec.scheduling.priorityClassName) does not exist in the cluster: the API "
        "server refuses every pod that names it"
    )
    assert "kubectl get priorityclasses" in message and "apply it again" in message
    assert priority_classes_message(missing_priority_classes(named, {"rl-batch": {"value": 1000}})) is None
    assert priority_classes_message(missing_priority_classes(named, {})) is None  # not read (RBAC)


def test_a_missing_priority_class_fails_at_once_creating_nothing() -> None:
    claims = {c: {} for c in ("hf-cache", "rl-data", "rl-checkpoints")}
    reads = observed(job(**RL_BATCH), [node("h20-0")], claims)
    step = next_step(replace(reads, priority_classes={"rl-batch": None}))
    assert (step.status.phase, step.status.reason) == ("Failed", "PriorityClassNotFound")
    assert step.apply == () and step.delete == ()
    assert (step.status.message or "").startswith(
        "PriorityClass rl-batch (spec.scheduling.priorityClassName) does not exist"
    )
    accepted = next(c for c in step.status.conditions if c.type == "Accepted")
    assert (accepted.status, accepted.reason) == ("False", "PriorityClassNotFound")
    (event,) = step.events
    assert (event.type, event.reason) == ("Warning", "PriorityClassNotFound")
    assert step.status.completion_time is not None and step.status.ray_job_name is None
    # The class exists, or could not be read: the job is created as before.
    for found in ({"rl-batch": {"metadata": {"name": "rl-batch"}}}, {}):
        assert next_step(replace(reads, priority_classes=found)).status.phase == "Pending"


def test_every_reason_a_job_cannot_start_is_said_the_first_one_named() -> None:
    """A missing claim, a missing PriorityClass and too few nodes at once: the user fixes all of them
    before applying again, so the message says all three; the reason is the first."""
    reads = observed(job({"nodes": 2}, **RL_BATCH), [node("h20-0")], {"hf-cache": None})
    step = next_step(replace(reads, priority_classes={"rl-batch": None}))
    assert step.status.reason == "ClaimNotFound"
    message = step.status.message or ""
    assert (
        message.index("claim hf-cache") < message.index("PriorityClass rl-batch") < message.index("needs 2")
    )
    reads = observed(job({"nodes": 2}, **RL_BATCH), [node("h20-0")], {})
    step = next_step(replace(reads, priority_classes={"rl-batch": None}))
    assert step.status.reason == "PriorityClassNotFound" and "needs 2 nodes" in (step.status.message or "")


def test_preflight_says_the_operators_priority_class_sentence() -> None:
    j = job(**RL_BATCH)
    missing = replace(facts([node("h20-0")]), priority_classes={"rl-batch": None})
    shown = [p for p in cluster_problems(j, missing, "1.7.0") if "PriorityClass" in p]
    reads = observed(j, [node("h20-0")], {c: {} for c in ("hf-cache", "rl-data", "rl-checkpoints")})
    step = next_step(replace(reads, priority_classes={"rl-batch": None}))
    assert shown == [step.status.message]
    present = replace(missing, priority_classes={"rl-batch": {}})
    assert not [p for p in cluster_problems(j, present, "1.7.0") if "PriorityClass" in p]
    # A user who may not read PriorityClasses: not judged, and a note says so.
    blind = replace(missing, priority_classes={}, priority_classes_unread=("rl-batch",))
    assert not [p for p in cluster_problems(j, blind, "1.7.0") if "PriorityClass" in p]
    assert "not checked: whether PriorityClass rl-batch exists (your user may not get priorityclasses)" in (
        cluster_notes(blind)
    )


# --- one judgement: preflight and the operator -------------------------------------------------------


def facts(nodes: list[dict[str, Any]], claims: Mapping[str, Any] | None = None) -> ClusterFacts:
    bound = {"status": {"phase": "Bound"}, "spec": {"accessModes": ["ReadWriteMany"]}}
    return ClusterFacts(
        namespace={},
        claims=dict(claims or dict.fromkeys(("hf-cache", "rl-data", "rl-checkpoints"), bound)),
        secrets={},
        nodes=nodes,
        crds={},
        kuberay_images=[],
    )


NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)


def observed(j: FlashRLJob, nodes: list[dict[str, Any]] | None, mounted: Mapping[str, Any]) -> Reads:
    desired = render(j, attempt_context(j, {}, NOW))
    return Reads(
        namespace="rl",
        name="j",
        uid="u-1",
        now=NOW,
        created=NOW,
        generation=1,
        job=j,
        desired=desired,
        nodes=None if nodes is None else tuple(nodes),
        mounted=mounted,
        new=True,
    )


def test_preflight_prints_the_operators_sentence() -> None:
    j, nodes = job({"nodes": 2}), [node("h20-0")]
    shown = [p for p in cluster_problems(j, facts(nodes), "1.7.0") if p.startswith("never fits: ")]
    assert shown == ["never fits: needs 2 nodes x 8 NVIDIA-H20; 1 node matches, with 8"]
    step = next_step(observed(j, nodes, {}))
    assert step.status.message is not None
    assert shown[0].removeprefix("never fits: ") in step.status.message


def test_a_job_that_never_fits_fails_at_once_creating_nothing() -> None:
    step = next_step(observed(job({"nodes": 2}), [node("h20-0")], {}))
    assert (step.status.phase, step.status.reason) == ("Failed", "NeverFits")
    assert step.apply == () and step.delete == ()
    assert "needs 2 nodes x 8 NVIDIA-H20; 1 node matches, with 8" in (step.status.message or "")
    accepted = next(c for c in step.status.conditions if c.type == "Accepted")
    assert (accepted.status, accepted.reason) == ("False", "NeverFits")
    (event,) = step.events
    assert (event.type, event.reason) == ("Warning", "NeverFits")
    assert event.message.startswith("Phase New -> Failed: The cluster can never hold this job: needs 2 nodes")
    assert step.status.completion_time is not None  # final: not judged again
    assert step.status.ray_job_name is None  # none was created, none will be


def test_a_missing_claim_fails_at_once_naming_the_claim_even_with_sources_to_stage() -> None:
    staged = parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": "j", "namespace": "rl", "uid": "u-1", "generation": 1},
            "spec": {},  # the model and data come from Hugging Face: a staging Job would come first
        }
    )
    step = next_step(
        observed(staged, [node("h20-0")], {"hf-cache": None, "rl-data": {}, "rl-checkpoints": {}})
    )
    assert (step.status.phase, step.status.reason) == ("Failed", "ClaimNotFound")
    assert step.apply == ()  # no staging Job either
    assert (step.status.message or "").startswith("claim hf-cache (storage.modelCache) does not exist in rl")
    assert [e.reason for e in step.events] == ["ClaimNotFound"]


def test_a_job_that_fits_is_created_as_before() -> None:
    step = next_step(
        observed(job(), [node("h20-0")], {c: {} for c in ("hf-cache", "rl-data", "rl-checkpoints")})
    )
    assert step.status.phase == "Pending" and step.apply
    # Nodes not readable (RBAC): nothing judged on that side.
    assert next_step(observed(job({"nodes": 2}), None, {})).status.phase == "Pending"


@pytest.mark.parametrize(
    ("previous", "due"),
    [
        ({}, True),
        ({"phase": "Pending", "observedGeneration": 1}, False),  # judged for this generation already
        ({"phase": "Staging", "observedGeneration": 0}, True),  # the spec changed before the RayJob
        ({"phase": "Starting", "observedGeneration": 0}, False),  # the RayJob exists
        ({"phase": "Failed", "reason": "NeverFits", "observedGeneration": 1}, False),
    ],
)
def test_the_judgement_is_made_before_the_first_rayjob_once_per_generation(
    previous: dict[str, Any], due: bool
) -> None:
    assert fit_due(previous, 1, None) is due


# --- waiting for GPUs ---------------------------------------------------------------------------------


def gpu_pod(
    name: str, on: str, gpus: int, namespace: str = "rl", phase: str = "Running", **labels: str
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def test_whose_pods_hold_the_gpus_is_named_and_a_queue_pointed_to() -> None:
    judged = capacity(gpu_pools(job().spec), [node("h20-0"), node("h20-1")])
    pods = [
        gpu_pod("first-gpu-worker-x", "h20-0", 8, **{"flashrl.dev/job": "first"}),
        gpu_pod("notebook", "h20-1", 4, namespace="team-b"),
        gpu_pod("done", "h20-1", 4, phase="Succeeded"),
        gpu_pod("j-gpu-worker-y", "h20-1", 4, **{"flashrl.dev/job": "j"}),  # its own
    ]
    message = gpu_holders(judged, pods, ("rl", "j"), queued=False)
    assert message == (
        "waiting for GPUs: the job fits the cluster, but pods of others hold the GPUs now (h20-0: 8 of 8 "
        "GPUs held by FlashRLJob rl/first; h20-1: 4 of 8 GPUs held by pod team-b/notebook); its pods start "
        "when those are released, and the wait counts against its startup deadline "
        "(lifecycle.startupTimeoutSeconds): to wait holding no GPU, queue it (spec.scheduling.queueName, a "
        "Kueue LocalQueue)"
    )
    queued = gpu_holders(judged, pods, ("rl", "j"), queued=True)
    assert queued is not None and "queueName" not in queued
    assert gpu_holders(judged, [], ("rl", "j"), queued=False) is None
    never = capacity(gpu_pools(job({"nodes": 4}).spec), [node("h20-0"), node("h20-1")])
    assert gpu_holders(never, pods, ("rl", "j"), queued=False) is None


NO_GPU = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available."


def test_a_start_waiting_for_gpus_says_whose_and_its_deadline_failure_keeps_it() -> None:
    problem = PodProblem("j-gpu-worker-z", "GPU worker", Reason.POD_UNSCHEDULABLE, NO_GPU)
    assert waits_for_gpus((problem,))
    taint = PodProblem("p", "head", Reason.POD_UNSCHEDULABLE, "1 node(s) had untolerated taint")
    assert not waits_for_gpus((taint,))
    holders = (
        "waiting for GPUs: the job fits the cluster, but ... (spec.scheduling.queueName, a Kueue LocalQueue)"
    )
    cluster = RayClusterView.of(
        {
            "metadata": {"name": "j-abc"},
            "status": {
                "state": "",
                "desiredWorkerReplicas": 1,
                "availableWorkerReplicas": 0,
                "readyWorkerReplicas": 0,
            },
        }
    )
    starting = RayJobView.of(
        {
            "metadata": {"name": "j"},
            "status": {"jobDeploymentStatus": "Initializing", "rayClusterName": "j-abc"},
        }
    )
    obs = Observation(
        ray_job_name="j", ray_job=starting, ray_cluster=cluster, pod_problems=(problem,), gpu_holders=holders
    )
    decision = decide_phase(obs)
    assert (decision.phase, decision.reason) == ("Starting", "WaitingForGPUs")
    assert decision.message.endswith(holders)
    status = status_of(obs, Decided(decision), "2026-03-01T12:00:00Z")
    assert status.reason == "WaitingForGPUs"
    ready = next(c for c in status.conditions if c.type == "ClusterReady")
    assert (ready.status, ready.reason) == ("False", "WaitingForGPUs") and holders in ready.message
    # Without the holders (nodes not readable, or the job never fits) it stays the scheduler's words.
    assert decide_phase(
        Observation(ray_job=starting, ray_cluster=cluster, pod_problems=(problem,))
    ).reason == ("PodUnschedulable")
    # KubeRay's startup deadline ends the wait: the failure keeps the cause and its pointer to a queue.
    timed_out = RayJobView.of(
        {
            "metadata": {"name": "j"},
            "status": {
                "jobDeploymentStatus": "Failed",
                "reason": "PreRunningDeadlineExceeded",
                "message": "The RayJob has passed the preRunningDeadlineSeconds.",
            },
        }
    )
    previous = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    failed = decide_phase(Observation(ray_job_name="j", ray_job=timed_out, previous=previous))
    assert (failed.phase, failed.reason) == ("Failed", "PreRunningDeadlineExceeded")
    assert "the Ray cluster had not started: RayCluster j-abc: waiting for GPUs" in failed.message
    assert "spec.scheduling.queueName" in failed.message
