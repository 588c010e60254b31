"""The mismatch guard's FallbackToBF16 end to end, on the real control plane: the launcher stand-in
reports a drifting KL step by step (the launcher's own code builds each patch), the real operator ends
the FP8 attempt and starts the next one from the newest checkpoint with BF16 rollout, once; the new
attempt's spec ConfigMap is what the launcher itself reads and checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from operator_harness import NAMESPACE, WAIT_S, Cluster, StartOperator, job_manifest

from flashrl_jobs import contract
from flashrl_jobs.cli import load_job
from flashrl_jobs.run_metrics import Record, RunState
from flashrl_jobs.verl_args import verl_overrides
from flashrl_operator.sim import (
    CONFIG_MAPS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    TRAINING,
    eventually,
    verl_step_metrics,
)

KV_ARG = "actor_rollout_ref.rollout.engine_kwargs.sglang.kv_cache_dtype"
FP8_WEIGHTS = "actor_rollout_ref.rollout.quantization=fp8"
CKPT = "/checkpoints/DAPO-1/fb/global_step_{step}"


def fallback_spec(**rollout: str) -> dict[str, Any]:
    return {
        "rollout": rollout,
        "correction": {"guard": {"maxKL": 0.05, "consecutiveSteps": 3, "action": "FallbackToBF16"}},
    }


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), None)


async def report(
    cluster: Cluster, name: str, state: RunState, step: int, kl: float, attempt: int
) -> dict[str, Any]:
    """One training step as the launcher reports it; waits until the operator has judged it."""
    state.add(
        Record(step, {**verl_step_metrics(step, state.total_steps), "rollout_corr/kl": kl}), now=float(step)
    )
    await cluster.kuberay.report_metrics(NAMESPACE, name, state, attempt=attempt)

    async def judged() -> dict[str, Any] | None:
        status = await cluster.status(name)
        return status if status.get("mismatchGuardStep") == step else None

    return await eventually(judged, f"the operator to judge step {step}", WAIT_S)


async def spec_config_map(cluster: Cluster, name: str, tmp_path: Path) -> list[str]:
    """The job's spec ConfigMap as the head pod mounts it, read by the launcher's own code (which
    refuses an overrides list that differs from the one it computes from the spec): the overrides."""
    obj = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, f"{name}-spec")
    assert obj is not None
    for key, text in obj["data"].items():
        (tmp_path / key).write_text(text, encoding="utf-8")
    job = load_job(str(tmp_path / contract.SPEC_FILE))
    overrides = json.loads((tmp_path / contract.OVERRIDES_FILE).read_text(encoding="utf-8"))
    assert overrides == verl_overrides(job)
    return [str(o) for o in overrides]


async def test_drift_on_an_fp8_job_falls_back_to_bf16_from_the_newest_checkpoint_once(
    cluster: Cluster, start_operator: StartOperator, tmp_path: Path
) -> None:
    await start_operator(resync_interval=0.3)
    spec = fallback_spec(quantization="blockwise-fp8", kvCache="fp8-e4m3")  # maxRestarts stays 0
    await cluster.api.create(JOBS_RESOURCE, job_manifest("fb", spec))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "fb")
    overrides = await spec_config_map(cluster, "fb", tmp_path)
    assert FP8_WEIGHTS in overrides and f"+{KV_ARG}=fp8_e4m3" in overrides
    await cluster.kuberay_says("fb", TRAINING, "Running")
    status = await cluster.status("fb")
    assert (status["quantization"], status["kvCache"]) == ("blockwise-fp8", "fp8-e4m3")

    state = RunState(total_steps=20)
    await report(cluster, "fb", state, 1, 0.01, attempt=1)
    await cluster.kuberay.report_checkpoint(NAMESPACE, "fb", 2, CKPT.format(step=2), 1)
    await report(cluster, "fb", state, 2, 0.08, attempt=1)
    await report(cluster, "fb", state, 3, 0.09, attempt=1)
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "fb-2") is None  # two steps: no drift yet
    await report(cluster, "fb", state, 4, 0.12, attempt=1)  # the third: drift

    second = await cluster.wait_for(RAY_JOBS_RESOURCE, "fb-2")
    assert second["metadata"]["labels"]["flashrl.dev/attempt"] == "2"

    async def first_gone() -> bool:
        return await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "fb") is None

    await eventually(first_gone, "the FP8 attempt's RayJob to be deleted", WAIT_S)

    # The new attempt's verl argv and SGLang arguments: BF16 weights and KV cache; the launcher reads
    # the same spec and computes the same overrides (load_job refuses a differing list).
    overrides = await spec_config_map(cluster, "fb", tmp_path)
    assert FP8_WEIGHTS not in overrides
    assert f"+{KV_ARG}=bf16" in overrides
    assert "quantization: bf16" in (tmp_path / contract.SPEC_FILE).read_text()

    status = await cluster.status("fb")
    assert (status["quantization"], status["kvCache"]) == ("bf16", "bf16")
    assert status["attempt"] == 2
    one, two = status["attempts"]
    assert (one["attempt"], one["endStep"], one["checkpointStep"], one["reason"]) == (
        1,
        4,
        2,
        "FellBackToBF16",
    )
    assert (one["quantization"], one["kvCache"]) == ("blockwise-fp8", "fp8-e4m3")
    assert (two["attempt"], two["startStep"], two["quantization"], two["kvCache"]) == (2, 2, "bf16", "bf16")
    fallback = status["rolloutFallback"]
    assert (fallback["attempt"], fallback["step"], fallback["checkpointStep"]) == (2, 4, 2)
    assert (fallback["metric"], fallback["value"], fallback["threshold"]) == ("rollout_corr/kl", 0.12, 0.05)
    cond = condition(status, "RolloutFallback")
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "FellBackToBF16")
    for part in ("rollout_corr/kl = 0.12 at step 4", "threshold 0.05", "resumes from checkpoint step 2"):
        assert part in cond["message"]

    async def announced() -> list[dict[str, Any]] | None:
        found = [e for e in await cluster.events_for("fb") if e["reason"] == "FellBackToBF16"]
        return found or None

    events = await eventually(announced, "the FellBackToBF16 Warning Event", WAIT_S)
    assert len(events) == 1 and events[0]["type"] == "Warning"
    assert "rollout_corr/kl = 0.12 at step 4" in events[0]["message"]

    # The BF16 attempt runs and drifts the same way: the guard only alerts now (no third attempt).
    await cluster.kuberay.set_status(NAMESPACE, "fb-2", TRAINING)
    await cluster.wait_phase("fb", "Running")
    for step, kl in ((3, 0.08), (4, 0.09), (5, 0.12), (6, 0.13)):
        status = await report(cluster, "fb", state, step, kl, attempt=2)
    cond = condition(status, "RolloutMismatch")
    assert cond is not None and cond["reason"] == "MismatchDrift"
    assert status["phase"] == "Running" and status["attempt"] == 2
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "fb-3") is None
    assert len([e for e in await cluster.events_for("fb") if e["reason"] == "FellBackToBF16"]) == 1

    # Goodput, split by precision: the FP8 stretch and the BF16 one.
    goodput = status["goodput"]
    by_precision = {p["precision"]: p for p in goodput["byPrecision"]}
    assert list(by_precision) == ["blockwise-fp8/kv-fp8-e4m3", "bf16/kv-bf16"]
    assert by_precision["blockwise-fp8/kv-fp8-e4m3"]["attempts"] == [1]
    assert by_precision["bf16/kv-bf16"]["attempts"] == [2]


async def test_a_bf16_job_with_the_same_metrics_only_alerts(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    await start_operator(resync_interval=0.3)
    spec = {
        "rollout": {"quantization": "bf16"},
        "correction": {"guard": {"maxKL": 0.05, "consecutiveSteps": 3}},
    }
    await cluster.api.create(JOBS_RESOURCE, job_manifest("bf", spec))
    await cluster.wait_for(RAY_JOBS_RESOURCE, "bf")
    await cluster.kuberay_says("bf", TRAINING, "Running")
    state = RunState(total_steps=20)
    for step, kl in ((1, 0.01), (2, 0.08), (3, 0.09), (4, 0.12)):
        status = await report(cluster, "bf", state, step, kl, attempt=1)
    cond = condition(status, "RolloutMismatch")
    assert cond is not None and cond["reason"] == "MismatchDrift"
    assert condition(status, "RolloutFallback") is None and "rolloutFallback" not in status
    assert status["phase"] == "Running" and status["attempt"] == 1
    assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, "bf-2") is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (fallback_spec(quantization="bf16"), "spec.correction.guard.action"),
        (
            {
                "rollout": {"quantization": "bf16", "kvCache": "fp8-e4m3"},
                "resources": {"gpuProduct": "NVIDIA-A100-SXM4-80GB"},
            },
            "spec.rollout.kvCache",
        ),
    ],
    ids=["fallback-on-bf16", "fp8-kv-on-a100"],
)
async def test_the_server_refuses_what_cannot_apply_at_its_field(
    cluster: Cluster, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(RuntimeError, match=r"HTTP 422") as refused:
        await cluster.api.create(JOBS_RESOURCE, job_manifest("no", spec))
    assert f"{field}: Invalid value" in str(refused.value)
