"""An exception's name means one thing: no two exception classes of ours share a name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from flashrl_operator.client.errors import ApiError, ConflictError

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [ROOT / "jobs" / "src", ROOT / "operator" / "src"]


def _exception_classes() -> dict[str, list[str]]:
    """Class name (without a leading underscore) -> where it is defined, for classes whose bases look
    like exceptions (``...Error``, ``...Exception``, ``Exception``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
                if any(base.endswith(("Error", "Exception")) for base in bases):
                    found[node.name.lstrip("_")].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_two_exception_classes_share_a_name() -> None:
    classes = _exception_classes()
    assert "ConflictError" in classes, "the scan found no exception classes"
    assert {name: where for name, where in classes.items() if len(where) > 1} == {}


def test_conflict_error_is_the_api_servers_409() -> None:
    assert issubclass(ConflictError, ApiError)
    assert classes_named("ConflictError") == ["operator/src/flashrl_operator/client/errors.py"]


def classes_named(name: str) -> list[str]:
    return [where.rsplit(":", 1)[0] for where in _exception_classes().get(name, [])]
