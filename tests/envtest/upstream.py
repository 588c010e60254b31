"""Upstream projects' public test data, read where the project's own set-up installed it.

* The Prometheus Operator's CRDs (PodMonitor, ServiceMonitor, PrometheusRule, ...): from its Go module,
  ``.tools/crds/prometheus-operator`` (``make tools`` links it to the module cache).
* KubeRay's CRDs for the operator the e2e runs: from its Go module, ``.tools/crds/kuberay``
  (:func:`flashrl_devcluster.kuberay_kwok.apply_kuberay_crds`).
* KubeRay 1.7.0's CRDs (the pinned version the RayJob is rendered for): ``tests/data/crds/kuberay-v1.7.0``,
  kept in the repository because the Go module proxy this project's machines reach does not serve
  ray-operator v1.7.0 (see images/pins.yaml, ``e2e.kuberay_operator``).

A missing folder fails the test that needs it with the command that installs it; nothing skips quietly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flashrl_devcluster.control_plane import KUBERAY_PINNED_CRDS, TOOLS_CRDS
from flashrl_devcluster.kuberay_kwok import kuberay_operator_crds

__all__ = ["KUBERAY_PINNED_CRDS", "kuberay_operator_crds", "prometheus_operator_crds"]
#: Only these of the Prometheus Operator's CRDs: the kinds the chart renders.
PROMETHEUS_KINDS = ("podmonitors", "servicemonitors", "prometheusrules")


def _folder(path: Path, what: str) -> Path:
    if not path.is_dir():
        pytest.fail(f"{what} not found at {path}: run `make tools`")
    return path


def prometheus_operator_crds() -> list[Path]:
    """The CRD files of the Prometheus Operator kinds the chart renders."""
    folder = _folder(TOOLS_CRDS / "prometheus-operator", "the Prometheus Operator's CRDs")
    return [folder / f"monitoring.coreos.com_{kind}.yaml" for kind in PROMETHEUS_KINDS]
