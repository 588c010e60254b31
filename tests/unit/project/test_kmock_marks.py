"""kmock's emulator only where a test injects a fault the real API server cannot produce: every such
test says which fault (``kmock(reason=...)``), and docs/install.md lists exactly those tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
INTEGRATION = REPO / "tests" / "integration"
INSTALL = REPO / "docs" / "install.md"


def _kmock_reason(node: ast.expr) -> str | None:
    """The reason of a ``pytest.mark.kmock(...)`` expression; "" when it has none; None if not kmock."""
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call is not None else node
    if not (isinstance(target, ast.Attribute) and target.attr == "kmock"):
        return None
    if call is None:
        return ""
    for keyword in call.keywords:
        if keyword.arg == "reason":
            value = ast.literal_eval(keyword.value)
            return str(value)
    return ""


def kmock_tests() -> dict[str, str]:
    """``file`` (a whole module) or ``file::test`` → the reason its mark gives."""
    found: dict[str, str] = {}
    for path in sorted(INTEGRATION.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
            ):
                marks = stmt.value.elts if isinstance(stmt.value, ast.List) else [stmt.value]
                for mark in marks:
                    reason = _kmock_reason(mark)
                    if reason is not None:
                        found[path.name] = reason
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in stmt.decorator_list:
                    reason = _kmock_reason(decorator)
                    if reason is not None:
                        found[f"{path.name}::{stmt.name}"] = reason
    return found


def documented() -> set[str]:
    """The tests the kmock table of docs/install.md names (its first column)."""
    text = INSTALL.read_text()
    start = text.index("| test | the fault |")
    rows = text[start:].split("\n\n", 1)[0].splitlines()[2:]
    return {re.sub(r"`", "", row.split("|")[1]).strip() for row in rows}


def test_every_kmock_test_names_the_fault_it_injects() -> None:
    found = kmock_tests()
    assert found, "no kmock test found: the parser no longer sees the marks"
    missing = [name for name, reason in found.items() if len(reason.split()) < 4]
    assert not missing, f"kmock marks without a reason saying which fault: {missing}"


def test_the_install_guide_lists_exactly_the_kmock_tests() -> None:
    assert documented() == set(kmock_tests())
