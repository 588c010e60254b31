"""verl config composition: user overrides, removed keys, sampling for TIS, and the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from manifests import job

from flashrl_api import parse_job
from flashrl_jobs.verl_args import verl_overrides
from flashrl_jobs.verl_config import check_user_overrides, compose_config, config_dir

REPO = Path(__file__).resolve().parents[3]

#: Keys the origin recipe (and recipes written for verl <= 0.7.0) used; the pinned verl has none.
REMOVED = [
    "algorithm.rollout_correction.rollout_token_veto_threshold=1e-4",
    "algorithm.rollout_correction.use_policy_gradient=True",
    "algorithm.rollout_correction.rollout_rs_threshold_lower=0.5",
    "reward_model.overlong_buffer.enable=True",
    "reward_model.overlong_buffer.len=4096",
    "reward_model.overlong_buffer.penalty_factor=1.0",
    "actor_rollout_ref.actor.tis_imp_ratio_cap=2.0",
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes=512",
]


def test_config_dir_is_found_without_importing_verl() -> None:
    import sys

    assert (config_dir() / "ppo_trainer.yaml").is_file()
    assert "verl" not in sys.modules


@pytest.mark.parametrize("quantization", ["blockwise-fp8", "channel-fp8", "bf16"])
@pytest.mark.parametrize("level", ["token", "sequence", "off"])
def test_generated_overrides_never_use_removed_keys(quantization: str, level: str) -> None:
    overrides = verl_overrides(
        job({"rollout": {"quantization": quantization}, "correction": {"tis": {"level": level}}})
    )
    text = "\n".join(overrides)
    for removed in REMOVED:
        assert removed.split("=", 1)[0] not in text
    assert "reward_model." not in text
    assert "tis_imp_ratio_cap" not in text


@pytest.mark.parametrize("removed", REMOVED)
def test_user_override_with_removed_key_is_rejected(removed: str) -> None:
    problems = check_user_overrides(job({"overrides": ["trainer.test_freq=10", removed, "+" + removed]}))
    assert [p.path for p in problems] == ["spec.overrides[1]", "spec.overrides[2]"]
    key = removed.split("=", 1)[0]
    assert all(key in p.message for p in problems)


def test_removed_keys_really_fail_against_pinned_verl() -> None:
    """The removed-key list is not folklore: the pinned verl rejects each of them."""
    for removed in REMOVED:
        with pytest.raises(ValueError, match="Could not override"):
            compose_config([removed])


def test_every_rejected_override_is_reported_at_its_index() -> None:
    problems = check_user_overrides(
        job(
            {
                "overrides": [
                    "trainer.test_freq=10",
                    "actor_rollout_ref.rollout.no_such_knob=1",
                    "trainer.n_gpus_per_node=4",
                    "+actor_rollout_ref.rollout.engine_kwargs.sglang.enable_metrics=True",
                    "data.bogus=1",
                    "trainer.test_freq=[",
                    "+trainer.test_freq=3",
                ]
            }
        )
    )
    by_path = {p.path: p.message for p in problems}
    assert sorted(by_path) == [
        "spec.overrides[1]",
        "spec.overrides[2]",
        "spec.overrides[4]",
        "spec.overrides[5]",
        "spec.overrides[6]",
    ]
    assert "actor_rollout_ref.rollout.no_such_knob" in by_path["spec.overrides[1]"]
    assert "spec.resources.gpusPerNode" in by_path["spec.overrides[2]"]
    assert "data.bogus" in by_path["spec.overrides[4]"]
    assert "not a valid Hydra override" in by_path["spec.overrides[5]"]
    assert "already at 'trainer.test_freq'" in by_path["spec.overrides[6]"]


def test_accepted_user_overrides_reach_verl_config() -> None:
    spec = {
        "overrides": [
            "trainer.test_freq=10",
            "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1024",
            "+actor_rollout_ref.rollout.engine_kwargs.sglang.enable_metrics=True",
        ]
    }
    assert check_user_overrides(job(spec)) == []
    cfg = compose_config(verl_overrides(job(spec)))
    assert cfg.trainer.test_freq == 10
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes == 1024


@pytest.mark.parametrize("quantization", ["blockwise-fp8", "channel-fp8"])
def test_quantization_keys_are_protected(quantization: str) -> None:
    problems = check_user_overrides(
        job(
            {
                "rollout": {"quantization": quantization},
                "overrides": [
                    "actor_rollout_ref.rollout.quantization=null",
                    "actor_rollout_ref.rollout.load_format=auto",
                    "+actor_rollout_ref.rollout.engine_kwargs.sglang.quantization=w8a8_fp8",
                ],
            }
        )
    )
    assert [p.path for p in problems] == [f"spec.overrides[{i}]" for i in range(3)]
    assert all("spec.rollout.quantization" in p.message for p in problems)


def test_sampling_stays_unbiased_for_tis_unless_the_user_says_otherwise() -> None:
    default = compose_config(verl_overrides(job({})))
    for section in (default.actor_rollout_ref.rollout, default.actor_rollout_ref.rollout.val_kwargs):
        assert (section.temperature, section.top_p, section.top_k) == (1.0, 1.0, -1)
    custom = compose_config(verl_overrides(job({"rollout": {"temperature": 0.7, "topK": 50}})))
    assert custom.actor_rollout_ref.rollout.temperature == 0.7
    assert custom.actor_rollout_ref.rollout.top_k == 50
    assert custom.actor_rollout_ref.rollout.top_p == 1.0


def test_validation_samples_dumps_and_seeds_reach_the_composed_verl_config() -> None:
    """A default job keeps every validation sample on the checkpoint claim, samples each validation row
    once (verl then names its score mean@1) and seeds data order, shuffling and rollout; the spec
    fields reach verl's keys as verl composes them."""
    default = compose_config(verl_overrides(job({})))
    checkpoints = default.trainer.default_local_dir
    assert default.trainer.validation_data_dir == f"{checkpoints}/validation"
    assert default.actor_rollout_ref.rollout.val_kwargs.n == 1
    assert default.data.seed == 0
    assert default.actor_rollout_ref.actor.data_loader_seed == 0
    assert default.actor_rollout_ref.rollout.seed == 0
    custom = compose_config(
        verl_overrides(job({"validation": {"samplesPerProblem": 16}, "training": {"seed": 7}}))
    )
    assert custom.actor_rollout_ref.rollout.val_kwargs.n == 16
    assert (custom.data.seed, custom.actor_rollout_ref.rollout.seed) == (7, 7)
    # The launcher adds the attempt (verl rewrites <step>.jsonl, and a retry repeats validations).
    from flashrl_jobs.verl_args import validation_dir

    assert validation_dir(job({}), 3) == f"{checkpoints}/validation/attempt-3"
    problems = check_user_overrides(job({"overrides": ["trainer.validation_data_dir=/tmp/x"]}))
    assert [p.path for p in problems] == ["spec.overrides[0]"]


def _examples() -> list[Path]:
    """The examples holding FlashRLJobs (the FlashRLExperiment example's variants are composed in
    test_experiment)."""
    return sorted(p for p in (REPO / "examples").glob("*.yaml") if "kind: FlashRLJob\n" in p.read_text())


def _example_jobs(path: Path) -> list[dict[str, Any]]:
    return [
        d
        for d in yaml.safe_load_all(path.read_text())
        if isinstance(d, dict) and d.get("kind") == "FlashRLJob"
    ]


@pytest.mark.parametrize("path", _examples(), ids=lambda p: p.name)
def test_every_example_composes_with_user_overrides(path: Path) -> None:
    docs = _example_jobs(path)
    if not docs:
        pytest.skip(f"{path.name} holds no FlashRLJob")
    for doc in docs:
        example = parse_job(doc)
        assert check_user_overrides(example) == [], path.name
        extra = dict(example.spec.to_wire())
        extra["overrides"] = [
            *example.spec.overrides,
            "trainer.test_freq=7",
            "+trainer.rollout_data_dir=/tmp/r",
        ]
        with_user = parse_job({**doc, "spec": extra})
        cfg = compose_config(verl_overrides(with_user))
        assert cfg.trainer.test_freq == 7
        assert cfg.trainer.nnodes == example.spec.resources.nodes
