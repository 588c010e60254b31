"""API requests per FlashRLJob, counted at the emulated API server.

Two figures: how many requests the operator (kopf included) sends for one new job, from the job's
creation until the operator goes quiet (children created, status and Event written), and how many
one periodic resync of an unchanged job costs. The operator runs in this process (its own thread and
loop) against the emulated API server; the benchmark reads the server's objects directly, so the
only request it sends itself is each job's creation, which is not counted. Watches are not counted
(they are opened once per operator, not per job).

Run: ``make bench`` (writes docs/benchmarks.md), or ``.venv/bin/python -m bench.requests_bench``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import kmock
from aiohttp import web

from bench import example_job
from flashrl_operator.run.handlers import OperatorConfig
from flashrl_operator.run.runner import OperatorThread
from flashrl_operator.sim import (
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    TRAINING,
    ApiClient,
    EmulatedApiServer,
    KubeRayStandIn,
    eventually,
    watch_started,
)

JOBS = 10
RESYNCS = 3
NAMESPACE = "bench"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "flashrljob.yaml"
QUIET_S = 0.6
RESYNC_INTERVAL_S = 2.0


class CountingApiServer(EmulatedApiServer):
    """Counts every request but watches, by method and resource."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.counted: Counter[str] = Counter()
        self.last_request = time.monotonic()

    async def _handle(self, request: kmock.Request) -> web.StreamResponse:
        if request.action != kmock.action.WATCH:
            plural = request.resource.plural if request.resource is not None else "-"
            sub = f"/{request.subresource}" if request.subresource else ""
            self.counted[f"{request.method.value} {plural}{sub}"] += 1
            self.last_request = time.monotonic()
        return await super()._handle(request)

    def total(self) -> int:
        return sum(self.counted.values())


async def _quiet(server: CountingApiServer) -> None:
    async def quiet() -> bool:
        return time.monotonic() - server.last_request > QUIET_S

    await eventually(quiet, "the operator to go quiet", 30.0)


def _status(server: CountingApiServer, name: str) -> dict[str, Any]:
    try:
        obj = server.objects[JOBS_RESOURCE, NAMESPACE, name]
    except KeyError:
        return {}
    return {} if obj.deleted else dict(obj.get("status") or {})


def _reconciles(op: OperatorThread) -> float:
    for metric in op.context.metrics.reconcile_duration.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                return float(sample.value)
    return 0.0


async def measure() -> dict[str, Any]:
    """Requests per new job and per unchanged resync, with the breakdown of a new job's requests."""
    base = example_job()
    async with CountingApiServer() as server, kmock.Server(server) as http:
        url = str(http.url).rstrip("/")
        config = OperatorConfig(
            server=url,
            bind_host="127.0.0.1",
            metrics_port=None,
            health_port=None,
            scanning=False,
            retry_delay=0.5,
            request_timeout=10.0,
            resync_interval=3600.0,
            check_overrides=False,
        )
        op = OperatorThread(config)
        api = ApiClient(url)
        await asyncio.to_thread(op.start)
        try:
            await watch_started(server, JOBS_RESOURCE)
            await watch_started(server, RAY_JOBS_RESOURCE)
            await _quiet(server)
            per_job: list[int] = []
            breakdown: Counter[str] = Counter()
            for i in range(JOBS):
                name = f"bench-{i:02d}"
                job = {**base, "metadata": {"name": name, "namespace": NAMESPACE}}
                before, seen = server.total(), Counter(server.counted)
                await api.create(JOBS_RESOURCE, job)

                async def pending(n: str = name) -> bool:
                    return _status(server, n).get("phase") == "Pending"

                await eventually(pending, f"{name} to be Pending")
                await _quiet(server)
                per_job.append(server.total() - before - 1)
                breakdown.update(server.counted - seen)
            breakdown[f"POST {JOBS_RESOURCE.rsplit('/', 1)[-1]}"] -= JOBS  # the benchmark's creates
            kuberay = KubeRayStandIn(api)
            for i in range(JOBS):
                await kuberay.set_status(NAMESPACE, f"bench-{i:02d}", TRAINING)

            async def running() -> bool:
                return all(_status(server, f"bench-{i:02d}").get("phase") == "Running" for i in range(JOBS))

            await eventually(running, "every job to be Running")
            await _quiet(server)
        finally:
            await asyncio.to_thread(op.stop)
        # A second operator resyncs every job every RESYNC_INTERVAL_S; count RESYNCS rounds of it
        # (after the reconciles it makes on start, when it resumes every job).
        op = OperatorThread(dataclasses.replace(config, resync_interval=RESYNC_INTERVAL_S))
        await asyncio.to_thread(op.start)
        try:

            async def resumed() -> bool:
                return _reconciles(op) >= JOBS

            await eventually(resumed, "the restarted operator to resume every job", 30.0)
            await _quiet(server)
            before, reconciled = server.total(), _reconciles(op)

            async def resynced() -> bool:
                return _reconciles(op) >= reconciled + JOBS * RESYNCS

            await eventually(resynced, f"{RESYNCS} resyncs of every job", 60.0)
            await _quiet(server)
            resync_requests = server.total() - before
            done = _reconciles(op) - reconciled
        finally:
            await api.close()
            await asyncio.to_thread(op.stop)
    return {
        "per_job": sum(per_job) / len(per_job),
        "per_job_min": min(per_job),
        "per_job_max": max(per_job),
        "breakdown": {k: v / JOBS for k, v in sorted(breakdown.items()) if v},
        "per_resync": resync_requests / done,
    }


#: The same measurement on the code before server-side apply and event-driven reconciles (commit
#: b93cdca: a GET before every child's create, kopf's create/update handlers with their annotation
#: patch), run with this module: 14.0 requests per new job, 7.0 per resync of an unchanged job. A job
#: had five children then (no NetworkPolicy).
BEFORE_PER_JOB: Final = 14.0
BEFORE_PER_RESYNC: Final = 7.0
BEFORE_CHILDREN: Final = 5
BEFORE_COMMIT: Final = "b93cdca"
#: Server-side apply alone, measured with this module when it landed (five children, no read before
#: the apply): 7.0 requests per new job.
APPLY_ONLY_PER_JOB: Final = 7.0


def run() -> str:
    """Measure once and return a markdown section."""
    from flashrl_api import parse_job
    from flashrl_operator.render import render

    r = asyncio.run(measure())
    children = len(render(parse_job(example_job())).children)
    rows = "\n".join(f"| `{request}` | {count:g} |" for request, count in r["breakdown"].items())
    same = BEFORE_PER_JOB + 2 * (children - BEFORE_CHILDREN)
    reads = sum(count for request, count in r["breakdown"].items() if request.startswith("GET "))
    return "\n".join(
        [
            "## API requests per job",
            "",
            f"{JOBS} copies of `examples/flashrljob.yaml` (its model and data as paths on its volumes: no",
            "staging Job, whose requests come before the RayJob's for hf:// sources) created one after",
            "another against the emulated",
            "API server, counting at the server every request the operator (kopf included) sends until it",
            "goes quiet; then, with every job Running, a restarted operator's periodic resync of the",
            f"unchanged jobs ({RESYNCS} rounds). Watches are not counted. One run of",
            "`bench/requests_bench.py`;",
            f"*before* is the same measurement on commit {BEFORE_COMMIT}, when a job had "
            f"{BEFORE_CHILDREN} children (it has {children} now: the NetworkPolicy joined; a job with",
            "hf:// sources has a staging Job as well).",
            "",
            "| figure | before | now | now / before |",
            "|---|---|---|---|",
            f"| requests per new job | {BEFORE_PER_JOB:g} | {r['per_job']:g} | "
            f"{r['per_job'] / BEFORE_PER_JOB:.2f} |",
            f"| requests per resync of an unchanged job (all reads) | {BEFORE_PER_RESYNC:g} | "
            f"{r['per_resync']:g} | {r['per_resync'] / BEFORE_PER_RESYNC:.2f} |",
            "",
            "A new job's requests now (per job):",
            "",
            "| request | count |",
            "|---|---|",
            rows,
            "",
            "Each child is created by one server-side apply (`PATCH`, `application/apply-patch+yaml`,",
            "field manager `flashrl-operator`) instead of a `POST`; the job's own watch event carries the",
            "job, so it is not read again; and kopf keeps no bookkeeping annotation on it. Server-side",
            f"apply alone brought a new job to {APPLY_ONLY_PER_JOB:g} requests (half of *before*). The",
            f"{reads:g} reads in the table are the ownership rule ([security.md](security.md)): every child",
            "is read before anything is written, so that an object under a child's name that is not this",
            "job's (a user's, a deleted job's) is never patched or adopted and the job creates nothing",
            "while one exists. Server-side apply has no create-only precondition, so those reads are",
            "what the guarantee costs: one read (a 404) and one apply per child, plus the status and an",
            "Event. By its per-child cost (a read and a create each), the code before would have sent",
            f"{same:g} for {children} children (an estimate, not measured here): now / that = "
            f"{r['per_job'] / same:.2f}.",
            "A resync reads the job, its children and the RayCluster, and writes nothing; the extra read",
            "against *before* is the NetworkPolicy's.",
            "",
        ]
    )


if __name__ == "__main__":
    print(run())
