"""The `flashrl` command: validate, render, crd and demo, and its handling of bad input."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api import load_job_file
from flashrl_operator.cli import EXIT_INVALID, build_parser, main
from flashrl_operator.generate.crd import crd_yaml
from flashrl_operator.sim.demo import demo_total_steps, ray_job_summary, scrape_excerpt, singular

REPO = Path(__file__).resolve().parents[3]
#: The FlashRLJob examples (the FlashRLExperiment example has its own tests below).
EXAMPLES = sorted(
    p for p in (REPO / "examples").glob("*.yaml") if "\nkind: FlashRLJob\n" in p.read_text(encoding="utf-8")
)
MAIN_EXAMPLE = REPO / "examples" / "flashrljob.yaml"

HEAD = "apiVersion: flashrl.dev/v1alpha1\nkind: FlashRLJob\nmetadata:\n  name: j\n"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _write(tmp_path: Path, text: str, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


# --- validate ------------------------------------------------------------------------------------


def test_validate_names_the_mode_and_the_rollout_pool(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(REPO / "examples" / "flashrljob-separate-async.yaml")
    code, out, _ = _run(["validate", path], capsys)
    assert code == 0
    assert out.endswith(
        "(blockwise-fp8, token TIS C=2.0, 1x8 NVIDIA-H20, separate-async, rollout pool 1x8 NVIDIA-H20)\n"
    )


def test_validate_refuses_a_broken_separate_async_job_at_its_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO / "examples" / "flashrljob-separate-async.yaml").read_text()
    text = text.replace("miniBatchSize: 8", "miniBatchSize: 16").replace(
        "checkpointEngine: nccl", "checkpointEngine: naive"
    )
    text = text.replace("    pool:\n      nodes: 1", "    pool:\n      nodes: 0")
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    code, _, err = _run(["validate", str(path)], capsys)
    assert code == EXIT_INVALID
    assert "spec.rollout.pool.nodes:" in err
    # Field errors come first; the cross-field rules run on a spec whose fields parse.
    text = text.replace("nodes: 0", "nodes: 1")
    path.write_text(text)
    code, _, err = _run(["validate", str(path)], capsys)
    assert code == EXIT_INVALID
    assert "spec.training.promptBatchSize: is 32, and must equal" in err
    assert "spec.training.async.checkpointEngine: must not be naive" in err


def test_validate_prints_one_line_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, HEAD.replace("name: j", "name: qwen3-8b-dapo-fp8") + "spec: {}\n")
    code, out, err = _run(["validate", path], capsys)
    assert code == 0
    assert (
        out
        == f'{path}: valid FlashRLJob "qwen3-8b-dapo-fp8" (blockwise-fp8, token TIS C=2.0, 1x8 NVIDIA-H20)\n'
    )
    # One line on what only the cluster can tell.
    assert err == (
        "not checked offline: namespace default; claims hf-cache, rl-data, rl-checkpoints (bound; "
        "ReadWriteMany when shared by several pods); optional Secret hf-token (Hub token); 1 node(s) with 8 "
        "allocatable and free NVIDIA-H20; KubeRay's CRDs and running operator; verl's model-dependent "
        "checks (Ulysses degree against the "
        "attention heads, context length; /models/hf/Qwen/Qwen3-8B-Base/main is not a local directory with a "
        "config.json here); `flashrl preflight -n default FILE` checks them with your kubeconfig\n"
    )


def test_validate_summary_follows_the_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = """\
        spec:
          rollout: {quantization: bf16}
          correction: {tis: {level: "off"}}
          resources: {nodes: 2, gpusPerNode: 4, gpuProduct: NVIDIA-H100-80GB-HBM3}
          dryRun: true
        """
    path = _write(tmp_path, HEAD + textwrap.dedent(spec))
    code, out, _ = _run(["validate", path], capsys)
    assert code == 0
    assert out.endswith('"j" (bf16, TIS off, 2x4 NVIDIA-H100-80GB-HBM3, dry run)\n')


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_validate_accepts_every_example(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["validate", str(path)], capsys)
    assert code == 0, err
    job = load_job_file(path)
    assert out.startswith(f'{path}: valid FlashRLJob "{job.name}" ({job.spec.rollout.quantization}, ')
    assert "note:" not in err  # hydra and verl are in the dev venv: overrides were composed


BAD_INPUTS: list[tuple[str, str, list[str]]] = [
    ("not-yaml", "spec: [unclosed\n", ["is not valid YAML (line"]),
    ("empty", "# nothing here\n", ["contains no YAML document"]),
    ("a-list", "- a\n- b\n", ["a FlashRLJob must be a YAML mapping, got list"]),
    ("a-string", "just words\n", ["a FlashRLJob must be a YAML mapping, got str"]),
    ("two-documents", HEAD + "---\n" + HEAD, ["must hold one FlashRLJob, found 2 documents"]),
    (
        "wrong-kind",
        HEAD.replace("kind: FlashRLJob", "kind: RayJob"),
        ["kind: must be 'FlashRLJob', got 'RayJob'"],
    ),
    (
        "wrong-api-version",
        HEAD.replace("flashrl.dev/v1alpha1", "flashrl.dev/v1"),
        ["apiVersion: must be 'flashrl.dev/v1alpha1', got 'flashrl.dev/v1'"],
    ),
    ("no-name", HEAD.replace("  name: j\n", "  labels: {}\n"), ["metadata.name: is required"]),
    (
        "bad-name",
        HEAD.replace("name: j", "name: My_Job"),
        ["metadata.name: 'My_Job' must be a DNS-1035 label"],
    ),
    ("unknown-top-level", HEAD + "sepc: {}\n", ["sepc: unknown field"]),
    (
        "typo",
        HEAD + "spec: {training: {promptBatchsize: 8}}\n",
        ["spec.training.promptBatchsize: unknown field"],
    ),
    ("spec-not-mapping", HEAD + "spec: [1]\n", ["spec: must be a mapping, got list"]),
    (
        "out-of-range",
        HEAD + "spec: {rollout: {samplesPerPrompt: 0}}\n",
        ["spec.rollout.samplesPerPrompt: Input should be greater than or equal to 1"],
    ),
    ("enum", HEAD + "spec: {rollout: {quantization: fp4}}\n", ["spec.rollout.quantization: must be one of"]),
    (
        "wrong-type",
        HEAD + "spec: {resources: {nodes: '2'}}\n",
        ["spec.resources.nodes: Input should be a valid integer, got '2'"],
    ),
    (
        "inconsistent",
        HEAD + "spec: {training: {promptBatchSize: 32, miniBatchSize: 24}}\n",
        ["spec.training.miniBatchSize: must divide training.promptBatchSize"],
    ),
    (
        "gpus-not-divisible",
        HEAD + "spec: {rollout: {samplesPerPrompt: 5}, resources: {nodes: 3}, "
        "training: {ulyssesSequenceParallelSize: 3}}\n",
        [
            "spec.rollout.samplesPerPrompt: training.promptBatchSize x rollout.samplesPerPrompt must be "
            "divisible by the GPU count"
        ],
    ),
    (
        "tp-not-dividing-node",
        HEAD + "spec: {rollout: {tensorParallelSize: 3}}\n",
        ["spec.rollout.tensorParallelSize: must divide resources.gpusPerNode"],
    ),
    (
        "several-problems",
        HEAD + "spec: {rollout: {samplesPerPrompt: 0, quantization: fp4}, training: {bogus: 1}}\n",
        [
            "spec.rollout.samplesPerPrompt:",
            "spec.rollout.quantization:",
            "spec.training.bogus: unknown field",
        ],
    ),
    (
        "protected-override",
        HEAD + "spec: {overrides: [trainer.nnodes=4]}\n",
        ["spec.overrides[0]: trainer.nnodes is set by spec.resources.nodes"],
    ),
    (
        "override-not-hydra",
        HEAD + "spec: {overrides: ['-bad']}\n",
        ["spec.overrides[0]:"],
    ),
    (
        "fp8-kv-cache-on-a100",
        HEAD + "spec: {rollout: {quantization: bf16, kvCache: fp8-e4m3}, "
        "resources: {gpuProduct: NVIDIA-A100-SXM4-80GB}}\n",
        ["spec.rollout.kvCache: fp8-e4m3 needs FP8 tensor cores"],
    ),
    (
        "fallback-on-bf16",
        HEAD + "spec: {rollout: {quantization: bf16}, correction: {guard: {action: FallbackToBF16}}}\n",
        ["spec.correction.guard.action: action FallbackToBF16 needs an FP8 rollout"],
    ),
    (
        "fallback-without-resume",
        HEAD + "spec: {checkpoint: {resumeMode: disable}, correction: {guard: {action: FallbackToBF16}}}\n",
        ["spec.correction.guard.action: action FallbackToBF16 resumes the next attempt"],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [(t, e) for _, t, e in BAD_INPUTS], ids=[n for n, _, _ in BAD_INPUTS]
)
@pytest.mark.parametrize("command", ["validate", "render"])
def test_bad_input_is_one_line_per_problem_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str, expected: list[str]
) -> None:
    path = _write(tmp_path, text)
    code, out, err = _run([command, path], capsys)
    assert code == EXIT_INVALID
    assert out == ""
    lines = err.splitlines()
    assert "Traceback" not in err
    for want in expected:
        assert any(want in line for line in lines), (want, lines)
    if command == "validate" and "overrides" not in text:
        assert len(lines) == len(expected)


def test_override_rejected_by_verl_names_its_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = ["trainer.val_before_train=false", "actor_rollout_ref.actor.no_such_key=1"]
    text = HEAD + yaml.safe_dump({"spec": {"overrides": overrides}})
    code, out, err = _run(["validate", _write(tmp_path, text)], capsys)
    assert code == EXIT_INVALID
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("spec.overrides[1]: actor_rollout_ref.actor.no_such_key")


def test_rule_violations_and_bad_overrides_are_reported_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        "resources": {"gpusPerNode": 6},
        "training": {"ulyssesSequenceParallelSize": 6},
        "overrides": ["trainer.nnodes=2", "actor_rollout_ref.actor.no_such_key=1"],
    }
    code, out, err = _run(["validate", _write(tmp_path, HEAD + yaml.safe_dump({"spec": spec}))], capsys)
    assert out == ""
    assert code == EXIT_INVALID
    paths = [line.split(": ", 1)[0] for line in err.splitlines()]
    assert paths == ["spec.rollout.samplesPerPrompt", "spec.overrides[0]", "spec.overrides[1]"]


def test_valid_overrides_are_composed_without_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = HEAD + "spec: {overrides: [trainer.val_before_train=false]}\n"
    code, _, err = _run(["validate", _write(tmp_path, text)], capsys)
    assert code == 0
    assert err.startswith("not checked offline: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: str(d / "missing.yaml"), "cannot read"),
        (lambda d: str(d), "cannot read"),
        (
            lambda d: (d / "bin.yaml").write_bytes(b"\xff\xfe\x00k") and str(d / "bin.yaml"),
            "is not UTF-8 text",
        ),
    ],
    ids=["missing-file", "directory", "not-utf8"],
)
def test_unreadable_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, expected: str
) -> None:
    code, out, err = _run(["validate", make(tmp_path)], capsys)
    assert code == EXIT_INVALID
    assert out == "" and expected in err and "Traceback" not in err


# --- render --------------------------------------------------------------------------------------


def test_render_prints_the_renderer_objects_as_a_yaml_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flashrl_operator.render import render

    path = _write(tmp_path, HEAD + "spec: {rollout: {samplesPerPrompt: 8}}\n")
    code, out, err = _run(["render", path], capsys)
    assert (code, err) == (0, "")
    docs = list(yaml.safe_load_all(out))
    assert docs == render(load_job_file(path)).manifests()
    kinds = [d["kind"] for d in docs]
    assert "RayJob" in kinds and "ConfigMap" in kinds
    assert out.startswith("---\n")


def test_render_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(HEAD + "spec: {}\n"))
    code, out, _ = _run(["render", "-"], capsys)
    assert code == 0
    assert any(d["kind"] == "RayJob" for d in yaml.safe_load_all(out))


def test_render_from_stdin_reports_several_documents(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(HEAD + "---\n" + HEAD))
    code, out, err = _run(["render", "-"], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    assert err == "standard input must hold one FlashRLJob, found 2 documents\n"


def test_render_of_the_kv_experiment_is_each_variants_job_and_what_it_becomes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An experiment renders as the operator creates it: each variant's FlashRLJob (the one the
    experiment's reconciler applies), followed by the objects that job becomes."""
    from flashrl_api.experiment import parse_experiment, variant_jobs
    from flashrl_operator.experiment.plan import job_object
    from flashrl_operator.render import render

    path = REPO / "examples" / "flashrlexperiment-kv.yaml"
    code, out, err = _run(["render", str(path)], capsys)
    assert (code, err) == (0, "")
    raw = yaml.safe_load(path.read_text())
    jobs = variant_jobs(parse_experiment(raw), raw["spec"]["template"])
    expected: list[Any] = []
    for job in jobs:
        expected += [job_object(job), *render(job).manifests()]
    docs = list(yaml.safe_load_all(out))
    assert docs == expected
    names = [d["metadata"]["name"] for d in docs if d["kind"] in ("FlashRLJob", "RayJob")]
    arms = [f"fp8-weights-vs-kv-cache-{arm}" for arm in ("bf16", "fp8-w", "fp8-kv", "fp8-w-kv")]
    assert names == [n for arm in arms for n in (arm, arm)]


def test_render_refuses_an_experiment_at_the_variants_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
    apiVersion: flashrl.dev/v1alpha1
    kind: FlashRLExperiment
    metadata: {name: x}
    spec:
      variants:
        - {name: a, spec: {rollout: {quantization: bf16}}}
        - {name: b, allowSetupChanges: true, spec: {overrides: [trainer.n_gpus_per_node=4]}}
    """
    code, out, err = _run(["render", _write(tmp_path, text)], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    assert err.startswith("spec.variants[1].spec.overrides[0]: trainer.n_gpus_per_node is set by"), err


# --- crd, demo, help -----------------------------------------------------------------------------


def test_crd_prints_the_generated_crd(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["crd"], capsys)
    assert (code, err) == (0, "")
    assert out == crd_yaml()


def test_demo_validates_and_renders_the_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The experiment's report goes under tmp_path, not into the working directory.
    # --stall bounds a wait by progress, not by the clock; it asserts no speed.
    argv = ["demo", "--file", str(MAIN_EXAMPLE), "--report", str(tmp_path / "report"), "--stall", "120"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    job = load_job_file(MAIN_EXAMPLE)
    ns, name = job.namespace, job.name
    assert f'valid FlashRLJob "{name}"' in out
    assert f"ray.io/v1 RayJob {ns}/" in out
    # Succeeded means every step ran: a short totalSteps, no shortcut.
    assert "demo shortcut" not in out
    assert f"spec.training.totalSteps set to {demo_total_steps(5)}" in out
    total = demo_total_steps(5)
    assert f"Succeeded at step {total}/{total}" in out
    assert f"step {total}/{total} (attempt 2)" in out
    # Kinds as kubectl names them.
    assert f"created networkpolicy {ns}/" in out and "networkpolicie " not in out
    # In the order they happened: attempt 2's RayJob, then its Ray cluster; a phase, then its Event.
    retry = f"created rayjob {ns}/{name}-2"
    assert out.index(retry) < out.index("creating attempt 2's Ray cluster")
    assert out.index(retry) < out.index(f"created raycluster {ns}/{name}-2-")
    assert out.index(f"created raycluster {ns}/{name}-2-") < out.index("attempt 2's Ray cluster is up")
    for phase in ("Staging", "Pending", "Starting", "Running", "Succeeded"):
        assert out.index(f"-> {phase}: ") < out.index(f"event                  Normal {phase}: "), phase
    # What a reader needs of the RayJob and the scrape; the whole objects only with --full.
    assert "kind: RayJob" not in out and "# HELP" not in out
    assert "flashrl demo --full prints the whole object" in out
    assert "more series (flashrl demo --full prints the whole scrape)" in out
    # The emulated KubeRay does what the rendered RayJob says when the job ends.
    assert "its GPU workers were deleted at once (deletionRules: DeleteWorkers" in out
    assert "3600 s later (played at once): DeleteCluster" in out


def test_demo_full_is_an_option() -> None:
    assert build_parser().parse_args(["demo", "--full"]).full is True
    assert build_parser().parse_args(["demo"]).full is False


@pytest.mark.parametrize(
    ("plural", "singular_"),
    [
        ("networkpolicies", "networkpolicy"),
        ("rayjobs", "rayjob"),
        ("persistentvolumeclaims", "persistentvolumeclaim"),
    ],
)
def test_the_timeline_names_kinds_in_the_singular(plural: str, singular_: str) -> None:
    assert singular(plural) == singular_


def test_the_scrape_excerpt_keeps_the_chosen_series_without_help_lines() -> None:
    text = (
        "# HELP flashrl_training_step Last step.\n# TYPE flashrl_training_step gauge\n"
        'flashrl_training_step{job="j",namespace="n"} 3.0\n'
        'flashrl_phase_seconds{job="j",namespace="n",phase="gen"} 2.0\n'
        'flashrl_training_step_seconds{job="j",namespace="n"} 1.0\n'
    )
    assert scrape_excerpt(text) == (['flashrl_training_step{job="j",namespace="n"} 3.0'], 2)


def test_the_ray_job_summary_names_command_lifecycle_and_groups() -> None:
    from flashrl_operator.render import render

    ray_job = next(o for o in render(load_job_file(MAIN_EXAMPLE)) if o["kind"] == "RayJob")
    summary_ = ray_job_summary(ray_job)
    spec = ray_job["spec"]
    assert spec["entrypoint"] in summary_ and "backoffLimit 0" in summary_
    assert "nvidia.com/gpu 8" in summary_ and "nvidia.com/gpu.product=NVIDIA-H20" in summary_
    # What is rendered for the end: the GPU workers at once, the head after the TTL.
    assert "when it ends: deletionRules: DeleteWorkers at once, DeleteCluster after 3600 s" in summary_
    assert "jobDeploymentStatus Failed" in summary_
    assert len(summary_.splitlines()) <= 9


def test_demo_with_a_missing_file_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["demo", "--file", str(tmp_path / "nope.yaml")], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    assert "cannot read" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "validate"),
        (["validate"], "standard input"),
        (["render"], "YAML stream"),
        (["crd"], "CustomResourceDefinition"),
        (["demo"], "--file"),
    ],
)
def test_help(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    assert expected in " ".join(capsys.readouterr().out.split())


def test_missing_subcommand_or_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["validate"], ["frobnicate"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert "usage: flashrl" in capsys.readouterr().err


def test_every_subcommand_is_registered() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) >= {"validate", "render", "crd", "demo"}  # type: ignore[arg-type]


# --- as a separate process -----------------------------------------------------------------------

#: Runs the CLI with the operator-only and verl-config packages made unimportable, as in the trainer
#: image: render, validate and crd must work with pydantic and PyYAML alone.
_WITHOUT_OPTIONAL = """
import sys
for name in ("kopf", "aiohttp", "prometheus_client", "hydra", "omegaconf", "kubernetes", "ray"):
    sys.modules[name] = None
from flashrl_operator.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _subprocess(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_OPTIONAL, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=REPO,
    )


def test_cli_works_without_the_operator_and_verl_config_packages(tmp_path: Path) -> None:
    good = _write(tmp_path, HEAD + "spec: {overrides: [trainer.val_before_train=false]}\n")
    validated = _subprocess(["validate", good])
    assert validated.returncode == 0, validated.stderr
    assert 'valid FlashRLJob "j"' in validated.stdout
    assert "checked for syntax only" in validated.stderr
    rendered = _subprocess(["render", "-"], stdin=HEAD)
    assert rendered.returncode == 0, rendered.stderr
    assert any(d["kind"] == "RayJob" for d in yaml.safe_load_all(rendered.stdout))
    experiment = _subprocess(["render", str(REPO / "examples" / "flashrlexperiment-kv.yaml")])
    assert experiment.returncode == 0, experiment.stderr
    assert [d["kind"] for d in yaml.safe_load_all(experiment.stdout)].count("RayJob") == 4
    crd = _subprocess(["crd"])
    assert crd.returncode == 0 and crd.stdout == crd_yaml()


def test_protected_overrides_are_refused_even_without_verl_config(tmp_path: Path) -> None:
    bad = _write(tmp_path, HEAD + "spec: {overrides: [trainer.n_gpus_per_node=4]}\n")
    out = _subprocess(["validate", bad])
    assert out.returncode == EXIT_INVALID
    assert "spec.overrides[0]: trainer.n_gpus_per_node is set by spec.resources.gpusPerNode" in out.stderr


def test_console_script_reports_bad_input_without_a_traceback(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "flashrl"
    assert exe.exists(), "the flashrl console script is missing: `make install`"
    bad = _write(tmp_path, HEAD + "spec: {rollout: {samplesPerPrompt: -1}}\n")
    out = subprocess.run(
        [str(exe), "validate", bad], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == EXIT_INVALID
    assert out.stderr.startswith("spec.rollout.samplesPerPrompt: ")
    assert "Traceback" not in out.stderr


def test_validate_refuses_what_verl_would_refuse_at_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        "training": {"dynamicSampling": {"metric": "pred"}},
        "overrides": ["trainer.test_freq=3", "actor_rollout_ref.actor.loss_agg_mode=seq-max"],
    }
    code, out, err = _run(["validate", _write(tmp_path, HEAD + yaml.safe_dump({"spec": spec}))], capsys)
    assert (code, out) == (EXIT_INVALID, "")
    lines = err.splitlines()
    assert lines[0].startswith("spec.overrides[1]: verl ") and "Invalid loss_agg_mode: seq-max" in lines[0]
    # The loss aggregation stops verl's actor checks; fixed, the DAPO metric is reported next.
    spec["overrides"] = ["trainer.test_freq=3"]
    code, _, err = _run(["validate", _write(tmp_path, HEAD + yaml.safe_dump({"spec": spec}))], capsys)
    assert code == EXIT_INVALID
    assert err.startswith("spec.training.dynamicSampling.metric: verl ")
    assert "does not produce DAPO metric 'pred'" in err


def test_validate_warns_about_a_gpu_it_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(
        ["validate", _write(tmp_path, HEAD + "spec: {resources: {gpuProduct: NVIDIA-Z9}}\n")], capsys
    )
    assert code == 0
    assert err.splitlines()[0].startswith(
        "warning: spec.resources.gpuProduct: 'NVIDIA-Z9' is not in the GPU table"
    )


def test_validate_refuses_fp8_on_a100(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(
        ["validate", _write(tmp_path, HEAD + "spec: {resources: {gpuProduct: NVIDIA-A100-SXM4-80GB}}\n")],
        capsys,
    )
    assert code == EXIT_INVALID
    assert err.startswith("spec.rollout.quantization: blockwise-fp8 needs FP8 tensor cores")


# --- FlashRLExperiment ---------------------------------------------------------------------------

EXPERIMENT_HEAD = "apiVersion: flashrl.dev/v1alpha1\nkind: FlashRLExperiment\nmetadata: {name: cmp}\n"


def test_validate_accepts_the_experiment_example(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "examples" / "flashrlexperiment.yaml"
    code, out, err = _run(["validate", str(path)], capsys)
    assert code == 0, err
    assert out.splitlines() == [
        f'{path}: valid FlashRLExperiment "origin-fp8-vs-bf16", 3 variants:',
        "  origin-fp8-vs-bf16-blockwise-fp8 (blockwise-fp8, token TIS C=2.0, 1x8 NVIDIA-H20)",
        "  origin-fp8-vs-bf16-channel-fp8 (channel-fp8, token TIS C=2.0, 1x8 NVIDIA-H20)",
        "  origin-fp8-vs-bf16-bf16 (bf16, token TIS C=2.0, 1x8 NVIDIA-H20)",
    ]
    assert "note:" not in err


def test_validate_accepts_the_async_experiment_example(capsys: pytest.CaptureFixture[str]) -> None:
    """Sync and separate-async, each with FP8 and BF16 rollout, checked as the jobs they become (verl's
    separate-async start-up assertions included)."""
    path = REPO / "examples" / "flashrlexperiment-async.yaml"
    code, out, err = _run(["validate", str(path)], capsys)
    assert code == 0, err
    pool = "separate-async, rollout pool 1x8 NVIDIA-H20"
    assert out.splitlines() == [
        f'{path}: valid FlashRLExperiment "async-vs-sync-fp8", 4 variants:',
        "  async-vs-sync-fp8-sync-fp8 (blockwise-fp8, token TIS C=2.0, 1x8 NVIDIA-H20)",
        "  async-vs-sync-fp8-sync-bf16 (bf16, token TIS C=2.0, 1x8 NVIDIA-H20)",
        f"  async-vs-sync-fp8-async-fp8 (blockwise-fp8, token TIS C=2.0, 1x8 NVIDIA-H20, {pool})",
        f"  async-vs-sync-fp8-async-bf16 (bf16, token TIS C=2.0, 1x8 NVIDIA-H20, {pool})",
    ]


def test_validate_accepts_the_kv_experiment_example(capsys: pytest.CaptureFixture[str]) -> None:
    """Four arms (weights, KV cache, both, neither), each checked as the job it becomes."""
    path = REPO / "examples" / "flashrlexperiment-kv.yaml"
    code, out, err = _run(["validate", str(path)], capsys)
    assert code == 0, err
    guard = "token TIS C=2.0, 1x8 NVIDIA-H20, guard FallbackToBF16"
    assert out.splitlines() == [
        f'{path}: valid FlashRLExperiment "fp8-weights-vs-kv-cache", 4 variants:',
        "  fp8-weights-vs-kv-cache-bf16 (bf16, token TIS C=2.0, 1x8 NVIDIA-H20)",
        f"  fp8-weights-vs-kv-cache-fp8-w (blockwise-fp8, {guard})",
        f"  fp8-weights-vs-kv-cache-fp8-kv (bf16 with fp8-e4m3 KV cache, {guard})",
        f"  fp8-weights-vs-kv-cache-fp8-w-kv (blockwise-fp8 with fp8-e4m3 KV cache, {guard})",
    ]


def test_validate_refuses_an_experiment_with_every_problem_at_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = """\
    spec:
      variants:
        - {name: a, spec: {rollout: {quantization: bf16}}}
        - {name: b, spec: {rollout: {quantization: bf16}}}
        - {name: c, spec: {data: {train: /data/x.parquet}}}
    """
    code, out, err = _run(["validate", _write(tmp_path, EXPERIMENT_HEAD + textwrap.dedent(spec))], capsys)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert any(line.startswith("spec.variants[2].spec.data.train: changes the data") for line in lines), err
    assert any(line.startswith("spec.variants[1]: runs exactly what variant 'a' runs") for line in lines), err


def test_validate_composes_each_variants_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = """\
    spec:
      template: {overrides: [trainer.no_such_key=1]}
      variants:
        - {name: a}
        - name: b
          allowSetupChanges: true
          spec: {rollout: {quantization: bf16}, overrides: [trainer.other_missing_key=2]}
    """
    code, _, err = _run(["validate", _write(tmp_path, EXPERIMENT_HEAD + textwrap.dedent(spec))], capsys)
    assert code == 2
    # Variant a inherits the template's list; b's list replaces it (lists are replaced, not merged).
    assert err.count("spec.template.overrides[0]") == 1, err
    assert "spec.variants[1].spec.overrides[0]" in err, err


@pytest.mark.parametrize(
    ("document", "verdict"),
    [
        (HEAD + "spec: {rollout: {quantization: channel-fp8}}\n", 'valid FlashRLJob "j" (channel-fp8, '),
        (EXPERIMENT_HEAD + "spec: {parallelism: 1}\n", 'valid FlashRLExperiment "cmp", 3 variants:'),
    ],
    ids=["job", "experiment"],
)
def test_validate_reads_standard_input(
    document: str, verdict: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(document))
    code, out, _ = _run(["validate", "-"], capsys)
    assert code == 0
    assert out.startswith(f"standard input: {verdict}")


@pytest.mark.parametrize(
    ("flag", "words"),
    [("--max-concurrent-reconciles=0", "at least 1"), ("--lease-duration=2", "at least 3 seconds")],
)
def test_operator_refuses_bounds_that_cannot_work_before_connecting(
    flag: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["operator", flag]) == EXIT_INVALID
    assert words in capsys.readouterr().err


def test_validate_and_the_operator_give_one_verdict_on_the_size_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """128 overrides of 505 list items each: past one job's check budget. ``flashrl validate`` says so at
    ``spec.overrides``, as the operator does, and composes nothing (verl's config is never loaded)."""
    from flashrl_operator.job import overrides as override_checks
    from flashrl_operator.job.verl_check import run_checks

    def composed(*_: Any, **__: Any) -> Any:
        raise AssertionError("a spec beyond the size budget was composed")

    monkeypatch.setattr("flashrl_jobs.verl_config.check_user_overrides", composed)
    monkeypatch.setattr(override_checks, "checked_in_sandbox", composed)
    big = [f"+data.x{i}=[" + ",".join(["0"] * 506) + "]" for i in range(128)]
    for overrides in (big, [*big[:127], "hydra.run.dir=/tmp"]):  # with a protected override too
        text = HEAD + yaml.safe_dump({"spec": {"overrides": overrides}})
        path = _write(tmp_path, text)
        job = load_job_file(path)
        validates = override_checks.override_problems(job, read_model_files=True)
        assert [str(p) for p in validates.problems] == run_checks(job, threading.Event())
        assert [p.path for p in validates.problems] == ["spec.overrides"]
        assert "more than the 1024" in validates.problems[0].message
        only_composed = override_checks.override_problems(job, start_up_checks=False)
        assert only_composed.problems == validates.problems
        code, out, err = _run(["validate", path], capsys)
        assert code == EXIT_INVALID and "valid" not in out
        items = sum(o.count(",") for o in overrides)
        assert err.startswith(f"spec.overrides: {items} list or dict items"), err


def test_a_verl_finding_naming_no_field_is_reported_at_the_overrides_that_reached_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl refused the merged configuration without naming a field (its finding is at ``spec``): the
    template's overrides are the free-form input that reached it, so it is reported there, once, not at
    ``spec.variants[i].spec.spec``; a variant with its own overrides gets it at its own."""
    from flashrl_api import Problem
    from flashrl_api.experiment import variant_field_path
    from flashrl_operator.cli import validate as validate_module
    from flashrl_operator.job.overrides import ConfigReport

    monkeypatch.setattr(
        validate_module,
        "override_problems",
        lambda job, **_: ConfigReport([Problem("spec", "verl 0.9.1: refused")]),
    )
    spec = """\
    spec:
      template: {overrides: [trainer.val_before_train=false]}
      variants:
        - {name: a, spec: {rollout: {quantization: bf16}}}
        - name: b
          allowSetupChanges: true
          spec: {rollout: {quantization: blockwise-fp8}, overrides: [trainer.val_before_train=true]}
    """
    code, _, err = _run(["validate", _write(tmp_path, EXPERIMENT_HEAD + textwrap.dedent(spec))], capsys)
    assert code == 2
    assert err.splitlines() == [
        "spec.template.overrides: verl 0.9.1: refused (in variant 'a')",
        "spec.variants[1].spec.overrides: verl 0.9.1: refused",
    ], err
    # Nothing set overrides: the variant's spec (or the template's, for a variant that changes nothing).
    assert variant_field_path(0, "spec", {"rollout": {}}, {}) == "spec.variants[0].spec"
    assert variant_field_path(0, "spec", {}, {}) == "spec.template"
    assert (
        variant_field_path(0, "spec.overrides[0]", {}, {"overrides": ["x=1"]}) == "spec.template.overrides[0]"
    )


def test_validate_composes_an_experiments_replicas_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replicas differ only in the seed, which composes alike: verl's checks run once per variant (each
    is a child process of seconds), and every run is still listed."""
    import flashrl_operator.cli.validate as validate

    composed: list[int] = []
    real = validate.override_problems

    def counted(job: Any, **kwargs: Any) -> Any:
        composed.append(job.spec.training.seed)
        return real(job, **kwargs)

    monkeypatch.setattr(validate, "override_problems", counted)
    spec = """\
    spec:
      replicas: 3
      variants:
        - {name: fp8}
        - {name: bf16, spec: {rollout: {quantization: bf16}}}
    """
    code, out, err = _run(["validate", _write(tmp_path, EXPERIMENT_HEAD + textwrap.dedent(spec))], capsys)
    assert code == 0, err
    assert len(composed) == 2, composed
    assert "2 variants × 3 replicas" in out.splitlines()[0]
    assert len(out.splitlines()) == 1 + 6
