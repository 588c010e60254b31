"""The job's ``<job>-metrics`` history is written by the job's own reconcile, like its other children,
at a bounded pace: a launcher patching its status over and over costs one fold per interval, not one
per patch (an order of events on the real server: a later reconcile that ran, then what it wrote)."""

from __future__ import annotations

from typing import Any

from operator_harness import NAMESPACE, WAIT_S, Cluster, StartOperator, job_manifest

from flashrl_api.history import HISTORY_KEY, parse_history
from flashrl_operator.sim import (
    CONFIG_MAPS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    TRAINING,
    eventually,
)

STEPS = 20
DATA = {"critic/score/mean": 0.5, "response_length/clip_ratio": 0.1}


async def _history_steps(cluster: Cluster, name: str) -> set[int]:
    cm = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, f"{name}-metrics")
    return set(parse_history(((cm or {}).get("data") or {}).get(HISTORY_KEY, "")))


async def test_a_status_patched_over_and_over_is_folded_once_per_interval(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator(history_interval=3600.0)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("paced", {"training": {"totalSteps": STEPS}}))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "paced")
    await cluster.kuberay_says("paced", TRAINING, "Running")
    await cluster.kuberay.report_named_metrics(NAMESPACE, "paced", 1, STEPS, DATA)

    async def first() -> bool:
        return await _history_steps(cluster, "paced") == {1}

    await eventually(first, "step 1 in paced-metrics", WAIT_S)
    cm = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, "paced-metrics")
    assert cm is not None
    (owner,) = cm["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("FlashRLJob", "paced", True)
    assert cm["metadata"]["labels"]["app.kubernetes.io/component"] == "history"

    for step in range(2, 12):  # the launcher patching again and again
        await cluster.kuberay.report_named_metrics(NAMESPACE, "paced", step, STEPS, DATA)
    # A reconcile that ran after every one of those patches: the job's suspend reaches its RayJob.
    await cluster.api.patch(JOBS_RESOURCE, NAMESPACE, "paced", {"spec": {"lifecycle": {"suspend": True}}})

    async def suspended() -> bool:
        ray_job: dict[str, Any] | None = await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "paced")
        return bool(ray_job and ray_job["spec"].get("suspend"))

    await eventually(suspended, "RayJob paced suspended", WAIT_S)
    # Its fold was not due: the history holds step 1 alone, written once.
    assert await _history_steps(cluster, "paced") == {1}
    assert cluster.operator_writes("configmaps", "paced-metrics") == ["create"]


async def test_the_next_fold_brings_the_history_up_to_the_newest_report(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """With the harness' short interval, the reports that came while a fold was not due are folded at
    the next one (the reconcile's wake-up), by a server-side apply of the job's own ConfigMap."""
    await start_operator()
    await cluster.api.create(JOBS_RESOURCE, job_manifest("caught", {"training": {"totalSteps": STEPS}}))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "caught")
    await cluster.kuberay_says("caught", TRAINING, "Running")
    for step in range(1, 6):
        await cluster.kuberay.report_named_metrics(NAMESPACE, "caught", step, STEPS, DATA)

    async def newest() -> bool:
        return 5 in await _history_steps(cluster, "caught")

    await eventually(newest, "step 5 in caught-metrics", WAIT_S)
    writes = cluster.operator_writes("configmaps", "caught-metrics")
    assert writes[0] == "create" and set(writes[1:]) <= {"patch"}
    cm = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, "caught-metrics")
    assert cm is not None
    managers = {m["manager"] for m in cm["metadata"].get("managedFields") or []}
    assert managers <= {"flashrl-operator"}, managers
