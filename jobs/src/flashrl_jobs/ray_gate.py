"""Wait, with a deadline, until the Ray cluster can hold the whole job; only then may verl start.

Why: KubeRay submits the job once every pod is Ready, but a GPU worker's raylet may register its GPUs
with the head a little later. verl does not wait: ``ResourcePoolManager._check_resource_available``
(``verl/single_controller/ray/base.py``) sums the *available* GPUs per node once and raises
``Total available GPUs ... is less than total desired GPUs ...`` immediately. The origin script hid
the race behind ``ray start ... || true; sleep 5``.

What is gated on: *available* GPUs, the same number verl checks, and at least ``nodes x gpusPerNode``
of them. Registered (total) GPUs are reported alongside, so a log line distinguishes "a worker has
not joined yet" from "GPUs joined but something else holds them".

Steps, each bounded: a TCP probe of the head's GCS port (an unreachable head fails within
``head_timeout``: ``ray.init`` itself can retry for minutes), ``ray.init`` to that explicit address in
a helper thread (bounded the same way), a poll of node resources every ``poll_interval`` seconds with
a progress line whenever the count changes (and at least every ``report_every`` seconds), and a
clean ``ray.shutdown()`` before verl connects on its own. Never ``address="auto"``: a driver that
discovers a cluster by accident is how the origin script joined a head it did not mean to.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flashrl_api.status import Reason
from flashrl_jobs.termination import LaunchError

Log = Callable[[str], None]

_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.\-_]+)):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class GpuCount:
    """What the cluster reports at one instant."""

    registered: float
    available: float
    gpu_nodes: int

    def describe(self, required: int) -> str:
        """A progress line such as ``6/8 GPUs registered on 1 node(s) (6 available)``."""
        return (
            f"{_num(self.registered)}/{required} GPUs registered on {self.gpu_nodes} node(s) "
            f"({_num(self.available)} available)"
        )


@dataclass(frozen=True)
class GateResult:
    """The successful outcome: the count that let the job through and how long it took."""

    count: GpuCount
    waited_seconds: float


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` of the head's GCS; other forms (``auto``, ``ray://``, ``http://``) are refused."""
    text = address.strip()
    if text in {"", "auto", "local"}:
        raise LaunchError(
            Reason.LAUNCHER_USAGE,
            f"Ray address {address!r} asks Ray to discover a cluster; give the head's GCS address "
            "as host:port (RAY_ADDRESS or --ray-address)",
        )
    if "://" in text:
        raise LaunchError(
            Reason.LAUNCHER_USAGE,
            f"Ray address {address!r} is a URL; give the head's GCS address as host:port (e.g. "
            "raycluster-head-svc:6379), not the Ray Client or dashboard URL",
        )
    match = _HOST_PORT.fullmatch(text)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise LaunchError(Reason.LAUNCHER_USAGE, f"Ray address {address!r} is not host:port")
    return match["v6"] or match["host"], int(match["port"])


def probe_head(address: str, timeout: float, log: Log, clock: Callable[[], float] = time.monotonic) -> None:
    """Return once the GCS port accepts a TCP connection; raise ``EXIT_RAY_UNREACHABLE`` after ``timeout``."""
    host, port = parse_address(address)
    deadline = clock() + timeout
    last_error = "no attempt made"
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline - clock()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(2.0, remaining))):
                return
        except OSError as exc:
            last_error = exc.strerror or str(exc) or type(exc).__name__
        remaining = deadline - clock()
        if remaining <= 0:
            raise LaunchError(
                Reason.RAY_UNREACHABLE,
                f"Ray head at {address} is unreachable after {timeout:g}s ({attempt} attempt(s), "
                f"last error: {last_error}); is RAY_ADDRESS the head's GCS address?",
            )
        if attempt == 1:
            log(f"Ray head at {address} not answering yet ({last_error}), retrying for {remaining:.0f}s")
        # A short, deadline-bounded pause between connection attempts (not a synchronisation sleep).
        time.sleep(min(0.5, remaining))


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise LaunchError(Reason.RAY_UNREACHABLE, "the ray package is not installed in this image") from None
    return ray


_CONNECT_THREAD = "flashrl-ray-connect"


def connection_abandoned() -> bool:
    """Whether a ``ray.init`` that overran its deadline is still running in its helper thread."""
    return any(t.name == _CONNECT_THREAD and t.is_alive() for t in threading.enumerate())


def connect(address: str, timeout: float) -> Any:
    """``ray.init`` to exactly ``address``, abandoned (with ``EXIT_RAY_UNREACHABLE``) after ``timeout``."""
    ray = _ray()
    outcome: dict[str, BaseException | None] = {}

    def init() -> None:
        try:
            ray.init(
                address=address,
                namespace="flashrl-launch",
                log_to_driver=False,
                logging_level="WARNING",
            )
            outcome["error"] = None
        except BaseException as exc:  # reported below, in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=init, name=_CONNECT_THREAD, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise LaunchError(
            Reason.RAY_UNREACHABLE,
            f"Ray head at {address} accepts connections but ray.init did not complete within {timeout:g}s",
        )
    error = outcome.get("error")
    if error is not None:
        raise LaunchError(Reason.RAY_UNREACHABLE, f"could not connect to the Ray head at {address}: {error}")
    return ray


def gpu_count(ray: Any) -> GpuCount:
    """Registered GPUs of alive nodes and the cluster's available GPUs (what verl sums)."""
    registered = 0.0
    gpu_nodes = 0
    for node in ray.nodes():
        if not node.get("Alive", node.get("alive", False)):
            continue
        gpus = float(node.get("Resources", {}).get("GPU", 0.0))
        if gpus > 0:
            registered += gpus
            gpu_nodes += 1
    available = float(ray.available_resources().get("GPU", 0.0))
    return GpuCount(registered=registered, available=available, gpu_nodes=gpu_nodes)


def wait_for_gpus(
    read: Callable[[], GpuCount],
    required: int,
    timeout: float,
    log: Log,
    *,
    poll_interval: float = 1.0,
    report_every: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Poll ``read`` until enough GPUs are registered and available; ``EXIT_GPU_TIMEOUT`` at the deadline.

    Ray's node table and its resource view are updated separately, so a joining worker's GPUs can
    show up as available a moment before its node is listed alive (or the other way round). Both
    must reach ``required`` in the same reading, so the line that says "proceeding" is consistent.
    """
    start = clock()
    deadline = start + timeout
    last_line = ""
    last_report = float("-inf")
    while True:
        count = read()
        now = clock()
        if count.available >= required and count.registered >= required:
            log(f"{count.describe(required)}, proceeding")
            return GateResult(count=count, waited_seconds=now - start)
        line = count.describe(required)
        if now >= deadline:
            missing = required - count.registered
            hint = (
                f"{_num(missing)} GPU(s) never registered: a worker pod has not joined Ray "
                "(check the GPU worker pods and their raylet logs)"
                if missing > 0
                else "every GPU registered but some are held by other Ray tasks or actors"
            )
            raise LaunchError(
                Reason.GPU_WAIT_TIMEOUT,
                f"timed out after {timeout:g}s waiting for {required} available GPU(s): {line}; {hint}",
            )
        if line != last_line or now - last_report >= report_every:
            log(f"{line}, waiting up to {deadline - now:.0f}s more")
            last_line, last_report = line, now
        # Polling interval of the deadline-bounded loop above.
        pause(min(poll_interval, max(0.0, deadline - now)))


def gate(
    address: str,
    required: int,
    timeout: float,
    log: Log,
    *,
    head_timeout: float = 15.0,
    poll_interval: float = 1.0,
) -> GateResult:
    """The whole gate: reach the head, wait for the GPUs, disconnect. Raises :class:`LaunchError`."""
    log(f"Connecting to the Ray head at {address}")
    probe_head(address, head_timeout, log)
    ray = connect(address, head_timeout)
    try:
        return wait_for_gpus(lambda: gpu_count(ray), required, timeout, log, poll_interval=poll_interval)
    finally:
        # verl calls ray.init itself (with RAY_ADDRESS); this driver must be gone by then.
        ray.shutdown()
