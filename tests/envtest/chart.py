"""The chart on the real control plane: :mod:`flashrl_devcluster.chart`, shared with ``make dev-cluster``."""

from __future__ import annotations

from flashrl_devcluster.chart import (
    CHART,
    CRD_NAMES,
    DEFAULT_CLAIMS,
    NAMESPACE,
    RELEASE,
    apply_crd_dir,
    deployment,
    install,
    installed,
    ready_for_jobs,
    room_for_jobs,
    wait_crds,
)

__all__ = [
    "CHART",
    "CRD_NAMES",
    "DEFAULT_CLAIMS",
    "NAMESPACE",
    "RELEASE",
    "apply_crd_dir",
    "deployment",
    "install",
    "installed",
    "ready_for_jobs",
    "room_for_jobs",
    "wait_crds",
]
