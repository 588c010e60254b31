"""How many requests the operator makes for a new job and for an unchanged resync, on the real server.

Counted by kube-apiserver's audit log (:mod:`envtest.audit`): every request the operator's
ServiceAccount made in the job's namespace, whichever client made it, watches left out. The operator
runs as the chart runs it (``flashrl operator``, the chart's arguments and token). A count, not a
timing: the figures for many jobs at once are ``make bench``'s.

* A new job: a read of each claim it mounts and one LIST of the GPU nodes (whether it can ever start:
  the chart runs the operator with its fit check; the nodes are cluster-scoped, outside the namespace
  counted here), one read of the job itself, right before the first write (a job deleted meanwhile
  gets no child; a newer version is computed again), then each child is created (one ``POST`` each,
  no read of a child before), then one status patch and one Event. At most 12 requests (three claims,
  the job's read, six children, the status, the Event).
* The periodic resync of the unchanged job (the operator-wide loop, every 60 s): the job and each
  child read once, nothing written.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_harness import job_manifest

from envtest import audit
from envtest.chart import DEFAULT_CLAIMS, ready_for_jobs, room_for_jobs
from envtest.chart import NAMESPACE as CHART_NAMESPACE
from envtest.control_plane import ControlPlane, require_binaries
from envtest.operator import OperatorProcess, container_service_account
from flashrl_api import parse_job
from flashrl_operator.render import render
from flashrl_operator.run.handlers import OperatorConfig

NAMESPACE = "counted"
JOB = "counted"
#: The operator-wide resync loop's period, plus room for the operator's start.
RESYNC_WAIT_S = OperatorConfig().resync_interval + 60.0
#: The three claims the job mounts, the job's read before the first write, six children (ServiceAccount,
#: Role, RoleBinding, ConfigMap, NetworkPolicy, RayJob), the status, an Event.
NEW_JOB_BUDGET = 12


class Audited:
    def __init__(self, plane: ControlPlane, log: Path) -> None:
        self.plane = plane
        self.log = log
        self.user = f"system:serviceaccount:{CHART_NAMESPACE}:{container_service_account(plane)}"

    def operator_requests(self) -> list[dict[str, Any]]:
        return audit.by(self.user, audit.events(self.log), NAMESPACE)

    def wait(self, probe: Any, what: str, timeout: float, proc: OperatorProcess) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = probe()
            if found:
                return found
            time.sleep(0.5)
        raise AssertionError(f"no {what} after {timeout:.0f} s; operator log:\n{proc.tail()}")


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audited]:
    """A control plane of this module's own: its API server writes the audit log the counts come from."""
    require_binaries()
    with audit.audited(Path(tmp_path_factory.mktemp("audited"))) as (plane, log):
        ready_for_jobs(plane)
        plane.kubectl("create", "namespace", NAMESPACE)
        room_for_jobs(plane, NAMESPACE)  # the claims and a GPU node: what the fit check asks
        yield Audited(plane, log)


def _is_job_read(event: dict[str, Any]) -> bool:
    return audit.what(event) == "get flashrljobs" and (event.get("objectRef") or {}).get("name") == JOB


def test_a_new_job_and_an_unchanged_resync_cost_few_requests(audited: Audited) -> None:
    operator = OperatorProcess(audited.plane, "operator-counted")
    try:
        manifest = job_manifest(JOB, namespace=NAMESPACE)
        audited.plane.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
        audited.wait(
            lambda: audited.plane.kubectl("get", "rayjob", JOB, "-n", NAMESPACE, check=False).returncode == 0,
            "RayJob",
            120.0,
            operator,
        )
        # The first resync reads the job after the new job's writes: everything the operator sent
        # before that is the new job's. The resync's own reads follow it.
        audited.wait(
            lambda: first_resync_read(audited) is not None,
            "resync",
            RESYNC_WAIT_S,
            operator,
        )
        # Until that resync has read the job and each child; then the operator stops (it finishes the
        # reconcile in hand first), which ends what the log can hold. The next resync is a minute away.
        reads = len(render_children()) + 1
        audited.wait(
            lambda: len(audited.operator_requests()) - (first_resync_read(audited) or 0) >= reads,
            "the resync's reads",
            120.0,
            operator,
        )
        operator.stop()
        requests = audited.operator_requests()
    finally:
        operator.stop()

    start = first_resync_read(audited)
    assert start is not None
    new, resync = requests[:start], requests[start:]
    new_counts = Counter(audit.what(e) for e in new)
    resync_counts = Counter(audit.what(e) for e in resync)

    children = len(render_children())
    assert new_counts["create rayjobs"] == 1, new_counts
    creates = sum(n for w, n in new_counts.items() if w.startswith("create "))
    assert creates == children + 1, new_counts  # each child, and the Event
    reads = {w for w in new_counts if w.startswith("get ")}
    assert reads == {"get flashrljobs", "get persistentvolumeclaims"}, new_counts
    assert new_counts["get flashrljobs"] == 1, f"one read of the job: {new_counts}"
    assert new_counts["get persistentvolumeclaims"] == len(DEFAULT_CLAIMS), (
        f"each claim read once: {new_counts}"
    )
    first_write = next(i for i, e in enumerate(new) if e["verb"] not in ("get", "list"))
    assert _is_job_read(new[first_write - 1]), "the job is read right before its first write"
    assert len(new) <= NEW_JOB_BUDGET, f"{len(new)} requests for a new job: {new_counts}"

    assert {e["verb"] for e in resync} == {"get"}, f"an unchanged resync writes nothing: {resync_counts}"
    assert len(resync) == children + 1, f"the job and each child read once: {resync_counts}"


def first_resync_read(audited: Audited) -> int | None:
    """Where the first resync starts in the operator's requests: its read of the job, the first after
    the new job's writes (whose reconcile read the job once, before them), or ``None`` yet."""
    requests = audited.operator_requests()
    writes = [i for i, e in enumerate(requests) if e["verb"] not in ("get", "list")]
    if not writes:
        return None
    return next((i for i, e in enumerate(requests) if i > writes[0] and _is_job_read(e)), None)


def render_children() -> tuple[object, ...]:
    """The children the operator renders for the test's job (six with the chart's defaults)."""
    manifest = job_manifest(JOB, namespace=NAMESPACE)
    job = parse_job(manifest | {"metadata": {"name": JOB, "namespace": NAMESPACE}})
    return tuple(render(job).children)
