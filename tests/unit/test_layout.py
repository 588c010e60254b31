"""The operator's folders are its layers: every folder has a place in the import contract and in
docs/architecture.md's picture, and no module sits outside a folder."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
