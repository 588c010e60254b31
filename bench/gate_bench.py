"""Ray GPU gate vs the origin's fixed ``sleep 5``, side by side on a real local Ray cluster.

Each approach gets a fresh cluster shaped like a FlashRLJob's: a CPU-only head and one GPU worker
(declared GPUs) whose ``ray start`` begins at t=0, the moment the driver starts, as when KubeRay
submits the job while a worker pod's raylet is still registering. Measured from t=0:

* origin: ``sleep 5`` then start the driver; how many GPUs were registered when it started (verl's
  ``_check_resource_available`` raises at once if fewer than required are available);
* gate: ``flashrl_jobs.ray_gate.gate``; when it let the driver start and how many GPUs it saw.

For both, when the worker's GPUs actually became visible to a driver (polled every 0.2 s).

Run: ``.venv/bin/python bench/gate_bench.py`` (or through ``python -m bench``). Loopback only.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

# The driver side must not rewrite 127.0.0.1 to an outward-facing address (see tests/ray/local_ray.py).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ray"))

from local_ray import LocalRay

from flashrl_jobs.ray_gate import connect, gate, one_pool, pool_counts

GPUS = 8
ORIGIN_SLEEP = 5.0
#: When the worker's `ray start` begins, relative to the driver: together, a little late (about when a
#: `sleep 5` ends, so either outcome), and late enough that the sleep is certainly too short (a worker
#: pod scheduled on a node that was busy, or pulling a multi-GB image, is later still).
WORKER_DELAYS = (0.0, 3.0, 10.0)


def _quiet(_line: str) -> None:
    pass


def _origin(delay: float) -> dict[str, float]:
    """One observer connected from t=0 records the count at the sleep's end and when all GPUs appear."""
    cluster = LocalRay()
    try:
        cluster.start_head(num_gpus=0)
        ray = connect(cluster.address, 30.0)
        try:
            t0 = time.monotonic()
            time.sleep(delay)  # the worker pod is scheduled this much later than the driver starts
            worker = cluster.start_worker(num_gpus=GPUS)
            at_start: float | None = None
            ready: float | None = None
            while True:
                count = pool_counts(ray, one_pool(GPUS)).available
                elapsed = time.monotonic() - t0
                if ready is None and count >= GPUS:
                    ready = elapsed
                if at_start is None and elapsed >= ORIGIN_SLEEP:
                    at_start = count
                if (ready is not None and at_start is not None) or elapsed > 120:
                    break
                time.sleep(0.1)  # measurement poll, bounded by the 120 s limit above
        finally:
            ray.shutdown()
        cluster.wait_worker(worker)
        return {
            "driver_start": ORIGIN_SLEEP,
            "gpus_at_start": at_start if at_start is not None else 0.0,
            "all_registered": ready if ready is not None else float("nan"),
        }
    finally:
        cluster.stop()


def _gated(delay: float) -> dict[str, float]:
    cluster = LocalRay()
    try:
        cluster.start_head(num_gpus=0)
        t0 = time.monotonic()
        late = threading.Timer(delay, lambda: workers.append(cluster.start_worker(num_gpus=GPUS)))
        workers: list[Any] = []
        late.start()
        result = gate(cluster.address, one_pool(GPUS), 120.0, _quiet, poll_interval=0.1)
        driver_start = time.monotonic() - t0
        late.join()
        cluster.wait_worker(workers[0])
        return {
            "driver_start": driver_start,
            "gpus_at_start": result.counts.available,
            "all_registered": driver_start,
        }
    finally:
        cluster.stop()


def run() -> str:
    """Measure both approaches once and return a markdown section."""
    results = [(delay, _origin(delay), _gated(delay)) for delay in WORKER_DELAYS]

    def row(name: str, delay: float, r: dict[str, float]) -> str:
        ok = "yes" if r["gpus_at_start"] >= GPUS else f"**no**: verl raises ({r['gpus_at_start']:g} < {GPUS})"
        return (
            f"| {delay:g} s | {name} | {r['driver_start']:.1f} s | {r['gpus_at_start']:g}/{GPUS} | {ok} | "
            f"{r['all_registered']:.1f} s |"
        )

    return "\n".join(
        [
            "## Ray GPU gate vs fixed sleep",
            "",
            f"The driver starts at t=0; one GPU worker ({GPUS} declared GPUs) starts joining the CPU-only",
            "head at t=0 (pods ready together) or later (a worker pod scheduled or pulled late).",
            "Fresh local Ray cluster per approach (loopback), "
            f"Ray {_ray_version()}, {os.cpu_count()} CPU(s), {platform.machine()}; one run of "
            "`bench/gate_bench.py`.",
            "",
            "| worker starts at | approach | driver starts at | GPUs available then "
            "| verl's resource check passes | all GPUs visible at |",
            "|---|---|---|---|---|---|",
            *[
                line
                for delay, origin, gated in results
                for line in (
                    row(f"origin: `sleep {ORIGIN_SLEEP:g}`", delay, origin),
                    row("flashrl-launch gate", delay, gated),
                )
            ],
            "",
            "A fixed sleep is either too short (verl fails with `Total available GPUs ... is less than total",
            "desired GPUs`) or wasted time; the gate starts the driver as soon as the GPUs are available and",
            "fails with a reason and exit code 75 after `lifecycle.gpuWaitTimeoutSeconds` otherwise.",
            "The 3 s worker registers close to when the sleep ends, so that row's outcome for the sleep",
            "differs from run to run (it is a race); the 10 s row is not close.",
            "",
        ]
    )


def _ray_version() -> str:
    import ray

    return str(ray.__version__)


if __name__ == "__main__":
    print(run())
