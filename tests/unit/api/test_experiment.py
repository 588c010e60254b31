"""FlashRLExperiment: the models, their rules (CEL paired with Python) and the variants' FlashRLJobs.
The generated CRD itself: tests/unit/generate/test_crd_experiment.py."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from crd_schema_tools import apply_defaults

from flashrl_api import API_VERSION, FlashRLJobSpec, SpecError
from flashrl_api.experiment import (
    EXPERIMENT_KIND,
    EXPERIMENT_LABEL,
    FREE_FIELDS,
    OBJECT_RULES,
    SETUP_CHANGES_CEL,
    SETUP_FIELDS,
    VARIANT_LABEL,
    experiment_problems,
    merge_patch,
    parse_experiment,
    setup_changes_allowed,
    variant_jobs,
)
from flashrl_api.pools import gpu_pools
from flashrl_operator.generate.crd_experiment import build_experiment_crd

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "flashrlexperiment.yaml"


def _experiment(spec: dict[str, Any] | None = None, name: str = "origin", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "metadata": {"name": name, "namespace": "rl", **meta},
        "spec": spec if spec is not None else {},
    }


def _problems(spec: dict[str, Any], name: str = "origin") -> list[str]:
    _, problems = experiment_problems(_experiment(spec, name))
    return [str(p) for p in problems]


def _root() -> dict[str, Any]:
    schema: dict[str, Any] = build_experiment_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


# --- the models ------------------------------------------------------------------------------------


def test_default_variants_are_the_origin_precisions() -> None:
    experiment = parse_experiment(_experiment())
    jobs = variant_jobs(experiment)
    assert [j.name for j in jobs] == ["origin-blockwise-fp8", "origin-channel-fp8", "origin-bf16"]
    assert [j.spec.rollout.quantization for j in jobs] == ["blockwise-fp8", "channel-fp8", "bf16"]


def test_per_channel_is_left_out_for_an_image_not_known_to_support_it() -> None:
    spec = {"template": {"images": {"trainer": "registry.example/verl:custom"}}}
    jobs = variant_jobs(parse_experiment(_experiment(spec)))
    assert [j.spec.rollout.quantization for j in jobs] == ["blockwise-fp8", "bf16"]


def test_variants_are_identical_but_for_their_own_fields() -> None:
    spec = {
        "template": {
            "training": {"totalSteps": 40},
            "storage": {"checkpoints": {"claimName": "ck", "mountPath": "/c"}},
        },
        "variants": [
            {"name": "fp8", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
            {
                "name": "bf16",
                "spec": {"rollout": {"quantization": "bf16"}, "correction": {"tis": {"level": "off"}}},
            },
        ],
    }
    fp8, bf16 = variant_jobs(parse_experiment(_experiment(spec, uid="u-1")))
    a, b = fp8.spec.to_wire(), bf16.spec.to_wire()
    for wire in (a, b):
        wire["rollout"].pop("quantization")
        wire["correction"]["tis"].pop("level")
        wire["training"].pop("experimentName")
    assert a == b
    assert fp8.spec.training.total_steps == bf16.spec.training.total_steps == 40
    assert bf16.spec.correction.tis.level == "off" and fp8.spec.correction.tis.level == "token"
    # Each keeps its own tracker run and checkpoint directory on the shared claim.
    assert (fp8.spec.training.experiment_name, bf16.spec.training.experiment_name) == (
        "origin-fp8",
        "origin-bf16",
    )
    assert (
        fp8.metadata["labels"][EXPERIMENT_LABEL] == "origin"
        and fp8.metadata["labels"][VARIANT_LABEL] == "fp8"
    )
    (owner,) = fp8.metadata["ownerReferences"]
    assert owner == {
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "name": "origin",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_a_template_tracker_name_is_suffixed_per_variant() -> None:
    spec = {"template": {"training": {"experimentName": "dapo"}}}
    names = [j.spec.training.experiment_name for j in variant_jobs(parse_experiment(_experiment(spec)))]
    assert names == ["dapo-blockwise-fp8", "dapo-channel-fp8", "dapo-bf16"]


def test_merge_patch_merges_mappings_and_replaces_lists() -> None:
    template = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_patch(template, {"a": {"c": [3]}, "e": {"f": 1}}) == {
        "a": {"b": 1, "c": [3]},
        "d": 1,
        "e": {"f": 1},
    }
    assert merge_patch(template, {"a": None}) == template  # the API server prunes nulls
    assert template == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # not modified


# --- refusals, at their field paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {
                "variants": [
                    {"name": "a", "spec": {"rollout": {"quantization": "bf16"}}},
                    {"name": "b", "spec": {"rollout": {"quantization": "bf16"}}},
                ]
            },
            "spec.variants[1]: runs exactly what variant 'a' runs",
        ),
        (  # the same run written differently (the template already is blockwise-fp8)
            {
                "variants": [
                    {"name": "a"},
                    {"name": "b", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
                ]
            },
            "spec.variants[1]: runs exactly what variant 'a' runs",
        ),
        (  # tracker names are set per variant, so they do not make two runs differ
            {"variants": [{"name": "a"}, {"name": "b", "spec": {"training": {"experimentName": "x"}}}]},
            "spec.variants[1]: runs exactly what variant 'a' runs",
        ),
        (
            {
                "variants": [
                    {"name": "base"},
                    {"name": "big", "spec": {"model": {"source": "hf://Qwen/Qwen3-32B"}}},
                ]
            },
            "spec.variants[1].spec.model.source: changes the model, so the variants would differ in more "
            "than what is compared; set spec.variants[1].allowSetupChanges: true to compare them anyway",
        ),
        (
            {
                "variants": [
                    {"name": "base"},
                    {"name": "d", "spec": {"data": {"train": "/data/other.parquet"}}},
                ]
            },
            "spec.variants[1].spec.data.train: changes the data",
        ),
        (
            {"variants": [{"name": "base"}, {"name": "o", "spec": {"overrides": ["trainer.test_freq=2"]}}]},
            "spec.variants[1].spec.overrides: changes verl's configuration directly",
        ),
        (
            {"variants": [{"name": "base"}, {"name": "t", "spec": {"rollout": {"tensorParallelSize": 3}}}]},
            "spec.variants[1].spec.rollout.tensorParallelSize: must divide resources.gpusPerNode",
        ),
        (
            {"variants": [{"name": "a"}, {"name": "a", "spec": {"rollout": {"quantization": "bf16"}}}]},
            "spec.variants[1].name: 'a' is already variant 0",
        ),
        (
            {"variants": [{"name": "a"}]},
            "spec.variants: List should have at least 2 items",
        ),
        (
            {"variants": [{"name": "a"}, {"name": "b", "spec": {"rollout": {"quantization": "fp4"}}}]},
            "spec.variants[1].spec.rollout.quantization: must be one of",
        ),
        (
            {"template": {"rollout": {"samplesPerPrompt": 0}}},
            "spec.template.rollout.samplesPerPrompt: Input should be greater than or equal to 1",
        ),
        (
            {"parallelism": 0},
            "spec.parallelism: Input should be greater than or equal to 1",
        ),
        (  # a rule broken by the merge, caused by the template's value: reported at the template, once
            {
                "template": {"resources": {"gpuProduct": "Tesla-T4"}, "rollout": {"quantization": "bf16"}},
                "variants": [
                    {"name": "bf16"},
                    {"name": "fp8", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
                ],
            },
            "spec.variants[1].spec.rollout.quantization: blockwise-fp8 needs FP8 tensor cores",
        ),
    ],
)
def test_refusals_name_the_field(spec: dict[str, Any], expected: str) -> None:
    problems = _problems(spec)
    assert any(p.startswith(expected) for p in problems), problems
    with pytest.raises(SpecError):
        parse_experiment(_experiment(spec))


def test_setup_changes_are_accepted_with_the_flag() -> None:
    spec = {
        "variants": [
            {"name": "qwen3-8b"},
            {
                "name": "qwen3-4b",
                "spec": {"model": {"source": "hf://Qwen/Qwen3-4B-Base"}},
                "allowSetupChanges": True,
            },
        ]
    }
    jobs = variant_jobs(parse_experiment(_experiment(spec)))
    assert [j.spec.model.source for j in jobs] == ["hf://Qwen/Qwen3-8B-Base", "hf://Qwen/Qwen3-4B-Base"]


def test_a_template_problem_is_reported_once_at_the_template() -> None:
    problems = _problems({"template": {"training": {"miniBatchSize": 24}}})
    assert problems == ["spec.template.training.miniBatchSize: must divide training.promptBatchSize"]


def test_variant_job_names_must_fit() -> None:
    problems = _problems({}, name="e" * 55)
    assert any(p.startswith("spec.variants[0].name: the variant's FlashRLJob") for p in problems), problems


def test_every_spec_field_is_free_or_setup_exactly_once() -> None:
    def leaves(model: type[Any], prefix: str = "") -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            path = f"{prefix}{field.alias or name}"
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, FlashRLJobSpec.__mro__[1]) and ann.model_fields:
                out.extend(leaves(ann, path + "."))
            else:
                out.append(path)
        return out

    tables = [*FREE_FIELDS, *SETUP_FIELDS]
    assert len(tables) == len(set(tables))
    for leaf in leaves(FlashRLJobSpec):
        covering = [t for t in tables if leaf == t or leaf.startswith(t + ".")]
        assert len(covering) == 1, (
            f"{leaf} is covered by {covering}: classify it in flashrl_api/experiment.py"
        )


# --- CEL paired with Python ----------------------------------------------------------------------------


def _cel(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _variant_samples() -> list[dict[str, Any]]:
    samples: list[dict[str, Any]] = [{}, {"variants": [{"name": "a"}, {"name": "b"}]}]
    for i, path in enumerate(itertools.chain(SETUP_FIELDS, FREE_FIELDS)):
        partial: dict[str, Any] = {}
        node = partial
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = {"x": 1} if path in ("model", "data", "checkpoint", "correction") else 1
        for flag in (False, True):
            samples.append(
                {
                    "variants": [
                        {"name": "base"},
                        {"name": f"v{i}", "spec": copy.deepcopy(partial), "allowSetupChanges": flag},
                    ]
                }
            )
    return samples


def test_setup_changes_rule_agrees_in_cel_and_python() -> None:
    program = _cel(SETUP_CHANGES_CEL)
    spec_schema = _root()["properties"]["spec"]
    verdicts = set()
    for sample in _variant_samples():
        defaulted = apply_defaults(spec_schema, sample)
        cel = program.evaluate({"self": celpy.json_to_cel(defaulted)})
        python = setup_changes_allowed(sample)
        assert bool(cel) == python, sample
        verdicts.add(python)
    assert verdicts == {True, False}


@pytest.mark.parametrize(
    ("name", "variants", "fits"),
    [
        ("origin", None, True),
        ("e" * 49, None, True),  # + "-blockwise-fp8" = 63
        ("e" * 50, None, False),
        ("e" * 60, [{"name": "ab"}, {"name": "c"}], True),
        ("e" * 60, [{"name": "abc"}, {"name": "c"}], False),
    ],
)
def test_job_names_fit_rule_agrees_in_cel_and_python(
    name: str, variants: list[dict[str, Any]] | None, fits: bool
) -> None:
    spec = {} if variants is None else {"variants": variants}
    obj = apply_defaults(_root(), _experiment(spec, name))
    (rule,) = [r for r in OBJECT_RULES if r.name == "variant-job-names-fit"]
    assert bool(_cel(rule.cel).evaluate({"self": celpy.json_to_cel(obj)})) == fits
    python_fits = not any("the variant's FlashRLJob" in p for p in _problems(spec, name))
    assert python_fits == fits


# --- the generated CRD ---------------------------------------------------------------------------------


def test_the_examples_variants_render_and_compose_with_verl() -> None:
    from flashrl_jobs.verl_config import check_user_overrides
    from flashrl_operator.render import render

    jobs = variant_jobs(parse_experiment(yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))))
    assert [j.spec.rollout.quantization for j in jobs] == ["blockwise-fp8", "channel-fp8", "bf16"]
    for job in jobs:
        kinds = [o["kind"] for o in render(job)]
        assert kinds[-1] == "RayJob"
        assert check_user_overrides(job) == []


# --- a variant may change the training mode (issue 35) ---------------------------------------------

ASYNC_EXAMPLE = REPO / "examples" / "flashrlexperiment-async.yaml"
_POOL = {"nodes": 1, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H20"}
_SEPARATE_ASYNC = {"training": {"mode": "separate-async", "async": {"parameterSyncStep": 4}}}


def test_a_variant_changes_the_mode_with_its_rollout_pool_without_allow_setup_changes() -> None:
    spec = {
        "template": {"training": {"miniBatchSize": 8}},
        "variants": [
            {"name": "sync", "spec": {"rollout": {"quantization": "blockwise-fp8"}}},
            {
                "name": "async",
                "spec": {**_SEPARATE_ASYNC, "rollout": {"quantization": "blockwise-fp8", "pool": _POOL}},
            },
        ],
    }
    assert _problems(spec) == []
    sync, separate = variant_jobs(parse_experiment(_experiment(spec)))
    assert (sync.spec.training.mode, sync.spec.rollout.pool) == ("sync", None)
    assert separate.spec.training.mode == "separate-async"
    assert separate.spec.rollout.pool is not None and sum(p.gpus for p in gpu_pools(separate.spec)) == 16
    assert separate.spec.training.mini_batch_size == 8, "the template's batch geometry holds for both"


def test_a_variant_switching_to_separate_async_without_a_pool_is_refused_at_its_own_field() -> None:
    spec = {
        "template": {"training": {"miniBatchSize": 8}},
        "variants": [{"name": "sync"}, {"name": "async", "spec": _SEPARATE_ASYNC}],
    }
    (problem,) = _problems(spec)
    # Neither the template nor the variant set rollout.pool: the variant made it required.
    assert problem.startswith(
        "spec.variants[1].spec.rollout.pool: is required with training.mode separate-async"
    )


def test_a_variant_breaking_the_batch_invariant_is_refused_at_its_own_field() -> None:
    broken = copy.deepcopy(_SEPARATE_ASYNC)
    broken["training"]["async"]["parameterSyncStep"] = 3
    spec = {
        "template": {"training": {"miniBatchSize": 8}},
        "variants": [{"name": "sync"}, {"name": "async", "spec": {**broken, "rollout": {"pool": _POOL}}}],
    }
    (problem,) = _problems(spec)
    assert problem.startswith("spec.variants[1].spec.training.promptBatchSize: is 32, and must equal")


def test_a_template_problem_is_reported_once_not_per_variant() -> None:
    spec = {
        "template": {"training": {"mode": "separate-async", "miniBatchSize": 8}},
        "variants": [{"name": "a"}, {"name": "b", "spec": {"rollout": {"quantization": "bf16"}}}],
    }
    (problem,) = _problems(spec)
    assert problem.startswith("spec.template.rollout.pool: is required")


def test_the_async_example_is_four_runs_sync_and_separate_async_each_with_fp8_and_bf16() -> None:
    raw = yaml.safe_load(ASYNC_EXAMPLE.read_text())
    experiment = parse_experiment(raw)
    assert not any(v.allow_setup_changes for v in experiment.spec.variants or [])
    jobs = variant_jobs(experiment)
    runs = {
        (j.spec.training.mode, j.spec.rollout.quantization, j.spec.rollout.pool is not None) for j in jobs
    }
    assert runs == {
        ("sync", "blockwise-fp8", False),
        ("sync", "bf16", False),
        ("separate-async", "blockwise-fp8", True),
        ("separate-async", "bf16", True),
    }


# --- the KV-cache precision as a treatment (issue 46) ------------------------------------------------

KV_EXAMPLE = REPO / "examples" / "flashrlexperiment-kv.yaml"


def test_the_kv_example_is_four_arms_each_composing_against_the_pinned_verl() -> None:
    import json

    from flashrl_jobs.verl_args import verl_overrides
    from flashrl_jobs.verl_config import compose_config
    from flashrl_operator.render import render

    experiment = parse_experiment(yaml.safe_load(KV_EXAMPLE.read_text()))
    assert not any(v.allow_setup_changes for v in experiment.spec.variants or [])
    jobs = variant_jobs(experiment)
    arms = [(j.spec.rollout.quantization, j.spec.rollout.kv_cache) for j in jobs]
    assert arms == [
        ("bf16", "auto"),
        ("blockwise-fp8", "auto"),
        ("bf16", "fp8-e4m3"),
        ("blockwise-fp8", "fp8-e4m3"),
    ]
    assert [j.spec.correction.guard.action for j in jobs] == ["Alert", *["FallbackToBF16"] * 3]
    for job in jobs:
        # What the operator renders: the spec ConfigMap's overrides are the ones composed here.
        (config_map,) = [o for o in render(job) if o["kind"] == "ConfigMap"]
        assert json.loads(config_map["data"]["verl-overrides.json"]) == verl_overrides(job)
        rollout = compose_config(verl_overrides(job)).actor_rollout_ref.rollout
        sglang = rollout.engine_kwargs.sglang
        kv = None if job.spec.rollout.kv_cache == "auto" else job.spec.rollout.kv_cache.replace("-", "_")
        assert sglang.get("kv_cache_dtype") == kv, job.name
        assert rollout.quantization == ("fp8" if job.spec.rollout.quantization == "blockwise-fp8" else None)


def test_a_variant_setting_an_fp8_kv_cache_on_an_older_gpu_is_refused_at_its_field() -> None:
    spec = {
        "template": {
            "resources": {"gpuProduct": "NVIDIA-A100-SXM4-80GB"},
            "rollout": {"quantization": "bf16"},
        },
        "variants": [{"name": "bf16"}, {"name": "kv", "spec": {"rollout": {"kvCache": "fp8-e4m3"}}}],
    }
    (problem,) = _problems(spec)
    assert problem.startswith("spec.variants[1].spec.rollout.kvCache: fp8-e4m3 needs FP8 tensor cores")
