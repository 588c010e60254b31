"""Fixtures: the emulated API server (``cluster``) and the real operator (``start_operator``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
from operator_harness import Cluster, StartOperator

from flashrl_operator.emulation import (
    JOBS_RESOURCE,
    ApiClient,
    EmulatedApiServer,
    KubeRayStandIn,
    watch_started,
)
from flashrl_operator.handlers import OperatorConfig
from flashrl_operator.runner import OperatorThread


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with EmulatedApiServer() as server, kmock.Server(server) as http:
        api = ApiClient(str(http.url))
        try:
            yield Cluster(server, str(http.url), api, KubeRayStandIn(api))
        finally:
            await api.close()


@pytest.fixture
async def start_operator(cluster: Cluster) -> AsyncIterator[StartOperator]:
    """Start the real operator against ``cluster``; keyword arguments override OperatorConfig."""
    started: list[OperatorThread] = []

    async def start(**overrides: Any) -> OperatorThread:
        config = OperatorConfig(
            server=cluster.url,
            bind_host="127.0.0.1",
            metrics_port=0,
            health_port=None,
            scanning=False,
            retry_delay=0.2,
            request_timeout=5.0,
            resync_interval=30.0,
            check_overrides=False,
        )
        op = OperatorThread(dataclasses.replace(config, **overrides))
        started.append(op)
        await asyncio.to_thread(op.start)
        await watch_started(cluster.server, JOBS_RESOURCE)
        await watch_started(cluster.server, "ray.io/v1/rayjobs")
        return op

    try:
        yield start
    finally:
        for op in started:
            await asyncio.to_thread(op.stop)
        assert not any(op.alive for op in started), "an operator thread outlived its test"
