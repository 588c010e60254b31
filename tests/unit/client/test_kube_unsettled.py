"""A 403 right after the API server restarted is transient; one that persists is a refusal.

Against a real HTTP server on loopback that plays a kube-apiserver restarting: it refuses connections
(stopped), then answers 403 to everything while its ``/readyz`` fails (its authorizer warming up), then
serves. A 403 from a settled, ready server stays a :class:`RejectedError` (RBAC refuses it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from kubeconfigs import kubeconfig, serving

from flashrl_operator.client.errors import RejectedError, TransientError
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.client.login import Credentials
from flashrl_operator.vocab.kuberay import RAY_JOB


@dataclass
class Restarting:
    """What the stand-in answers: ``forbid`` 403 to object requests, ``ready`` its /readyz."""

    forbid: bool = False
    ready: bool = True
    down: bool = False
    paths: list[str] = field(default_factory=list)

    async def readyz(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        if self.ready:
            return web.Response(text="ok")
        return web.Response(text="[-]poststarthook/rbac/bootstrap-roles failed: not finished", status=500)

    async def ray_job(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        if self.down:
            return web.json_response({"kind": "Status", "code": 503, "message": "unavailable"}, status=503)
        if self.forbid:
            body = {"kind": "Status", "reason": "Forbidden", "code": 403, "message": "rayjobs is forbidden"}
            return web.json_response(body, status=403)
        return web.json_response({"metadata": {"name": request.match_info["name"]}})


@pytest.fixture
async def server() -> AsyncIterator[tuple[Restarting, str]]:
    state = Restarting()
    app = web.Application()
    app.router.add_get("/readyz", state.readyz)
    app.router.add_get("/apis/ray.io/v1/namespaces/{ns}/rayjobs/{name}", state.ray_job)
    async with serving(app) as url:
        yield state, url


async def test_a_403_while_readyz_fails_is_transient_and_a_settled_403_is_a_refusal(
    server: tuple[Restarting, str], tmp_path: Path
) -> None:
    state, url = server
    async with connected(url, tmp_path, unsettled_seconds=3600.0) as kube:
        # Ready and never failed: RBAC refuses, retrying cannot help.
        state.forbid = True
        with pytest.raises(RejectedError):
            await kube.get(RAY_JOB, "team-a", "j")
        assert "/readyz" in state.paths  # it asked whether the server is ready before judging
        # The authorizer warming up: /readyz fails, so the 403 is retried.
        state.ready = False
        with pytest.raises(TransientError, match="HTTP 403"):
            await kube.get(RAY_JOB, "team-a", "j")
        # Ready again: within the window of the failed /readyz a 403 is still taken for the restart.
        state.ready = True
        with pytest.raises(TransientError, match="not settled"):
            await kube.get(RAY_JOB, "team-a", "j")
        state.forbid = False
        assert (await kube.get(RAY_JOB, "team-a", "j")) == {"metadata": {"name": "j"}}


async def test_a_403_after_a_5xx_is_transient_only_within_the_window(
    server: tuple[Restarting, str], tmp_path: Path
) -> None:
    state, url = server
    async with (
        connected(url, tmp_path, unsettled_seconds=3600.0) as kube,
        connected(url, tmp_path, unsettled_seconds=0.0) as settled,
    ):
        state.down = True
        for each in (kube, settled):
            with pytest.raises(TransientError, match="HTTP 503"):
                await each.get(RAY_JOB, "team-a", "j")
        state.down, state.forbid = False, True
        # /readyz says ok; what tells the restart is the 503 a moment ago.
        with pytest.raises(TransientError, match="not settled"):
            await kube.get(RAY_JOB, "team-a", "j")
        # Past the window (none here) a 403 from a ready server is RBAC's answer.
        with pytest.raises(RejectedError):
            await settled.get(RAY_JOB, "team-a", "j")


@asynccontextmanager
async def connected(url: str, tmp_path: Path, *, unsettled_seconds: float) -> AsyncIterator[KubeClient]:
    """A client of the server at ``url``, closed on the way out."""
    path = kubeconfig(tmp_path / f"{unsettled_seconds}.kubeconfig", {"server": url}, {"token": "t"})
    credentials = Credentials(environ={"KUBECONFIG": str(path)})
    kube = await KubeClient.connect(credentials, retry_delay=0.01, unsettled_seconds=unsettled_seconds)
    try:
        yield kube
    finally:
        await kube.close()
