"""The real-trainer tier's processes: verl 0.9.1's own trainer on CPU, driven by the product's launcher.

Everything runs with the trainer environment's Python (``make trainer-env``: torch, verl, vLLM's CPU build,
Ray), not the test suite's: the tests spawn it. The launcher and Ray read the clone's own packages from
``PYTHONPATH`` (``jobs/src``, ``operator/src``), and the CPU plugins (``plugins/``) with a distribution
record declaring their entry points, written at test time.

Every run is one session (``start_new_session``): the Ray head's daemons and every worker verl starts stay
in it, so :meth:`TrainerRun.stop` kills the session whole, by its id, after a hard watchdog; verl's failures
hang rather than exit, and a ``ray::TaskRunnerV1`` once outlived its driver.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from flashrl_operator.sim import free_port

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ENV_LINK = REPO / ".trainer-env"
LOOPBACK = "127.0.0.1"

#: The entry points of the test-only plugins (``plugins/flashrl_cpu_test_plugins``).
ENTRY_POINTS = (
    "[verl.plugins]\ncpu = flashrl_cpu_test_plugins.verl_cpu\n\n"
    "[vllm.general_plugins]\nno_onednn = flashrl_cpu_test_plugins:register_vllm\n"
)


def python() -> Path:
    """The trainer environment's Python; a clear failure when ``make trainer-env`` has not run."""
    found = ENV_LINK / "bin" / "python"
    if not found.exists():
        raise AssertionError(f"{found} is missing: run `make trainer-env` (scripts/get-trainer-env.sh)")
    return found


def plugin_path(root: Path) -> list[str]:
    """``PYTHONPATH`` entries that make the plugins importable and their entry points discoverable."""
    record = root / "flashrl_cpu_test_plugins-0.dist-info"
    record.mkdir(parents=True, exist_ok=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: flashrl-cpu-test-plugins\nVersion: 0\n")
    (record / "entry_points.txt").write_text(ENTRY_POINTS)
    return [str(root), str(HERE / "plugins"), str(REPO / "jobs" / "src"), str(REPO / "operator" / "src")]


def session_processes(sid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getsid(proc.pid) == sid and proc.pid != os.getpid():
                found.append(proc)
    return found


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (the run's own), until none is left."""
    deadline = time.monotonic() + 30
    while (procs := session_processes(sid)) and time.monotonic() < deadline:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(procs, timeout=5)


class TrainerRun:
    """A Ray head (one declared GPU, eight logical CPUs for TransferQueue) and the launcher, one session."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        # Short: Ray puts Unix sockets under it (107-byte limit).
        self.temp_dir = Path(f"/tmp/frl-rt-{os.getpid()}-{free_port()}")
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.env = env
        self.sessions: list[int] = []
        self.log = workdir / "launcher.log"

    def start_head(self, timeout: float = 180.0) -> None:
        argv = [
            str(ENV_LINK / "bin" / "ray"),
            "start",
            "--head",
            f"--port={self.port}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            "--include-dashboard=false",
            "--num-gpus=1",
            "--num-cpus=8",
            f"--node-ip-address={LOOPBACK}",
            f"--temp-dir={self.temp_dir}",
            "--object-store-memory=200000000",
            "--disable-usage-stats",
        ]
        env = {
            **self.env,
            "AUTOSCALER_METRIC_PORT": str(free_port()),
            "DASHBOARD_METRIC_PORT": str(free_port()),
        }
        with (self.workdir / "ray-head.log").open("wb") as log:
            proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.sessions.append(proc.pid)
        code = proc.wait(timeout)
        if code != 0:
            raise AssertionError(
                f"ray start failed ({code}): {(self.workdir / 'ray-head.log').read_text()[-3000:]}"
            )

    def launch(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``flashrl-launch ARGS`` as the RayJob's entrypoint runs it, its output in :attr:`log`."""
        full = {**self.env, "RAY_ADDRESS": self.address, **(env or {})}
        with self.log.open("ab") as log:
            proc = subprocess.Popen(
                [str(python()), "-m", "flashrl_jobs.cli", *args],
                env=full,
                cwd=self.workdir,  # verl's Hydra writes outputs/<date>/ under the working directory
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.sessions.append(proc.pid)
        return proc

    def wait(self, proc: subprocess.Popen[bytes], watchdog: float) -> int:
        """The launcher's exit code; past ``watchdog`` seconds the whole run is killed and the test fails."""
        try:
            return proc.wait(watchdog)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the run passed its watchdog of {watchdog:.0f} s:\n{self.tail()}") from None

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        for sid in self.sessions:
            kill_session(sid)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(str(self.temp_dir) in part for part in proc.info["cmdline"] or []):
                    proc.kill()
