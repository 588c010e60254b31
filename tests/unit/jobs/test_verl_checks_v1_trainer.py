"""The seed's rendered overrides hold no key verl 0.9.1's V1 trainer overrides or ignores.

The V1 trainer (the default, ``trainer.use_v1: true``) rewrites or skips some configuration at start
without failing; a rendered key in that set would be a recipe setting that silently does nothing.
The conditions (``flashrl_jobs.verl_checks.v1_overridden_or_ignored``) are verl's own, transcribed from the
pinned source (``verl/trainer/ppo/v1/trainer_base.py`` and ``verl/trainer/main_ppo.py``);
``test_the_conditions_match_the_pinned_source`` keeps them honest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api import parse_job
from flashrl_jobs import verl_checks
from flashrl_jobs.verl_args import generated_overrides, override_key
from flashrl_jobs.verl_config import compose_config, config_dir

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "examples" / "flashrljob.yaml"


def v1_overridden_or_ignored(cfg: Any, rendered: set[str]) -> dict[str, str]:
    """Rendered keys the V1 trainer would override or ignore, with the reason."""
    return {
        finding.keys[0]: finding.message for finding in verl_checks.v1_overridden_or_ignored(cfg, rendered)
    }


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
