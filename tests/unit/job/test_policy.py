"""The admin's policy: each rule refuses at the field it is about, and only what it names."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from manifests import job as _job

from flashrl_api.pools import gpu_pools
from flashrl_api.status import Reason
from flashrl_operator.job.policy import (
    HEAD_GROUP,
    SUBMITTER_GROUP,
    AdminPolicy,
    image_allowed,
    normalized_image,
    policy_problems,
    rendered_pods,
)
from flashrl_operator.render import Child, DesiredState, render

EVERYTHING: dict[str, Any] = {
    "images": {"trainer": "docker.io/evil/miner:1"},
    "scheduling": {"priorityClassName": "system-cluster-critical"},
    "resources": {
        "rdma": {"resourceName": "vpc.amazonaws.com/efa"},
        "tolerations": [{"key": "dedicated", "value": "rl"}, {"operator": "Exists"}],
        "head": {"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]},
    },
}

STRICT = AdminPolicy(
    allowed_registries=("ghcr.io/flashrl-dev", "registry.internal:5000"),
    allowed_priority_classes=("rl-batch",),
    allowed_rdma_resources=("rdma/hca_shared_devices_a",),
    forbid_keyless_exists_tolerations=True,
)


def test_no_policy_allows_everything() -> None:
    assert not AdminPolicy().restricts_anything
    assert policy_problems(_job(EVERYTHING), AdminPolicy()) == []


def test_every_violation_is_named_by_its_field() -> None:
    problems = policy_problems(_job(EVERYTHING), STRICT)
    assert sorted(p.path for p in problems) == [
        "spec.images.trainer",
        "spec.resources.head.tolerations[0]",
        "spec.resources.rdma.resourceName",
        "spec.resources.tolerations[1]",
        "spec.scheduling.priorityClassName",
    ]
    assert all(
        "not allowed" in p.message or "not from an allowed" in p.message or "Exists" in p.message
        for p in problems
    )
    assert Reason.POLICY_VIOLATION == "PolicyViolation"


def test_the_default_job_complies_with_a_policy_that_admits_the_pinned_image() -> None:
    assert policy_problems(_job(), STRICT) == []
    allowed = {
        "images": {"trainer": "registry.internal:5000/rl/trainer@sha256:" + "a" * 64},
        "scheduling": {"priorityClassName": "rl-batch"},
        "resources": {
            "rdma": {"resourceName": "rdma/hca_shared_devices_a"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
        },
    }
    assert policy_problems(_job(allowed), STRICT) == []


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("ubuntu", "docker.io/library/ubuntu"),
        ("evil/miner:1", "docker.io/evil/miner:1"),
        ("localhost/x", "localhost/x"),
        ("registry:5000/x", "registry:5000/x"),
        ("ghcr.io/a/b@sha256:00", "ghcr.io/a/b@sha256:00"),
    ],
)
def test_image_references_are_normalised_like_container_runtimes_do(image: str, expected: str) -> None:
    assert normalized_image(image) == expected


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("ghcr.io/flashrl-dev/trainer:1", True),
        ("ghcr.io/flashrl-dev-evil/trainer:1", False),
        ("ghcr.io.evil.com/flashrl-dev/trainer:1", False),
        ("ghcr.io/other/trainer:1", False),
        ("flashrl-dev/trainer:1", False),
        ("docker.io/library/ubuntu", False),
    ],
)
def test_registries_match_whole_path_segments(image: str, ok: bool) -> None:
    assert image_allowed(image, ["ghcr.io/flashrl-dev"]) is ok


KEYLESS = {"operator": "Exists"}
#: Every pool shape a job can have: the trainer's pool alone, and separate-async's two pools.
POOL_SHAPES: dict[str, dict[str, Any]] = {
    "one-pool": {},
    "separate-async": {
        "training": {
            "mode": "separate-async",
            "promptBatchSize": 128,
            "miniBatchSize": 32,
            "generationBatchSize": 384,
        },
        "rollout": {"pool": {"nodes": 2, "gpusPerNode": 4}},
        "resources": {"nodes": 2},
    },
}
TOLERATIONS_ONLY = AdminPolicy(forbid_keyless_exists_tolerations=True)


def _with(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``spec`` (a deep copy) with ``value`` at the dotted ``path`` under ``spec.``."""
    out = copy.deepcopy(spec)
    node = out
    *parents, last = path.removeprefix("spec.").split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


@pytest.mark.parametrize("shape", sorted(POOL_SHAPES))
def test_every_rendered_pod_group_has_a_named_toleration_source_and_is_judged(shape: str) -> None:
    """Each pod group the renderer produces (head, submitter, staging, every worker group) maps to the
    spec field its tolerations come from; a keyless Exists toleration in that field is refused at it.
    A group added to the renderer without a source, or a pool the policy does not see, fails here."""
    base = POOL_SHAPES[shape]
    pods = rendered_pods(render(_job(base)))
    groups = {pod.group for pod in pods}
    workers = {pool.worker_group for pool in gpu_pools(_job(base).spec)}
    assert {HEAD_GROUP, SUBMITTER_GROUP} | workers <= groups
    ray_job = render(_job(base)).ray_job.body
    rendered_workers = {g["groupName"] for g in ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    assert rendered_workers == workers  # pools.py is the one list of the renderer's worker groups
    sources = {f"{pool.spec_path}.tolerations" for pool in gpu_pools(_job(base).spec)}
    sources.add("spec.resources.head.tolerations")
    for field in sorted(sources):
        spec = _with(base, field, [{"key": "dedicated", "value": "rl"}, KEYLESS])
        problems = policy_problems(_job(spec), TOLERATIONS_ONLY)
        assert [p.path for p in problems] == [f"{field}[1]"], field
        assert "Exists" in problems[0].message
        assert policy_problems(_job(spec), AdminPolicy()) == []


def test_the_rollout_pools_keyless_toleration_is_refused_at_its_field() -> None:
    spec = _with(POOL_SHAPES["separate-async"], "spec.rollout.pool.tolerations", [KEYLESS])
    problems = policy_problems(_job(spec), TOLERATIONS_ONLY)
    assert [str(p).split(":")[0] for p in problems] == ["spec.rollout.pool.tolerations[0]"]
    assert "rollout" in problems[0].message


def test_a_pod_group_no_spec_field_explains_is_judged_at_its_rendered_path() -> None:
    """A worker group the policy has no source for (as if one were added to the renderer alone) is
    still judged, and named by where it is in the RayJob."""
    desired = render(_job())
    ray_job = desired.ray_job.body
    extra = copy.deepcopy(ray_job)
    groups = extra["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    new_group = copy.deepcopy(groups[0])
    new_group["groupName"] = "new-group"
    new_group["template"]["spec"]["tolerations"].append(dict(KEYLESS))
    groups.append(new_group)
    changed = DesiredState(
        tuple(Child.of(extra) if c.resource == desired.ray_job.resource else c for c in desired.children)
    )
    problems = policy_problems(_job(), TOLERATIONS_ONLY, changed)
    name = ray_job["metadata"]["name"]
    assert [p.path for p in problems] == [
        f"RayJob {name} spec.rayClusterSpec.workerGroupSpecs[1].template.spec.tolerations[1]"
    ]


def test_every_rendered_container_image_is_judged() -> None:
    """The registry rule judges the images the pods run (every container of every pod), at
    spec.images.trainer when that is where they come from."""
    pods = rendered_pods(render(_job(EVERYTHING)))
    images = {
        c["image"]
        for pod in pods
        for kind in ("containers", "initContainers")
        for c in pod.spec.get(kind, [])
    }
    assert images == {"docker.io/evil/miner:1"}
    problems = policy_problems(_job(EVERYTHING), AdminPolicy(allowed_registries=("ghcr.io",)))
    assert [p.path for p in problems] == ["spec.images.trainer"]
