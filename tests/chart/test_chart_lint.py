"""`helm lint --strict` and `helm package` on the chart as committed."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import yaml
from chart_support import CHART, PINS_FILE, require_crd_file, run_helm

pytestmark = pytest.mark.chart


def test_lint_strict_passes() -> None:
    require_crd_file()
    proc = run_helm("lint", "--strict", str(CHART), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_lint_strict_passes_namespace_scoped_with_service_monitor() -> None:
    require_crd_file()
    proc = run_helm(
        "lint",
        "--strict",
        str(CHART),
        "--set",
        "watchNamespaces={team-a,team-b}",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_package_follows_the_pins_symlink(tmp_path: Path) -> None:
    """The packaged chart carries the pins file's content (not a dangling link) and the CRD."""
    require_crd_file()
    assert (CHART / "pins.yaml").is_symlink(), (
        "charts/flashrl-operator/pins.yaml must link to images/pins.yaml"
    )
    run_helm("package", str(CHART), "--destination", str(tmp_path))
    chart_meta = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    archive = tmp_path / f"{chart_meta['name']}-{chart_meta['version']}.tgz"
    with tarfile.open(archive) as tar:
        member = tar.getmember("flashrl-operator/pins.yaml")
        assert member.isfile(), "helm package must store pins.yaml as a regular file"
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert extracted.read().decode() == PINS_FILE.read_text(encoding="utf-8")
        names = tar.getnames()
    assert "flashrl-operator/files/crds/flashrljobs.flashrl.dev.yaml" in names
    assert "flashrl-operator/files/crds/flashrlexperiments.flashrl.dev.yaml" in names
    assert "flashrl-operator/values.schema.json" in names


def test_packaged_chart_renders_the_same_image(tmp_path: Path) -> None:
    """Rendering from the .tgz (as users install it) still finds the pinned image."""
    require_crd_file()
    run_helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("*.tgz")
    packaged = run_helm("template", "frl", str(archive), "--show-only", "templates/deployment.yaml").stdout
    source = run_helm("template", "frl", str(CHART), "--show-only", "templates/deployment.yaml").stdout
    assert packaged == source
