"""``flashrl-launch`` without a Ray cluster: usage, config first, version skew, unreachable head."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api import load_job_file
from flashrl_jobs import contract
from flashrl_jobs.cli import build_parser, main
from flashrl_jobs.verl_args import verl_overrides


def write_job(path: Path, **spec: Any) -> Path:
    doc = {
        "apiVersion": "flashrl.dev/v1alpha1",
        "kind": "FlashRLJob",
        "metadata": {"name": "cli-test", "namespace": "ml"},
        "spec": {"resources": {"nodes": 1, "gpusPerNode": 2}, **spec},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(contract.SPEC_ENV, raising=False)
    monkeypatch.setenv(contract.TERMINATION_LOG_ENV, str(tmp_path / "termination-log"))


class RecordingServer:
    """A TCP listener that counts connections: proof that no Ray call was attempted."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def recorder() -> Iterator[RecordingServer]:
    server = RecordingServer()
    yield server
    server.sock.close()


def refused_before_ray(job: Path, recorder: RecordingServer) -> str:
    """``check`` refuses the job's config with EXIT_INVALID_CONFIG before any Ray call; the termination
    message it wrote beside the job."""
    code = main(["check", "--spec", str(job), "--ray-address", recorder.address])
    assert code == contract.EXIT_INVALID_CONFIG
    assert recorder.connections == 0
    return (job.parent / "termination-log").read_text()


def test_bad_override_fails_before_any_ray_call(
    tmp_path: Path, recorder: RecordingServer, capsys: pytest.CaptureFixture[str]
) -> None:
    job = write_job(
        tmp_path / "job.yaml", overrides=["trainer.test_freq=3", "algorithm.rollout_correction.bogus=1"]
    )
    code = main(["train", "--spec", str(job), "--ray-address", recorder.address, "--head-timeout", "600"])
    assert code == contract.EXIT_INVALID_CONFIG
    err = capsys.readouterr().err
    assert "spec.overrides[1]: algorithm.rollout_correction.bogus" in err
    assert recorder.connections == 0
    assert "algorithm.rollout_correction.bogus" in (tmp_path / "termination-log").read_text()


def test_removed_key_is_named_with_its_replacement(tmp_path: Path, recorder: RecordingServer) -> None:
    job = write_job(tmp_path / "job.yaml", overrides=["reward_model.overlong_buffer.len=4096"])
    message = refused_before_ray(job, recorder)
    assert "spec.overrides[0]: reward_model.overlong_buffer.len" in message
    assert "spec.training.overlongBuffer" in message


def test_no_address_is_refused_not_discovered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = write_job(tmp_path / "job.yaml")
    assert main(["check", "--spec", str(job)]) == contract.EXIT_USAGE
    assert "no Ray address" in capsys.readouterr().err


@pytest.mark.parametrize("address", ["auto", "ray://head:10001", "http://head:8265", "head"])
def test_discovery_and_url_addresses_are_refused(tmp_path: Path, address: str) -> None:
    job = write_job(tmp_path / "job.yaml")
    assert main(["check", "--spec", str(job), "--ray-address", address]) == contract.EXIT_USAGE
    assert "host:port" in (tmp_path / "termination-log").read_text()


def test_address_comes_from_ray_address_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorder: RecordingServer
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", recorder.address)
    assert build_parser().parse_args(["check"]).ray_address == recorder.address


def test_spec_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_parser().parse_args(["check"]).spec == contract.DEFAULT_SPEC_PATH
    monkeypatch.setenv(contract.SPEC_ENV, "/x/job.yaml")
    assert build_parser().parse_args(["train"]).spec == "/x/job.yaml"


def test_unreachable_head_fails_fast_with_its_exit_code(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    job = write_job(tmp_path / "job.yaml")
    code = main(["check", "--spec", str(job), "--ray-address", f"127.0.0.1:{port}", "--head-timeout", "1"])
    assert code == contract.EXIT_RAY_UNREACHABLE
    assert "unreachable" in (tmp_path / "termination-log").read_text()


def test_overrides_file_from_another_version_is_refused(tmp_path: Path, recorder: RecordingServer) -> None:
    job = write_job(tmp_path / "flashrljob.yaml")
    rendered = verl_overrides(load_job_file(job))
    (tmp_path / contract.OVERRIDES_FILE).write_text(json.dumps([*rendered[:-1], "trainer.some_old_key=1"]))
    message = refused_before_ray(job, recorder)
    assert "different flashrl versions" in message
    assert "trainer.some_old_key=1" in message


def test_invalid_spec_file_names_the_field(tmp_path: Path, recorder: RecordingServer) -> None:
    job = write_job(tmp_path / "job.yaml", rollout={"quantization": "int4"})
    assert "spec.rollout.quantization" in refused_before_ray(job, recorder)


def test_missing_spec_file(tmp_path: Path, recorder: RecordingServer) -> None:
    code = main(["check", "--spec", str(tmp_path / "absent.yaml"), "--ray-address", recorder.address])
    assert code == contract.EXIT_INVALID_CONFIG
    assert "cannot read" in (tmp_path / "termination-log").read_text()


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["check", "--help"]])
def test_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: flashrl-launch" in out
    assert "--entry-module" not in out
    if argv != ["--help"]:
        assert "--ray-address" in out and "--timeout" in out and "--spec" in out


def test_bad_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--timeout", "-5"])
    assert exit_info.value.code == contract.EXIT_USAGE
