"""scripts/resolve_digests.py against a loopback registry speaking the v2 API and the token flow."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "resolve_digests.py"
INDEX = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json"}).encode()
INDEX_DIGEST = "sha256:" + hashlib.sha256(INDEX).hexdigest()
TOKEN = "t0ken"

PINS_TEXT = """\
# header comment kept
versions:
  ray: "2.60.0"
bases:
  python:
    # a comment inside a base
    repository: docker.io/library/python
    tag: "3.11.16-slim-bookworm"
    digest: unresolved
  verl-sglang:
    repository: docker.io/verlai/verl
    tag: "sgl0512.dev4"
    digest: sha256:{old}
images:
  operator:
    repository: ghcr.io/example/op
    tag: "0.1.0"
""".format(old="0" * 64)


class Registry(BaseHTTPRequestHandler):
    """Manifests for library/python and verlai/verl behind an anonymous bearer token."""

    requests: list[str] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        port = self.server.server_address[1]
        if self.path.startswith("/token"):
            self._send(200, json.dumps({"token": TOKEN}).encode(), {"Content-Type": "application/json"})
        elif self.headers.get("Authorization") != f"Bearer {TOKEN}":
            challenge = f'Bearer realm="http://127.0.0.1:{port}/token",service="registry",scope="pull"'
            self._send(401, b"{}", {"WWW-Authenticate": challenge})
        elif self.path in {
            "/v2/library/python/manifests/3.11.16-slim-bookworm",
            "/v2/verlai/verl/manifests/sgl0512.dev4",
        }:
            assert "application/vnd.oci.image.index.v1+json" in self.headers.get("Accept", "")
            self._send(200, INDEX, {"Docker-Content-Digest": INDEX_DIGEST})
        else:
            self._send(404, b"{}", {})

    def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    Registry.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def run(pins: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(pins), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_fills_unresolved_digests_and_keeps_the_rest(tmp_path: Path, registry: str) -> None:
    pins = tmp_path / "pins.yaml"
    pins.write_text(PINS_TEXT)
    proc = run(pins, "--registry", registry)
    assert proc.returncode == 0, proc.stderr
    expected = PINS_TEXT.replace("digest: unresolved", f"digest: {INDEX_DIGEST}")
    assert pins.read_text() == expected  # comments, quoting and the resolved digest untouched
    assert "1 digest(s) updated" in proc.stdout
    assert "/token?service=registry&scope=pull" in Registry.requests


def test_refresh_updates_every_base(tmp_path: Path, registry: str) -> None:
    pins = tmp_path / "pins.yaml"
    pins.write_text(PINS_TEXT)
    proc = run(pins, "--registry", registry, "--refresh")
    assert proc.returncode == 0, proc.stderr
    assert pins.read_text().count(f"digest: {INDEX_DIGEST}") == 2


def test_unknown_tag_fails_with_the_reason_and_leaves_the_file(tmp_path: Path, registry: str) -> None:
    pins = tmp_path / "pins.yaml"
    text = PINS_TEXT.replace("3.11.16-slim-bookworm", "no-such-tag")
    pins.write_text(text)
    proc = run(pins, "--registry", registry)
    assert proc.returncode == 1
    assert "docker.io/library/python:no-such-tag" in proc.stderr and "HTTP 404" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert pins.read_text() == text


def test_unreachable_registry_is_a_clear_error(tmp_path: Path) -> None:
    pins = tmp_path / "pins.yaml"
    pins.write_text(PINS_TEXT)
    proc = run(pins, "--registry", "http://127.0.0.1:9")  # discard port: nothing listens
    assert proc.returncode == 1
    assert "cannot reach" in proc.stderr and "Traceback" not in proc.stderr


def test_parses_the_real_pins_file() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import resolve_digests
    finally:
        sys.path.remove(str(SCRIPT.parent))
    bases = {b.name: b for b in resolve_digests.parse_bases((REPO / "images" / "pins.yaml").read_text())}
    assert set(bases) == {"python", "verl-sglang", "verl-vllm"}
    assert bases["verl-sglang"].repository == "docker.io/verlai/verl"
    assert bases["verl-vllm"].repository == "docker.io/verlai/verl"
    assert bases["verl-vllm"].tag == "vllm024.dev2"
    assert resolve_digests.registry_endpoint("docker.io/verlai/verl", None) == (
        "https://registry-1.docker.io",
        "verlai/verl",
    )
