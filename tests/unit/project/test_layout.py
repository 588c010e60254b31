"""The operator's folders are its layers: every folder has a place in the import contract and in
docs/architecture.md's picture, and no module sits outside a folder."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "operator" / "src" / "flashrl_operator"


def folders() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_no_module_sits_outside_a_folder() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"put {loose} in the folder of its layer (docs/architecture.md, Layers)"


def test_every_folder_has_a_place_in_the_layers_contract() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    [layers] = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    placed = {
        name.strip().removeprefix("flashrl_operator.")
        for layer in layers["layers"]
        for name in layer.split("|")
    }
    assert placed == folders()


def test_every_folder_is_in_the_architecture_picture() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    layers = text[text.index("## Layers") : text.index("## Where to change what")]
    missing = sorted(f for f in folders() if f" {f}/ " not in layers)
    assert missing == [], f"docs/architecture.md's Layers picture lacks {missing}"


def test_every_folder_says_what_it_is() -> None:
    import ast

    for folder in folders():
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
        assert doc, f"flashrl_operator/{folder}/__init__.py has no docstring"


UNIT = REPO / "tests" / "unit"
#: Unit-test folders for the packages outside flashrl_operator, and for the repository as a whole.
OTHER_TEST_FOLDERS = {"api": "flashrl_api", "jobs": "flashrl_jobs", "report": "flashrl_report", "project": ""}


def test_unit_tests_follow_the_packages() -> None:
    """tests/unit/ has one folder a package (or a flashrl_operator layer), and no test outside them."""
    loose = sorted(p.name for p in UNIT.glob("test_*.py"))
    assert loose == [], f"put {loose} in the folder of the package it tests (tests/unit/conftest.py)"
    for path in sorted(UNIT.rglob("test_*.py")):
        parts = path.relative_to(UNIT).parts[:-1]
        if parts[0] in OTHER_TEST_FOLDERS:
            assert len(parts) == 1, f"{path}: {parts[0]}/ has no sub-folders"
            continue
        package = PACKAGE.joinpath(*parts)
        assert (package / "__init__.py").is_file(), (
            f"{path.relative_to(REPO)} is in a folder that matches no package under flashrl_operator"
        )
    assert all((REPO / "jobs" / "src" / p).is_dir() for p in ("flashrl_api", "flashrl_jobs"))
    assert (REPO / "operator" / "src" / "flashrl_report").is_dir()
