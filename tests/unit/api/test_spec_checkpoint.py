"""spec.checkpoint: on by default, refused at its field path by the CRD and the models, and what verl gets."""

from __future__ import annotations

from typing import Any

import pytest
from crd_schema_tools import apply_defaults, error_path, root_schema, validator

from flashrl_api import SpecError, parse_job, parse_spec, spec_warnings
from flashrl_api.spec import DEFAULT_CHECKPOINT_INTERVAL
from flashrl_jobs.verl_args import checkpoint_dir, protected_key_problems, verl_overrides
from flashrl_jobs.verl_config import compose_config


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "j"},
        "spec": spec,
    }


def _crd_paths(raw: dict[str, Any]) -> set[str]:
    return {error_path(e) for e in validator().iter_errors(apply_defaults(root_schema(), raw))}


@pytest.mark.parametrize(
    ("checkpoint", "path"),
    [
        ({"interval": 0}, "spec.checkpoint.interval"),
        ({"interval": -1}, "spec.checkpoint.interval"),
        ({"keep": 0}, "spec.checkpoint.keep"),
        ({"resumeMode": "resume_path"}, "spec.checkpoint.resumeMode"),
    ],
)
def test_bad_checkpoint_settings_are_refused_at_their_field_path_by_crd_and_models(
    checkpoint: dict[str, Any], path: str
) -> None:
    raw = _job({"checkpoint": checkpoint})
    assert path in _crd_paths(raw)
    with pytest.raises(SpecError) as caught:
        parse_job(raw)
    assert path in {p.path for p in caught.value.problems}


def test_the_origin_recipes_save_frequency_field_is_gone() -> None:
    raw = _job({"training": {"saveFrequency": 10}})
    assert "spec.training.saveFrequency" in _crd_paths(raw)
    with pytest.raises(SpecError):
        parse_job(raw)


def _values(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_checkpoints_are_on_by_default_and_reach_verl() -> None:
    job = parse_job(_job({}))
    values = _values(verl_overrides(job))
    assert values["trainer.save_freq"] == str(DEFAULT_CHECKPOINT_INTERVAL) != "-1"
    assert values["trainer.max_actor_ckpt_to_keep"] == "2"
    assert values["trainer.resume_mode"] == "auto"
    assert values["actor_rollout_ref.actor.checkpoint.save_contents"] == "[model,optimizer,extra]"
    assert values["trainer.default_local_dir"] == checkpoint_dir(job) == "/checkpoints/DAPO-1/j"
    config = compose_config(verl_overrides(job))
    assert config.trainer.save_freq == DEFAULT_CHECKPOINT_INTERVAL
    assert config.trainer.max_actor_ckpt_to_keep == 2
    assert list(config.actor_rollout_ref.actor.checkpoint.load_contents) == ["model", "optimizer", "extra"]


def test_settings_and_hugging_face_export_compose_against_verl() -> None:
    spec = {"checkpoint": {"interval": 10, "keep": 5, "huggingFaceModel": True, "resumeMode": "disable"}}
    config = compose_config(verl_overrides(parse_job(_job(spec))))
    assert config.trainer.save_freq == 10
    assert config.trainer.max_actor_ckpt_to_keep == 5
    assert config.trainer.resume_mode == "disable"
    assert list(config.actor_rollout_ref.actor.checkpoint.save_contents) == [
        "model",
        "optimizer",
        "extra",
        "hf_model",
    ]
    # A resume loads the resumable state only, never the Hugging Face copy.
    assert list(config.actor_rollout_ref.actor.checkpoint.load_contents) == ["model", "optimizer", "extra"]


@pytest.mark.parametrize(
    "key", ["trainer.save_freq", "trainer.max_actor_ckpt_to_keep", "trainer.resume_mode"]
)
def test_overrides_may_not_set_what_spec_checkpoint_owns(key: str) -> None:
    (problem,) = protected_key_problems([f"{key}=3"])
    assert "spec.checkpoint." in problem[1]


def test_retries_that_cannot_resume_are_warned_about() -> None:
    assert spec_warnings(parse_spec({"lifecycle": {"maxRestarts": 2}})) == []
    no_claim = {"lifecycle": {"maxRestarts": 2}, "storage": {"checkpoints": {"mountPath": "/checkpoints"}}}
    [(path, message)] = spec_warnings(parse_spec(no_claim))
    assert path == "storage.checkpoints.claimName" and "starts again from step 0" in message
    disabled = {"lifecycle": {"maxRestarts": 1}, "checkpoint": {"resumeMode": "disable"}}
    assert [p for p, _ in spec_warnings(parse_spec(disabled))] == ["checkpoint.resumeMode"]
    # Without retries there is nothing to resume.
    assert spec_warnings(parse_spec({"storage": {"checkpoints": {"mountPath": "/checkpoints"}}})) == []
