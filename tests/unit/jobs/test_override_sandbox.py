"""Issue 18: a job's overrides never make the validating process run, read, write or fetch anything.

Three locks, each tested on its own: overrides that name code or reach the reserved environment are
refused with their field path (``flashrl_jobs.override_rules``); Hydra instantiates only verl's config
dataclasses while verl's checks run (``verl_checks.instantiation_guard``), even when the first lock is
removed; and the checks run in a child process whose audit hook refuses files outside Python's import
roots, writes, sockets and new processes (``flashrl_jobs.verl_child``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from instantiation_probe import SECRET, probe_overrides, traps

from flashrl_api.manifest import parse_job
from flashrl_jobs.override_rules import INSTANTIATION_KEYS, unsafe_override_problems
from flashrl_operator.cli import EXIT_INVALID, main

REPO = Path(__file__).resolve().parents[3]
HEAD = "apiVersion: flashrl.dev/v1alpha1\nkind: FlashRLJob\nmetadata:\n  name: probe\n"


def _example(overrides: list[str]) -> dict[str, object]:
    raw = yaml.safe_load((REPO / "examples" / "flashrljob.yaml").read_text(encoding="utf-8"))
    raw["spec"]["overrides"] = overrides
    return raw


# --- the first lock: refused before anything composes ----------------------------------------------


@pytest.mark.parametrize(
    "override",
    [
        "+a.b={_target_:builtins.open}",
        "a.b={_target_:builtins.open}",
        "++a.b={_target_:builtins.open}",
        "a.b={c:{d:[1,{_args_:[1]}]}}",
        "a.b=[[{_recursive_:false}]]",
        "a.b=choice(1,{_convert_:all})",
        "a._target_=builtins.open",
        "+a._partial_=true",
    ],
)
def test_every_instantiation_key_anywhere_is_refused(override: str) -> None:
    [(index, message)] = unsafe_override_problems(["trainer.test_freq=3", override])
    assert index == 1
    assert any(key in message for key in INSTANTIATION_KEYS) or "instantiation key" in message
    assert "builtins" not in message  # the rule and the key, never the value


def test_the_word_as_plain_data_is_not_refused() -> None:
    assert unsafe_override_problems(["trainer.project_name='_target_'"]) == []


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("++ray_kwargs.ray_init.runtime_env.env_vars.LD_PRELOAD=/x.so", "LD_PRELOAD"),
        ("+ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES"),
        ("+ray_kwargs.ray_init.runtime_env.env_vars.FLASHRL_SPEC=/x", "FLASHRL_SPEC"),
        ("+ray_kwargs.ray_init.runtime_env.env_vars.RAY_IP=1.2.3.4", "RAY_IP"),
        ("+ray_kwargs.ray_init.runtime_env.env_vars={LD_PRELOAD:/x.so}", "LD_PRELOAD"),
        ("ray_kwargs={ray_init:{runtime_env:{env_vars:{FLASHRL_ATTEMPT:9}}}}", "FLASHRL_ATTEMPT"),
        ("+ray_kwargs.ray_init.address=10.0.0.1:6379", "address"),
        ("ray_kwargs.ray_init={address:evil:6379}", "address"),
    ],
)
def test_the_reserved_environment_is_refused_through_runtime_env(override: str, words: str) -> None:
    [(index, message)] = unsafe_override_problems([override])
    assert index == 0 and words in message


def test_an_ordinary_runtime_env_variable_is_allowed() -> None:
    assert unsafe_override_problems(["+ray_kwargs.ray_init.runtime_env.env_vars.MY_FLAG=1"]) == []


def test_flashrl_validate_refuses_the_probe_at_each_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with traps(tmp_path) as t:
        overrides = probe_overrides(t)
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(_example(overrides)), encoding="utf-8")
        code = main(["validate", str(path)])
        out, err = capsys.readouterr()
        assert code == EXIT_INVALID
        for index in range(len(overrides)):
            assert f"spec.overrides[{index}]: " in err, err
        t.assert_untouched(out, err)


def test_the_probe_is_refused_in_a_flashrl_validate_process(tmp_path: Path) -> None:
    with traps(tmp_path) as t:
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(_example(probe_overrides(t))), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "flashrl_operator.cli", "validate", str(path)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            check=False,
        )
        assert done.returncode == EXIT_INVALID, done.stderr
        assert "Traceback" not in done.stderr
        t.assert_untouched(done.stdout, done.stderr)


# --- the second lock: Hydra instantiates only verl's config classes -------------------------------


def test_with_the_first_lock_removed_the_guard_still_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flashrl_jobs import verl_config

    monkeypatch.setattr(verl_config, "protected_key_problems", lambda _overrides: [])
    with traps(tmp_path) as t:
        # The node verl converts to its RolloutConfig now holds the probe.
        job = parse_job(_example([probe_overrides(t)[0], probe_overrides(t)[2]]))
        result = verl_config.check_config(job, model_files=False)
        text = "\n".join(str(p) for p in result.problems)
        assert "instantiate something other than verl's config classes" in text, text
        t.assert_untouched(text, "\n".join(result.skipped))


def test_the_guard_refuses_every_way_to_call() -> None:
    import hydra.utils

    from flashrl_jobs.verl_checks import InstantiationRefusedError, instantiation_guard
    from flashrl_jobs.verl_import import verl_sandbox

    with verl_sandbox(), instantiation_guard():
        for config in (
            {"_target_": "os.getcwd"},
            {"_target_": "verl.utils.config.omega_conf_to_dataclass"},  # in verl, not a dataclass
            {"x": {"_target_": "builtins.open", "_args_": ["/etc/hostname"]}},
            {"_target_": "verl.trainer.config.AlgoConfig", "_partial_": True},
        ):
            with pytest.raises(Exception) as caught:
                hydra.utils.instantiate(config)
            chain = [caught.value, caught.value.__cause__, caught.value.__context__]
            assert any(isinstance(e, InstantiationRefusedError) for e in chain), config
        # verl's own config classes still instantiate.
        assert type(
            hydra.utils.instantiate({"_target_": "verl.trainer.config.KLControlConfig"})
        ).__name__ == ("KLControlConfig")
        for call in (hydra.utils.call, hydra.utils.get_method, hydra.utils.get_object, hydra.utils.get_class):
            with pytest.raises(InstantiationRefusedError):
                call("os.getcwd")
    # Restored afterwards.
    assert hydra.utils.get_method("os.getcwd") is os.getcwd


# --- the third lock: the child process -------------------------------------------------------------


def test_the_checks_run_in_a_child_and_answer_as_before() -> None:
    from flashrl_jobs.verl_child import check_config_isolated

    job = parse_job(_example(["actor_rollout_ref.actor.loss_agg_mode=seq-max"]))
    problems, _skipped = check_config_isolated(job)
    assert [p.path for p in problems] == ["spec.overrides[0]"]
    assert "Invalid loss_agg_mode: seq-max" in problems[0].message


def test_a_child_that_overruns_its_time_is_reported_in_fixed_words() -> None:
    from flashrl_jobs.verl_child import VerlChildError, check_config_isolated

    job = parse_job(_example([]))
    with pytest.raises(
        VerlChildError, match=r"did not finish within their time budget of 0 s in their sandbox"
    ):
        check_config_isolated(job, timeout=0.01)


#: A torch that does at import what the real one does through dill: ask for the temporary directory,
#: which test-writes a file there, and fail when that write does.
_TEMPDIR_TORCH = textwrap.dedent(
    """
    import tempfile
    tempfile.gettempdir()
    with open(tempfile.gettempdir() + "/probe", "wb") as f:
        f.write(b"x")
    """
)


def test_the_preload_may_write_its_temporary_files_before_file_growth_is_forbidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where torch (so dill) is installed, its import writes in the temporary directory: that happens
    before RLIMIT_FSIZE is lowered, in the child's own working directory, and the checks then answer."""
    from flashrl_jobs.verl_child import check_config_isolated

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(_TEMPDIR_TORCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Before the fix the child died on that write (exit code 1) and no check answered.
    problems, _skipped = check_config_isolated(parse_job(_example([])))
    assert all(p.path.startswith("spec") for p in problems)
    assert (tmp_path / "probe").exists() is False  # the probe went to the child's own directory


def test_a_preload_that_fails_is_reported_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flashrl_jobs.verl_child import VerlChildError, check_config_isolated

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise FileNotFoundError('No usable temporary directory found')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(VerlChildError) as raised:
        check_config_isolated(parse_job(_example([])))
    assert str(raised.value) == (
        "verl's checks could not start in their sandbox: importing torch failed "
        "(FileNotFoundError: No usable temporary directory found)"
    )


def test_a_cancelled_check_kills_its_child() -> None:
    """Issue 33: an operator that stops, or a check nobody waits for, does not leave a child running."""
    import threading

    from flashrl_jobs.verl_child import CheckCancelledError, check_config_isolated

    job = parse_job(_example([]))
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CheckCancelledError):
        check_config_isolated(job, cancel=cancel)


_HOOKED = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys
    sys.path[:] = json.loads(sys.argv[1])
    from flashrl_jobs.verl_child import _audit_hook, _import_roots, _set_limits
    secret, forbidden, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
    _set_limits()
    sys.addaudithook(_audit_hook(_import_roots()))
    attempts = {
        "read": lambda: open(secret).read(),
        "write": lambda: open(forbidden, "w").write("x"),
        "connect": lambda: socket.create_connection(("127.0.0.1", port), timeout=5),
        "process": lambda: subprocess.run(["true"], check=False),
        "system": lambda: os.system("true"),
        "listdir": lambda: os.listdir(os.path.dirname(secret)),
        "import": lambda: __import__("json.tool"),
    }
    outcome = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            outcome[name] = "done"
        except Exception as exc:
            outcome[name] = type(exc).__name__
    sys.stdout.write(json.dumps(outcome))
    """
)


def test_the_childs_audit_hook_refuses_files_sockets_and_processes(tmp_path: Path) -> None:
    with traps(tmp_path) as t:
        port = t.url.split(":")[2].split("/")[0]
        done = subprocess.run(
            [
                sys.executable,
                "-I",
                "-B",
                "-c",
                _HOOKED,
                json.dumps(sys.path),
                str(t.secret),
                str(t.forbidden),
                port,
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            check=False,
        )
        outcome = json.loads(done.stdout)
        refused = {k for k, v in outcome.items() if v == "SandboxRefusalError"}
        assert refused == {"read", "write", "connect", "process", "system", "listdir"}, outcome
        assert outcome["import"] == "done"  # Python's own files stay readable
        t.assert_untouched(done.stdout, done.stderr)
    assert SECRET not in done.stderr
