"""Build one of the project's images with every reference taken from images/pins.yaml.

    python3 images/build.py operator|trainer|trainer-cpu [--tag REF] [--dry-run]

The Dockerfiles declare their base image and versions as build arguments with no defaults; this
script is the only thing that fills them, from the pins file, so no Dockerfile carries a copy. A base
whose digest is still ``unresolved`` is refused (releases must be reproducible) unless
``ALLOW_UNRESOLVED=1`` is set, in which case the base is pulled by tag (used by the CI e2e).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
PINS = REPO / "images" / "pins.yaml"
UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class ImageRecipe:
    """What an image is built from: its Dockerfile, its base (a key of ``bases``) and its build args."""

    dockerfile: str
    base: str
    #: Build args besides BASE_IMAGE, mapped to the key of ``versions`` that fills them.
    versions: tuple[tuple[str, str], ...]


RECIPES: dict[str, ImageRecipe] = {
    "operator": ImageRecipe("images/operator/Dockerfile", "python", (("VERL_VERSION", "verl"),)),
    "trainer": ImageRecipe(
        "images/trainer/Dockerfile", "verl-sglang", (("VERL_VERSION", "verl"), ("RAY_VERSION", "ray"))
    ),
    # The same Dockerfile on verl's vLLM image: the trainer image of spec.rollout.engine vllm.
    "trainer-vllm": ImageRecipe(
        "images/trainer/Dockerfile", "verl-vllm", (("VERL_VERSION", "verl"), ("RAY_VERSION", "ray"))
    ),
    "trainer-cpu": ImageRecipe(
        "images/trainer-cpu/Dockerfile", "python", (("VERL_VERSION", "verl"), ("RAY_VERSION", "ray"))
    ),
}


class BuildRefusedError(Exception):
    """The pins do not allow this build; the message says why and what to do."""


def load_pins(path: Path = PINS) -> dict[str, Any]:
    """The parsed pins file."""
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def image_tag(name: str, pins: dict[str, Any]) -> str:
    """The reference the built image is tagged with (the CPU trainer is the trainer's ``-cpu`` variant)."""
    if name == "trainer-cpu":
        trainer = pins["images"]["trainer"]
        return f"{trainer['repository']}:{trainer['tag']}-cpu"
    image = pins["images"][name]
    return f"{image['repository']}:{image['tag']}"


def base_reference(base: dict[str, Any], base_key: str, allow_unresolved: bool) -> str:
    """``repository:tag@digest``; tag only when the digest is unresolved and that is explicitly allowed."""
    tag = str(base["tag"])
    if tag == "latest":
        raise BuildRefusedError(f"bases.{base_key}.tag is 'latest': pin an exact tag in images/pins.yaml")
    digest = str(base.get("digest") or UNRESOLVED)
    if digest == UNRESOLVED:
        if not allow_unresolved:
            raise BuildRefusedError(
                f"bases.{base_key}.digest is unresolved in images/pins.yaml: run `make resolve-digests` "
                "(needs registry access), or set ALLOW_UNRESOLVED=1 for a throwaway build by tag"
            )
        return f"{base['repository']}:{tag}"
    if not digest.startswith("sha256:") or len(digest) != len("sha256:") + 64:
        raise BuildRefusedError(f"bases.{base_key}.digest {digest!r} is not a sha256 digest")
    return f"{base['repository']}:{tag}@{digest}"


def build_args(name: str, pins: dict[str, Any], allow_unresolved: bool) -> dict[str, str]:
    """Every build argument of the image's Dockerfile, from the pins."""
    recipe = RECIPES[name]
    args = {"BASE_IMAGE": base_reference(pins["bases"][recipe.base], recipe.base, allow_unresolved)}
    for arg, key in recipe.versions:
        args[arg] = str(pins["versions"][key])
    return args


def build_command(
    name: str, pins: dict[str, Any], allow_unresolved: bool, tag: str | None = None
) -> list[str]:
    """The ``docker build`` argument list (context: the repository root)."""
    recipe = RECIPES[name]
    command = ["docker", "build", "--file", recipe.dockerfile, "--tag", tag or image_tag(name, pins)]
    for key, value in build_args(name, pins, allow_unresolved).items():
        command += ["--build-arg", f"{key}={value}"]
    return [*command, "."]


def main(argv: list[str] | None = None) -> int:
    """Print the build command, then run it unless ``--dry-run``."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("image", choices=sorted(RECIPES))
    parser.add_argument("--tag", help="tag the result with this reference instead of the pinned one")
    parser.add_argument("--dry-run", action="store_true", help="print the docker command only")
    args = parser.parse_args(argv)
    allow_unresolved = os.environ.get("ALLOW_UNRESOLVED") == "1"
    try:
        command = build_command(args.image, load_pins(), allow_unresolved, args.tag)
    except BuildRefusedError as exc:
        print(f"build.py: refusing to build {args.image}: {exc}", file=sys.stderr)
        return 2
    if allow_unresolved and "@sha256:" not in command[command.index("--build-arg") + 1]:
        print(f"build.py: WARNING: {args.image} is built from a base pulled by tag only", file=sys.stderr)
    print(shlex.join(command), flush=True)
    if args.dry_run:
        return 0
    return subprocess.run(command, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
