"""Release bookkeeping in images/pins.yaml, the one record of every image reference.

    python3 scripts/release_pins.py check-tag v0.1.0            # the git tag names the pinned image tag
    python3 scripts/release_pins.py reference operator           # repository:tag to build and push
    python3 scripts/release_pins.py record images/pins.yaml operator=sha256:... trainer=sha256:...

The release workflow (.github/workflows/release.yaml) builds and pushes ``images.operator`` and
``images.trainer`` at the tag the pins give, then records the digests the registry assigned as
``images.<name>.digest``; from then on the API's default trainer image and the chart's operator image
are pinned by digest. Standard library only (it runs before anything is installed); the file is edited
line by line so its comments and layout stay.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PINS = REPO / "images" / "pins.yaml"
#: The images this project builds and releases (keys of ``images`` in the pins).
RELEASED = ("operator", "trainer")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ReleaseError(Exception):
    """The pins and the release disagree; the message says how."""


def _images_section(lines: list[str]) -> tuple[int, int]:
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "images:"), None)
    if start is None:
        raise ReleaseError("the pins file has no top-level images: section")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith((" ", "#"))),
        len(lines),
    )
    return start, end


def image_fields(text: str) -> dict[str, dict[str, str]]:
    """``images.<name>.{repository,tag,digest}`` as written (quotes removed)."""
    lines = text.splitlines()
    start, end = _images_section(lines)
    found: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in lines[start + 1 : end]:
        if re.match(r"^  [A-Za-z0-9_.-]+:\s*$", line):
            current = found.setdefault(line.strip().rstrip(":"), {})
        elif current is not None and (m := re.match(r"^    (repository|tag|digest):\s*(.*)$", line)):
            current[m[1]] = m[2].split(" #", 1)[0].strip().strip("\"'")
    return found


def reference(name: str, text: str) -> str:
    """``repository:tag`` of a released image."""
    fields = image_fields(text).get(name)
    if not fields or "repository" not in fields or "tag" not in fields:
        raise ReleaseError(f"images.{name} lacks repository or tag")
    return f"{fields['repository']}:{fields['tag']}"


def check_tag(tag: str, text: str) -> None:
    """A release tag ``v<version>`` must name the tag every released image is pinned at."""
    version = tag.removeprefix("refs/tags/").removeprefix("v")
    fields = image_fields(text)
    wrong = [
        f"images.{n}.tag is {fields.get(n, {}).get('tag')!r}"
        for n in RELEASED
        if fields.get(n, {}).get("tag") != version
    ]
    if wrong:
        raise ReleaseError(
            f"tag {tag} releases {version!r}, but {'; '.join(wrong)}: update images/pins.yaml first"
        )


def record(text: str, digests: dict[str, str]) -> str:
    """The pins text with ``images.<name>.digest`` set (added after ``tag`` when absent)."""
    lines = text.splitlines(keepends=True)
    start, end = _images_section([line.rstrip("\n") for line in lines])
    for name, digest in digests.items():
        if name not in RELEASED:
            raise ReleaseError(f"{name} is not a released image ({', '.join(RELEASED)})")
        if not _DIGEST.match(digest):
            raise ReleaseError(f"{name}: {digest!r} is not a sha256 digest")
        header = next((i for i in range(start + 1, end) if lines[i].rstrip() == f"  {name}:"), None)
        if header is None:
            raise ReleaseError(f"images.{name} is not in the pins file")
        block_end = next(
            (i for i in range(header + 1, end) if not lines[i].startswith("    ") and lines[i].strip()), end
        )
        digest_line = next(
            (i for i in range(header + 1, block_end) if lines[i].startswith("    digest:")), None
        )
        new = f"    digest: {digest}\n"
        if digest_line is not None:
            lines[digest_line] = new
        else:
            tag_line = next(
                (i for i in range(header + 1, block_end) if lines[i].startswith("    tag:")), None
            )
            if tag_line is None:
                raise ReleaseError(f"images.{name} has no tag")
            lines.insert(tag_line + 1, new)
            end += 1
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; one line on stderr and exit 1 on any disagreement."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check-tag").add_argument("tag")
    commands.add_parser("reference").add_argument("image", choices=RELEASED)
    rec = commands.add_parser("record")
    rec.add_argument("pins", type=Path)
    rec.add_argument("digests", nargs="+", metavar="IMAGE=sha256:...")
    args = parser.parse_args(argv)
    try:
        if args.command == "check-tag":
            check_tag(args.tag, PINS.read_text(encoding="utf-8"))
        elif args.command == "reference":
            print(reference(args.image, PINS.read_text(encoding="utf-8")))
        else:
            pairs = dict(item.split("=", 1) for item in args.digests if "=" in item)
            if len(pairs) != len(args.digests):
                raise ReleaseError("digests are given as IMAGE=sha256:...")
            args.pins.write_text(record(args.pins.read_text(encoding="utf-8"), pairs), encoding="utf-8")
            for name, digest in pairs.items():
                print(f"images.{name}.digest: {digest}")
    except (OSError, ReleaseError) as exc:
        print(f"release_pins: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
