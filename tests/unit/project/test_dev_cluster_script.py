"""``make dev-cluster``'s script (scripts/flashrl_devcluster): its operator listens on loopback only,
and the kubeconfigs it writes (tokens) are its owner's only from the first byte."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from flashrl_devcluster.control_plane import ControlPlane, write_private
from flashrl_devcluster.operator import operator_argv


def _no_chmod(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mode set after the write would leave a moment where others could open the file: forbid it."""

    def refused(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("chmod after writing: the file was readable by others for a moment")

    monkeypatch.setattr(os, "chmod", refused)
    monkeypatch.setattr(Path, "chmod", refused)


def test_a_private_file_is_created_0600_not_chmod_ed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_chmod(monkeypatch)
    old = os.umask(0o000)  # the most permissive umask: the mode given at creation is all that protects it
    try:
        path = tmp_path / "kubeconfig"
        write_private(path, "token")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text() == "token"
        # An existing file that others could read is replaced, not reused with its mode.
        loose = tmp_path / "loose"
        loose.write_text("old")
        monkeypatch.undo()
        loose.chmod(0o644)
        _no_chmod(monkeypatch)
        write_private(loose, "new")
        assert (stat.S_IMODE(loose.stat().st_mode), loose.read_text()) == (0o600, "new")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kubeconfig", "loose"]  # no scratch left
    finally:
        os.umask(old)


def test_the_control_plane_writes_its_kubeconfigs_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane = ControlPlane(tmp_path, api_port=6443)
    plane.pki.mkdir()
    plane.ca.write_text("not a real certificate")
    _no_chmod(monkeypatch)
    old = os.umask(0o000)
    try:
        plane._write_kubeconfig(plane.kubeconfig, "admin", "secret-token")
        tokens = plane._tokens()
    finally:
        os.umask(old)
    assert stat.S_IMODE(plane.kubeconfig.stat().st_mode) == 0o600
    assert json.loads(plane.kubeconfig.read_text())["users"][0]["user"]["token"] == "secret-token"
    assert stat.S_IMODE((plane.pki / "tokens.csv").stat().st_mode) == 0o600
    assert set(tokens) == {"admin", "kcm", "scheduler", "operator"}


def test_the_dev_cluster_operator_listens_on_loopback_only() -> None:
    chart = [
        "--metrics-port=8080",
        "--health-port=8081",
        "--bind-address=0.0.0.0",
        "--log-format=json",
        "--leader-election",
    ]
    argv = operator_argv(chart, 41000, 41001)
    assert "--bind-address=127.0.0.1" in argv
    assert not any(a.startswith("--bind-address=") and a != "--bind-address=127.0.0.1" for a in argv)
    assert "--leader-election" in argv
    assert (argv[-4], argv[-3]) == ("--metrics-port=41000", "--health-port=41001")


def test_play_says_what_it_waits_for_at_once_and_when_it_changes(capsys: pytest.CaptureFixture[str]) -> None:
    from flashrl_devcluster.__main__ import _job_waiting_for, _Waiting

    waiting = _Waiting()
    status = {"phase": "Starting", "reason": "PodUnschedulable", "message": "0/1 nodes are available"}
    waiting.now(_job_waiting_for("j", status))
    waiting.now(_job_waiting_for("j", status))  # the same: not said again before SAY_EVERY_S
    waiting.now(_job_waiting_for("j", {"phase": "Running"}))
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "dev-cluster: waiting for j to end: it is Starting (PodUnschedulable: 0/1 nodes are available)",
        "dev-cluster: waiting for j to end: it is Running",
    ]
    assert not waiting.stalled()
