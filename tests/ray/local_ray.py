"""A real Ray cluster on loopback for tests and the gate benchmark, cleaned up by process id.

Every process is started with ``ray start`` in a new session, so its daemons share one process group;
:meth:`LocalRay.stop` collects those groups plus all their descendants (Ray's worker processes
start sessions of their own) and anything naming this cluster's private temp dir, then terminates
them (SIGKILL after a deadline). It never runs ``ray stop``, which would stop every Ray on the host.

Loopback only. Ray rewrites ``127.0.0.1`` to the host's outward-facing IP unless
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (single-node mode), and that mode in turn makes ``ray start``
refuse to add a worker node. So the head and every driver run in single-node mode (everything binds
127.0.0.1), and the worker's ``ray start`` runs with Ray's localhost rewrite disabled instead.
Fixed default ports (6379, 10001, 8265, 52365, 44217, 44227) are replaced by free ones, so
concurrent runs on one host do not collide.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from flashrl_operator.sim import free_port

BIN = Path(sys.executable).parent
LOOPBACK = "127.0.0.1"

#: The variable KubeRay sets in every Ray container to its group's name (``groupName``, or headgroup).
GROUP_ENV = "RAY_NODE_TYPE_NAME"

#: The environment a driver (e.g. flashrl-launch) needs to reach this cluster on loopback.
DRIVER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}

_WORKER_START = (
    "import sys\n"
    "import ray._private.services as services\n"
    "services.resolve_ip_for_localhost = lambda host: host\n"
    "from ray.scripts.scripts import main\n"
    "sys.argv[0] = 'ray'\n"
    "main()\n"
)


class LocalRay:
    """One head, any number of late-joining workers; GPUs are declared, not real."""

    def __init__(self) -> None:
        # Short path: Ray puts Unix sockets under it (107-byte limit).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="frl-ray-", dir="/tmp"))
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self._groups: list[int] = []
        self._pending: list[subprocess.Popen[bytes]] = []

    def _env(self, single_node: bool) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            RAY_USAGE_STATS_ENABLED="0",
            AUTOSCALER_METRIC_PORT=str(free_port()),
            DASHBOARD_METRIC_PORT=str(free_port()),
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        )
        env.pop("RAY_ADDRESS", None)
        if single_node:
            env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        else:
            env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        return env

    def _common(self, num_gpus: int) -> list[str]:
        return [
            f"--num-gpus={num_gpus}",
            "--num-cpus=1",
            f"--node-ip-address={LOOPBACK}",
            f"--temp-dir={self.temp_dir}",
            f"--dashboard-agent-listen-port={free_port()}",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
        ]

    def _spawn(self, argv: list[str], env: dict[str, str], log_name: str) -> subprocess.Popen[bytes]:
        log = (self.temp_dir / log_name).open("wb")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._groups.append(proc.pid)
        return proc

    def _finish(self, proc: subprocess.Popen[bytes], log_name: str, timeout: float) -> None:
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ray start did not finish within {timeout}s: {self.log(log_name)}") from None
        if code != 0:
            raise RuntimeError(f"ray start failed ({code}): {self.log(log_name)}")

    def log(self, name: str) -> str:
        return (self.temp_dir / name).read_text(errors="replace")[-3000:]

    def start_head(self, num_gpus: int, timeout: float = 120.0) -> str:
        argv = [
            str(BIN / "ray"),
            "start",
            "--head",
            f"--port={self.port}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-port={free_port()}",
            "--include-dashboard=false",
            *self._common(num_gpus),
        ]
        self._finish(self._spawn(argv, self._env(single_node=True), "head.log"), "head.log", timeout)
        return self.address

    def start_worker(self, num_gpus: int, group: str | None = None) -> subprocess.Popen[bytes]:
        """Begin joining a worker node; returns at once (see :meth:`wait_worker`). ``group`` is the
        KubeRay worker group it plays: KubeRay names it to Ray in ``RAY_NODE_TYPE_NAME``, and Ray labels
        the node ``ray.io/node-group`` with it."""
        name = f"worker-{len(self._groups)}.log"
        argv = [
            sys.executable,
            "-c",
            _WORKER_START,
            "start",
            f"--address={self.address}",
            *self._common(num_gpus),
        ]
        env = self._env(single_node=False)
        if group is not None:
            env[GROUP_ENV] = group
        proc = self._spawn(argv, env, name)
        self._pending.append(proc)
        return proc

    def wait_worker(self, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
        self._finish(proc, f"worker-{self._groups.index(proc.pid)}.log", timeout)

    def _processes(self) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        marker = str(self.temp_dir)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                in_group = os.getpgid(proc.pid) in self._groups
                named = any(marker in part for part in (proc.info["cmdline"] or []))
            except (ProcessLookupError, psutil.Error):
                continue
            if in_group or named:
                found[proc.pid] = proc
                try:
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
                except psutil.Error:
                    pass
        found.pop(os.getpid(), None)
        return list(found.values())

    def stop(self, grace: float = 3.0) -> None:
        """Terminate everything this cluster started; SIGKILL what is left after ``grace`` seconds."""
        for proc in self._pending:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        procs = self._processes()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=grace)
        deadline = time.monotonic() + grace
        while self._processes() and time.monotonic() < deadline:
            for proc in self._processes():
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(self._processes(), timeout=1.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
