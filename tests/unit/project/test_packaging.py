"""What the distribution says about itself: its license file, classifiers, project URLs and version; and
how the Makefile installs it."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from flashrl_operator.cli import DISTRIBUTION, main

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_license_file_is_the_apache_2_license_pyproject_names() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it


def test_classifiers_and_project_urls() -> None:
    classifiers = PROJECT["classifiers"]
    assert "Programming Language :: Python :: 3.11" in classifiers
    # PEP 639: an SPDX license expression and a License classifier may not both be given.
    assert not [c for c in classifiers if c.startswith("License ::")]
    urls = PROJECT["urls"]
    assert {"Homepage", "Source", "Issues", "Documentation"} <= set(urls)
    assert all(url.startswith("https://") for url in urls.values())


def test_version_prints_the_installed_distributions_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert PROJECT["name"] == DISTRIBUTION
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"flashrl {version(DISTRIBUTION)}"


def test_make_install_after_make_demo_leaves_pip_nothing_to_complain_about() -> None:
    """`make demo` installs verl without its dependencies (it needs verl's config only); pip's resolver,
    run by `make install` afterwards, would print an ERROR block about them. Both install paths remove
    verl before they install the project, and install it again, without dependencies, after."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("$(STAMP): ", "$(DEMO_STAMP): "):
        recipe = makefile[makefile.index(target) :].split("\n\n", 1)[0]
        uninstall = recipe.index("pip uninstall --quiet --yes flashrl verl")
        project = recipe.index("pip install --quiet -e '.[")
        verl = recipe.index("pip install --quiet --no-deps 'verl==")
        assert uninstall < project < verl, target
