"""The Ray GPU gate against a real local Ray cluster (declared GPUs, loopback only)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_ray import LocalRay

from flashrl_jobs import contract
from flashrl_operator.job.status.launcher_failure import launcher_failure
from flashrl_operator.vocab.kuberay import entrypoint_failed_message

pytestmark = pytest.mark.ray


def write_job(path: Path, nodes: int, gpus_per_node: int, **spec: Any) -> Path:
    job = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "gate-test", "namespace": "ml"},
        "spec": {"resources": {"nodes": nodes, "gpusPerNode": gpus_per_node}, **spec},
    }
    path.write_text(yaml.safe_dump(job))
    return path


def test_times_out_with_exit_code_and_termination_message(
    ray_cluster: LocalRay, launch: Callable[..., Any], tmp_path: Path
) -> None:
    job = write_job(tmp_path / "job.yaml", nodes=1, gpus_per_node=16)
    run = launch("check", "--spec", str(job), "--ray-address", ray_cluster.address, "--timeout", "2")
    assert run.wait() == contract.EXIT_GPU_TIMEOUT, run.output
    assert "/16 GPUs registered on" in run.output
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith("timed out after 2s waiting for 16 available GPU(s)")
    assert "never registered" in message
    # What the operator will read: Ray's job message (the output's last lines) as KubeRay copies it.
    ray_message = entrypoint_failed_message(contract.EXIT_GPU_TIMEOUT, *run.lines[-10:])
    failure = launcher_failure(ray_message)
    assert failure is not None
    assert (failure.reason, failure.detail) == ("GPUWaitTimeout", message)


def test_gate_opens_when_a_late_worker_brings_the_missing_gpus(
    ray_cluster: LocalRay, launch: Callable[..., Any], tmp_path: Path
) -> None:
    job = write_job(tmp_path / "job.yaml", nodes=2, gpus_per_node=2)
    run = launch("check", "--spec", str(job), "--ray-address", ray_cluster.address, "--timeout", "240")
    # The launcher is waiting with 2 of 4 GPUs before the worker even starts.
    waiting = run.wait_for_line("GPUs registered on 1 node(s)")
    assert waiting.startswith("flashrl-launch: 2/4 GPUs registered on 1 node(s) (2 available)")
    assert "waiting" in waiting
    worker = ray_cluster.start_worker(num_gpus=2)
    ray_cluster.wait_worker(worker)
    assert run.wait() == contract.EXIT_OK, run.output
    assert "4/4 GPUs registered on 2 node(s) (4 available), proceeding" in run.output
    assert "Check passed" in run.output
    assert not (tmp_path / "termination-log").exists()


def test_dry_run_train_stops_after_the_gate(
    ray_cluster: LocalRay, launch: Callable[..., Any], tmp_path: Path
) -> None:
    job = write_job(tmp_path / "job.yaml", nodes=1, gpus_per_node=2, dryRun=True)
    run = launch(
        "train", "--spec", str(job), "--ray-address", ray_cluster.address, "--entry-module", "no_such_module"
    )
    assert run.wait() == contract.EXIT_OK, run.output
    assert "not training" in run.output


def _separate_async(path: Path, rollout_gpus: int) -> Path:
    return write_job(
        path,
        nodes=1,
        gpus_per_node=2,
        training={"mode": "separate-async", "async": {"parameterSyncStep": 1}},
        rollout={"pool": {"nodes": 1, "gpusPerNode": rollout_gpus}},
    )


def test_a_separate_async_job_waits_for_the_rollout_pools_gpus_too(
    ray_cluster: LocalRay, launch: Callable[..., Any], tmp_path: Path
) -> None:
    """2 trainer GPUs (which the local cluster has) plus a rollout pool of 16: the gate counts 18 and the
    reason names each pool's count (the trainer's holds any unlabelled GPU node of the shared cluster)."""
    job = _separate_async(tmp_path / "job.yaml", rollout_gpus=16)
    run = launch("check", "--spec", str(job), "--ray-address", ray_cluster.address, "--timeout", "2")
    assert run.wait() == contract.EXIT_GPU_TIMEOUT, run.output
    message = (tmp_path / "termination-log").read_text()
    assert re.match(
        r"timed out after 2s waiting for 18 available GPU\(s\): trainer pool: \d+/2 GPUs registered on \d "
        r"node\(s\) \(\d+ available\); rollout pool: 0/16 GPUs registered on 0 node\(s\) \(0 available\); "
        r"16 GPU\(s\) of the rollout pool \(worker group rollout\) never registered",
        message,
    ), message


def test_the_gate_opens_when_the_rollout_groups_node_joins(
    ray_cluster: LocalRay, launch: Callable[..., Any], tmp_path: Path
) -> None:
    """The trainer's GPUs are there from the start; the gate waits until a node of the ``rollout`` worker
    group (labelled by Ray from KubeRay's RAY_NODE_TYPE_NAME) brings the rollout pool's 2."""
    job = _separate_async(tmp_path / "job.yaml", rollout_gpus=2)
    run = launch("check", "--spec", str(job), "--ray-address", ray_cluster.address, "--timeout", "240")
    waiting = run.wait_for_line("rollout pool: 0/2 GPUs registered on 0 node(s) (0 available), waiting")
    assert "trainer pool: " in waiting
    worker = ray_cluster.start_worker(num_gpus=2, group="rollout")
    ray_cluster.wait_worker(worker)
    assert run.wait() == contract.EXIT_OK, run.output
    assert "rollout pool: 2/2 GPUs registered on 1 node(s) (2 available), proceeding" in run.output
    assert "Check passed" in run.output
