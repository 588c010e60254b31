"""The operator refuses what verl 0.9.1 would refuse at start-up, before it creates anything.

The real operator, with verl's configuration checks on (as in its image when hydra and verl are
installed), on the real API server: a job verl would stop only after the GPU cluster came up
is failed with InvalidSpec at the field or override the value came from, and nothing is created.
"""

from __future__ import annotations

from typing import Any

import pytest
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_operator.sim import JOBS_RESOURCE, RAY_JOBS_RESOURCE


def _created_children(cluster: Cluster) -> set[str]:
    return {plural for (plural, _, _) in cluster.creations() if plural not in ("events", "flashrljobs")}


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


def _probe_module() -> Any:
    """tests/unit/instantiation_probe.py, shared with ``flashrl validate``'s test of the same probe."""
    import importlib.util
    import sys
    from pathlib import Path

    if "instantiation_probe" in sys.modules:
        return sys.modules["instantiation_probe"]

    path = Path(__file__).resolve().parents[1] / "unit" / "instantiation_probe.py"
    spec = importlib.util.spec_from_file_location("instantiation_probe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["instantiation_probe"] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


async def test_the_instantiation_probe_is_refused_and_touches_nothing(
    cluster: Cluster, start_operator: StartOperator, tmp_path: Any
) -> None:
    """Issue 18: overrides naming ``builtins.open``, ``urlopen`` and ``os.getcwd`` through every place an
    override can go are refused at their field paths; no file is read or written, no request made, and
    neither the status nor an Event carries anything from outside the spec."""
    probe = _probe_module()
    await start_operator(check_overrides=True)
    with probe.traps(tmp_path) as traps:
        overrides = probe.probe_overrides(traps)
        await cluster.api.create(JOBS_RESOURCE, job_manifest("probe", {"overrides": overrides}))
        status = await cluster.wait_phase("probe", "Failed")
        assert status["reason"] == "InvalidSpec"
        for index in range(len(overrides)):
            assert f"spec.overrides[{index}]: " in status["message"], status["message"]
        from flashrl_operator.sim import eventually

        async def announced() -> list[dict[str, Any]] | None:
            # The Event follows the status write (status once, then Events): wait for it.
            return await cluster.events_for("probe") or None

        events = await eventually(announced, "the refusal announced by an Event", 20.0)
        import json

        traps.assert_untouched(json.dumps(status), json.dumps(events))
    assert _created_children(cluster) == set()


#: Issue 33's probes, one per route to what the spec owns: Hydra's own configuration (its env_set
#: reaching the driver's environment, its run directory), a dict above protected keys (replaced,
#: forced, deleted), the reserved environment through runtime_env as a whole mapping.
REACH_PROBES = {
    "hydra-env-set": "+hydra.job.env_set.RAY_ADDRESS=ray://elsewhere:10001",
    "hydra-forced": "++hydra.job.env_set.LD_PRELOAD=/tmp/x.so",
    "hydra-root": "hydra={run:{dir:/tmp/x}}",
    "hydra-deleted": "~hydra",
    "parent-dict": "trainer={nnodes:99}",
    "parent-forced": "++trainer={default_local_dir:/tmp/x,save_freq:-1,resume_mode:disable}",
    "parent-rollout": "actor_rollout_ref.rollout={quantization:null,name:vllm}",
    "parent-deleted": "~trainer",
    "runtime-env-mapping": "ray_kwargs={ray_init:{runtime_env:{env_vars:{CUDA_VISIBLE_DEVICES:'0'}}}}",
}


async def test_every_route_to_what_the_spec_owns_is_invalid_spec(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """Each probe in its own job, beside a harmless override: InvalidSpec at the probe's own index,
    naming the key it would reach, and no RayJob (nor any other child) for any of them."""
    await start_operator(check_overrides=True)
    for name, probe in REACH_PROBES.items():
        await cluster.api.create(
            JOBS_RESOURCE, job_manifest(f"reach-{name}", {"overrides": ["trainer.test_freq=3", probe]})
        )
    for name in REACH_PROBES:
        status = await cluster.wait_phase(f"reach-{name}", "Failed")
        assert status["reason"] == "InvalidSpec", (name, status)
        assert "spec.overrides[1]: " in status["message"], (name, status["message"])
        assert "spec.overrides[0]" not in status["message"], (name, status["message"])
        assert await cluster.api.get(RAY_JOBS_RESOURCE, NAMESPACE, f"reach-{name}") is None
    assert _created_children(cluster) == set()


def _largest_checked_overrides(tag: str = "") -> list[str]:
    """Overrides at the size budget of one job's checks, valid for verl (new keys, long lists). ``tag``
    makes the spec a job's own: identical specs share one check (keyed by content), which would decide
    them all at once."""
    from flashrl_jobs.override_rules import MAX_OVERRIDE_ITEMS

    per = 400
    count = MAX_OVERRIDE_ITEMS // (per - 1)
    return [f"+data.flashrl_probe{tag}_{i}=[" + ",".join(["0"] * per) + "]" for i in range(count)]


async def test_one_tenants_slow_checks_do_not_hold_up_another_namespaces_job(
    cluster: Cluster, start_operator: StartOperator
) -> None:
    """Issue 33: three jobs at the check's size budget in one namespace, then a plain job in another:
    the plain job's check is not queued behind them (ordering, not time: when the plain job has its
    verdict, at most one of the slow ones has)."""
    from envtest.audit import TEST_NAMESPACES

    other = TEST_NAMESPACES[1]
    await start_operator(check_overrides=True, check_slots=2)
    slow = [f"slow-{i}" for i in range(3)]
    for name in slow:
        await cluster.api.create(
            JOBS_RESOURCE, job_manifest(name, {"overrides": _largest_checked_overrides(name[-1])})
        )
    await cluster.api.create(
        JOBS_RESOURCE, job_manifest("plain", {"overrides": ["trainer.test_freq=3"]}, namespace=other)
    )
    await cluster.wait_phase("plain", "Pending", namespace=other)
    decided = [name for name in slow if (await cluster.status(name)).get("phase")]
    assert len(decided) <= 1, decided
