"""spec.training.mode and spec.rollout.pool rendered to verl 0.9.1's V1 trainer keys, composed against
the pinned verl so every key is real, and the mode's keys owned by the typed fields."""

from __future__ import annotations

from typing import Any

import pytest
from manifests import job

from flashrl_jobs.verl_args import (
    PROTECTED_KEYS,
    generated_overrides,
    override_key,
    verl_argv,
    verl_overrides,
)
from flashrl_jobs.verl_config import check_config, check_user_overrides, compose_config

SEPARATE: dict[str, Any] = {
    "training": {
        "mode": "separate-async",
        "promptBatchSize": 128,
        "miniBatchSize": 32,
        "generationBatchSize": 384,
    },
    "rollout": {"pool": {"nodes": 2, "gpusPerNode": 4}},
    "resources": {"nodes": 2},
}


def test_sync_renders_no_v1_mode_keys_and_composes_to_the_sync_trainer() -> None:
    overrides = verl_overrides(job({}))
    assert not [o for o in overrides if o.startswith("trainer.v1.") or "hybrid_engine" in o]
    cfg = compose_config(overrides)
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "sync"
    assert cfg.actor_rollout_ref.rollout.nnodes == 0


def test_colocate_async_composes_with_its_settings() -> None:
    spec = {
        "training": {"mode": "colocate-async", "async": {"warmupBatches": 1.5, "offPolicyStrategy": "wait"}}
    }
    cfg = compose_config(verl_overrides(job(spec)))
    v1 = cfg.trainer.v1
    assert (v1.trainer_mode, v1.colocate_async.num_warmup_batches) == ("colocate_async", 1.5)
    assert (v1.sampler.max_off_policy_threshold, v1.sampler.max_off_policy_strategy) == (8, "wait")
    # No standalone pool: rollout stays on the trainer's GPUs.
    assert cfg.actor_rollout_ref.rollout.nnodes == 0 and cfg.actor_rollout_ref.hybrid_engine is True
    assert not [o for o in verl_overrides(job(spec)) if "max_inflight_gen_batches" in o]


def test_separate_async_composes_to_what_verls_trainer_asserts_at_start() -> None:
    """The conditions PPOTrainerSeparateAsync.__init__ asserts (trainer_separate_async.py:59-70),
    read from the composed config: the spec's rules made them true before any GPU."""
    cfg = compose_config(verl_overrides(job(SEPARATE)))
    v1, rollout = cfg.trainer.v1, cfg.actor_rollout_ref.rollout
    assert v1.trainer_mode == "separate_async"
    assert (
        cfg.data.train_batch_size
        == v1.separate_async.parameter_sync_step * cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    )
    assert v1.separate_async.parameter_sync_step == 4  # verl's default, spec left it out
    assert (rollout.nnodes, rollout.n_gpus_per_node) == (2, 4)
    assert rollout.checkpoint_engine.backend == "nccl"
    # Not lending: the standalone pool serves every rollout.
    assert cfg.actor_rollout_ref.hybrid_engine is False
    assert v1.separate_async.hybrid_rollout.enable_switch is False
    # The trainer keeps its own group's size.
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (2, 8)
    assert check_config(job(SEPARATE)).problems == []


def test_lending_idle_trainer_gpus_keeps_the_hybrid_engine() -> None:
    spec = {
        **SEPARATE,
        "training": {
            **SEPARATE["training"],
            "async": {"lendIdleTrainerGpus": True, "checkpointEngine": "nixl"},
        },
    }
    cfg = compose_config(verl_overrides(job(spec)))
    assert cfg.actor_rollout_ref.hybrid_engine is True
    assert cfg.trainer.v1.separate_async.hybrid_rollout.enable_switch is True
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == "nixl"


def test_every_mode_runs_verls_own_entry_point() -> None:
    """verl.trainer.main_ppo picks the V1 trainer class from trainer.v1.trainer_mode (main_ppo.py:141)."""
    assert (
        verl_argv(job(SEPARATE))[:3] == verl_argv(job({}))[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    )


@pytest.mark.parametrize(
    "override",
    [
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.parameter_sync_step=2",
        "trainer.v1.sampler.max_off_policy_threshold=100",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
        "actor_rollout_ref.rollout.nnodes=4",
        "actor_rollout_ref.hybrid_engine=True",
        "trainer.use_v1=False",
    ],
)
def test_mode_keys_are_protected_from_overrides(override: str) -> None:
    assert override_key(override) in PROTECTED_KEYS
    problems = check_user_overrides(job({**SEPARATE, "overrides": [override]}))
    assert [p.path for p in problems] == ["spec.overrides[0]"]
    assert "is set by spec." in problems[0].message


def test_every_rendered_mode_key_is_protected() -> None:
    keys = {override_key(o) for o in generated_overrides(job(SEPARATE))} - {
        override_key(o) for o in generated_overrides(job({}))
    }
    assert keys and keys <= set(PROTECTED_KEYS)
