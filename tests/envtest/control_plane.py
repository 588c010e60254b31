"""The real control plane for tests: :mod:`flashrl_devcluster.control_plane` (shared with
``make dev-cluster``), and what only tests do with it (skip, or fail under CI, without its binaries)."""

from __future__ import annotations

import os

import pytest

from flashrl_devcluster.control_plane import (
    CONTROLLERS,
    OPERATOR_USER,
    READY_DEADLINE_S,
    REPO,
    REQUIRED,
    TOOLS,
    ControlPlane,
    ControlPlaneError,
    Process,
    find_binary,
    free_ports,
    missing_binaries,
    running,
)

__all__ = [
    "CONTROLLERS",
    "OPERATOR_USER",
    "READY_DEADLINE_S",
    "REPO",
    "REQUIRED",
    "TOOLS",
    "ControlPlane",
    "ControlPlaneError",
    "Process",
    "find_binary",
    "free_ports",
    "missing_binaries",
    "require_binaries",
    "running",
]


def require_binaries() -> None:
    """Skip the test when the control plane's binaries are missing (``make tools`` builds them), but
    fail under ``CI=true``: CI must never pass without the real API server."""
    missing = missing_binaries()
    if missing:
        message = f"the real control plane needs {', '.join(missing)}: run `make tools`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
