"""The one way to run the real operator against the emulated API server (demo, tests, benchmark).

::

    async with EmulatedCluster() as cluster:
        operator = await cluster.start_operator(resync_interval=1.0)  # OperatorConfig overrides
        await cluster.api.create(JOBS_RESOURCE, manifest)              # as a user would
        await cluster.kuberay.set_status(namespace, name, TRAINING)    # as KubeRay would
        ...                                                            # read cluster.server.objects

:class:`EmulatedCluster` starts the emulated API server (:mod:`flashrl_operator.sim.apiserver`) on
127.0.0.1, a user's client to it (``api``) and the stand-in for KubeRay, the scheduler, the kubelet and
the launcher (``kuberay``). :meth:`EmulatedCluster.start_operator` starts the real operator (kopf,
its own thread and loop, :class:`~flashrl_operator.runner.OperatorThread`) with settings fit for
an emulator (:meth:`EmulatedCluster.operator_config`), and returns once it is ready and watching.
Leaving the ``async with`` stops every operator it started (failing loudly if one hangs), then the
client and the server, also when the body failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from types import TracebackType
from typing import Any

import kmock

from flashrl_operator.handlers import OperatorConfig
from flashrl_operator.runner import OperatorThread
from flashrl_operator.sim.apiserver import (
    EXPERIMENTS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    ApiClient,
    EmulatedApiServer,
    watch_started,
)
from flashrl_operator.sim.staging import StagingStandIn
from flashrl_operator.sim.standins import GarbageCollectorStandIn, KubeRayStandIn


class EmulatedCluster:
    """The emulated API server, a user's client to it, the stand-ins, and the operators started on it."""

    def __init__(self, server: EmulatedApiServer | None = None) -> None:
        self.server = server if server is not None else EmulatedApiServer()
        self.url = ""
        self._stack = contextlib.AsyncExitStack()
        self._api: ApiClient | None = None
        self._kuberay: KubeRayStandIn | None = None
        self._gc: GarbageCollectorStandIn | None = None
        self.operators: list[OperatorThread] = []

    @property
    def api(self) -> ApiClient:
        """A user's client (``kubectl``)."""
        if self._api is None:
            raise RuntimeError("use EmulatedCluster in `async with`")
        return self._api

    @property
    def staging(self) -> StagingStandIn:
        """The Job controller and ``flashrl-launch stage`` for staging Jobs, played."""
        return StagingStandIn(self.api)

    @property
    def kuberay(self) -> KubeRayStandIn:
        """KubeRay, the scheduler, the kubelet and the launcher, played."""
        if self._kuberay is None:
            raise RuntimeError("use EmulatedCluster in `async with`")
        return self._kuberay

    @property
    def garbage_collector(self) -> GarbageCollectorStandIn:
        """Kubernetes' garbage collector, played (deletes what deleted owners owned)."""
        if self._gc is None:
            raise RuntimeError("use EmulatedCluster in `async with`")
        return self._gc

    async def __aenter__(self) -> EmulatedCluster:
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self.server)
            http = await self._stack.enter_async_context(kmock.Server(self.server))
            self.url = str(http.url).rstrip("/")
            self._api = ApiClient(self.url)
            self._stack.push_async_callback(self._api.close)
            self._kuberay = KubeRayStandIn(self._api)
            self._gc = GarbageCollectorStandIn(self.server, self._api)
            self._stack.push_async_callback(self.stop_operators)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, tb)

    def operator_config(self, **overrides: Any) -> OperatorConfig:
        """Settings for an operator on the emulator: explicit server, loopback, short delays, no scanning.

        The emulator serves no CRD objects (so kopf's scanning is off) and no pods are watched.
        """
        config = OperatorConfig(
            server=self.url,
            bind_host="127.0.0.1",
            metrics_port=0,
            health_port=None,
            scanning=False,
            retry_delay=0.2,
            request_timeout=5.0,
            resync_interval=30.0,
            check_overrides=False,
        )
        return dataclasses.replace(config, **overrides)

    async def start_operator(self, **overrides: Any) -> OperatorThread:
        """Start the real operator (``OperatorConfig`` fields as keywords) and wait until it watches."""
        operator = OperatorThread(self.operator_config(**overrides))
        self.operators.append(operator)
        await asyncio.to_thread(operator.start)
        await watch_started(self.server, JOBS_RESOURCE)
        await watch_started(self.server, RAY_JOBS_RESOURCE)
        await watch_started(self.server, EXPERIMENTS_RESOURCE)
        return operator

    async def stop_operators(self) -> None:
        """Stop every operator started here; raise if one outlives its stop."""
        operators, self.operators = self.operators, []
        for operator in operators:
            await asyncio.to_thread(operator.stop)
        if any(op.alive for op in operators):
            raise RuntimeError("an operator thread outlived its stop")
