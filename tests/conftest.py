"""Fixtures every test layer may use: the real control plane (:mod:`envtest`), started once per run.

The control plane is started lazily, by the first test that asks for it, and stopped at the end of the
run by its recorded process ids, also when tests failed. Without its binaries (``make tools`` builds them)
the tests that need it are skipped with that instruction, except under ``CI=true``, where they fail:
CI must never pass without the real API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envtest.audit import session_args
from envtest.control_plane import ControlPlane, require_binaries, running


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler, as processes on loopback."""
    require_binaries()
    root = Path(tmp_path_factory.mktemp("control-plane"))
    args, log = session_args(root / "audit")
    with running(root, apiserver_args=args) as plane:
        plane.audit_log = log
        yield plane
