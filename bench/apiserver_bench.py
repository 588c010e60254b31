"""The operator against the real API server: kube-apiserver v1.36.2 + etcd on this machine's cores.

The chart is installed with ``helm`` and ``flashrl operator`` runs as the chart runs it (its arguments,
a token of its ServiceAccount). ``JOBS`` copies of the example (model and data as paths: no staging)
are created by concurrent clients. What the operator sent is read from the API server's own audit log
(level Metadata, the operator's user only), not counted by the operator: every request it made, by
verb and resource. Figures:

* jobs per second: first create to the last RayJob created (audit timestamps);
* per-job latency: the job's create to its RayJob's create (audit timestamps), p50 and p99;
* requests per new job: the operator's requests while the jobs were new, divided by ``JOBS``;
* requests per unchanged resync: the operator's requests over one resync interval with nothing
  changing, divided by ``JOBS``;
* the operator's RSS: peak while creating, and with every job known.

Run: ``.venv/bin/python -m bench`` (writes docs/benchmarks.md), or ``python -m bench.apiserver_bench``.
Needs ``make tools`` (the control plane).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import example_job
from bench.operator_bench import PeakRss, percentile
from flashrl_api.pins import load_pins

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the control-plane helpers the tests use (tests/envtest)

from envtest.chart import NAMESPACE as CHART_NAMESPACE  # noqa: E402
from envtest.chart import ready_for_jobs  # noqa: E402
from envtest.control_plane import ControlPlane, running  # noqa: E402
from envtest.operator import OperatorProcess, container_service_account  # noqa: E402

JOBS = int(os.environ.get("BENCH_REAL_JOBS", "1000"))
CONCURRENCY = 8
NAMESPACE = "bench"
#: The operator's resync period (OperatorConfig.resync_interval): one unchanged pass is measured.
RESYNC_S = 60.0
DEADLINE_S = float(os.environ.get("BENCH_DEADLINE_S", "1800"))

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # The operator's requests: it is the only ServiceAccount of the chart's namespace that calls.
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{CHART_NAMESPACE}"]},
        {
            "level": "Metadata",
            "verbs": ["create"],
            "resources": [{"group": "flashrl.dev", "resources": ["flashrljobs"]}],
        },
        {"level": "None"},
    ],
}


def _audit(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(errors="replace").splitlines():
        event = json.loads(line)
        if event.get("stage") == "ResponseComplete":
            events.append(event)
    return events


def _time(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00")).timestamp()


def _what(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
    return f"{event['verb']} {ref.get('resource', '?')}{sub}"


def measure() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        policy = root / "audit-policy.json"
        audit_log = root / "audit.log"
        policy.write_text(json.dumps(AUDIT_POLICY))
        args = (f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}", "--audit-log-format=json")
        with running(root / "control-plane", scheduler=False, apiserver_args=args) as plane:
            return _drive(plane, audit_log)


def _drive(plane: ControlPlane, audit_log: Path) -> dict[str, Any]:
    ready_for_jobs(plane)
    user = f"system:serviceaccount:{CHART_NAMESPACE}:{container_service_account(plane)}"
    plane.kubectl("create", "namespace", NAMESPACE)
    base = example_job()
    jobs = []
    for i in range(JOBS):
        job = json.loads(json.dumps(base))
        job["metadata"] = {"name": f"bench-{i:04d}", "namespace": NAMESPACE}
        jobs.append(job)
    operator = OperatorProcess(plane, "operator-bench")
    try:
        time.sleep(5)  # the operator's watches open; its start-up requests are not a new job's
        idle_rss = PeakRss(operator.popen.pid)._proc.memory_info().rss
        started_events = len(_audit(audit_log))
        with PeakRss(operator.popen.pid) as rss:
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                chunks = [jobs[i : i + 50] for i in range(0, len(jobs), 50)]
                list(pool.map(plane.apply_json, chunks))
            deadline = time.monotonic() + DEADLINE_S
            while True:
                events = _audit(audit_log)
                created = [
                    e for e in events if e["user"]["username"] == user and _what(e) == "create rayjobs"
                ]
                if len(created) >= JOBS:
                    break
                if time.monotonic() > deadline or operator.popen.poll() is not None:
                    raise RuntimeError(
                        f"{len(created)}/{JOBS} RayJobs after {DEADLINE_S:.0f} s:\n{operator.tail()}"
                    )
                time.sleep(2)
            time.sleep(5)  # the last jobs' status writes and Events
            new_events = [e for e in _audit(audit_log)[started_events:] if e["user"]["username"] == user]
            time.sleep(RESYNC_S + 5)
        settled = _audit(audit_log)
        resync_events = [
            e
            for e in settled[started_events + len(new_events) :]
            if e["user"]["username"] == user and e["verb"] not in ("watch",)
        ]
        rss_with_jobs = PeakRss(operator.popen.pid)._proc.memory_info().rss
    finally:
        operator.stop()
    job_created = {
        (e.get("objectRef") or {}).get("name"): _time(e)
        for e in settled
        if _what(e) == "create flashrljobs" and e["user"]["username"] != user
    }
    ray_created = {
        (e.get("objectRef") or {}).get("name"): _time(e) for e in settled if _what(e) == "create rayjobs"
    }
    latencies = [ray_created[n] - job_created[n] for n in job_created if n in ray_created]
    first, last = min(job_created.values()), max(ray_created.values())
    counted = [e for e in new_events if e["verb"] not in ("watch", "list")]
    return {
        "jobs_per_s": JOBS / (last - first),
        "wall_s": last - first,
        "p50_s": percentile(latencies, 0.5),
        "p99_s": percentile(latencies, 0.99),
        "per_new_job": len(counted) / JOBS,
        "new_breakdown": Counter(_what(e) for e in counted),
        "per_resync": len(resync_events) / JOBS,
        "resync_breakdown": Counter(_what(e) for e in resync_events),
        "idle_rss_mib": idle_rss / 2**20,
        "peak_rss_mib": rss.peak / 2**20,
        "rss_with_jobs_mib": rss_with_jobs / 2**20,
        "version": plane.version,
    }


def _breakdown(counter: Counter[str]) -> str:
    return ", ".join(f"{what} {n / JOBS:.2f}" for what, n in counter.most_common())


def run() -> str:
    """Measure once and return a markdown section."""
    r = measure()
    return "\n".join(
        [
            f"## Operator on the real API server: {JOBS:,} FlashRLJobs",
            "",
            f"kube-apiserver {r['version']} and etcd {load_pins().versions.etcd} as processes on this "
            f"machine (the same {os.cpu_count()} CPU(s) as the operator; {platform.machine()}, Python "
            f"{platform.python_version()}). The chart is installed with helm; `flashrl operator` runs with "
            f"its arguments and its ServiceAccount's token. {JOBS} copies of `examples/flashrljob.yaml` "
            f"(model and data as paths: no staging) are applied by {CONCURRENCY} concurrent clients. "
            "Requests are the API server's audit log of the operator's user (watches and the initial lists "
            "excluded). One run of `bench/apiserver_bench.py`.",
            "",
            "| figure | value |",
            "|---|---|",
            f"| new jobs per second (first create to last RayJob) | {r['jobs_per_s']:.1f} |",
            f"| wall time for {JOBS} jobs | {r['wall_s']:.1f} s |",
            f"| per-job latency, job created to RayJob created: p50 | {r['p50_s']:.2f} s |",
            f"| same, p99 | {r['p99_s']:.2f} s |",
            f"| operator requests per new job | {r['per_new_job']:.2f} |",
            f"| operator requests per job in one unchanged resync ({RESYNC_S:.0f} s) | "
            f"{r['per_resync']:.2f} |",
            f"| operator RSS: idle / peak while creating / with {JOBS} jobs | "
            f"{r['idle_rss_mib']:.0f} / {r['peak_rss_mib']:.0f} / {r['rss_with_jobs_mib']:.0f} MiB |",
            "",
            f"Per new job, by request: {_breakdown(r['new_breakdown'])}.",
            "",
            f"Per job in a resync, by request: {_breakdown(r['resync_breakdown'])}.",
            "",
        ]
    )


if __name__ == "__main__":
    print(run())
