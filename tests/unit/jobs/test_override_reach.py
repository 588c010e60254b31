"""Issue 33: what an override may touch, one rule whatever the spelling.

No override writes under ``hydra`` (Hydra reads it in verl's driver before verl runs: ``env_set``
would put RAY_ADDRESS in the driver's environment), none replaces or deletes a dict that holds a key
another spec field owns, and the reserved environment is reachable by no route. Each probe is refused
by the spelling rules at ``spec.overrides[i]`` (no composition) and by ``flashrl validate`` with exit
2; the composed-config comparison is tested on its own, as the backstop for a route the spelling
rules would miss.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api import FlashRLJob, parse_job
from flashrl_api.kuberay_env import KUBERAY_MANAGED_ENV_NAMES
from flashrl_api.spec import RESERVED_ENV_NAMES
from flashrl_jobs.override_rules import reserved_runtime_env_name
from flashrl_jobs.verl_args import PROTECTED_KEYS, generated_overrides, protected_key_problems
from flashrl_operator.cli import EXIT_INVALID, main

#: The issue's probes (and their spellings), each with what the refusal must name.
HYDRA_PROBES = [
    "+hydra.job.env_set.RAY_ADDRESS=ray://evil:10001",
    "++hydra.job.env_set.LD_PRELOAD=/tmp/x.so",
    "hydra.job.env_set.CUDA_VISIBLE_DEVICES=0",
    "+hydra.job.env_set.FLASHRL_STATUS_FILE=/tmp/x",
    "hydra={job:{env_set:{RAY_ADDRESS:x}}}",
    "++hydra={run:{dir:/tmp/x}}",
    "~hydra",
    "~hydra.job",
    "+hydra.job_logging.handlers.h.class=logging.FileHandler",
    "hydra.run.dir=/tmp/elsewhere",
    "hydra/job_logging=disabled",
    "+hydra/launcher=basic",
    "+trainer@hydra.job=x",
    "+foo@_global_.hydra=x",
    " +hydra.verbose=true",
]
PARENT_PROBES = [
    ("trainer={nnodes:99}", "trainer.nnodes"),
    ("++trainer={default_local_dir:/tmp/x,save_freq:-1,resume_mode:disable}", "trainer.default_local_dir"),
    ("actor_rollout_ref.rollout={quantization:null,name:vllm}", "actor_rollout_ref.rollout.name"),
    ("actor_rollout_ref.rollout={quantization:null}", "actor_rollout_ref.rollout.quantization"),
    ("~trainer", "trainer."),
    ("~actor_rollout_ref", "actor_rollout_ref."),
    ("trainer=null", "trainer."),
    ("actor_rollout_ref={rollout:null}", "actor_rollout_ref.rollout"),
    (
        "+actor_rollout_ref.rollout.engine_kwargs.sglang={quantization:fp8}",
        "engine_kwargs.sglang.quantization",
    ),
    ("trainer=a,b", "trainer."),
]


def _manifest(**spec: Any) -> dict[str, Any]:
    """A job of a local model and data, with ``spec``'s further fields."""
    return {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "j", "namespace": "rl"},
        "spec": {
            "model": {"source": "/models/qwen"},
            "data": {"train": "/data/t.parquet", "validation": "/data/v.parquet"},
            **spec,
        },
    }


def _job(**spec: Any) -> FlashRLJob:
    return parse_job(_manifest(**spec))


@pytest.mark.parametrize("probe", HYDRA_PROBES)
def test_no_override_reaches_hydra(probe: str) -> None:
    problems = dict(protected_key_problems(["trainer.test_freq=3", probe]))
    assert list(problems) == [1], problems
    assert "Hydra's own configuration" in problems[1]


@pytest.mark.parametrize(("probe", "names"), PARENT_PROBES)
def test_no_override_replaces_or_deletes_a_dict_holding_a_protected_key(probe: str, names: str) -> None:
    problems = dict(protected_key_problems([probe]))
    assert list(problems) == [0], problems
    assert names in problems[0]
    assert "set by spec." in problems[0]


@pytest.mark.parametrize(
    "override",
    ["trainer={total_epochs:2}", "actor_rollout_ref.rollout={temperature:0.7}", "trainer.test_freq=3"],
)
def test_a_dict_that_leaves_the_protected_keys_alone_is_allowed(override: str) -> None:
    assert protected_key_problems([override]) == []


#: Every route to a process's environment a FlashRLJob has, each with a reserved name.
RESERVED = [*RESERVED_ENV_NAMES, "FLASHRL_STATUS_FILE", KUBERAY_MANAGED_ENV_NAMES[0]]
ENV_ROUTES = {
    "runtime_env key": "+ray_kwargs.ray_init.runtime_env.env_vars.{name}=x",
    "runtime_env dict": "+ray_kwargs.ray_init.runtime_env.env_vars={{{name}:x}}",
    "runtime_env parent": "ray_kwargs.ray_init.runtime_env={{env_vars:{{{name}:x}}}}",
    "ray_kwargs dict": "ray_kwargs={{ray_init:{{runtime_env:{{env_vars:{{{name}:x}}}}}}}}",
    "hydra env_set": "+hydra.job.env_set.{name}=x",
    "hydra env_set dict": "++hydra.job.env_set={{{name}:x}}",
    "hydra root": "hydra={{job:{{env_set:{{{name}:x}}}}}}",
}


@pytest.mark.parametrize("name", RESERVED)
@pytest.mark.parametrize("route", sorted(ENV_ROUTES))
def test_the_reserved_environment_is_reachable_by_no_override_route(route: str, name: str) -> None:
    assert reserved_runtime_env_name(name)
    override = ENV_ROUTES[route].format(name=name)
    assert [i for i, _ in protected_key_problems([override])] == [0], override


@pytest.mark.parametrize("name", RESERVED)
def test_the_reserved_environment_is_reachable_through_spec_env_neither(name: str) -> None:
    from flashrl_api import SpecError

    with pytest.raises(SpecError) as caught:
        _job(env=[{"name": name, "value": "x"}])
    assert [p.path for p in caught.value.problems] == ["spec.env"]


# --- the composed config, the backstop ------------------------------------------------------------

hydra = pytest.importorskip("hydra")


def test_the_composed_config_is_compared_whatever_the_spelling() -> None:
    """A change to a protected key that no spelling rule sees (here the rule is bypassed by calling the
    composed comparison directly) is still found, at the override that made it."""
    from flashrl_jobs.verl_config import composed_owned_problems

    generated = generated_overrides(_job(overrides=[]))
    user = [
        (0, "trainer.test_freq=3"),
        (1, "trainer={nnodes:99}"),
        (2, "+ray_kwargs.ray_init.runtime_env.env_vars={LD_PRELOAD:/x.so}"),
    ]
    found = composed_owned_problems(generated, user)
    assert set(found) == {1, 2}, found
    assert "trainer.nnodes" in found[1] and "spec.resources.nodes" in found[1]
    assert "LD_PRELOAD" in found[2]
    assert composed_owned_problems(generated, [(0, "trainer={total_epochs:2}")]) == {}


def test_every_protected_key_is_read_from_the_composed_config() -> None:
    from flashrl_jobs.verl_config import owned_values

    values = owned_values(tuple(generated_overrides(_job(overrides=[]))))
    assert values is not None
    assert set(PROTECTED_KEYS) <= set(values)
    assert values["trainer.nnodes"] == "1"


def _validate(tmp_path: Path, override: str) -> int:
    """``flashrl validate`` on a job whose second override is ``override``; its exit code."""
    path = tmp_path / "job.yaml"
    manifest = _manifest(overrides=["trainer.test_freq=3", override])
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    return main(["validate", str(path)])


@pytest.mark.parametrize(
    "probe",
    [
        *HYDRA_PROBES[:8],
        *(p for p, _ in PARENT_PROBES[:5]),
        ENV_ROUTES["ray_kwargs dict"].format(name="LD_PRELOAD"),
    ],
)
def test_flashrl_validate_refuses_each_probe_with_exit_2_and_its_field_path(
    probe: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, probe) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "spec.overrides[1]: " in err and "spec.overrides[0]" not in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("actor_rollout_ref.rollout.n=[1,2]", "holds a number there, the override gives a list"),
        ("~data.max_prompt_length", "the override deletes a number"),
    ],
)
def test_a_crash_inside_verls_checks_is_reported_at_the_override_that_caused_it(
    override: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, override) == EXIT_INVALID
    err = capsys.readouterr().err
    assert err.startswith("spec.overrides[1]: ") and words in err, err
    assert "spec.overrides[0]" not in err and "Traceback" not in err
