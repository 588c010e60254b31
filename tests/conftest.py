"""Fixtures every test layer may use: the real control plane (:mod:`envtest`), started once per run.

The control plane is started lazily, by the first test that asks for it, and stopped at the end of the
run by its recorded process ids, also when tests failed, and when the run itself is ended by SIGTERM
(``timeout``, a CI runner's cancel): that signal is turned into an interrupt, so fixtures tear down.
Without its binaries (``make tools`` builds them) the tests that need it are skipped with that
instruction, except under ``CI=true``, where they fail: CI must never pass without the real API server.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from envtest.audit import session_args
from envtest.control_plane import ControlPlane, require_binaries, running


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM ends the run as Ctrl-C does: every fixture's teardown runs (Python's default for
    SIGTERM ends the process at once, leaving the control plane's processes behind)."""
    signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler, as processes on loopback."""
    require_binaries()
    root = Path(tmp_path_factory.mktemp("control-plane"))
    args, log = session_args(root / "audit")
    with running(root, apiserver_args=args) as plane:
        plane.audit_log = log
        yield plane
