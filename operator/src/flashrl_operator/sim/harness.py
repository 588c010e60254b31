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
its own thread and loop, :class:`~flashrl_operator.run.runner.OperatorThread`) with settings fit for
an emulator (:meth:`EmulatedCluster.operator_config`), and returns once it is ready and watching.
:meth:`EmulatedCluster.start_operator_process` runs ``flashrl operator`` as its own process instead
(credentials from a kubeconfig it writes; the two-replica test kills one with SIGKILL).
Leaving the ``async with`` stops every operator it started (failing loudly if one hangs, killing a
process that does not stop), then the client and the server, also when the body failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import kmock
import yaml

from flashrl_operator.run.handlers import OperatorConfig
from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim.apiserver import (
    EXPERIMENTS_RESOURCE,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    ApiClient,
    EmulatedApiServer,
    eventually,
    free_port,
    watch_started,
)
from flashrl_operator.sim.staging import StagingStandIn
from flashrl_operator.sim.standins import GarbageCollectorStandIn, KubeRayStandIn


@dataclasses.dataclass
class OperatorProcess:
    """``flashrl operator`` in its own process, with its metrics URL and its output file."""

    process: subprocess.Popen[bytes]
    metrics_url: str
    log: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: the process dies without cleaning anything up (a crashed or evicted pod)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not stop in time. Returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.process.returncode)

    def output(self) -> str:
        """What it printed so far."""
        return self.log.read_text(errors="replace")


_Part = TypeVar("_Part")


def _entered(part: _Part | None) -> _Part:
    """A part the cluster makes on entering its ``async with`` (``None`` before that)."""
    if part is None:
        raise RuntimeError("use EmulatedCluster in `async with`")
    return part


def loopback_config(**fields: Any) -> OperatorConfig:
    """An operator as the tests run it, whichever server it talks to (``fields``: which one, and any other
    setting): its endpoints on loopback and free ports, short retry delays, a resync rare enough not to
    hide a missed event, no composing of overrides, a history fold pace the played launcher's steps
    (milliseconds apart, not minutes) keep up with, and no judging of the cluster's nodes and claims
    (the tests' clusters have neither unless a test makes them and asks for ``check_fit``)."""
    config = OperatorConfig(
        bind_host="127.0.0.1",
        metrics_port=0,
        health_port=None,
        retry_delay=0.2,
        resync_interval=30.0,
        check_overrides=False,
        history_interval=0.2,
        check_fit=False,
    )
    return dataclasses.replace(config, **fields)


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
        self.processes: list[OperatorProcess] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="flashrl-sim-")

    @property
    def api(self) -> ApiClient:
        """A user's client (``kubectl``)."""
        return _entered(self._api)

    @property
    def staging(self) -> StagingStandIn:
        """The Job controller and ``flashrl-launch stage`` for staging Jobs, played."""
        return StagingStandIn(self.api)

    @property
    def kuberay(self) -> KubeRayStandIn:
        """KubeRay, the scheduler, the kubelet and the launcher, played."""
        return _entered(self._kuberay)

    @property
    def garbage_collector(self) -> GarbageCollectorStandIn:
        """Kubernetes' garbage collector, played (deletes what deleted owners owned)."""
        return _entered(self._gc)

    async def __aenter__(self) -> EmulatedCluster:
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self.server)
            http = await self._stack.enter_async_context(kmock.Server(self.server))
            self.url = str(http.url).rstrip("/")
            self._api = ApiClient(self.url)
            self._stack.push_async_callback(self._api.close)
            self._kuberay = KubeRayStandIn(self._api)
            self._stack.callback(self._tmp.cleanup)
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
        return loopback_config(**{"server": self.url, "scanning": False, "request_timeout": 5.0, **overrides})

    async def start_operator(self, **overrides: Any) -> OperatorThread:
        """Start the real operator (``OperatorConfig`` fields as keywords) and wait until it watches."""
        operator = OperatorThread(self.operator_config(**overrides))
        self.operators.append(operator)
        await asyncio.to_thread(operator.start)
        await watch_started(self.server, JOBS_RESOURCE)
        await watch_started(self.server, RAY_JOBS_RESOURCE)
        await watch_started(self.server, EXPERIMENTS_RESOURCE)
        return operator

    def kubeconfig(self) -> Path:
        """A kubeconfig for the emulated server (token-less, as the emulator checks none by default)."""
        path = Path(self._tmp.name) / "kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "emulated",
            "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "operator"}}],
            "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
            "users": [{"name": "operator", "user": {"token": "emulated"}}],
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    async def start_operator_process(self, *flags: str, env: dict[str, str] | None = None) -> OperatorProcess:
        """Run ``flashrl operator FLAGS`` against the emulator; returns once its ``/metrics`` answers."""
        metrics_port = free_port()
        log = Path(self._tmp.name) / f"operator-{len(self.processes)}.log"
        cmd = [sys.executable, "-m", "flashrl_operator.cli", "operator", "--metrics-port", str(metrics_port)]
        cmd += ["--health-port", str(free_port()), *flags]
        environ = {**os.environ, "KUBECONFIG": str(self.kubeconfig()), **(env or {})}
        with log.open("wb") as out:
            process = subprocess.Popen(cmd, env=environ, stdout=out, stderr=subprocess.STDOUT)  # noqa: ASYNC220
        handle = OperatorProcess(process, f"http://127.0.0.1:{metrics_port}/metrics", log)
        self.processes.append(handle)

        async def serving() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"flashrl operator exited with {process.returncode}:\n{handle.output()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", metrics_port)
            except OSError:
                return False
            writer.close()
            return True

        await eventually(serving, "flashrl operator to serve /metrics", 30.0)
        await watch_started(self.server, JOBS_RESOURCE)
        return handle

    async def stop_operators(self) -> None:
        """Stop every operator started here; raise if one outlives its stop."""
        processes, self.processes = self.processes, []
        for process in processes:
            await asyncio.to_thread(process.stop)
        operators, self.operators = self.operators, []
        for operator in operators:
            await asyncio.to_thread(operator.stop)
        if any(op.alive for op in operators):
            raise RuntimeError("an operator thread outlived its stop")
