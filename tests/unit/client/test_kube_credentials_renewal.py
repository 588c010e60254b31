"""KubeClient renews its credentials on expiry and after a 401, against a real HTTP server on loopback.

The credentials come the way they do on a managed cluster: a kubeconfig whose user runs an ``exec``
credential plugin (a real command here, printing the token it reads from a file, with an expiry),
loaded by ``kubernetes_asyncio`` through :class:`flashrl_operator.client.login.Credentials`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from kubeconfigs import kubeconfig, serving

from flashrl_operator.client.errors import TransientError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.client.login import Credentials
from flashrl_operator.vocab.kuberay import RAY_JOB

PLUGIN = """
import json, pathlib, sys
here = pathlib.Path(__file__).parent
with (here / "calls").open("a") as calls:
    calls.write("x")
if (here / "fail").exists():
    sys.stderr.write((here / "fail").read_text())
    sys.exit(1)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": (here / "token").read_text(),
                             "expirationTimestamp": (here / "expiry").read_text()}}))
"""


@dataclass
class TokenServer:
    """An API server stand-in that accepts exactly one bearer token at a time."""

    accepted: str = "token-1"
    seen: list[str] = field(default_factory=list)
    url: str = ""
    #: Holds requests until set (to keep one in flight while the credentials change).
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when a held request has arrived.
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        given = request.headers.get("Authorization", "")
        self.seen.append(given)
        if request.match_info["name"] == "held":
            self.arrived.set()
            await self.gate.wait()
        if given != f"Bearer {self.accepted}":
            return web.json_response({"kind": "Status", "reason": "Unauthorized", "code": 401}, status=401)
        return web.json_response({"metadata": {"name": request.match_info["name"]}})


@pytest.fixture
async def server() -> AsyncIterator[TokenServer]:
    state = TokenServer()
    app = web.Application()
    app.router.add_get("/apis/ray.io/v1/namespaces/{ns}/rayjobs/{name}", state.handle)
    async with serving(app) as url:
        state.url = url
        try:
            yield state
        finally:
            state.gate.set()


class Plugin:
    """The exec credential plugin's files: the token it hands out, its expiry, how often it ran."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        script = directory / "get-token"
        script.write_text(f"#!{sys.executable}\n{PLUGIN}")
        script.chmod(0o755)
        self.token = "token-1"
        self.expires_in(datetime.timedelta(hours=1))

    @property
    def token(self) -> str:
        return (self.dir / "token").read_text()

    @token.setter
    def token(self, value: str) -> None:
        (self.dir / "token").write_text(value)

    def expires_in(self, delta: datetime.timedelta) -> None:
        moment = datetime.datetime.now(datetime.UTC) + delta
        (self.dir / "expiry").write_text(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))

    def fail(self, stderr: str) -> None:
        (self.dir / "fail").write_text(stderr)

    @property
    def calls(self) -> int:
        path = self.dir / "calls"
        return len(path.read_text()) if path.exists() else 0


def credentials_for(server: TokenServer, tmp_path: Path) -> tuple[Credentials, Plugin]:
    plugin = Plugin(tmp_path)
    exec_user = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(tmp_path / "get-token")}
    path = kubeconfig(tmp_path / "kubeconfig", {"server": server.url}, {"exec": exec_user})
    return Credentials(environ={"KUBECONFIG": str(path)}), plugin


@dataclass
class Connected:
    """A KubeClient logged in through the exec plugin, and the plugin, for the tests to rotate tokens."""

    client: KubeClient
    plugin: Plugin


@pytest.fixture
async def connected(server: TokenServer, tmp_path: Path) -> AsyncIterator[Connected]:
    credentials, plugin = credentials_for(server, tmp_path)
    client = await KubeClient.connect(credentials)
    try:
        yield Connected(client, plugin)
    finally:
        await client.close()


async def test_a_401_renews_once_and_repeats_the_request(connected: Connected, server: TokenServer) -> None:
    client, plugin = connected.client, connected.plugin
    assert await client.get(RAY_JOB, "ml", "a") == {"metadata": {"name": "a"}}
    plugin.token = server.accepted = "token-2"  # rotated: the old token is refused from now on
    assert await client.get(RAY_JOB, "ml", "b") == {"metadata": {"name": "b"}}
    assert client.renewals == 1
    assert server.seen == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]
    assert await client.get(RAY_JOB, "ml", "c") is not None
    assert client.renewals == 1  # no renewal while the credentials work
    assert plugin.calls == 2


async def test_expiring_credentials_are_renewed_before_the_request(
    server: TokenServer, tmp_path: Path
) -> None:
    credentials, plugin = credentials_for(server, tmp_path)
    plugin.expires_in(datetime.timedelta(seconds=10))  # inside the library's renewal margin
    client = await KubeClient.connect(credentials)
    try:
        plugin.token = server.accepted = "token-2"
        assert await client.get(RAY_JOB, "ml", "a") is not None
        assert server.seen == ["Bearer token-2"]  # renewed first: no request went out with the old token
        assert client.renewals == 0  # no 401 was needed
    finally:
        await client.close()


async def test_concurrent_401s_renew_once(connected: Connected, server: TokenServer) -> None:
    client, plugin = connected.client, connected.plugin
    plugin.token = server.accepted = "token-2"
    results = await asyncio.gather(*(client.get(RAY_JOB, "ml", f"j{i}") for i in range(8)))
    assert all(r is not None for r in results)
    assert (plugin.calls, client.renewals) == (2, 1)


async def test_a_request_in_flight_finishes_on_the_old_connection_pool(
    connected: Connected, server: TokenServer
) -> None:
    client, plugin = connected.client, connected.plugin
    held = asyncio.create_task(client.get(RAY_JOB, "ml", "held"))
    await asyncio.wait_for(server.arrived.wait(), timeout=30)
    plugin.token = server.accepted = "token-2"
    assert await client.get(RAY_JOB, "ml", "b") is not None  # renews meanwhile
    server.accepted = "token-1"  # let the held request succeed with the token it was sent with
    server.gate.set()
    assert await held == {"metadata": {"name": "held"}}
    assert client.renewals == 1


async def test_a_second_401_is_transient_not_a_rejected_job(
    connected: Connected, server: TokenServer
) -> None:
    client = connected.client
    server.accepted = "nobody-has-this"
    with pytest.raises(TransientError, match=r"refused the operator's credentials \(HTTP 401\)"):
        await client.get(RAY_JOB, "ml", "a")


async def test_a_failing_plugin_during_renewal_is_transient_and_says_why(
    connected: Connected, server: TokenServer
) -> None:
    client, plugin = connected.client, connected.plugin
    server.accepted = "token-2"
    plugin.fail("SSO session expired")
    with pytest.raises(TransientError, match=r"cannot renew credentials: .*SSO session expired"):
        await client.get(RAY_JOB, "ml", "a")


async def test_kopf_logs_in_with_the_same_credentials(server: TokenServer, tmp_path: Path) -> None:
    credentials, plugin = credentials_for(server, tmp_path)
    info = await credentials.connection_info()
    assert (info.server, info.token) == (server.url, "token-1")
    assert info.expiration is not None and info.expiration > datetime.datetime.now(datetime.UTC)
    plugin.token = "token-2"
    assert (await credentials.connection_info()).token == "token-2"  # asked again: the plugin runs again
    assert json.loads(json.dumps(plugin.calls)) == 2
