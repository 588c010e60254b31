"""The seed's rendered overrides hold no key verl 0.9.1's V1 trainer overrides or ignores.

The V1 trainer (the default, ``trainer.use_v1: true``) rewrites or skips some configuration at start
without failing; a rendered key in that set would be a recipe setting that silently does nothing.
The conditions below are verl's own, read from the pinned source (``verl/trainer/ppo/v1/trainer_base.py``
and ``verl/trainer/main_ppo.py``); ``test_the_conditions_match_the_pinned_source`` keeps them honest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api import parse_job
from flashrl_jobs.verl_args import generated_overrides, override_key
from flashrl_jobs.verl_config import compose_config, config_dir

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "flashrljob.yaml"


def v1_overridden_or_ignored(cfg: Any, rendered: set[str]) -> dict[str, str]:
    """Rendered keys the V1 trainer would override or ignore, with verl's reason."""
    found: dict[str, str] = {}
    filter_groups = cfg.algorithm.get("filter_groups") or {}
    dapo = bool(filter_groups.get("enable", False))
    mode = cfg.trainer.v1.trainer_mode
    sampler = cfg.trainer.v1.sampler
    custom = sampler.get("custom_sampler")
    builtin_sync_buffer = mode == "sync" and not (custom and custom.get("path") and custom.get("name"))
    # trainer_base.py _init_dataloader: `requires_exact_refill` forces data.gen_batch_size to 1.
    exact_refill = mode != "sync" or dapo or bool(sampler.get("sync_refill_failed_groups", False))
    if exact_refill and "data.gen_batch_size" in rendered and cfg.data.get("gen_batch_size") not in (None, 1):
        found["data.gen_batch_size"] = "overridden to 1 (requires_exact_refill)"
    # trainer_base.py _resolve_filter_groups_metric: a positive max_num_gen_batches is ignored.
    ignored = "algorithm.filter_groups.max_num_gen_batches"
    if dapo and ignored in rendered and filter_groups.get("max_num_gen_batches", 0) > 0:
        found[ignored] = "ignored by the built-in V1 ReplayBuffer"
    # trainer_base.py _build_replay_buffer: max_inflight_gen_batches is read only with filtering on and
    # the built-in synchronous ReplayBuffer.
    if "algorithm.filter_groups.max_inflight_gen_batches" in rendered and not (dapo and builtin_sync_buffer):
        found["algorithm.filter_groups.max_inflight_gen_batches"] = (
            "read only with DAPO filtering in sync mode"
        )
    # trainer_base.py (total training steps): the optimisers' horizons are always recomputed.
    for key in ("actor_rollout_ref.actor.optim.total_training_steps", "critic.optim.total_training_steps"):
        if key in rendered:
            found[key] = "overwritten with trainer.total_training_steps x parameter_sync_step"
    # main_ppo.py TaskRunnerV1.run: the transfer queue is always enabled.
    if "transfer_queue.enable" in rendered:
        found["transfer_queue.enable"] = "forced to True"
    return found


def _seed_overrides() -> list[str]:
    return generated_overrides(parse_job(yaml.safe_load(SEED.read_text())))


def test_the_seed_renders_nothing_the_v1_trainer_overrides_or_ignores() -> None:
    overrides = _seed_overrides()
    cfg = compose_config(overrides)
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "sync"
    assert v1_overridden_or_ignored(cfg, {override_key(o) for o in overrides}) == {}


def test_the_seed_keeps_the_recipes_generation_concurrency() -> None:
    """The origin's 96-prompt generation batch over 32-prompt steps is 3 prompt batches in flight."""
    cfg = compose_config(_seed_overrides())
    assert cfg.algorithm.filter_groups.enable is True
    assert cfg.algorithm.filter_groups.max_inflight_gen_batches == 3
    assert cfg.data.gen_batch_size is None
    assert cfg.algorithm.filter_groups.max_num_gen_batches <= 0


@pytest.mark.parametrize(
    ("old_key", "override"),
    [
        ("data.gen_batch_size", "data.gen_batch_size=96"),
        ("algorithm.filter_groups.max_num_gen_batches", "algorithm.filter_groups.max_num_gen_batches=10"),
        ("transfer_queue.enable", "transfer_queue.enable=False"),
    ],
)
def test_the_check_catches_what_the_old_rendering_did(old_key: str, override: str) -> None:
    overrides = [*_seed_overrides(), override]
    cfg = compose_config(overrides)
    assert old_key in v1_overridden_or_ignored(cfg, {override_key(o) for o in overrides})


def test_the_conditions_match_the_pinned_source() -> None:
    """The warnings and assignments transcribed above are still in the installed verl."""
    verl = config_dir().parents[1]
    base = (verl / "trainer" / "ppo" / "v1" / "trainer_base.py").read_text()
    assert (
        'requires_exact_refill = self.trainer_mode != "sync" or dapo_enabled or sync_refill_failed_groups'
        in base
    )
    assert "self.config.data.gen_batch_size = 1" in base
    assert "max_num_gen_batches=%s is ignored by the built-in V1 ReplayBuffer" in base
    assert 'max_inflight_gen_batches = filter_groups.get("max_inflight_gen_batches", 1)' in base
    assert (
        "self.config.actor_rollout_ref.actor.optim.total_training_steps = optim_total_training_steps" in base
    )
    main = (verl / "trainer" / "main_ppo.py").read_text()
    assert "config.transfer_queue.enable = True" in main
