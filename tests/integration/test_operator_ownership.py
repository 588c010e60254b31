"""The operator never takes over what is not its job's, refuses what the admin's policy forbids, and
applies each job's NetworkPolicy.

For every child kind (the staging Job of a job with Hugging Face sources included), an object already
exists under the child's name (made by a user, or owned by another FlashRLJob of the same name that
was deleted): the job reports ``ChildConflict`` naming it, creates nothing, and the object is left
exactly as it was (no patch, no adoption, no deletion). Once the object is gone, the job goes ahead
on the next resync.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_api import parse_job
from flashrl_operator.job.policy import AdminPolicy
from flashrl_operator.render import render
from flashrl_operator.render.network import NetworkSettings
from flashrl_operator.sim import (
    BATCH_JOBS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    StagingStandIn,
    eventually,
    resource_key,
)
from flashrl_operator.vocab.kinds import CHILD_KINDS


def _children(name: str) -> dict[str, dict[str, Any]]:
    """The children of a job with Hugging Face sources (so a staging Job too) as rendered (no uid yet:
    what a squatter would copy)."""
    manifest = job_manifest(name, hf_sources=True)
    job = parse_job({**manifest, "metadata": {"name": name, "namespace": NAMESPACE}})
    return {obj["kind"]: obj for obj in render(job)}


def _foreign(obj: dict[str, Any], owner: dict[str, Any] | None) -> dict[str, Any]:
    """The same object as someone else's: their data, and their controller ``owner`` (or none)."""
    foreign = copy.deepcopy(obj)
    foreign["metadata"].pop("ownerReferences", None)
    foreign["metadata"]["labels"] = {**foreign["metadata"].get("labels", {}), "owner": "someone-else"}
    if owner is not None:
        foreign["metadata"]["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    if obj["kind"] == "ConfigMap":
        foreign["data"] = {"their.yaml": "theirs"}
    if obj["kind"] == "Role":
        foreign["rules"] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    return foreign


KINDS = [r.kind for r in CHILD_KINDS]


async def conflicted(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The job's status once its Accepted condition says ChildConflict."""
    status = await cluster.status(name)
    accepted = [c for c in status.get("conditions", []) if c["type"] == "Accepted"]
    return status if accepted and accepted[0]["reason"] == "ChildConflict" else None


def test_every_child_kind_is_covered() -> None:
    assert set(_children("x")) == set(KINDS)


def untouched(obj: dict[str, Any]) -> dict[str, Any]:
    """What the operator must never change of somebody else's object."""
    meta = obj["metadata"]
    kept = ("uid", "labels", "annotations", "ownerReferences", "finalizers")
    return {
        "metadata": {k: meta.get(k) for k in kept},
        "rest": {k: v for k, v in obj.items() if k not in ("metadata", "status")},
    }


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("controlled", [False, True], ids=["no-controller", "another-controller"])
async def test_an_object_under_a_childs_name_is_never_taken_over(
    cluster: Cluster, start_operator: StartOperator, staging: StagingStandIn, kind: str, controlled: bool
) -> None:
    name = f"own-{kind.lower()}"[:40]
    children = _children(name)
    owner = None
    if controlled:  # an object that exists (the garbage collector deletes what a missing owner owned)
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "their-app", "namespace": NAMESPACE},
        }
        owner = await cluster.api.create("v1/configmaps", cm)
    squatter = _foreign(children[kind], owner)
    resource = next(resource_key(r) for r in CHILD_KINDS if r.kind == kind)
    await cluster.api.create(resource, squatter)
    before = await cluster.api.get(resource, NAMESPACE, squatter["metadata"]["name"])
    assert before is not None

    await start_operator(resync_interval=0.5)
    await cluster.api.create(JOBS_RESOURCE, job_manifest(name, hf_sources=True))

    status = await eventually(lambda: conflicted(cluster, name), "Accepted=False/ChildConflict")
    assert status["phase"] == "Pending"
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert accepted["status"] == "False"
    assert f"{kind} {NAMESPACE}/{squatter['metadata']['name']}" in accepted["message"]
    assert f"{kind} {NAMESPACE}/{squatter['metadata']['name']}" in status["message"]

    async def warned() -> bool:
        events = await cluster.events_for(name)
        return any(e["reason"] == "ChildConflict" and e["type"] == "Warning" for e in events)

    await eventually(warned, "a Warning Event ChildConflict")

    # Nothing was created, and the squatter is untouched (a few resyncs later).
    await cluster.api.get(JOBS_RESOURCE, NAMESPACE, name)
    for other_kind, obj in children.items():
        if other_kind != kind:
            other = next(resource_key(r) for r in CHILD_KINDS if r.kind == other_kind)
            assert await cluster.api.get(other, NAMESPACE, obj["metadata"]["name"]) is None, other_kind
    after = await cluster.api.get(resource, NAMESPACE, squatter["metadata"]["name"])
    assert after is not None and untouched(after) == untouched(before)  # (a Job's status is its controller's)
    assert cluster.operator_writes(resource.rsplit("/", 1)[-1], squatter["metadata"]["name"]) == []

    # Once it is gone, the job goes ahead and creates its own.
    await cluster.api.delete(resource, NAMESPACE, squatter["metadata"]["name"])
    await cluster.wait_for(BATCH_JOBS_RESOURCE, children["Job"]["metadata"]["name"])
    await staging.succeed(NAMESPACE, children["Job"]["metadata"]["name"])
    await cluster.wait_for(RAY_JOBS_RESOURCE, children["RayJob"]["metadata"]["name"])
    mine = await cluster.wait_for(resource, squatter["metadata"]["name"])
    job = await cluster.job(name)
    refs = mine["metadata"]["ownerReferences"]
    assert [(r["uid"], r["controller"]) for r in refs] == [(job["metadata"]["uid"], True)]


async def test_a_foreign_rayjobs_status_is_not_reported_as_the_jobs(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    children = _children("hijack")
    squatter = _foreign(children["RayJob"], None)
    squatter["status"] = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}
    await cluster.api.create(RAY_JOBS_RESOURCE, squatter)
    await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("hijack"))

    status = await eventually(lambda: conflicted(cluster, "hijack"), "Accepted=False/ChildConflict")
    assert status["phase"] == "Pending"  # not the foreign job's Succeeded


async def test_policy_violations_are_refused_before_anything_is_created(
    cluster: Cluster, start_operator: StartOperator, staging: StagingStandIn
) -> None:
    await start_operator(
        policy=AdminPolicy(allowed_registries=("registry.internal",), forbid_keyless_exists_tolerations=True)
    )
    spec = {
        "images": {"trainer": "docker.io/evil/miner:1"},
        "resources": {"tolerations": [{"operator": "Exists"}]},
    }
    await cluster.api.create(JOBS_RESOURCE, job_manifest("pol", spec, hf_sources=True))
    status = await cluster.wait_phase("pol", "Failed")
    assert status["reason"] == "PolicyViolation"
    assert "spec.images.trainer" in status["message"]
    assert "spec.resources.tolerations[0]" in status["message"]
    for kind in KINDS:
        resource = next(resource_key(r) for r in CHILD_KINDS if r.kind == kind)
        assert await cluster.api.get(resource, NAMESPACE, _children("pol")[kind]["metadata"]["name"]) is None

    # Fixed, it goes through: a policy violation is not held against the name. The spec is immutable
    # (the CRD's CEL rules), so the user deletes the job and applies the fixed one under the same name.
    await cluster.api.delete(JOBS_RESOURCE, NAMESPACE, "pol")
    await cluster.gone(JOBS_RESOURCE, "pol")
    fixed = {"images": {"trainer": "registry.internal/rl/trainer:1"}}
    await cluster.api.create(JOBS_RESOURCE, job_manifest("pol", fixed, hf_sources=True))
    # The staging Job runs the image the policy judged, then the RayJob follows.
    stage = await cluster.wait_for(BATCH_JOBS_RESOURCE, "pol-stage")
    assert stage["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.internal/rl/trainer:1"
    await staging.succeed(NAMESPACE, "pol-stage")
    await cluster.wait_for(RAY_JOBS_RESOURCE, "pol")


#: A separate-async job: the rollout servers' pool is a worker group of its own (flashrl_api.pools).
SEPARATE_ASYNC: dict[str, Any] = {
    "training": {
        "mode": "separate-async",
        "promptBatchSize": 128,
        "miniBatchSize": 32,
        "generationBatchSize": 384,
    },
    "rollout": {"pool": {"nodes": 2, "gpusPerNode": 4, "tolerations": [{"operator": "Exists"}]}},
    "resources": {"nodes": 2},
}


async def test_the_policy_judges_the_rollout_pools_pods_too(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """A keyless Exists toleration on the rollout pool reaches the ``rollout`` worker group's pods: the
    policy refuses it at its field, as it refuses the trainer's, and no RayJob is created."""
    await start_operator(policy=AdminPolicy(forbid_keyless_exists_tolerations=True))
    await cluster.api.create(JOBS_RESOURCE, job_manifest("pool", SEPARATE_ASYNC))
    status = await cluster.wait_phase("pool", "Failed")
    assert status["reason"] == "PolicyViolation"
    assert "spec.rollout.pool.tolerations[0]" in status["message"]
    assert "rollout" in status["message"]
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "PolicyViolation")
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "pool") is None

    # The same pool with the taint's key named goes through: the rollout group is rendered.
    await cluster.api.delete(JOBS_RESOURCE, NAMESPACE, "pool")
    await cluster.gone(JOBS_RESOURCE, "pool")
    keyed = copy.deepcopy(SEPARATE_ASYNC)
    keyed["rollout"]["pool"]["tolerations"] = [{"key": "pool", "operator": "Exists"}]
    await cluster.api.create(JOBS_RESOURCE, job_manifest("pool", keyed))
    ray_job = await cluster.wait_for(RAY_JOBS_RESOURCE, "pool")
    groups = {g["groupName"]: g for g in ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    assert {"key": "pool", "operator": "Exists"} in groups["rollout"]["template"]["spec"]["tolerations"]


async def test_the_network_policy_is_applied_with_the_operators_settings(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator(network=NetworkSettings(kuberay_namespace="ray-system", monitoring_namespace=""))
    await cluster.submit("net")
    policy = await cluster.wait_for("networking.k8s.io/v1/networkpolicies", "net-ray")
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}}} in peers
    assert len(policy["spec"]["ingress"]) == 2  # no monitoring namespace
    job = await cluster.job("net")
    assert policy["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]


async def test_no_network_policy_when_disabled(cluster: Cluster, start_operator: StartOperator) -> None:
    await start_operator(network=NetworkSettings(enabled=False))
    await cluster.submit("nonet")
    assert await cluster.api.get("networking.k8s.io/v1/networkpolicies", NAMESPACE, "nonet-ray") is None
