"""The release workflow and its bookkeeping script (scripts/release_pins.py), without a registry."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from flashrl_api.pins import Pins

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "release.yaml"
PINS_TEXT = (REPO / "images" / "pins.yaml").read_text(encoding="utf-8")
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("release_pins", REPO / "scripts" / "release_pins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release_pins = _script()


def test_recorded_digests_pin_the_api_default_and_keep_the_file_as_it_was() -> None:
    text = release_pins.record(PINS_TEXT, {"operator": DIGEST_A, "trainer": DIGEST_B})
    pins = Pins.model_validate(yaml.safe_load(text))
    assert pins.images["operator"].digest == DIGEST_A
    assert pins.images["trainer"].reference.endswith(f":{pins.images['trainer'].tag}@{DIGEST_B}")
    # Only the two digest lines were added: comments and every other line are untouched.
    assert [
        line
        for line in text.splitlines()
        if not line.startswith("    digest: sha256:aaaa") and not line.startswith("    digest: sha256:bbbb")
    ] == PINS_TEXT.splitlines()
    # Recording again replaces instead of adding.
    again = release_pins.record(text, {"trainer": DIGEST_A})
    assert again.count("    digest: ") == text.count("    digest: ")
    assert Pins.model_validate(yaml.safe_load(again)).images["trainer"].digest == DIGEST_A


@pytest.mark.parametrize(
    ("digests", "message"),
    [({"operator": "sha256:short"}, "not a sha256 digest"), ({"python": DIGEST_A}, "not a released image")],
)
def test_bad_digests_are_refused(digests: dict[str, str], message: str) -> None:
    with pytest.raises(release_pins.ReleaseError, match=message):
        release_pins.record(PINS_TEXT, digests)


def test_the_tag_must_name_the_pinned_image_tag() -> None:
    tag = yaml.safe_load(PINS_TEXT)["images"]["operator"]["tag"]
    release_pins.check_tag(f"v{tag}", PINS_TEXT)
    with pytest.raises(release_pins.ReleaseError, match=r"update images/pins\.yaml first"):
        release_pins.check_tag("v99.0.0", PINS_TEXT)


def test_reference_comes_from_the_pins() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "release_pins.py"), "reference", "trainer"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    image = yaml.safe_load(PINS_TEXT)["images"]["trainer"]
    assert out == f"{image['repository']}:{image['tag']}"


def test_workflow_builds_pushes_and_records_both_images_from_the_pins() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert workflow[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    steps = workflow["jobs"]["images"]["steps"]
    run = "\n".join(step.get("run", "") for step in steps)
    assert "scripts/release_pins.py check-tag" in run
    assert "scripts/resolve_digests.py images/pins.yaml" in run
    for image in ("operator", "trainer"):
        assert f"python3 images/build.py {image}" in run
        assert f"{image}=${{{{ steps.{image}.outputs.digest }}}}" in run
    assert "scripts/release_pins.py record images/pins.yaml" in run
    # No image reference or version is written in the workflow itself.
    assert "ghcr.io" not in WORKFLOW.read_text(encoding="utf-8")
    assert workflow["permissions"]["packages"] == "write"
