"""Fixtures for the chart tests (helpers live in chart_support.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import yaml
from chart_support import PINS_FILE, require_crd_file, template


@pytest.fixture(scope="session")
def render() -> Callable[..., list[dict[str, Any]]]:
    """Render with ``--set`` values; the CRD file must exist unless crds.enabled=false is passed."""

    def _render(values: dict[str, str] | None = None, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
        if (values or {}).get("crds.enabled") != "false":
            require_crd_file()
        return template(values, extra)

    return _render


@pytest.fixture(scope="session")
def default_docs(render: Callable[..., list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The chart rendered with its default values."""
    return render()


@pytest.fixture(scope="session")
def pins() -> dict[str, Any]:
    """The project's pins file."""
    data: dict[str, Any] = yaml.safe_load(PINS_FILE.read_text(encoding="utf-8"))
    return data
