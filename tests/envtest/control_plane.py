"""The real control plane for tests: :mod:`flashrl_devcluster.control_plane` (shared with
``make dev-cluster``), and what only tests do with it (skip, or fail under CI, without its binaries)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest

from flashrl_devcluster.control_plane import (
    CONTROLLERS,
    KWOK_CLUSTER,
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
    "KWOK_CLUSTER",
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


def require_binaries(names: Sequence[str] = REQUIRED, what: str = "the real control plane") -> None:
    """Skip the test when binaries ``what`` needs are missing (``make tools`` builds them), but fail
    under ``CI=true``: CI must never pass without the real API server (or KubeRay, or kwok)."""
    missing = missing_binaries(names)
    if missing:
        message = f"{what} needs {', '.join(missing)}: run `make tools`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
