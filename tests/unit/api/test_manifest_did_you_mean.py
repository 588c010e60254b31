"""An unknown field names the closest known field of its mapping, with its whole field path.

For a FlashRLJob (``flashrl validate`` and the operator's ``InvalidSpec`` read the same problems) and
for a FlashRLExperiment: its own fields, its template's, and a variant's partial spec, whose
suggestion is at the variant's path, where the author wrote the typo.
"""

from __future__ import annotations

from typing import Any

import pytest

from flashrl_api import API_VERSION, SpecError, parse_job, spec_problems
from flashrl_api.experiment import EXPERIMENT_KIND, experiment_problems
from flashrl_api.manifest import closest_field, known_fields
from flashrl_api.spec import FlashRLJobSpec


def messages(problems: Any) -> dict[str, str]:
    return {p.path: p.message for p in problems}


@pytest.mark.parametrize(
    ("spec", "path", "meant"),
    [
        ({"trainng": {}}, "spec.trainng", "spec.training"),
        (
            {"training": {"promptBatchsize": 8}},
            "spec.training.promptBatchsize",
            "spec.training.promptBatchSize",
        ),
        # The Python name of a field: case, '_' and '-' do not count.
        ({"training": {"total_steps": 8}}, "spec.training.total_steps", "spec.training.totalSteps"),
        (
            {"correction": {"guard": {"maxKl": 0.1}}},
            "spec.correction.guard.maxKl",
            "spec.correction.guard.maxKL",
        ),
        # In a list item: the item's own fields, at its index.
        (
            {"resources": {"tolerations": [{"key": "a", "operator": "Exists", "efect": "NoSchedule"}]}},
            "spec.resources.tolerations[0].efect",
            "spec.resources.tolerations[0].effect",
        ),
    ],
)
def test_a_job_spec_typo_names_the_field_meant(spec: dict[str, Any], path: str, meant: str) -> None:
    _, problems = spec_problems(spec)
    assert messages(problems)[path] == (
        f"unknown field; did you mean {meant}? (see `kubectl explain flashrljob.spec`)"
    )


def test_nothing_close_is_no_suggestion() -> None:
    _, problems = spec_problems({"training": {"zzqqxx": 1}})
    assert messages(problems)["spec.training.zzqqxx"] == (
        "unknown field (check the spelling; see `kubectl explain flashrljob.spec`)"
    )


def test_a_top_level_typo_and_the_operators_invalid_spec_text() -> None:
    raw = {"apiVersion": API_VERSION, "kind": "FlashRLJob", "metadata": {"name": "j"}, "sepc": {}}
    raw["spec"] = {"rollout": {"quantisation": "bf16"}}
    with pytest.raises(SpecError) as exc:
        parse_job(raw)
    # The operator's InvalidSpec message is these lines joined (flashrl_operator.job.reconciler).
    lines = [str(p) for p in exc.value.problems]
    assert "sepc: unknown field; did you mean spec?" in lines
    assert (
        "spec.rollout.quantisation: unknown field; did you mean spec.rollout.quantization? "
        "(see `kubectl explain flashrljob.spec`)"
    ) in lines


def test_known_fields_follow_the_models_and_stop_at_maps() -> None:
    assert "promptBatchSize" in known_fields(FlashRLJobSpec, ("training",))
    assert "effect" in known_fields(FlashRLJobSpec, ("resources", "tolerations", 0))
    assert known_fields(FlashRLJobSpec, ("resources", "nodeSelector")) == []  # a map: any key goes
    assert closest_field("sepc", ("apiVersion", "kind", "metadata", "spec", "status")) == "spec"
    assert closest_field("zzqqxx", ("spec",)) is None


def experiment(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": EXPERIMENT_KIND,
        "metadata": {"name": "cmp"},
        "spec": spec,
        **extra,
    }


def test_an_experiment_typo_names_the_field_meant_where_it_was_written() -> None:
    found = messages(
        experiment_problems(
            experiment(
                {"parallelsim": 1, "variants": [{"name": "a", "allowSetupChange": True}, {"name": "b"}]}
            )
        )[1]
    )
    assert found["spec.parallelsim"] == (
        "unknown field; did you mean spec.parallelism? (see `kubectl explain flashrlexperiment.spec`)"
    )
    assert found["spec.variants[0].allowSetupChange"].startswith(
        "unknown field; did you mean spec.variants[0].allowSetupChanges?"
    )


def test_a_template_or_variant_typo_is_suggested_at_its_own_path() -> None:
    template = {"template": {"trainng": {}}}
    found = messages(
        experiment_problems(experiment({**template, "variants": [{"name": "a"}, {"name": "b"}]}))[1]
    )
    assert found["spec.template.trainng"].startswith("unknown field; did you mean spec.template.training?")

    variants = [
        {"name": "a", "spec": {"rollout": {"quantisation": "bf16"}}},
        {"name": "b", "spec": {"rolout": {}}},
    ]
    found = messages(experiment_problems(experiment({"variants": variants}))[1])
    assert found["spec.variants[0].spec.rollout.quantisation"].startswith(
        "unknown field; did you mean spec.variants[0].spec.rollout.quantization?"
    )
    assert found["spec.variants[1].spec.rolout"].startswith(
        "unknown field; did you mean spec.variants[1].spec.rollout?"
    )
    found = messages(experiment_problems(experiment({"variants": variants}, spce={}))[1])
    assert found["spce"] == "unknown field; did you mean spec?"
