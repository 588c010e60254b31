"""What the client's unit tests connect to: kubeconfig files (one context, one cluster, one user) and
HTTP servers on loopback that play an API server or a proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    """Writes a kubeconfig whose current context joins ``cluster`` and ``user`` (their kubeconfig entries)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [{"name": "k", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serves ``app`` on a free loopback port while the block runs; yields its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
