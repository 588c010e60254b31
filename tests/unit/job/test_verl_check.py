"""The verl check the reconciler is given: its slots come from the container, its key from what verl
reads, and it holds back only the creation of a RayJob."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from manifests import job

from flashrl_api import FlashRLJob
from flashrl_jobs.verl_args import check_key
from flashrl_operator.job.verl_check import CHILD_MIB, OPERATOR_MIB, CheckUnderWay, VerlCheck, container_slots

MIB = 2**20


def cgroup(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_v2_quota_and_memory_limit(tmp_path: Path) -> None:
    # The chart's default: 1 CPU and 512 MiB. Two at least (no tenant holds every slot), and memory room.
    root = cgroup(tmp_path, {"cpu.max": "100000 100000", "memory.max": str(512 * MIB)})
    assert container_slots(root, cpus=64) == 2
    root = cgroup(tmp_path, {"cpu.max": "400000 100000", "memory.max": str(4096 * MIB)})
    assert container_slots(root, cpus=64) == 4


def test_the_memory_limit_caps_the_cpu_quota(tmp_path: Path) -> None:
    limit = OPERATOR_MIB + 3 * CHILD_MIB + 10
    root = cgroup(tmp_path, {"cpu.max": "1600000 100000", "memory.max": str(limit * MIB)})
    assert container_slots(root, cpus=64) == 3
    tight = cgroup(tmp_path / "tight", {"cpu.max": "200000 100000", "memory.max": str(OPERATOR_MIB * MIB)})
    assert container_slots(tight, cpus=64) == 1


def test_no_limit_does_not_grow_with_the_node(tmp_path: Path) -> None:
    root = cgroup(tmp_path, {"cpu.max": "max 100000", "memory.max": "max"})
    assert container_slots(root, cpus=64) == container_slots(root, cpus=8) == 4
    assert container_slots(root, cpus=1) == 2
    assert container_slots(tmp_path / "none", cpus=96) == 4  # no cgroup files at all


def test_v1_fallbacks(tmp_path: Path) -> None:
    root = cgroup(
        tmp_path,
        {
            "cpu,cpuacct/cpu.cfs_quota_us": "300000",
            "cpu,cpuacct/cpu.cfs_period_us": "100000",
            "memory/memory.limit_in_bytes": str(2048 * MIB),
        },
    )
    assert container_slots(root, cpus=64) == 3
    unlimited = cgroup(
        tmp_path / "u",
        {
            "cpu/cpu.cfs_quota_us": "-1",
            "cpu/cpu.cfs_period_us": "100000",
            "memory/memory.limit_in_bytes": str(2**63 - 4096),
        },
    )
    assert container_slots(unlimited, cpus=64) == 4


def _variant(name: str, seed: int, overrides: list[str] | None = None, **training: Any) -> FlashRLJob:
    return job({"training": {"seed": seed, **training}, "overrides": overrides or []}, name=name)


def test_replicas_that_differ_in_seed_and_name_share_one_check() -> None:
    assert check_key(_variant("exp-a-r0", 1)) == check_key(_variant("exp-a-r1", 2))
    # As an experiment makes its replicas: each names its tracker run after itself.
    r0 = _variant("exp-a-r0", 0, experimentName="exp-a-r0")
    assert check_key(r0) == check_key(_variant("exp-a-r1", 1, experimentName="exp-a-r1"))
    # ... unless an override reads the seed, or a field verl reads differs.
    seeded = ["+data.shuffle_seed=3"]  # an override about seeds: the seed stays in the key
    assert check_key(_variant("a", 1, seeded)) != check_key(_variant("a", 2, seeded))
    assert check_key(_variant("a", 1)) != check_key(_variant("a", 1, totalSteps=7))
    assert check_key(_variant("a", 1)) != check_key(_variant("a", 1, ["trainer.test_freq=3"]))


def test_lifecycle_fields_do_not_reach_the_key() -> None:
    plain = job({}, name="a")
    edited = job({"lifecycle": {"suspend": True, "activeDeadlineSeconds": 60, "ttlSecondsAfterFinished": 5}})
    assert check_key(plain) == check_key(edited)


class Gate:
    """A checker that waits until released, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def __call__(self, _job: FlashRLJob, cancel: threading.Event) -> list[str]:
        self.calls += 1
        while not self.release.wait(0.01):
            if cancel.is_set():
                raise RuntimeError("cancelled")
        return []


async def test_only_a_rayjob_to_create_waits_for_the_check() -> None:
    submitted: list[tuple[str, str]] = []
    gate = Gate()
    check = VerlCheck(lambda ns, name, _body: submitted.append((ns, name)), slots=2, checker=gate)
    new = job({}, name="new", namespace="team-a")
    with pytest.raises(CheckUnderWay):
        check.verdict(new, {}, accepted=None, needed=True)
    # A running job whose RayJob was made from these inputs: nothing to check.
    assert check.verdict(new, {}, accepted=check_key(new), needed=False) == []
    # A running job whose verl inputs changed: checked meanwhile, not held.
    changed = job({"overrides": ["trainer.test_freq=3"]}, name="running", namespace="team-b")
    assert check.verdict(changed, {}, accepted=check_key(new), needed=False) == []
    while gate.calls < 2:  # noqa: ASYNC110 (both checks run, one slot per namespace; neither ended)
        await asyncio.sleep(0.01)
    assert submitted == []
    gate.release.set()
    while len(submitted) < 2:  # noqa: ASYNC110 (the checks' ends, from worker threads)
        await asyncio.sleep(0.01)
    assert sorted(submitted) == [("team-a", "new"), ("team-b", "running")]
    assert check.verdict(new, {}, accepted=None, needed=True) == []
    await check.close()


async def test_checks_off_accept_everything() -> None:
    check = VerlCheck(lambda *_: None, enabled=False, slots=1)
    assert check.verdict(job({}), {}, accepted=None, needed=True) == []


async def test_a_check_that_cannot_run_fails_a_job_that_waits_never_one_that_runs() -> None:
    def broken(_job: FlashRLJob, _cancel: threading.Event) -> list[str]:
        raise OSError("no child process")

    submitted: list[str] = []
    check = VerlCheck(lambda _ns, name, _body: submitted.append(name), slots=2, checker=broken)
    new = job({}, name="new", namespace="team-a")
    with pytest.raises(CheckUnderWay):
        check.verdict(new, {}, accepted=None, needed=True)
    while not submitted:  # noqa: ASYNC110 (the check's end, from a worker thread)
        await asyncio.sleep(0.01)
    assert check.verdict(new, {}, accepted="older", needed=False) == []  # a running job goes on
    with pytest.raises(OSError, match="no child process"):
        check.verdict(new, {}, accepted=None, needed=True)  # once, to a job that waits: retried
    await check.close()
