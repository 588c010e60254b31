"""The issue-18 probe: overrides that would make whoever validates a job call Python of the user's choice.

Shared by the unit tests (``flashrl validate``, the guard, the sandbox) and the operator's integration
test. Each probe tries something the validating process must never do: read a file (the stand-in for
the ServiceAccount token), create one, make a request (to a loopback server the test runs), or learn
its working directory, through every place an override can put a Hydra ``_target_``.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SECRET = "s3cr3t-token-6f1d2a"


@dataclass
class Traps:
    """A file whose content must never be read, a path that must never be created, and a server that
    must never be asked anything."""

    secret: Path
    forbidden: Path
    url: str
    requests: list[str] = field(default_factory=list)

    def assert_untouched(self, *outputs: str) -> None:
        assert not self.forbidden.exists(), "a probe created a file"
        assert self.requests == [], f"a probe made a request: {self.requests}"
        for text in outputs:
            assert SECRET not in text, "the secret file's content reached the output"
            # No path of the traps' directory either: it is the working directory of the processes the
            # tests start, so an answer from os.getcwd (or an echoed argument) would show it.
            assert str(self.secret.parent) not in text, "a path of the traps' directory reached the output"


@contextmanager
def traps(tmp_path: Path) -> Iterator[Traps]:
    """The traps, with the loopback server running for the duration (and stopped after)."""
    secret = tmp_path / "token"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    received: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Traps(
            secret=secret,
            forbidden=tmp_path / "created-by-probe",
            url=f"http://127.0.0.1:{server.server_address[1]}/leak",
            requests=received,
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def probe_overrides(t: Traps) -> list[str]:
    """One override per way in: ``+key``, ``key`` (replacing verl's own node), ``++key``, nested dicts
    and lists, a sweep, and the instantiation key in the key path itself."""
    read = (
        "{_target_:builtins.float,_args_:[{_target_:builtins.next,_args_:"
        f"[{{_target_:builtins.open,_args_:['{t.secret}']}}]}}]}}"
    )
    return [
        f"+actor_rollout_ref.rollout.pwn={read}",
        f"actor_rollout_ref.actor.checkpoint={{_target_:builtins.open,_args_:['{t.forbidden}','w']}}",
        f"++actor_rollout_ref.rollout.fetch={{_target_:urllib.request.urlopen,_args_:['{t.url}']}}",
        "+algorithm.pwn={outer:{inner:{_target_:os.getcwd}}}",
        f"+actor_rollout_ref.rollout.deep=[1,[{read}]]",
        "actor_rollout_ref.actor._target_=builtins.open",
        "+algorithm.sweep=choice({_target_:os.getcwd},1)",
        f"+actor_rollout_ref.rollout.partial={{x:{{_partial_:true,_target_:builtins.open,_args_:['{t.secret}']}}}}",
    ]
