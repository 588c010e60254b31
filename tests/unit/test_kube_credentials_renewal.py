"""KubeClient renews its credentials on expiry and after a 401, against a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import kopf
import pytest
from aiohttp import web

from flashrl_operator.credentials import CredentialError
from flashrl_operator.errors import TransientError
from flashrl_operator.kube import KubeClient
from flashrl_operator.kuberay import RAY_JOB


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
        if request.query.get("hold"):
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
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        state.gate.set()
        await runner.cleanup()


class Issuer:
    """A credentials source that hands out whatever token the server accepts now, and counts calls."""

    def __init__(self, server: TokenServer, expiration: datetime.datetime | None = None) -> None:
        self.server = server
        self.calls = 0
        self.expiration = expiration
        self.error: Exception | None = None
        #: When set, hand out this token whatever the server accepts (a revoked identity).
        self.token: str | None = None

    def __call__(self) -> kopf.ConnectionInfo:
        self.calls += 1
        if self.error is not None:
            raise self.error
        token = self.token or self.server.accepted
        return kopf.ConnectionInfo(server=self.server.url, token=token, expiration=self.expiration)


def in_an_hour() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)


async def test_a_401_renews_once_and_repeats_the_request(server: TokenServer) -> None:
    issuer = Issuer(server, in_an_hour())
    client = KubeClient.connect(issuer(), credentials=issuer)
    try:
        assert await client.get(RAY_JOB, "ml", "a") == {"metadata": {"name": "a"}}
        server.accepted = "token-2"  # rotated: the old token is refused from now on
        assert await client.get(RAY_JOB, "ml", "b") == {"metadata": {"name": "b"}}
        assert client.renewals == 1
        assert server.seen == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]
        assert await client.get(RAY_JOB, "ml", "c") is not None
        assert client.renewals == 1  # no renewal while the credentials work
    finally:
        await client.close()


async def test_expiring_credentials_are_renewed_before_the_request(server: TokenServer) -> None:
    issuer = Issuer(server, in_an_hour())
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=10)  # inside the renewal margin
    client = KubeClient.connect(
        kopf.ConnectionInfo(server=server.url, token="token-1", expiration=soon), credentials=issuer
    )
    try:
        server.accepted = "token-2"
        assert await client.get(RAY_JOB, "ml", "a") is not None
        assert server.seen == ["Bearer token-2"]  # renewed first: no request went out with the old token
        assert (issuer.calls, client.renewals) == (1, 1)
    finally:
        await client.close()


async def test_concurrent_401s_renew_once(server: TokenServer) -> None:
    issuer = Issuer(server)
    client = KubeClient.connect(issuer(), credentials=issuer)
    issuer.calls = 0
    try:
        server.accepted = "token-2"
        results = await asyncio.gather(*(client.get(RAY_JOB, "ml", f"j{i}") for i in range(8)))
        assert all(r is not None for r in results)
        assert (issuer.calls, client.renewals) == (1, 1)
    finally:
        await client.close()


async def test_a_request_in_flight_finishes_on_the_old_connection_pool(server: TokenServer) -> None:
    issuer = Issuer(server)
    client = KubeClient.connect(issuer(), credentials=issuer)
    try:
        held = asyncio.create_task(client._request("GET", RAY_JOB.path("ml", "held") + "?hold=1", "get held"))
        await asyncio.wait_for(server.arrived.wait(), timeout=30)
        server.accepted = "token-2"
        assert await client.get(RAY_JOB, "ml", "b") is not None  # renews meanwhile
        server.accepted = "token-1"  # let the held request succeed with the token it was sent with
        server.gate.set()
        assert await held == {"metadata": {"name": "held"}}
        assert client.renewals == 1
    finally:
        await client.close()


async def test_a_second_401_is_transient_not_a_rejected_job(server: TokenServer) -> None:
    issuer = Issuer(server)
    client = KubeClient.connect(issuer(), credentials=issuer)
    try:
        server.accepted = "nobody-has-this"
        issuer.token = "token-1"
        with pytest.raises(TransientError, match=r"refused the operator's credentials \(HTTP 401\)"):
            await client.get(RAY_JOB, "ml", "a")
    finally:
        await client.close()


async def test_a_failing_plugin_during_renewal_is_transient_and_says_why(server: TokenServer) -> None:
    issuer = Issuer(server)
    client = KubeClient.connect(issuer(), credentials=issuer)
    try:
        server.accepted = "token-2"
        issuer.error = CredentialError("the credential plugin 'aws' exited with 255: SSO session expired")
        with pytest.raises(TransientError, match=r"cannot renew credentials: .*SSO session expired"):
            await client.get(RAY_JOB, "ml", "a")
    finally:
        await client.close()
