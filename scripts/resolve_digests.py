"""Fill in the ``unresolved`` base-image digests of images/pins.yaml from the registries' v2 API.

    python3 scripts/resolve_digests.py images/pins.yaml [--refresh] [--registry URL]

For each ``bases.<name>`` whose digest is ``unresolved`` (every base with ``--refresh``) it asks the
image's registry for the manifest digest of ``repository:tag`` (the multi-architecture index when
there is one) and writes it into the file in place, keeping comments and layout. Standard library
only, so it runs before anything is installed; it needs registry access. Docker Hub's anonymous token
flow is followed automatically. ``--registry`` sends every request to one base URL (a mirror, or a
local test registry).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

UNRESOLVED = "unresolved"
TIMEOUT_SECONDS = 30
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


class ResolveError(Exception):
    """A digest could not be obtained; the message says which image and why."""


@dataclass(frozen=True)
class Base:
    """One ``bases`` entry of the pins file, with the line numbers of its fields."""

    name: str
    repository: str
    tag: str
    digest: str
    digest_line: int


def _value(line: str) -> str:
    raw = line.split(":", 1)[1].split(" #", 1)[0].strip()
    return raw.strip("\"'")


def parse_bases(text: str) -> list[Base]:
    """Read the ``bases:`` section line by line (so the file can be rewritten without losing comments)."""
    lines = text.splitlines()
    bases: list[Base] = []
    in_bases = False
    current: dict[str, str] = {}
    digest_line = -1

    def flush() -> None:
        if current:
            missing = {"name", "repository", "tag", "digest"} - current.keys()
            if missing:
                raise ResolveError(f"bases.{current.get('name', '?')} lacks {', '.join(sorted(missing))}")
            bases.append(
                Base(current["name"], current["repository"], current["tag"], current["digest"], digest_line)
            )

    for number, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            if in_bases:
                flush()
                current = {}
            in_bases = line.startswith("bases:")
            continue
        if not in_bases:
            continue
        if re.match(r"^  [A-Za-z0-9_.-]+:\s*$", line):
            flush()
            current = {"name": line.strip().rstrip(":")}
        elif re.match(r"^    (repository|tag|digest):", line):
            key = line.strip().split(":", 1)[0]
            current[key] = _value(line)
            if key == "digest":
                digest_line = number
    if in_bases:
        flush()
    return bases


def registry_endpoint(repository: str, override: str | None) -> tuple[str, str]:
    """``(base URL, repository path)`` for an image repository such as docker.io/library/python."""
    host, _, path = repository.partition("/")
    if "." not in host and ":" not in host and host != "localhost":
        host, path = "docker.io", repository
    if host == "docker.io":
        host = "registry-1.docker.io"
        if "/" not in path:
            path = f"library/{path}"
    return (override.rstrip("/") if override else f"https://{host}"), path


def _bearer_token(challenge: str) -> str:
    """Follow a ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` challenge anonymously."""
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", "")
    if not challenge.lower().startswith("bearer") or not realm:
        raise ResolveError(f"unsupported registry authentication challenge: {challenge!r}")
    url = f"{realm}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (registry URL)
        body = json.loads(response.read())
    token = body.get("token") or body.get("access_token")
    if not token:
        raise ResolveError(f"the token endpoint {realm} returned no token")
    return str(token)


def manifest_digest(repository: str, tag: str, registry: str | None = None) -> str:
    """The digest the registry serves for ``repository:tag`` (an index when the image is multi-arch)."""
    base_url, path = registry_endpoint(repository, registry)
    url = f"{base_url}/v2/{path}/manifests/{urllib.parse.quote(tag)}"
    headers = {"Accept": MANIFEST_TYPES}
    for attempt in range(2):
        request = urllib.request.Request(url, headers=headers, method="GET")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
                body = response.read()
                digest = response.headers.get("Docker-Content-Digest") or (
                    "sha256:" + hashlib.sha256(body).hexdigest()
                )
        except urllib.error.HTTPError as exc:
            challenge = exc.headers.get("WWW-Authenticate", "")
            if exc.code == 401 and attempt == 0 and challenge:
                headers["Authorization"] = f"Bearer {_bearer_token(challenge)}"
                continue
            raise ResolveError(f"{repository}:{tag}: {url} answered HTTP {exc.code}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise ResolveError(f"{repository}:{tag}: cannot reach {base_url} ({exc})") from exc
        if not _DIGEST_RE.match(digest):
            raise ResolveError(f"{repository}:{tag}: the registry returned a malformed digest {digest!r}")
        return digest
    raise ResolveError(f"{repository}:{tag}: the registry refused the token it issued")


def resolve(text: str, refresh: bool = False, registry: str | None = None) -> tuple[str, list[str]]:
    """Return the updated pins text and one line per change."""
    lines = text.splitlines(keepends=True)
    changes: list[str] = []
    for base in parse_bases(text):
        if base.digest != UNRESOLVED and not refresh:
            continue
        if base.tag == "latest":
            raise ResolveError(f"bases.{base.name}: refusing to pin the moving tag 'latest'")
        digest = manifest_digest(base.repository, base.tag, registry)
        if digest == base.digest:
            continue
        old = lines[base.digest_line]
        indent = old[: len(old) - len(old.lstrip())]
        newline = "\n" if old.endswith("\n") else ""
        lines[base.digest_line] = f"{indent}digest: {digest}{newline}"
        changes.append(f"bases.{base.name}: {base.repository}:{base.tag} -> {digest}")
    return "".join(lines), changes


def main(argv: list[str] | None = None) -> int:
    """Resolve and rewrite the pins file; exit non-zero with the reason on any failure."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pins", type=Path)
    parser.add_argument("--refresh", action="store_true", help="re-resolve digests that are already set")
    parser.add_argument("--registry", help="send every request to this base URL instead of each registry")
    args = parser.parse_args(argv)
    try:
        text = args.pins.read_text(encoding="utf-8")
        updated, changes = resolve(text, args.refresh, args.registry)
    except (OSError, ResolveError) as exc:
        print(f"resolve_digests: {exc}", file=sys.stderr)
        return 1
    if changes:
        args.pins.write_text(updated, encoding="utf-8")
    for change in changes:
        print(change)
    print(f"resolve_digests: {len(changes)} digest(s) updated in {args.pins}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
