"""Counting the operator's requests with the API server's own audit log.

The server logs every request it answered, whoever made it and through whichever client (kopf's
watches, the operator's ``KubeClient``, a retry after a timeout): a count from it cannot miss a code
path the way a counter inside the operator could, and needs nothing in the operator. The policy logs
at level Metadata (verb, user, object, no bodies) the requests of the chart's ServiceAccounts and the
creation of FlashRLJobs by anyone (the start of a job's clock), nothing else.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from envtest.chart import NAMESPACE as CHART_NAMESPACE
from envtest.control_plane import OPERATOR_USER, ControlPlane, running

#: The controller-manager's user (``ControlPlane._tokens``).
CONTROLLER_MANAGER = "system:kube-controller-manager"
#: The namespaces the integration tests run jobs in (emptied before every test).
TEST_NAMESPACES = ("team-a", "other-team")
#: The verbs that change objects: every such request in the tests' namespaces is logged, whoever sent it.
WRITE_VERBS = ["create", "patch", "update", "delete", "deletecollection"]

SESSION_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # Everything an operator run by a test asks (watches included: their ResponseStarted stage
        # says the watch is open), and every write in the tests' namespaces, whoever made it.
        {"level": "Metadata", "users": [OPERATOR_USER]},
        {"level": "Metadata", "verbs": WRITE_VERBS, "namespaces": list(TEST_NAMESPACES)},
        {"level": "None"},
    ],
}

POLICY: dict[str, Any] = {
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


def session_args(root: Path) -> tuple[tuple[str, ...], Path]:
    """kube-apiserver arguments for the test run's control plane's audit log, and the log's path."""
    root.mkdir(parents=True, exist_ok=True)
    policy, log = root / "session-audit-policy.json", root / "session-audit.log"
    policy.write_text(json.dumps(SESSION_POLICY))
    return (f"--audit-policy-file={policy}", f"--audit-log-path={log}", "--audit-log-format=json"), log


class AuditLog:
    """The requests the server logged since :meth:`mark`: what a test asks of "who did what"."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        """Forget what was logged so far (a test's start)."""
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def entries(self) -> list[dict[str, Any]]:
        """Every stage logged since the mark (a line still being written is left for the next read)."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        found = []
        for line in data.decode(errors="replace").splitlines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return found

    def completed(self) -> list[dict[str, Any]]:
        return [e for e in self.entries() if e.get("stage") == "ResponseComplete"]

    def creations(self) -> Counter[tuple[str, str, str]]:
        """How often each ``(resource, namespace, name)`` was created (create, or an apply that made it),
        by anyone but the control plane's own controllers (a namespace's ``default`` ServiceAccount
        and ``kube-root-ca.crt``, a Job's pods)."""
        made: Counter[tuple[str, str, str]] = Counter()
        for event in self.completed():
            ref = event.get("objectRef") or {}
            if event["user"]["username"] == CONTROLLER_MANAGER:
                continue
            if creates(event, ref.get("resource", "")):
                made[(ref["resource"], ref.get("namespace", ""), ref.get("name", ""))] += 1
        return made

    def requests(self, user: str, resource: str) -> list[dict[str, Any]]:
        """``user``'s completed requests on ``resource`` (subresources included)."""
        return [
            e
            for e in self.completed()
            if e["user"]["username"] == user and (e.get("objectRef") or {}).get("resource") == resource
        ]

    def watching(self, user: str, resource: str) -> bool:
        """Whether ``user`` opened a watch of ``resource`` since the mark."""
        return any(
            e.get("stage") == "ResponseStarted"
            and e["verb"] == "watch"
            and e["user"]["username"] == user
            and (e.get("objectRef") or {}).get("resource") == resource
            for e in self.entries()
        )


@contextmanager
def audited(root: Path, *, scheduler: bool = False) -> Iterator[tuple[ControlPlane, Path]]:
    """A control plane of its own whose API server writes the audit log (returned with it)."""
    root.mkdir(parents=True, exist_ok=True)
    policy, log = root / "audit-policy.json", root / "audit.log"
    policy.write_text(json.dumps(POLICY))
    args = (f"--audit-policy-file={policy}", f"--audit-log-path={log}", "--audit-log-format=json")
    with running(root / "control-plane", scheduler=scheduler, apiserver_args=args) as plane:
        yield plane, log


def events(log: Path) -> list[dict[str, Any]]:
    """Every completed request in the log, in the order the server finished them."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text(errors="replace").splitlines():
        event = json.loads(line)
        if event.get("stage") == "ResponseComplete":
            found.append(event)
    return found


def when(event: dict[str, Any]) -> float:
    """When the server finished the request (seconds since the epoch)."""
    return datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00")).timestamp()


def what(event: dict[str, Any]) -> str:
    """``verb resource[/subresource]``, e.g. ``create rayjobs``, ``patch flashrljobs/status``."""
    ref = event.get("objectRef") or {}
    sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
    return f"{event['verb']} {ref.get('resource', '?')}{sub}"


def creates(event: dict[str, Any], resource: str) -> bool:
    """Whether the request created an object of ``resource`` (a create, or a server-side apply that
    created it: either answers 201)."""
    return (
        (event.get("objectRef") or {}).get("resource") == resource
        and not (event.get("objectRef") or {}).get("subresource")
        and event["verb"] in ("create", "patch", "update")
        and (event.get("responseStatus") or {}).get("code") == 201
    )


def by(user: str, found: list[dict[str, Any]], namespace: str | None = None) -> list[dict[str, Any]]:
    """The requests ``user`` made (in ``namespace``, when given), watches left out: a watch is one
    long request the operator opens at start, not a request per job."""
    return [
        e
        for e in found
        if e["user"]["username"] == user
        and e["verb"] != "watch"
        and (namespace is None or (e.get("objectRef") or {}).get("namespace") == namespace)
    ]
