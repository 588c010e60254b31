"""verl 0.9.1's own start-up checks, run offline on the composed config, each failure at its field path.

The table holds, per rule family the pinned verl enforces at start-up, a FlashRLJob that breaks it
and where the problem must be reported: the field the value came from, else the override that set
it. The same jobs without the breaking part pass, and so does every example.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from manifests import job

from flashrl_api import parse_job
from flashrl_jobs.verl_args import FIELD_OF_KEY, generated_overrides, override_key
from flashrl_jobs.verl_checks import model_config_json, run_checks
from flashrl_jobs.verl_config import check_config, compose_config
from flashrl_jobs.verl_import import VerlUnavailableError, verl_module, verl_sandbox

REPO = Path(__file__).resolve().parents[3]


def _example_docs() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "FlashRLJob":
                docs.append((path.name, doc))
    return docs


@pytest.mark.parametrize(("name", "doc"), _example_docs(), ids=[n for n, _ in _example_docs()])
def test_every_example_passes_verls_own_checks(name: str, doc: dict[str, Any]) -> None:
    result = check_config(parse_job(doc))
    assert result.problems == [], name
    # verl's code ran: nothing was skipped but what needs the model's files.
    assert all(note.startswith("verl's model-dependent checks") for note in result.skipped), result.skipped


#: (case, spec, expected path, words of verl's message)
BREAKING: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "temperature 0 with sampled validation (utils/config.py validate_config)",
        {"overrides": ["actor_rollout_ref.rollout.temperature=0.0"]},
        "spec.overrides[0]",
        "temperature should be greater than 0",
    ),
    (
        "dynamic batch sizes off for the actor only (workers/engine_workers.py:616)",
        {"overrides": ["actor_rollout_ref.actor.use_dynamic_bsz=False"]},
        "spec.overrides[0]",
        "use_dynamic_bsz",
    ),
    (
        "sequence parallelism without remove-padding (FSDPActorConfig.validate)",
        {"overrides": ["trainer.test_freq=3", "actor_rollout_ref.model.use_remove_padding=False"]},
        "spec.overrides[1]",
        "use_remove_padding",
    ),
    (
        "unsupported loss aggregation (ActorConfig.__post_init__)",
        {"overrides": ["actor_rollout_ref.actor.loss_agg_mode=seq-max"]},
        "spec.overrides[0]",
        "Invalid loss_agg_mode: seq-max",
    ),
    (
        "rollout mode sync (RolloutConfig.__post_init__)",
        {"overrides": ["actor_rollout_ref.rollout.mode=sync"]},
        "spec.overrides[0]",
        "Rollout mode 'sync' has been removed",
    ),
    (
        "rollout pipeline parallelism (RolloutConfig.__post_init__)",
        {"overrides": ["actor_rollout_ref.rollout.pipeline_model_parallel_size=2"]},
        "spec.overrides[0]",
        "pipeline_model_parallel_size",
    ),
    (
        "rollout data parallelism not dividing the GPUs (workers/engine_workers.py:659)",
        {"overrides": ["actor_rollout_ref.rollout.data_parallel_size=3"]},
        "spec.overrides[0]",
        "not divisible by infer_world_size: 3",
    ),
    (
        "rejection sampling without a threshold (rollout_corr_helper)",
        {"overrides": ["algorithm.rollout_correction.rollout_rs=token_k1"]},
        "spec.overrides[0]",
        "rollout_rs_threshold must be provided",
    ),
    (
        "unknown rejection-sampling option (rollout_corr_helper)",
        {
            "overrides": [
                "algorithm.rollout_correction.rollout_rs=token_k9",
                "algorithm.rollout_correction.rollout_rs_threshold=2.0",
            ]
        },
        "spec.overrides[0]",
        "Invalid rollout_rs option: token_k9",
    ),
    (
        "unknown policy loss (register_policy_loss)",
        {"overrides": ["actor_rollout_ref.actor.policy_loss.loss_mode=ppo2"]},
        "spec.overrides[0]",
        "Unsupported loss mode: ppo2",
    ),
    (
        "token budget below the sequence length (utils/seqlen_balancing.py:384)",
        {"overrides": ["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=8192"]},
        "spec.overrides[0]",
        "max_token_len must be greater than the sequence length",
    ),
    (
        "mini batch x n not divisible by the data-parallel size (workers/engine_workers.py:267)",
        {"overrides": ["actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.rollout.n=2"]},
        "spec.overrides[0]",
        "data parallel size 4",
    ),
    (
        "a DAPO metric the dapo reward manager does not produce (replay_buffer.py:299)",
        {"training": {"dynamicSampling": {"metric": "pred"}}},
        "spec.training.dynamicSampling.metric",
        "does not produce DAPO metric 'pred'",
    ),
    (
        "a key the V1 trainer overrides (trainer_base.py requires_exact_refill)",
        {"overrides": ["data.gen_batch_size=96"]},
        "spec.overrides[0]",
        "overridden to 1",
    ),
    (
        "a key the V1 trainer ignores (trainer_base.py _resolve_filter_groups_metric)",
        {"overrides": ["algorithm.filter_groups.max_num_gen_batches=10"]},
        "spec.overrides[0]",
        "ignored by verl's V1 trainer",
    ),
]


#: verl checks of keys spec.training.mode and spec.training.async own (protected from overrides, so no
#: spec reaches verl with these values): verl's checks still catch a config that holds them.
MODE_KEY_CASES: list[tuple[str, str]] = [
    ("trainer.v1.sampler.max_off_policy_strategy=keep", "Invalid max off policy strategy: keep"),
    ("trainer.v1.sampler.max_off_policy_threshold=0", "Invalid max off policy threshold: 0"),
    ("trainer.v1.trainer_mode=pipelined", "Unknown trainer 'pipelined'"),
]


@pytest.mark.parametrize(("override", "words"), MODE_KEY_CASES)
def test_verl_checks_the_mode_keys_the_spec_owns(override: str, words: str) -> None:
    report = run_checks(compose_config([*generated_overrides(job({})), override]))
    assert any(words in f.message for f in report.findings), report.findings
    refused = check_config(job({"overrides": [override]})).problems
    assert [p.path for p in refused] == ["spec.overrides[0]"]


@pytest.mark.parametrize(("case", "spec", "path", "words"), BREAKING, ids=[c for c, *_ in BREAKING])
def test_verl_refuses_with_the_field_path(case: str, spec: dict[str, Any], path: str, words: str) -> None:
    result = check_config(job(spec))
    assert path in [p.path for p in result.problems], (case, result.problems)
    assert any(words in p.message for p in result.problems if p.path == path), (case, result.problems)
    assert all(p.message.startswith("verl ") for p in result.problems)


def test_a_value_from_a_field_is_reported_at_the_field() -> None:
    """The same verl check, fed by a field instead of an override, names the field."""
    result = check_config(job({"overrides": ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1024"]}))
    assert [p.path for p in result.problems] == ["spec.overrides[0]"]
    by_field = check_config(job({"training": {"dynamicSampling": {"metric": "overlong"}}}))
    assert [p.path for p in by_field.problems] == ["spec.training.dynamicSampling.metric"]


def test_every_field_mapping_names_a_generated_key() -> None:
    generated = {
        override_key(o) for o in generated_overrides(job({"rollout": {"quantization": "channel-fp8"}}))
    }
    generated |= {override_key(o) for o in generated_overrides(job({}))}
    generated |= {
        override_key(o)
        for o in generated_overrides(
            job(
                {
                    "training": {"mode": "separate-async", "async": {"parameterSyncStep": 1}},
                    "rollout": {"pool": {}},
                }
            )
        )
    }
    generated |= {override_key(o) for o in generated_overrides(job({"training": {"mode": "colocate-async"}}))}
    generated |= {override_key(o) for o in generated_overrides(job({"rollout": {"kvCache": "fp8-e4m3"}}))}
    vllm_kv = job({"rollout": {"engine": "vllm", "kvCache": "fp8-e4m3"}})
    generated |= {override_key(o) for o in generated_overrides(vllm_kv)}
    assert set(FIELD_OF_KEY) <= generated


# --- model-dependent rules ---------------------------------------------------------------------


def _model_dir(tmp_path: Path, **config: int) -> str:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", **config}))
    return str(tmp_path)


def test_model_rules_are_skipped_without_the_models_config() -> None:
    result = check_config(job({}))
    assert result.problems == []
    assert any("model-dependent" in note and "Qwen/Qwen3-8B-Base" in note for note in result.skipped)


def test_ulysses_degree_must_divide_the_attention_heads(tmp_path: Path) -> None:
    path = _model_dir(tmp_path, num_attention_heads=30, num_key_value_heads=6, max_position_embeddings=40960)
    result = check_config(job({"model": {"source": path}, "training": {"ulyssesSequenceParallelSize": 4}}))
    assert [p.path for p in result.problems] == ["spec.training.ulyssesSequenceParallelSize"]
    assert "num_attention_heads 30 must be divisible by ulysses_sp_size 4" in result.problems[0].message
    assert not any("model-dependent" in note for note in result.skipped)
    fine = check_config(job({"model": {"source": path}, "training": {"ulyssesSequenceParallelSize": 2}}))
    assert fine.problems == []


def test_the_prompt_must_fit_the_models_context(tmp_path: Path) -> None:
    path = _model_dir(tmp_path, num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048)
    result = check_config(job({"model": {"source": path}}))
    assert [p.path for p in result.problems] == ["spec.training.maxPromptLength"]
    assert "context length 2048" in result.problems[0].message


def test_model_config_json_reads_only_local_directories(tmp_path: Path) -> None:
    assert model_config_json("Qwen/Qwen3-8B-Base") is None
    assert model_config_json(_model_dir(tmp_path, num_attention_heads=8)) == {
        "model_type": "qwen3",
        "num_attention_heads": 8,
    }


# --- the sandbox -------------------------------------------------------------------------------


def test_verls_checks_leave_no_module_behind() -> None:
    before = set(sys.modules)
    run_checks(compose_config(generated_overrides(job({}))))
    assert {
        m for m in set(sys.modules) - before if m.split(".")[0] in ("verl", "torch", "transformers")
    } == set()


def test_a_check_that_reaches_torch_fails_loudly_instead_of_passing() -> None:
    if __import__("importlib").util.find_spec("torch") is not None:
        pytest.skip("torch is installed here: the real one is used")
    with verl_sandbox():
        torch = verl_module("torch")
        with pytest.raises(VerlUnavailableError):
            torch.zeros(3)
        with pytest.raises(VerlUnavailableError):
            bool(torch.cuda.is_available)


def test_a_verl_check_that_needs_the_model_files_is_skipped_not_failed() -> None:
    """The critic's config loads the model (HFModelConfig): offline that is a skip, not the user's error."""
    result = check_config(job({"overrides": ["critic.enable=True"]}))
    assert all("not available without its library" not in p.message for p in result.problems), result.problems
    assert any("validate_config: not run here" in note for note in result.skipped), result.skipped


def test_an_hf_model_in_the_local_hugging_face_cache_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flashrl validate`` on a machine that has the model cached runs the model-dependent checks."""
    import huggingface_hub.constants

    repo = tmp_path / "models--acme--tiny"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    (snapshot / "config.json").write_text(
        json.dumps({"num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 32768})
    )
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    result = check_config(
        job({"model": {"source": "hf://acme/tiny"}, "training": {"ulyssesSequenceParallelSize": 4}})
    )
    assert [p.path for p in result.problems] == ["spec.training.ulyssesSequenceParallelSize"]
    assert "num_attention_heads 6" in result.problems[0].message
    elsewhere = check_config(job({"model": {"source": "hf://acme/other"}}))
    assert any("model-dependent" in note for note in elsewhere.skipped)


#: The separate-async trainer's constructor assertions (transcribed: its module imports torch), each
#: broken on a composed separate-async config by the overrides given.
SEPARATE_ASYNC_JOB: dict[str, Any] = {
    "training": {"mode": "separate-async", "miniBatchSize": 8},
    "rollout": {"pool": {"nodes": 1, "gpusPerNode": 8}},
}
SEPARATE_ASYNC_CASES: list[tuple[list[str], str]] = [
    (["data.train_batch_size=64"], "train_batch_size must equal parameter_sync_step * ppo_mini_batch_size"),
    (["actor_rollout_ref.rollout.nnodes=0"], "nnodes must be > 0 in separate async training"),
    (["actor_rollout_ref.rollout.n_gpus_per_node=0"], "n_gpus_per_node must be > 0"),
    (["actor_rollout_ref.rollout.checkpoint_engine.backend=naive"], "please use nccl/nixl/mooncake"),
    (["reward.reward_model.enable=True"], "Colocate reward model"),
    (
        [
            "trainer.v1.separate_async.hybrid_rollout.enable_switch=True",
            "actor_rollout_ref.hybrid_engine=True",
            "actor_rollout_ref.rollout.disaggregation.enabled=True",
        ],
        "does not support rollout disaggregation",
    ),
]


def _separate_async_findings(extra: list[str], spec: dict[str, Any] = SEPARATE_ASYNC_JOB) -> list[str]:
    report = run_checks(compose_config([*generated_overrides(job(spec)), *extra]))
    return [f.message for f in report.findings if "trainer_separate_async.py" in f.message]


@pytest.mark.parametrize(
    ("overrides", "words"), SEPARATE_ASYNC_CASES, ids=[w for _, w in SEPARATE_ASYNC_CASES]
)
def test_the_separate_async_trainers_start_up_assertions_run_on_the_composed_config(
    overrides: list[str], words: str
) -> None:
    assert _separate_async_findings([]) == [], "the job as composed passes them"
    found = _separate_async_findings(overrides)
    assert len(found) == 1 and words in found[0], found


def test_the_separate_async_assertions_hold_only_in_that_mode() -> None:
    # A sync job's batch is not tied to the sync step, nor does it need a rollout pool.
    assert _separate_async_findings(["data.train_batch_size=64"], {"training": {"miniBatchSize": 8}}) == []
