"""A loopback stand-in for the Hugging Face Hub endpoints ``huggingface_hub`` calls to stage a repository.

Tests point the real client at it with ``HF_ENDPOINT``. It serves, from memory:

- ``GET /api/{models|datasets}/<owner>/<name>/revision/<rev>`` (``HfApi.repo_info``; with
  ``?blobs=true`` each sibling carries ``size``, ``blobId`` and, for LFS files, ``lfs.sha256``);
- ``HEAD``/``GET /[datasets/]<owner>/<name>/resolve/<rev>/<path>`` (``hf_hub_download``: ``X-Repo-Commit``,
  ``ETag`` (the git blob id, or for LFS files the sha256 in ``X-Linked-Etag``), ``Content-Length``).

Errors use the Hub's ``X-Error-Code`` header, which the client maps to its exceptions
(``huggingface_hub/utils/_http.py``, ``hf_raise_for_status``): ``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``, ``GatedRepo``. Every request is recorded, so a test can assert that a run downloaded
nothing. ``corrupt`` makes the server send different bytes than the checksums it reports.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

#: Files at least this large are served as LFS files (the Hub's rule is by attributes; size will do).
LFS_THRESHOLD = 1024


@dataclass
class Repo:
    """One repository at one commit."""

    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    gated_token: str | None = None
    #: Paths whose served bytes differ from the checksum reported (a corrupted mirror or transfer).
    corrupt: set[str] = field(default_factory=set)


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest()


class FakeHub:
    """The server's state; ``url`` is its ``HF_ENDPOINT``."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.url = ""

    def add(self, repo_type: str, repo_id: str, repo: Repo) -> Repo:
        """Serve a repository (``repo_type`` is ``model`` or ``dataset``)."""
        self.repos[(repo_type, repo_id)] = repo
        return repo

    def downloads(self) -> list[str]:
        """Paths of file bodies served (GET on resolve)."""
        return [path for method, path in self.requests if method == "GET" and "/resolve/" in path]

    # --- request handling -------------------------------------------------------------------------

    def _repo(
        self, repo_type: str, repo_id: str, revision: str, auth: str | None
    ) -> tuple[int, dict[str, str], Any]:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            return 404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}, None
        if repo.gated_token is not None and auth != f"Bearer {repo.gated_token}":
            return (
                401,
                {"X-Error-Code": "GatedRepo", "X-Error-Message": f"Access to {repo_id} is restricted"},
                None,
            )
        if revision not in repo.revisions and revision != repo.commit:
            return 404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id"}, None
        return 200, {}, repo

    def info(
        self, repo_type: str, repo_id: str, revision: str, auth: str | None
    ) -> tuple[int, dict[str, str], bytes]:
        """``repo_info``: the commit and every file with its metadata."""
        status, headers, repo = self._repo(repo_type, repo_id, revision, auth)
        if repo is None:
            return status, headers, b'{"error": "not found"}'
        siblings = []
        for path, data in sorted(repo.files.items()):
            entry: dict[str, Any] = {"rfilename": path, "size": len(data), "blobId": _blob_id(data)}
            if len(data) >= LFS_THRESHOLD:
                entry["lfs"] = {
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "size": len(data),
                    "pointerSize": 134,
                }
                entry["blobId"] = _blob_id(b"version https://git-lfs.github.com/spec/v1\n")
            siblings.append(entry)
        body = {
            "id": repo_id,
            "sha": repo.commit,
            "private": False,
            "gated": "auto" if repo.gated_token else False,
            "siblings": siblings,
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def resolve(
        self, repo_type: str, repo_id: str, revision: str, path: str, auth: str | None
    ) -> tuple[int, dict[str, str], bytes]:
        """A file body (or, for HEAD, its headers)."""
        status, headers, repo = self._repo(repo_type, repo_id, revision, auth)
        if repo is None:
            return status, headers, b""
        if path not in repo.files:
            return 404, {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"}, b""
        data = repo.files[path]
        served = data[:-1] + bytes([data[-1] ^ 0xFF]) if path in repo.corrupt else data
        headers = {"X-Repo-Commit": repo.commit, "Content-Type": "application/octet-stream"}
        if len(data) >= LFS_THRESHOLD:
            headers["X-Linked-Etag"] = f'"{hashlib.sha256(data).hexdigest()}"'
            headers["X-Linked-Size"] = str(len(data))
            headers["ETag"] = f'"{hashlib.sha256(data).hexdigest()}"'
        else:
            headers["ETag"] = f'"{_blob_id(data)}"'
        return 200, headers, served


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _route(self) -> tuple[int, dict[str, str], bytes]:
            path = urlsplit(self.path).path
            hub.requests.append((self.command, path))
            parts = [unquote(p) for p in path.strip("/").split("/")]
            auth = self.headers.get("Authorization")
            if len(parts) >= 6 and parts[0] == "api" and parts[4] == "revision":
                kind = {"models": "model", "datasets": "dataset"}.get(parts[1])
                if kind is not None:
                    return hub.info(kind, f"{parts[2]}/{parts[3]}", "/".join(parts[5:]), auth)
            kind = "model"
            if parts and parts[0] == "datasets":
                kind, parts = "dataset", parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve":
                return hub.resolve(kind, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), auth)
            return 404, {}, b"no such endpoint"

        def _answer(self, body: bool) -> None:
            status, headers, data = self._route()
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                stream = io.BytesIO(data)
                while chunk := stream.read(65536):
                    self.wfile.write(chunk)

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

    return Handler


@contextmanager
def serve(hub: FakeHub) -> Iterator[FakeHub]:
    """Run the hub on 127.0.0.1 (a random port) for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="fake-hub", daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
