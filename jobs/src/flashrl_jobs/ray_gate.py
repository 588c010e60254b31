"""Wait, with a deadline, until the Ray cluster can hold the whole job; only then may verl start.

Why: KubeRay submits the job once every pod is Ready, but a GPU worker's raylet may register its GPUs
with the head a little later. verl does not wait: ``ResourcePoolManager._check_resource_available``
(``verl/single_controller/ray/base.py``) sums the *available* GPUs per node once and raises
``Total available GPUs ... is less than total desired GPUs ...`` immediately. The origin script hid
the race behind ``ray start ... || true; sleep 5``.

What is gated on: *available* GPUs, the same number verl checks, per GPU pool of the job
(:mod:`flashrl_api.pools`): ``nodes x gpusPerNode`` of the trainer's and, with separate-async, of the
rollout pool's, each counted on the Ray nodes of its own KubeRay worker group (Ray's node label
``ray.io/node-group``), so a rollout pool that never came up is not hidden by a large trainer pool and
the failure names each pool's count. Registered (total) GPUs are reported alongside, so a log line
distinguishes "a worker has not joined yet" from "GPUs joined but something else holds them".

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

from flashrl_api import FlashRLJobSpec
from flashrl_api.pools import RAY_NODE_GROUP_LABEL, TRAINER_POOL, TRAINER_WORKER_GROUP, gpu_pools
from flashrl_api.status import Reason
from flashrl_jobs.termination import LaunchError

Log = Callable[[str], None]

_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.\-_]+)):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class PoolNeed:
    """GPUs one pool of the job must bring to Ray: ``name`` as users read it, ``worker_group`` as Ray
    labels its nodes (``ray.io/node-group``)."""

    name: str
    worker_group: str
    gpus: int


def pool_needs(spec: FlashRLJobSpec) -> tuple[PoolNeed, ...]:
    """What the gate waits for: each of the job's GPU pools (:func:`flashrl_api.pools.gpu_pools`)."""
    return tuple(PoolNeed(p.name, p.worker_group, p.gpus) for p in gpu_pools(spec))


def one_pool(gpus: int) -> tuple[PoolNeed, ...]:
    """A single trainer pool of ``gpus`` GPUs (every GPU node of the cluster counts for it)."""
    return (PoolNeed(TRAINER_POOL, TRAINER_WORKER_GROUP, gpus),)


@dataclass(frozen=True)
class GpuCount:
    """What the cluster reports at one instant, for one pool (or the whole cluster)."""

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
class PoolCounts:
    """One reading, per pool in the order of the job's pools (the trainer's first)."""

    needs: tuple[PoolNeed, ...]
    counts: tuple[GpuCount, ...]

    @property
    def available(self) -> float:
        """Available GPUs of all pools together."""
        return sum(c.available for c in self.counts)

    def pairs(self) -> list[tuple[PoolNeed, GpuCount]]:
        """Each pool's need with its count."""
        return list(zip(self.needs, self.counts, strict=True))

    def ready(self) -> bool:
        """Every pool has its GPUs registered and available in the same reading."""
        return all(c.available >= n.gpus and c.registered >= n.gpus for n, c in self.pairs())

    def describe(self) -> str:
        """One pool: its count alone (``6/8 GPUs registered ...``); several: ``trainer pool: 8/8 GPUs
        registered on 1 node(s) (8 available); rollout pool: 3/8 ...``."""
        if len(self.needs) == 1:
            return self.counts[0].describe(self.needs[0].gpus)
        return "; ".join(f"{n.name} pool: {c.describe(n.gpus)}" for n, c in self.pairs())

    def hint(self) -> str:
        """Why the gate is still closed: GPUs that never registered (per pool), else GPUs held by others."""
        missing = [(n, n.gpus - c.registered) for n, c in self.pairs() if c.registered < n.gpus]
        if not missing:
            return "every GPU registered but some are held by other Ray tasks or actors"
        several = len(self.needs) > 1
        where = " and ".join(
            f"{_num(m)} GPU(s)" + (f" of the {n.name} pool (worker group {n.worker_group})" * several)
            for n, m in missing
        )
        return (
            f"{where} never registered: a worker pod has not joined Ray "
            "(check the GPU worker pods and their raylet logs)"
        )


@dataclass(frozen=True)
class GateResult:
    """The successful outcome: the counts that let the job through and how long it took."""

    counts: PoolCounts
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


def _pool_of(labels: dict[str, str], needs: tuple[PoolNeed, ...]) -> int:
    """Index of the pool a Ray node's GPUs count for: the pool whose worker group the node's
    ``ray.io/node-group`` label names, else the first (the trainer's: a job of one pool counts every
    GPU node, as verl does, and a Ray node started without KubeRay's label adds to the trainer's)."""
    group = labels.get(RAY_NODE_GROUP_LABEL)
    for index, need in enumerate(needs):
        if need.worker_group == group:
            return index
    return 0


def pool_counts(ray: Any, needs: tuple[PoolNeed, ...]) -> PoolCounts:
    """Registered GPUs of alive nodes and their available GPUs, per pool.

    Available GPUs are read per node with ``ray._private.state.available_resources_per_node``, the very
    call verl's ``ResourcePoolManager._check_resource_available`` sums, so "available" means what verl
    will find.
    """
    registered = [0.0] * len(needs)
    available = [0.0] * len(needs)
    nodes = [0] * len(needs)
    per_node = ray._private.state.available_resources_per_node()
    for node in ray.nodes():
        if not node.get("Alive", node.get("alive", False)):
            continue
        gpus = float(node.get("Resources", {}).get("GPU", 0.0))
        if gpus <= 0:
            continue
        index = _pool_of(node.get("Labels") or {}, needs)
        registered[index] += gpus
        nodes[index] += 1
        available[index] += float(per_node.get(node.get("NodeID", ""), {}).get("GPU", 0.0))
    counts = tuple(GpuCount(r, a, n) for r, a, n in zip(registered, available, nodes, strict=True))
    return PoolCounts(needs, counts)


def wait_for_gpus(
    read: Callable[[], PoolCounts],
    timeout: float,
    log: Log,
    *,
    poll_interval: float = 1.0,
    report_every: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Poll ``read`` until every pool's GPUs are registered and available; ``EXIT_GPU_TIMEOUT`` at the
    deadline, naming each pool's count.

    Ray's node table and its resource view are updated separately, so a joining worker's GPUs can
    show up as available a moment before its node is listed alive (or the other way round). Both
    must reach each pool's need in the same reading, so the line that says "proceeding" is consistent.
    """
    start = clock()
    deadline = start + timeout
    last_line = ""
    last_report = float("-inf")
    while True:
        reading = read()
        now = clock()
        line = reading.describe()
        if reading.ready():
            log(f"{line}, proceeding")
            return GateResult(counts=reading, waited_seconds=now - start)
        if now >= deadline:
            required = sum(n.gpus for n in reading.needs)
            raise LaunchError(
                Reason.GPU_WAIT_TIMEOUT,
                f"timed out after {timeout:g}s waiting for {required} available GPU(s): {line}; "
                f"{reading.hint()}",
            )
        if line != last_line or now - last_report >= report_every:
            log(f"{line}, waiting up to {deadline - now:.0f}s more")
            last_line, last_report = line, now
        # Polling interval of the deadline-bounded loop above.
        pause(min(poll_interval, max(0.0, deadline - now)))


def gate(
    address: str,
    needs: tuple[PoolNeed, ...],
    timeout: float,
    log: Log,
    *,
    head_timeout: float = 15.0,
    poll_interval: float = 1.0,
) -> GateResult:
    """The whole gate: reach the head, wait for every pool's GPUs, disconnect. Raises :class:`LaunchError`."""
    log(f"Connecting to the Ray head at {address}")
    probe_head(address, head_timeout, log)
    ray = connect(address, head_timeout)
    try:
        return wait_for_gpus(lambda: pool_counts(ray, needs), timeout, log, poll_interval=poll_interval)
    finally:
        # verl calls ray.init itself (with RAY_ADDRESS); this driver must be gone by then.
        ray.shutdown()
