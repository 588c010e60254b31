"""The operator refuses what verl 0.9.1 would refuse at start-up, before it creates anything.

The real operator, with verl's configuration checks on (as in its image when hydra and verl are
installed), against the emulated API server: a job verl would stop only after the GPU cluster came up
is failed with InvalidSpec at the field or override the value came from, and nothing is created.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_operator.sim import JOBS_RESOURCE, RAY_JOBS_RESOURCE

pytestmark = pytest.mark.kmock

pytest.importorskip("hydra", reason="hydra-core is not installed; verl's checks cannot run")


def _created_children(cluster: Cluster) -> set[str]:
    return {plural for (plural, _, _) in cluster.server.creations if plural not in ("events", "flashrljobs")}


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        (
            {"overrides": ["trainer.test_freq=3", "actor_rollout_ref.actor.loss_agg_mode=seq-max"]},
            "spec.overrides[1]",
            "Invalid loss_agg_mode: seq-max",
        ),
        (
            {"training": {"dynamicSampling": {"metric": "pred"}}},
            "spec.training.dynamicSampling.metric",
            "does not produce DAPO metric 'pred'",
        ),
    ],
    ids=["override", "field"],
)
async def test_verl_start_up_problem_is_invalid_spec_before_anything_exists(
    cluster: Cluster, start_operator: StartOperator, spec: dict[str, Any], path: str, words: str
) -> None:
    await start_operator(check_overrides=True)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("verl-refuses", spec))
    status = await cluster.wait_phase("verl-refuses", "Failed")
    assert status["reason"] == "InvalidSpec"
    assert f"{path}: verl " in status["message"] and words in status["message"]
    assert _created_children(cluster) == set()
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "verl-refuses") is None


async def test_a_job_verl_accepts_goes_ahead(cluster: Cluster, start_operator: StartOperator) -> None:
    await start_operator(check_overrides=True)
    await cluster.api.create(
        JOBS_RESOURCE, job_manifest("verl-accepts", {"overrides": ["trainer.test_freq=3"]})
    )
    await cluster.wait_phase("verl-accepts", "Pending")
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "verl-accepts") is not None
