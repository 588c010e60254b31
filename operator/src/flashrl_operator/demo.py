"""``flashrl demo``: the main job's whole lifecycle with no cluster, as a readable timeline.

The operator here is the real one (the same kopf handlers, reconciler and status mapping that run in
a cluster). Its surroundings are emulated in-process and the output says so: the Kubernetes API
server is kmock's in-memory emulator on 127.0.0.1, and KubeRay (plus the launcher's progress
reports) is played by :class:`~flashrl_operator.emulation.KubeRayStandIn`, which creates the RayCluster
and patches RayJob and RayCluster status the way KubeRay would (their pods' startup is made up step by
step; the one pod that exists is a GPU worker the emulated scheduler cannot place for a while).
Every wait has a deadline; on any failure the demo says what it was waiting for and exits non-zero.
It always stops the operator thread and the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TextIO

import kmock

from flashrl_api import SpecError, load_documents, parse_job
from flashrl_operator._yaml import dump
from flashrl_operator.children import SPEC_ANNOTATION
from flashrl_operator.emulation import (
    CLUSTER_STARTING,
    JOBS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUBMITTED,
    SUCCEEDED,
    TRAINING,
    ApiClient,
    EmulatedApiServer,
    KubeRayStandIn,
    eventually,
    unschedulable,
    watch_started,
)
from flashrl_operator.handlers import OperatorConfig
from flashrl_operator.runner import OperatorThread

#: Training steps the emulated launcher reports before KubeRay (emulated) reports success.
DEMO_STEPS: Final = 3
#: The whole lifecycle must complete within this many seconds.
DEFAULT_DEADLINE: Final = 45.0


class Timeline:
    """Prints what happened, with the time since the demo started."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._t0 = time.monotonic()
        self._phase: str | None = None
        self._conditions: dict[str, tuple[str, str, str]] = {}
        self._events: set[str] = set()
        self._objects: set[tuple[str, str, str]] = set()

    def say(self, who: str, text: str) -> None:
        """One timeline line."""
        print(f"[{time.monotonic() - self._t0:6.2f}s] {who:<22} {text}", file=self._out, flush=True)

    def objects(self, server: EmulatedApiServer) -> None:
        """Report objects created since the last call (in creation order)."""
        for key in list(server.creations):
            plural, namespace, name = key
            if key in self._objects or plural == "events":
                continue
            self._objects.add(key)
            who = {"flashrljobs": "kubectl apply", "rayclusters": "KubeRay (emulated)"}.get(
                plural, "operator"
            )
            self.say(who, f"created {plural[:-1]} {namespace}/{name}")

    def status(self, status: Mapping[str, Any]) -> None:
        """Report a phase change and conditions that changed status or reason.

        ClusterReady is also reported when only its message changes: that is the pod progress.
        """
        phase = status.get("phase")
        if phase and phase != self._phase:
            self.say("operator", f"phase {self._phase or '-'} -> {phase}: {status.get('message', '')}")
            self._phase = str(phase)
        for cond in status.get("conditions") or []:
            ctype = str(cond.get("type"))
            detail = str(cond.get("message") or "") if ctype == "ClusterReady" else ""
            now = (str(cond.get("status")), str(cond.get("reason")), detail)
            if self._conditions.get(ctype) != now:
                self._conditions[ctype] = now
                self.say(
                    "operator", f"  condition {ctype}={now[0]} ({now[1]})" + (f": {detail}" if detail else "")
                )

    def events(self, events: list[dict[str, Any]]) -> None:
        """Report Events not reported yet."""
        for event in events:
            name = str(event.get("metadata", {}).get("name"))
            if name in self._events:
                continue
            self._events.add(name)
            self.say("event", f"{event.get('type')} {event.get('reason')}: {event.get('message')}")


class DemoFailedError(Exception):
    """The lifecycle did not complete; the message says where it stopped."""


#: What the scheduler says when every GPU node is busy (the demo's one stuck pod).
NO_FREE_GPU: Final = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


async def _lifecycle(manifest: dict[str, Any], out: TextIO, deadline: float) -> None:
    namespace = str(manifest["metadata"].get("namespace") or "default")
    manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    name = str(manifest["metadata"]["name"])
    async with EmulatedApiServer() as server, kmock.Server(server) as http:
        url = str(http.url).rstrip("/")
        print(
            "NOTE: the Kubernetes API server and KubeRay are EMULATED in this demo "
            f"(kmock's in-memory API server at {url}; the RayCluster, its status and one stuck pod are\n"
            "      made the way KubeRay and the scheduler would; no container runs).\n"
            "      The operator is the real one: the same handlers, reconciler and status mapping as "
            "in a cluster.\n",
            file=out,
        )
        timeline = Timeline(out)
        config = OperatorConfig(
            server=url,
            bind_host="127.0.0.1",
            metrics_port=0,
            health_port=None,
            scanning=False,
            retry_delay=0.5,
            request_timeout=10.0,
            # Pods are not watched: a stuck pod shows up at the next resync, every second here.
            resync_interval=1.0,
        )
        operator = OperatorThread(config)
        api = ApiClient(url)
        try:
            await asyncio.to_thread(operator.start)
            timeline.say("operator", f"started (watching all namespaces; metrics at {operator.metrics_url})")
            await watch_started(server, JOBS_RESOURCE)
            await watch_started(server, RAY_JOBS_RESOURCE)
            kuberay = KubeRayStandIn(api)
            await _play(server, api, kuberay, timeline, manifest, namespace, name, deadline)
            ray_job = await api.get(RAY_JOBS_RESOURCE, namespace, name)
            if ray_job is not None:
                print(
                    "\nThe RayJob the operator rendered (as stored by the API server, status omitted):\n",
                    file=out,
                )
                shown = {k: v for k, v in ray_job.items() if k != "status"}
                annotations = shown.get("metadata", {}).get("annotations") or {}
                if SPEC_ANNOTATION in annotations:  # one long JSON line: summarise it
                    size = len(str(annotations[SPEC_ANNOTATION]))
                    annotations[SPEC_ANNOTATION] = f"<the spec's immutable part as JSON, {size} bytes>"
                print(dump(shown), file=out)
        finally:
            await api.close()
            await asyncio.to_thread(operator.stop)


async def _play(
    server: EmulatedApiServer,
    api: ApiClient,
    kuberay: KubeRayStandIn,
    timeline: Timeline,
    manifest: dict[str, Any],
    namespace: str,
    name: str,
    deadline: float,
) -> None:
    async def observe() -> dict[str, Any]:
        job = await api.get(JOBS_RESOURCE, namespace, name)
        status = dict((job or {}).get("status") or {})
        timeline.objects(server)
        timeline.status(status)
        events = await api.list("v1/events", namespace)
        timeline.events([e for e in events if e.get("involvedObject", {}).get("name") == name])
        return status

    async def until(what: str, check: Any) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            status = await observe()
            return status if check(status) else None

        remaining = max(1.0, deadline - time.monotonic())
        try:
            return await eventually(probe, what, remaining)
        except TimeoutError as exc:
            raise DemoFailedError(str(exc)) from None

    def phase(wanted: str) -> Any:
        return lambda s: s.get("phase") == wanted

    def ready(s: Mapping[str, Any]) -> bool:
        return any(c["type"] == "ClusterReady" and c["status"] == "True" for c in s.get("conditions") or [])

    def cluster_says(text: str) -> Any:
        return lambda s: any(
            c["type"] == "ClusterReady" and text in str(c.get("message")) for c in s.get("conditions") or []
        )

    await api.create(JOBS_RESOURCE, manifest)
    await until(
        "the operator to create the RayJob", lambda _s: ("rayjobs", namespace, name) in server.creations
    )
    await until("phase Pending", phase("Pending"))
    total = int(manifest.get("spec", {}).get("training", {}).get("totalSteps", 150))
    workers = int(manifest.get("spec", {}).get("resources", {}).get("nodes", 1))
    timeline.say("KubeRay (emulated)", f"creating the Ray cluster: {_describe(CLUSTER_STARTING)}")
    await kuberay.set_status(namespace, name, CLUSTER_STARTING)
    await until("phase Starting", phase("Starting"))
    await until("the RayCluster's pod progress in ClusterReady", cluster_says("head pod not created yet"))
    timeline.say("KubeRay (emulated)", "RayCluster status: head pod ready")
    await kuberay.cluster_pods(namespace, name, head_ready=True, ready_workers=0)
    await until("ClusterReady to show the head pod ready", cluster_says("head pod ready"))
    timeline.say("scheduler (emulated)", f"a GPU worker pod does not fit yet: {NO_FREE_GPU}")
    await kuberay.stuck_pod(namespace, name, unschedulable(NO_FREE_GPU))
    await until("the job to name the unschedulable pod", lambda s: s.get("reason") == "PodUnschedulable")
    timeline.say(
        "KubeRay (emulated)",
        f"GPU nodes free up; RayCluster status: {workers}/{workers} GPU worker pods ready",
    )
    await kuberay.delete_pods(namespace, name)
    await kuberay.cluster_pods(namespace, name, head_ready=True, ready_workers=workers)
    await until("ClusterReady=True", ready)
    steps: list[tuple[str, dict[str, Any], str, Any]] = [
        (
            "job submitted",
            SUBMITTED,
            "the job to be submitted",
            lambda s: "submitted" in str(s.get("message")),
        ),
        ("verl is running", TRAINING, "phase Running", phase("Running")),
    ]
    for label, status, what, check in steps:
        timeline.say("KubeRay (emulated)", f"{label}: {_describe(status)}")
        await kuberay.set_status(namespace, name, status)
        await until(what, check)
    for step in range(1, DEMO_STEPS + 1):
        timeline.say("launcher (emulated)", f"reports status.progress step {step}/{total}")
        await kuberay.report_progress(namespace, name, step, total)
        await until(f"progress step {step}", lambda s, n=step: (s.get("progress") or {}).get("step") == n)
    timeline.say("KubeRay (emulated)", f"training finished (demo shortcut): {_describe(SUCCEEDED)}")
    await kuberay.set_status(namespace, name, SUCCEEDED)
    final = await until("phase Succeeded", phase("Succeeded"))
    await until(
        "the Succeeded event",
        lambda _s: any("-> Succeeded" in line for line in _event_lines(server, namespace)),
    )
    await observe()
    progress = final.get("progress") or {}
    timeline.say(
        "result",
        f"FlashRLJob {namespace}/{name}: {final.get('phase')} at step {progress.get('step')}/"
        f"{progress.get('totalSteps')}, completed {final.get('completionTime')}",
    )


def _event_lines(server: EmulatedApiServer, namespace: str) -> list[str]:
    lines = []
    for plural, ns, event_name in server.creations:
        if plural == "events" and ns == namespace:
            obj = server.objects["v1/events", ns, event_name]
            lines.append(str(obj.get("message", "")))
    return lines


def _describe(status: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in status.items() if v)


def run_demo(
    manifest_path: str | Path, out: TextIO, err: TextIO, deadline_s: float = DEFAULT_DEADLINE
) -> int:
    """Run the demo; 0 when the lifecycle completed, 1 when it did not, 2 for an invalid manifest."""
    path = Path(manifest_path)
    try:
        docs = load_documents(path.read_text(encoding="utf-8"), str(path))
        if len(docs) != 1:
            print(f"{path}: expected one FlashRLJob, found {len(docs)} documents", file=err)
            return 2
        parse_job(docs[0])
    except OSError as exc:
        print(f"cannot read {path}: {exc.strerror or exc}", file=err)
        return 2
    except SpecError as exc:
        for problem in exc.problems:
            print(str(problem), file=err)
        return 2
    started = time.monotonic()
    try:
        asyncio.run(_lifecycle(dict(docs[0]), out, started + deadline_s))
    except DemoFailedError as exc:
        print(f"\nFAILED: the lifecycle did not complete within {deadline_s:.0f}s: {exc}", file=err)
        return 1
    elapsed = time.monotonic() - started
    print(f"\nOK: the job went Pending -> Starting -> Running -> Succeeded in {elapsed:.1f}s.", file=out)
    return 0
