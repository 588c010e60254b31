"""The admin's policy: each rule refuses at the field it is about, and only what it names."""

from __future__ import annotations

from typing import Any

import pytest
from manifests import job as _job

from flashrl_api.status import Reason
from flashrl_operator.job.policy import (
    AdminPolicy,
    image_allowed,
    normalized_image,
    policy_problems,
)

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
    assert [p.path for p in problems] == [
        "spec.images.trainer",
        "spec.scheduling.priorityClassName",
        "spec.resources.rdma.resourceName",
        "spec.resources.tolerations[1]",
        "spec.resources.head.tolerations[0]",
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
