"""``/metrics`` of one operator, served from its own event loop by prometheus-client's aiohttp handler.

The handler negotiates the format (OpenMetrics when the scraper asks for it, else the text format)
and compresses when asked; the series are :class:`~flashrl_operator.vocab.metrics.OperatorMetrics`'.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from flashrl_operator.vocab.metrics import OperatorMetrics


class MetricsServer:
    """Serves ``/metrics`` for one :class:`OperatorMetrics` from the operator's own event loop."""

    def __init__(self, metrics: OperatorMetrics, host: str, port: int) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    async def start(self) -> str:
        """Start listening (port 0 picks a free one) and return the ``/metrics`` URL."""
        app = web.Application()
        app.router.add_get("/metrics", make_aiohttp_handler(self._metrics.registry))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/metrics"
        return self.url

    async def stop(self) -> None:
        """Stop listening and release the port."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
