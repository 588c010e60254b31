"""The operator against the real API server: kube-apiserver + etcd as processes on this machine's cores.

The chart is installed with ``helm`` and ``flashrl operator`` runs as the chart runs it (its arguments,
a token of its ServiceAccount). ``JOBS`` copies of the example (model and data as paths: no staging)
are created at once (``kubectl create`` of one list per 50, by concurrent clients). What the operator
sent is read from the API server's own audit log (:mod:`envtest.audit`: level Metadata, the
operator's user only), not counted by the operator: every request it made, whichever client made it.
Figures:

* new jobs per second: ``JOBS`` / (first job created to the last RayJob created, audit timestamps);
* per-job latency: the job's create to its RayJob's create (audit timestamps), p50 and p99;
* requests per new job: the operator's requests until the last RayJob and 5 s more, divided by
  ``JOBS`` (watches left out; the resync loop's passes that fall in that window are in it);
* requests per unchanged resync: the operator's requests over one resync interval with nothing
  changing, divided by how many jobs it read (each resync reconcile reads its job first);
* reconcile duration p50/p99, new and resync: from the operator's own histogram
  (``flashrl_operator_reconcile_duration_seconds``), interpolated in its buckets as Prometheus'
  ``histogram_quantile`` does;
* the operator's RSS: idle (watches open, no job), peak while creating, and with every job known.

``BENCH_BASELINE=<git revision>`` measures that revision's operator first, on a control plane of its
own, the same way (same chart, same machine, same run), and the section shows both side by side.

Run: ``BENCH_BASELINE=<rev> .venv/bin/python -m bench.apiserver_bench`` (this section alone, into
docs/benchmarks.md) or ``make bench`` (all sections). Needs ``make tools`` (the control plane).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from bench import example_job
from flashrl_api.pins import load_pins
from flashrl_operator.vocab.metrics import RECONCILE_DURATION

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the control-plane helpers the tests use (tests/envtest)
sys.path.insert(0, str(REPO / "scripts"))  # and what they share with `make dev-cluster`

from envtest import audit  # noqa: E402
from envtest.chart import NAMESPACE as CHART_NAMESPACE  # noqa: E402
from envtest.chart import ready_for_jobs, room_for_jobs  # noqa: E402
from envtest.control_plane import ControlPlane  # noqa: E402
from envtest.operator import OperatorProcess, container_service_account  # noqa: E402

DOC = REPO / "docs" / "benchmarks.md"
TITLE = "## Operator on the real API server"
JOBS = int(os.environ.get("BENCH_REAL_JOBS", "1000"))
BASELINE = os.environ.get("BENCH_BASELINE", "")
CONCURRENCY = 8
CHUNK = 50
NAMESPACE = "bench"
#: The operator's resync period (OperatorConfig.resync_interval): one unchanged pass is measured.
RESYNC_S = 60.0
DEADLINE_S = float(os.environ.get("BENCH_DEADLINE_S", "1800"))


class PeakRss:
    """Samples a process's RSS every 50 ms in a thread and keeps the peak."""

    def __init__(self, pid: int) -> None:
        self._proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        return int(self._proc.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.now())
            except psutil.Error:
                return
            self._stop.wait(0.05)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


_BUCKET = re.compile(RECONCILE_DURATION + r'_bucket\{le="([^"]+)"\} ([0-9.e+]+)')


def buckets(port: int) -> dict[float, float]:
    """The operator's reconcile-duration histogram: cumulative count per upper bound."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {float(le): float(n) for le, n in _BUCKET.findall(text)}


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """The q-quantile of the observations between two scrapes, linear within a bucket (as Prometheus)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(bounds, counts, strict=True):
        if cumulative >= rank:
            if bound == float("inf"):
                return float("inf")  # beyond the last finite bucket: only a lower bound is known
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cumulative
    return lower


def checkout(revision: str, into: Path) -> Path:
    """``operator/src``, ``jobs/src`` and what they link to, of ``revision`` (a plain export)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "operator/src", "jobs/src", "images", "examples"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def measure(source: Path | None = None) -> dict[str, Any]:
    """One run on a control plane of its own; ``source``: another revision's code (see :func:`checkout`)."""
    with tempfile.TemporaryDirectory() as tmp, audit.audited(Path(tmp)) as (plane, log):
        return _drive(plane, log, source)


def import_rss_mib(*modules: str) -> float:
    """RSS of a fresh interpreter of this venv after importing ``modules`` (none: a bare interpreter)."""
    code = "import psutil" + "".join(f", {m}" for m in modules)
    code += "; print(psutil.Process().memory_info().rss)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout) / 2**20


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _drive(plane: ControlPlane, log: Path, source: Path | None) -> dict[str, Any]:
    ready_for_jobs(plane)
    user = f"system:serviceaccount:{CHART_NAMESPACE}:{container_service_account(plane)}"
    plane.kubectl("create", "namespace", NAMESPACE)
    room_for_jobs(plane, NAMESPACE)  # the claims and a GPU node the operator's fit check asks for
    base = example_job()
    jobs = []
    for i in range(JOBS):
        job = json.loads(json.dumps(base))
        job["metadata"] = {"name": f"bench-{i:04d}", "namespace": NAMESPACE}
        jobs.append(job)
    operator = OperatorProcess(plane, "operator-bench", source=source)
    try:
        time.sleep(10)  # the operator's watches open; its start-up requests are not a new job's
        rss = PeakRss(operator.popen.pid)
        idle_rss = rss.now()
        started = len(audit.events(log))
        h0 = buckets(operator.metrics_port)
        server = next(p.popen.pid for p in plane.processes if p.name == "kube-apiserver")
        etcd = next(p.popen.pid for p in plane.processes if p.name == "etcd")
        cpu0 = [cpu_seconds(pid) for pid in (operator.popen.pid, server, etcd)]

        def create(chunk: list[dict[str, Any]]) -> None:
            body = json.dumps({"apiVersion": "v1", "kind": "List", "items": chunk})
            plane.kubectl("create", "-f", "-", stdin=body)

        with rss, ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(create, [jobs[i : i + CHUNK] for i in range(0, len(jobs), CHUNK)]))
            deadline = time.monotonic() + DEADLINE_S
            while True:
                made = [e for e in audit.by(user, audit.events(log)) if audit.creates(e, "rayjobs")]
                if len(made) >= JOBS:
                    break
                if time.monotonic() > deadline or operator.popen.poll() is not None:
                    raise RuntimeError(
                        f"{len(made)}/{JOBS} RayJobs after {DEADLINE_S:.0f} s:\n{operator.tail()}"
                    )
                time.sleep(2)
            time.sleep(5)  # the last jobs' status writes and Events
        creating = audit.events(log)[started:]
        new_requests = audit.by(user, creating)
        cpu1 = [cpu_seconds(pid) for pid in (operator.popen.pid, server, etcd)]
        load = os.getloadavg()[1]  # the machine's load over the last 5 minutes (others' processes too)
        h1 = buckets(operator.metrics_port)
        time.sleep(RESYNC_S + 5)
        settled = audit.events(log)
        resync_requests = audit.by(user, settled[started + len(creating) :])
        h2 = buckets(operator.metrics_port)
        rss_with_jobs = rss.now()
    finally:
        operator.stop()
    job_created = {
        (e.get("objectRef") or {}).get("name"): audit.when(e)
        for e in settled
        if audit.creates(e, "flashrljobs") and e["user"]["username"] != user
    }
    ray_created = {
        (e.get("objectRef") or {}).get("name"): audit.when(e)
        for e in settled
        if audit.creates(e, "rayjobs") and e["user"]["username"] == user
    }
    latencies = [ray_created[n] - job_created[n] for n in job_created if n in ray_created]
    first, last = min(job_created.values()), max(ray_created.values())
    resynced = sum(1 for e in resync_requests if audit.what(e) == "get flashrljobs")
    return {
        "jobs_per_s": JOBS / (last - first),
        "wall_s": last - first,
        "p50_s": percentile(latencies, 0.5),
        "p99_s": percentile(latencies, 0.99),
        "per_new_job": len(new_requests) / JOBS,
        "new_breakdown": Counter(audit.what(e) for e in new_requests),
        "resynced": resynced,
        "per_resync": len(resync_requests) / max(1, resynced),
        "resync_breakdown": Counter(audit.what(e) for e in resync_requests),
        "reconcile_new_p50_s": histogram_quantile(0.5, h0, h1),
        "reconcile_new_p99_s": histogram_quantile(0.99, h0, h1),
        "reconcile_resync_p50_s": histogram_quantile(0.5, h1, h2),
        "reconcile_resync_p99_s": histogram_quantile(0.99, h1, h2),
        "operator_cpu_ms": 1000 * (cpu1[0] - cpu0[0]) / JOBS,
        "apiserver_cpu_ms": 1000 * (cpu1[1] - cpu0[1]) / JOBS,
        "etcd_cpu_ms": 1000 * (cpu1[2] - cpu0[2]) / JOBS,
        "idle_rss_mib": idle_rss / 2**20,
        "peak_rss_mib": rss.peak / 2**20,
        "rss_with_jobs_mib": rss_with_jobs / 2**20,
        "load5": load,
        "last_bucket": max((b for b in h2 if b != float("inf")), default=0.0),
        "version": plane.version,
        # What importing costs, apart from any job: kopf (which imports kubernetes_asyncio.client) and
        # the client's generated models and APIs alone, above a bare interpreter with psutil.
        "bare_rss_mib": import_rss_mib(),
        "kopf_rss_mib": import_rss_mib("kopf"),
        "client_rss_mib": import_rss_mib("kubernetes_asyncio.client"),
    }


def _breakdown(counter: Counter[str], per: float) -> str:
    return ", ".join(f"`{what}` {n / per:.2f}" for what, n in sorted(counter.items()))


ROWS: list[tuple[str, str, str]] = [
    ("new jobs per second (first job created to last RayJob created)", "jobs_per_s", "{:.1f}"),
    (f"wall time for {JOBS} jobs", "wall_s", "{:.1f} s"),
    ("per-job latency, job created to RayJob created: p50", "p50_s", "{:.1f} s"),
    ("same, p99", "p99_s", "{:.1f} s"),
    ("operator requests per new job", "per_new_job", "{:.2f}"),
    ("operator requests per job in an unchanged resync", "per_resync", "{:.2f}"),
    ("CPU per new job: the operator", "operator_cpu_ms", "{:.0f} ms"),
    ("CPU per new job: kube-apiserver", "apiserver_cpu_ms", "{:.0f} ms"),
    ("CPU per new job: etcd", "etcd_cpu_ms", "{:.0f} ms"),
    ("reconcile duration, new jobs: p50", "reconcile_new_p50_s", "{:.2f} s"),
    ("same, p99", "reconcile_new_p99_s", "{:.2f} s"),
    ("reconcile duration, unchanged resync: p50", "reconcile_resync_p50_s", "{:.3f} s"),
    ("same, p99", "reconcile_resync_p99_s", "{:.3f} s"),
    ("operator RSS idle (watches open, no job)", "idle_rss_mib", "{:.0f} MiB"),
    ("operator RSS peak while creating", "peak_rss_mib", "{:.0f} MiB"),
    (f"operator RSS with {JOBS} jobs known (after a resync)", "rss_with_jobs_mib", "{:.0f} MiB"),
]


def _cell(fmt: str, value: float, last_bucket: float) -> str:
    if value == float("inf"):
        return f"> {last_bucket:g} s"
    return fmt.format(value)


def section(now: dict[str, Any], before: dict[str, Any] | None) -> str:
    lines = [
        f"{TITLE}: {JOBS:,} FlashRLJobs",
        "",
        f"kube-apiserver {now['version']} and etcd {load_pins().versions.etcd} as processes on this machine "
        f"(the same {os.cpu_count()} CPU(s) as the operator; {platform.machine()}, Python "
        f"{platform.python_version()}). The chart is installed with helm; `flashrl operator` runs with its "
        f"arguments and its ServiceAccount's token. {JOBS} copies of `examples/flashrljob.yaml` (model and "
        f"data as paths: no staging) are created at once by {CONCURRENCY} concurrent `kubectl create` of "
        f"{CHUNK} each. Requests are counted from the API server's audit log of the operator's user "
        "(watches left out): the server's own record of every request, whichever client in the operator "
        "sent it, with nothing added to the operator. Reconcile durations are the operator's histogram "
        "(bucket-interpolated). One run of "
        + (f"`BENCH_BASELINE={BASELINE} " if BASELINE else "`")
        + f"BENCH_REAL_JOBS={JOBS} python -m bench.apiserver_bench`"
        + (
            f"; *before* is commit {BASELINE} measured in the same run, the same way, on its own control "
            "plane (same chart)."
            if before is not None
            else "."
        ),
        "",
    ]
    if before is None:
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {label} | {_cell(fmt, now[key], now['last_bucket'])} |" for label, key, fmt in ROWS]
    else:
        lines += ["| figure | before | now | now / before |", "|---|---|---|---|"]
        for label, key, fmt in ROWS:
            finite = before[key] and abs(before[key]) != float("inf") and abs(now[key]) != float("inf")
            ratio = f"{now[key] / before[key]:.2f}" if finite else "n/a"
            old, new = (
                _cell(fmt, before[key], before["last_bucket"]),
                _cell(fmt, now[key], now["last_bucket"]),
            )
            lines.append(f"| {label} | {old} | {new} | {ratio} |")
    lines += ["", f"Per new job, by request (now): {_breakdown(now['new_breakdown'], JOBS)}."]
    if before is not None:
        lines += ["", f"Per new job, by request (before): {_breakdown(before['new_breakdown'], JOBS)}."]
    lines += [
        "",
        f"Per job in a resync, by request (now; {now['resynced']} job reconciles in the window): "
        f"{_breakdown(now['resync_breakdown'], max(1, now['resynced']))}.",
        "",
        *_reading(now, before),
    ]
    return "\n".join(lines)


def _reading(now: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    """What the figures say, and what limits them (from this run's own numbers)."""
    cpu = now["operator_cpu_ms"] + now["apiserver_cpu_ms"] + now["etcd_cpu_ms"]
    cores = os.cpu_count() or 1
    text = [
        "How to read it:",
        "",
        "* A new job sends one create (`POST`) per child, its status patch and one Event, and reads "
        "nothing (`tests/integration/test_apiserver_requests.py` counts one job: 8). The reads above 8 "
        "per job are the operator-wide resync passes (every 60 s, a read of the job and of each "
        "child) that fell inside the creation window.",
        f"* Throughput is bound by CPU: per new job the operator, kube-apiserver and etcd used {cpu:.0f} ms "
        f"together, on {cores} cores they share with each other and with whatever else runs (load "
        f"average {now['load5']:.1f} during the run), a ceiling of about {1000 * cores / cpu:.0f} jobs/s "
        "with the cores to themselves. Fewer requests cut the server's share, but each remaining one is "
        "a write (admission, etcd), and the operator's own share (parsing, rendering, kopf's event "
        "handling, JSON) is untouched by the request count.",
        "* RSS with the jobs known is the peak of the burst, kept: CPython keeps the memory arenas a "
        "peak needed (freed objects leave them fragmented, not returned). What waits during the burst is "
        "small: kopf's handler hands each job to the operator's intake (`run/intake.py`) and returns, and "
        "a job waiting for one of the `--max-concurrent-reconciles` turns (default 16) is held once, as "
        "compact JSON without `managedFields`. What is left above idle is kopf's own: it decodes every "
        "watch event as it arrives (the jobs', then their RayJobs' and status changes) and queues it "
        "for that object's worker, and while the operator's CPU is busy reconciling, those queues grow. "
        "Traced once with `tracemalloc` (2026-12-05; tracing slows the operator about fivefold, so its "
        "backlog was larger than in an untraced run), the largest live group at the peak was 17 MiB of "
        "decoded watch events inside kopf, then 5 MiB of TLS read buffers (42 connections to the API "
        "server); the intake's waiting jobs were about 1 MiB.",
        f"* Most of the idle {now['idle_rss_mib']:.0f} MiB is imports, paid before any job: `import "
        f"kopf` takes {now['kopf_rss_mib'] - now['bare_rss_mib']:.0f} MiB above a bare interpreter "
        f"({now['bare_rss_mib']:.0f} MiB), {now['client_rss_mib'] - now['bare_rss_mib']:.0f} MiB of it "
        "`kubernetes_asyncio.client` (every generated model and API of the Kubernetes client; kopf "
        "imports it whenever it is installed, and the operator's I/O layer is built on it). Running "
        "with `-OO` would drop their docstrings (about 12 MiB; one run on 2026-12-05: 142 MiB with "
        "1,000 jobs), but `-O` also drops `assert`, and verl's config checks are asserts "
        "(three refusals of `tests/unit/jobs/test_verl_checks.py` pass silently under "
        "`PYTHONOPTIMIZE=1`), so the operator runs without it. Measured on 2026-12-05, one run each, "
        "and not adopted: `PYTHONMALLOC=malloc` (166 MiB) and `--max-concurrent-reconciles 8` "
        "(153 MiB at 11 jobs/s, against 158 MiB at 16 jobs/s with the default in that day's runs); "
        "on 2026-12-06, two runs each of this module's `measure()` alternating with the default, "
        "`MALLOC_ARENA_MAX=2` (159 and "
        "160 MiB, against 160 and 161 MiB).",
        "* A new job's reconcile duration is its work once admitted by that bound (the wait before it "
        "is not in the histogram); an unchanged resync goes through the same queue and bound.",
        "",
    ]
    if before is not None:
        text[-1:-1] = [
            f"* Against {BASELINE}: {before['per_new_job']:.1f} -> {now['per_new_job']:.1f} requests per "
            f"new job, {before['jobs_per_s']:.1f} -> {now['jobs_per_s']:.1f} jobs/s, "
            f"{before['rss_with_jobs_mib']:.0f} -> {now['rss_with_jobs_mib']:.0f} MiB with the jobs known.",
        ]
    return text


def run() -> str:
    """Measure (the baseline first, when given) and return a markdown section."""
    before = None
    if BASELINE:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"  baseline: {BASELINE} ...", file=sys.stderr)
            before = measure(checkout(BASELINE, Path(tmp)))
    print("  this checkout ...", file=sys.stderr)
    return section(measure(), before)


def replace_section(text: str, new: str, title: str = TITLE) -> str:
    """``text`` (docs/benchmarks.md) with the section headed ``title`` (this module's by default)
    replaced by ``new``, or ``new`` appended."""
    start = text.find(title)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + new
    end = text.find("\n## ", start + len(title))
    return text[:start] + new + ("\n" + text[end + 1 :] if end >= 0 else "")


if __name__ == "__main__":
    result = run()
    print(result)
    DOC.write_text(replace_section(DOC.read_text(encoding="utf-8"), result), encoding="utf-8")
    print(f"wrote the section into {DOC}", file=sys.stderr)
