"""``flashrl demo``: the main job's whole lifecycle with no cluster, as a readable timeline.

The operator here is the real one (the same kopf handlers, reconciler and status mapping that run in
a cluster). Its surroundings are emulated in-process and the output says so: the Kubernetes API
server is kmock's in-memory emulator on 127.0.0.1, and KubeRay, the scheduler, the kubelet and the
launcher's progress reports are played by :class:`~flashrl_operator.sim.standins.KubeRayStandIn`
(with verl-like metrics for each step, reported through the launcher's own status code and served
by the launcher's own Prometheus exporter, of which the demo prints one scrape).
Each timeline line says who did it: the emulator records the actor of every write, so an object
the emulated KubeRay created is not shown as the operator's. The operator's own log lines are held
back (they would break the timeline) and printed only if the demo fails. Every wait is bounded by
progress, not by the clock (:mod:`flashrl_operator.sim.progress`): a busy machine only makes the demo
slower, while a job that fails, an operator that stops or a run where nothing moved for the stall window
ends it at once; it then says what it was waiting for and exits non-zero. It always stops the
operator thread and the server.

The example job ships with the package (:data:`EXAMPLE`), so ``flashrl demo`` works from any
directory.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Mapping
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any, Final, TextIO

from flashrl_api import SpecError, load_documents, parse_job
from flashrl_api.goodput import LauncherClock
from flashrl_api.spec import DEFAULT_CHECKPOINT_INTERVAL
from flashrl_api.status import ConditionType, Reason
from flashrl_jobs.exporter import serve
from flashrl_jobs.run_metrics import Record, RunState
from flashrl_operator.client.kube import COMPONENT
from flashrl_operator.generate._yaml import dump
from flashrl_operator.render import attempt_ray_job_name
from flashrl_operator.render.children import SPEC_ANNOTATION
from flashrl_operator.sim.apiserver import (
    EVENTS_RESOURCE,
    JOBS_RESOURCE,
    KUBERAY,
    LAUNCHER,
    RAY_JOBS_RESOURCE,
    SCHEDULER,
    USER,
    EmulatedApiServer,
)
from flashrl_operator.sim.harness import EmulatedCluster
from flashrl_operator.sim.logs import HeldLogs, held_logs
from flashrl_operator.sim.progress import DEFAULT_STALL_S, Progress, StalledError
from flashrl_operator.sim.staging import JOB_CONTROLLER, STAGER
from flashrl_operator.sim.standins import (
    CLUSTER_STARTING,
    SUBMITTED,
    SUCCEEDED,
    TRAINING,
    failed,
    unschedulable,
    verl_step_metrics,
)
from flashrl_operator.vocab.kuberay import DeletionPolicy, KubeRayReason, entrypoint_failed_message

#: The example FlashRLJob shipped with the package (``examples/flashrljob.yaml`` in the repository).
EXAMPLE: Final[Traversable] = resources.files("flashrl_operator.sim") / "example.yaml"
#: Steps the emulated run completes after its first checkpoint before a GPU node is lost.
DEMO_STEPS_LOST: Final = 2
#: Steps attempt 2 runs past the step attempt 1 failed at, to the end of the demo's run.
DEMO_STEPS_AFTER_FAILURE: Final = 3


def demo_total_steps(interval: int) -> int:
    """The demo run's ``spec.training.totalSteps``: a checkpoint, the steps lost after it, and a few
    more for the second attempt, every one of them played."""
    return interval + DEMO_STEPS_LOST + DEMO_STEPS_AFTER_FAILURE


#: How the timeline names each actor the emulator records (the rest by their own name).
WHO: Final[dict[str, str]] = {COMPONENT: "operator", "kopf": "operator (kopf)", USER: "kubectl apply"}


def singular(plural: str) -> str:
    """A resource's plural as the singular kubectl prints (``networkpolicies`` -> ``networkpolicy``)."""
    if plural.endswith("ies"):
        return plural[: -len("ies")] + "y"
    return plural.removesuffix("s")


class Timeline:
    """Prints what happened, with the time since the demo started and who did it."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._t0 = time.monotonic()
        self._phase: str | None = None
        self._conditions: dict[str, tuple[str, str, str]] = {}
        self._events: set[str] = set()
        self._writes = 0
        self._seen: set[tuple[str, str, str]] = set()

    def say(self, who: str, text: str) -> None:
        """One timeline line."""
        print(f"[{time.monotonic() - self._t0:6.2f}s] {who:<22} {text}", file=self._out, flush=True)

    def objects(self, server: EmulatedApiServer) -> None:
        """Report objects created or deleted since the last call, in order, by whoever did it."""
        writes = server.writes[self._writes :]
        self._writes += len(writes)
        for write in writes:
            key = (write.plural, write.namespace, write.name)
            if write.plural == "events" or write.subresource is not None:
                continue
            who = WHO.get(write.actor, write.actor)
            if write.verb in ("create", "apply") and key not in self._seen:
                self._seen.add(key)
                self.say(who, f"created {singular(write.plural)} {write.namespace}/{write.name}")
            elif write.verb == "delete":
                self._seen.discard(key)
                self.say(who, f"deleted {singular(write.plural)} {write.namespace}/{write.name}")

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
            detail = str(cond.get("message") or "") if ctype == ConditionType.CLUSTER_READY else ""
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


async def _lifecycle(
    manifest: dict[str, Any], out: TextIO, stall_s: float, held: HeldLogs | None = None, full: bool = False
) -> None:
    namespace = str(manifest["metadata"].get("namespace") or "default")
    manifest = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    name = str(manifest["metadata"]["name"])
    async with EmulatedCluster() as cluster:
        print(
            "NOTE: the Kubernetes API server and KubeRay are EMULATED in this demo "
            f"(kmock's in-memory API server at {cluster.url}; the staging Job's outcome, the RayCluster,\n"
            "      its status and one stuck pod are made the way the Job controller, flashrl-launch stage,\n"
            "      KubeRay, the scheduler and the kubelet would; no container runs, nothing is downloaded).\n"
            "      The operator is the real one: the same handlers, reconciler and status mapping as "
            "in a cluster.\n",
            file=out,
        )
        timeline = Timeline(out)
        # Pods are not watched: a stuck pod shows up at the next resync, every second here.
        operator = await cluster.start_operator(
            retry_delay=0.5,
            request_timeout=10.0,
            resync_interval=1.0,
            check_overrides=True,
            retry_backoff=1.0,
        )
        timeline.say("operator", f"started (watching all namespaces; metrics at {operator.metrics_url})")
        progress = Progress(cluster.server, held, stall_s, alive=lambda: operator.alive)
        state = await _play(cluster, timeline, manifest, namespace, name, progress)
        await _show_metrics(cluster, state, namespace, name, out, full)
        final = await cluster.api.get(JOBS_RESOURCE, namespace, name)
        current = str(((final or {}).get("status") or {}).get("rayJobName") or name)
        ray_job = await cluster.api.get(RAY_JOBS_RESOURCE, namespace, current)
        if ray_job is not None and full:
            print(
                "\nThe RayJob the operator applied (as stored by the API server, status omitted):\n", file=out
            )
            shown = {k: v for k, v in ray_job.items() if k != "status"}
            annotations = shown.get("metadata", {}).get("annotations") or {}
            if SPEC_ANNOTATION in annotations:  # one long JSON line: summarise it
                size = len(str(annotations[SPEC_ANNOTATION]))
                annotations[SPEC_ANNOTATION] = f"<the spec's immutable part as JSON, {size} bytes>"
            print(dump(shown), file=out)
        elif ray_job is not None:
            print("\n" + ray_job_summary(ray_job), file=out)


async def _play(
    cluster: EmulatedCluster,
    timeline: Timeline,
    manifest: dict[str, Any],
    namespace: str,
    name: str,
    progress: Progress,
) -> RunState:
    server, api, kuberay = cluster.server, cluster.api, cluster.kuberay

    async def observe() -> dict[str, Any]:
        # Read in the order things happen: the writes so far, then the Events, then the status. The
        # operator writes a status before the Event announcing it, so an Event read here is never
        # printed ahead of the phase change it reports.
        timeline.objects(server)
        events = await api.list(EVENTS_RESOURCE, namespace)
        job = await api.get(JOBS_RESOURCE, namespace, name)
        status = dict((job or {}).get("status") or {})
        timeline.status(status)
        timeline.events([e for e in events if e.get("involvedObject", {}).get("name") == name])
        return status

    async def until(what: str, check: Any) -> dict[str, Any]:
        latest: dict[str, Any] = {}

        async def probe() -> dict[str, Any] | None:
            status = await observe()
            latest.clear()
            latest.update(status)
            if not check(status):
                return None
            # A check on the server's writes can pass on a write made after observe() printed them:
            # print it now, before the demo's next line, so the timeline keeps the order of events.
            timeline.objects(server)
            return status

        def failed() -> str | None:
            # Failed is terminal: waiting on would only wait for the stall window.
            if latest.get("phase") != "Failed":
                return None
            return f"the job Failed ({latest.get('reason')}: {latest.get('message')})"

        try:
            return await progress.until(probe, what, failed)
        except StalledError as exc:
            raise DemoFailedError(str(exc)) from None

    def phase(wanted: str) -> Any:
        return lambda s: s.get("phase") == wanted

    def ready(s: Mapping[str, Any]) -> bool:
        return any(
            c["type"] == ConditionType.CLUSTER_READY and c["status"] == "True"
            for c in s.get("conditions") or []
        )

    def cluster_says(text: str) -> Any:
        return lambda s: any(
            c["type"] == ConditionType.CLUSTER_READY and text in str(c.get("message"))
            for c in s.get("conditions") or []
        )

    for claim in sorted({str(v["claimName"]) for v in _storage(manifest) if v.get("claimName")}):
        await api.create(
            "v1/persistentvolumeclaims",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": namespace},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}},
            },
        )
    interval = int(
        manifest.get("spec", {}).get("checkpoint", {}).get("interval", DEFAULT_CHECKPOINT_INTERVAL)
    )
    fails_after = interval + DEMO_STEPS_LOST
    # Every step of the run is played, so Succeeded means what it means in a cluster (a run that ends
    # before totalSteps is StoppedEarly): the demo's run is short rather than cut short.
    total = demo_total_steps(interval)
    timeline.say(
        "demo",
        f"spec.training.totalSteps set to {total} (checkpoints every {interval}), so every step runs",
    )
    spec = dict(manifest.get("spec") or {})
    spec["training"] = {**(spec.get("training") or {}), "totalSteps": total}
    manifest = {**manifest, "spec": spec}
    await api.create(JOBS_RESOURCE, manifest)
    stage_name = f"{name}-stage"
    await until(
        "the operator to create the staging Job",
        lambda _s: ("jobs", namespace, stage_name) in server.creations,
    )
    await until("phase Staging", phase("Staging"))
    if ("rayjobs", namespace, name) in server.creations:
        raise DemoFailedError("the RayJob was created before the staging Job finished")
    staging = cluster.staging
    sizes = [16_400_000_000, 110_000_000, 40_000]  # Qwen3-8B-Base, DAPO-Math-17k, AIME-2024
    for files in range(1, len(sizes) + 1):
        done = files
        timeline.say(STAGER, f"verified {files}/{len(sizes)} sources; reports status.staging")
        done_bytes = sum(sizes[:done])
        await staging.report_progress(namespace, name, files, len(sizes), done_bytes, sum(sizes))
        line = f"{files}/{len(sizes)} files"
        await until(
            f"staging progress {line}",
            lambda s, t=line: any(
                c["type"] == ConditionType.STAGED and t in str(c.get("message"))
                for c in s.get("conditions") or []
            ),
        )
    timeline.say(JOB_CONTROLLER, "the staging Job completed (no GPU was requested while it ran)")
    await staging.succeed(namespace, stage_name)
    await until(
        "the operator to create the RayJob", lambda _s: ("rayjobs", namespace, name) in server.creations
    )
    await until("phase Pending", phase("Pending"))
    workers = int(manifest.get("spec", {}).get("resources", {}).get("nodes", 1))
    timeline.say(KUBERAY, f"creating the Ray cluster: {_describe(CLUSTER_STARTING)}")
    await kuberay.set_status(namespace, name, CLUSTER_STARTING)
    await until("phase Starting", phase("Starting"))
    await until("the RayCluster's pod progress in ClusterReady", cluster_says("head pod not created yet"))
    timeline.say(KUBERAY, "RayCluster status: head pod ready")
    await kuberay.cluster_pods(namespace, name, head_ready=True, ready_workers=0)
    await until("ClusterReady to show the head pod ready", cluster_says("head pod ready"))
    timeline.say(SCHEDULER, f"a GPU worker pod does not fit yet: {NO_FREE_GPU}")
    await kuberay.stuck_pod(namespace, name, unschedulable(NO_FREE_GPU))
    await until(
        "the job to name the unschedulable pod", lambda s: s.get("reason") == Reason.POD_UNSCHEDULABLE
    )
    timeline.say(
        KUBERAY,
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
        timeline.say(KUBERAY, f"{label}: {_describe(status)}")
        await kuberay.set_status(namespace, name, status)
        await until(what, check)
    # Each attempt's launcher is a new process reading its own attempt-<k>.jsonl: a new run state.
    states: list[RunState] = []

    job_spec = parse_job(manifest).spec
    gpus = job_spec.resources.nodes * job_spec.resources.gpus_per_node

    async def run_steps(attempt: int, steps: range) -> None:
        # The launcher's goodput clock runs on the wall-clock: verl's hour-scale timings are split in
        # proportion over the seconds each emulated step really took.
        clock = LauncherClock(launched=time.time(), kept_groups=job_spec.training.prompt_batch_size)
        state = RunState(total_steps=total, clock=clock)
        states.append(state)
        if steps.start > 1:
            state.set_checkpoint(steps.start - 1)  # the launcher finds the checkpoint it resumes from
        for step in steps:
            if step % interval == 0 or step == total:  # verl also saves after the last step
                path = f"/checkpoints/.../global_step_{step}"
                timeline.say(LAUNCHER, f"verl saved a checkpoint: status.checkpoint step {step} ({path})")
                state.set_checkpoint(step)
                await kuberay.report_checkpoint(namespace, name, step, path, attempt)
            # verl's file-logger line for the step, as the launcher reads it (step times as on 8xH20).
            metrics = verl_step_metrics(step, total)
            seen = time.time()
            state.add(Record(step, metrics), now=seen)
            timeline.say(
                LAUNCHER,
                f"step {step}/{total} (attempt {attempt}) from verl's metrics file: status.progress and "
                f"status.metrics (rollout_corr/kl {metrics['rollout_corr/kl']:.4f}, "
                f"perf/throughput {metrics['perf/throughput']:.0f} tokens/s/GPU)",
            )
            await kuberay.report_goodput_step(namespace, name, state, seen, attempt, gpus)
            await until(f"progress step {step}", lambda s, n=step: (s.get("progress") or {}).get("step") == n)

    await run_steps(1, range(1, fails_after + 1))
    crash = entrypoint_failed_message(
        1,
        "RuntimeError: NCCL watchdog timeout (a GPU node was lost)",
        f"flashrl-launch: verl exited with code 1 on its own at step {fails_after}",
    )
    timeline.say(
        KUBERAY, f"the Ray job failed after step {fails_after} (NCCL timeout): jobDeploymentStatus=Failed"
    )
    await kuberay.set_status(namespace, name, failed(KubeRayReason.APP_FAILED, crash))
    await until("the operator to decide on a retry", lambda s: s.get("attempt") == 2)
    retry = attempt_ray_job_name(parse_job(manifest), 2)
    await until(
        f"the second attempt's RayJob {retry}", lambda _s: ("rayjobs", namespace, retry) in server.creations
    )
    await cluster.garbage_collector.collect()  # the failed attempt's RayCluster follows its deleted RayJob
    timeline.say(KUBERAY, f"creating attempt 2's Ray cluster: {_describe(CLUSTER_STARTING)}")
    await kuberay.set_status(namespace, retry, CLUSTER_STARTING)
    await until(
        f"the RayCluster of {retry}",
        lambda _s: any(
            p == "rayclusters" and ns == namespace and n.startswith(f"{retry}-")
            for p, ns, n in server.creations
        ),
    )
    timeline.say(KUBERAY, f"attempt 2's Ray cluster is up and verl is running: {_describe(TRAINING)}")
    await kuberay.set_status(namespace, retry, TRAINING)
    await until("phase Running again", phase("Running"))
    timeline.say(LAUNCHER, f"verl resumes from the checkpoint of step {interval} (resumeMode auto)")
    await run_steps(2, range(interval + 1, total + 1))
    # verl saves its last checkpoint and exits after its last step: the Ray job ends a moment after the
    # launcher's last report. Timestamps have whole seconds, so a second keeps that teardown phase in
    # the ledger (within one second it would be 0 and not listed).
    await asyncio.sleep(1.0)
    timeline.say(KUBERAY, f"verl finished step {total}/{total}: {_describe(SUCCEEDED)}")
    await kuberay.set_status(namespace, retry, SUCCEEDED)
    final = await until("phase Succeeded", phase("Succeeded"))
    await until(
        "the Succeeded event",
        lambda _s: any("-> Succeeded" in line for line in _event_lines(server, namespace)),
    )
    final = await _release_clusters(cluster, timeline, until, namespace, retry)
    await observe()
    reached = final.get("progress") or {}
    timeline.say(
        "result",
        f"FlashRLJob {namespace}/{name}: {final.get('phase')} at step {reached.get('step')}/"
        f"{reached.get('totalSteps')}, completed {final.get('completionTime')}; attempt "
        f"{final.get('attempt')}, {final.get('lostSteps')} step(s) lost to the failure",
    )
    for entry in final.get("attempts") or []:
        timeline.say(
            "result",
            f"  attempt {entry.get('attempt')}: from step {entry.get('startStep')} to step "
            f"{entry.get('endStep')}, newest checkpoint {entry.get('checkpointStep')}"
            + (f", ended by {entry['reason']}" if entry.get("reason") else ""),
        )
    _show_ledger(timeline, final)
    return states[-1]


async def _release_clusters(
    cluster: EmulatedCluster, timeline: Timeline, until: Any, namespace: str, ray_job: str
) -> dict[str, Any]:
    """As the RayJob's deletion rules say: its GPU workers went when the job finished (the head stays);
    the garbage collector deletes the failed attempt's cluster; the operator sees both attempts' GPUs
    released (the end of the goodput ledger). Then the TTL, played at once: the head goes too."""
    await cluster.garbage_collector.collect()
    ray_job_object = await cluster.api.get(RAY_JOBS_RESOURCE, namespace, ray_job) or {}
    ttl = _cluster_ttl(ray_job_object.get("spec") or {})
    timeline.say(
        KUBERAY,
        "the job finished: its GPU workers were deleted at once (deletionRules: DeleteWorkers, "
        f"ttlSeconds 0); the CPU head stays {ttl} s for its logs (DeleteCluster)",
    )
    released = dict(
        await until(
            "every attempt's GPUs seen released",
            lambda s: all(e.get("releaseTime") for e in s.get("attempts") or [{}]),
        )
    )
    policy = await cluster.kuberay.teardown(namespace, ray_job, float(ttl or 0))
    timeline.say(KUBERAY, f"{ttl} s later (played at once): {policy or 'nothing left to delete'}")
    return released


def _cluster_ttl(spec: Mapping[str, Any]) -> int | None:
    """The RayJob's DeleteCluster TTL (its deletion rules), else its ttlSecondsAfterFinished."""
    for rule in (spec.get("deletionStrategy") or {}).get("deletionRules") or []:
        if rule.get("policy") == DeletionPolicy.DELETE_CLUSTER:
            return int((rule.get("condition") or {}).get("ttlSeconds") or 0)
    ttl = spec.get("ttlSecondsAfterFinished")
    return int(ttl) if isinstance(ttl, int) else None


def _show_ledger(timeline: Timeline, status: Mapping[str, Any]) -> None:
    """status.goodput: where the GPU-seconds of both attempts went."""
    goodput = status.get("goodput") or {}
    timeline.say(
        "result",
        f"status.goodput: {goodput.get('heldGPUSeconds')} GPU-seconds held, "
        f"{goodput.get('trainingGPUSeconds')} training, productive fraction "
        f"{goodput.get('productiveFraction')} "
        "(phases sum to the held GPU-seconds; docs/observability.md):",
    )
    for entry in goodput.get("byPhase") or []:
        timeline.say(
            "result", f"  {entry['phase']:<22} {entry['gpuSeconds']:>9.1f} GPU-s  {entry['seconds']:>7.1f} s"
        )


async def _show_metrics(
    cluster: EmulatedCluster, state: RunState, namespace: str, name: str, out: TextIO, full: bool = False
) -> None:
    """The job's status.metrics as stored, and one scrape of the launcher's real /metrics exporter (the
    series a dashboard starts from, or with ``full`` the whole scrape)."""
    job = await cluster.api.get(JOBS_RESOURCE, namespace, name)
    status = (job or {}).get("status") or {}
    progress = status.get("progress") or {}
    print(
        f"\nstatus.progress: step {progress.get('step')}/{progress.get('totalSteps')}, "
        f"{progress.get('percent')}%, about {progress.get('estimatedRemainingSeconds')} s left at the "
        "pace of the reported steps\nstatus.metrics (verl's names; newest value and its step):",
        file=out,
    )
    for metric in status.get("metrics") or []:
        print(f"  {metric['name']:<46} {metric['value']:>12.6g}  (step {metric['step']})", file=out)
    server = serve(state, namespace, name, 0, address="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        text = await asyncio.to_thread(_scrape, url)
    finally:
        server.close()
    if full:
        print(f"\nOne scrape of the launcher's /metrics (its exporter, here on {url}):\n", file=out)
        print(text.rstrip(), file=out)
        return
    shown, rest = scrape_excerpt(text)
    print(f"\nFrom one scrape of the launcher's /metrics (its exporter, here on {url}):\n", file=out)
    print("\n".join(f"  {line}" for line in shown), file=out)
    print(f"  ... and {rest} more series (flashrl demo --full prints the whole scrape)", file=out)


#: The series of the scrape excerpt: progress, the checkpoint a retry resumes from, speed and mismatch.
EXCERPT_SERIES: Final = (
    "flashrl_training_step",
    "flashrl_training_total_steps",
    "flashrl_checkpoint_step",
    "flashrl_throughput_tokens_per_second_per_gpu",
    "flashrl_rollout_mismatch_kl",
)


def scrape_excerpt(text: str) -> tuple[list[str], int]:
    """The samples of :data:`EXCERPT_SERIES` in a Prometheus text scrape (no HELP or TYPE lines), and
    how many other samples it holds."""
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    shown = [line for line in samples if line.split("{")[0].split(" ")[0] in EXCERPT_SERIES]
    return shown, len(samples) - len(shown)


def _teardown_summary(spec: Mapping[str, Any]) -> str:
    """The RayJob's deletion rules in one line: which policy after how long, on which ends."""
    rules = (spec.get("deletionStrategy") or {}).get("deletionRules") or []
    if not rules:
        return (
            f"the whole cluster after {spec.get('ttlSecondsAfterFinished')} s (shutdownAfterJobFinishes)"
            if spec.get("shutdownAfterJobFinishes")
            else "nothing is deleted"
        )
    by_policy: dict[str, tuple[set[int], list[str]]] = {}
    for rule in rules:
        condition = dict(rule.get("condition") or {})
        ttl = int(condition.pop("ttlSeconds", 0) or 0)
        ttls, ends = by_policy.setdefault(str(rule.get("policy")), (set(), []))
        ttls.add(ttl)
        ends.extend(f"{k} {v}" for k, v in condition.items())
    parts = []
    for policy, (ttls, _) in by_policy.items():
        after = "at once" if ttls == {0} else "after " + "/".join(f"{t} s" for t in sorted(ttls))
        parts.append(f"{policy} {after}")
    ends = next(iter(by_policy.values()))[1]
    return "deletionRules: " + ", ".join(parts) + " (on " + ", ".join(ends) + ")"


def ray_job_summary(ray_job: Mapping[str, Any]) -> str:
    """What a reader needs from the RayJob the operator applied: its command, lifecycle settings and
    pod groups (``flashrl demo --full`` prints the whole object)."""
    meta = ray_job.get("metadata") or {}
    spec = ray_job.get("spec") or {}
    cluster = spec.get("rayClusterSpec") or {}
    lines = [
        f"The RayJob the operator applied, {meta.get('namespace')}/{meta.get('name')} "
        "(flashrl demo --full prints the whole object):",
        f"  entrypoint: {spec.get('entrypoint')}",
        f"  submissionMode {spec.get('submissionMode')}, backoffLimit {spec.get('backoffLimit')} "
        f"(the operator retries), shutdownAfterJobFinishes {spec.get('shutdownAfterJobFinishes')}, "
        f"ttlSecondsAfterFinished {spec.get('ttlSecondsAfterFinished')}",
        f"  when it ends: {_teardown_summary(spec)}",
        f"  Ray {cluster.get('rayVersion')}",
    ]
    groups = [("head", 1, cluster.get("headGroupSpec") or {})] + [
        (str(g.get("groupName")), g.get("replicas"), g) for g in cluster.get("workerGroupSpecs") or []
    ]
    for label, replicas, group in groups:
        pod = (group.get("template") or {}).get("spec") or {}
        containers = pod.get("containers") or [{}]
        limits = (containers[0].get("resources") or {}).get("limits") or {}
        selector = pod.get("nodeSelector") or {}
        where = f", on nodes {', '.join(f'{k}={v}' for k, v in selector.items())}" if selector else ""
        lines.append(
            f"  {label}: {replicas} pod(s) of {containers[0].get('image')}, limits "
            f"{', '.join(f'{k} {v}' for k, v in limits.items())}{where}"
        )
    return "\n".join(lines)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback
        return str(response.read().decode())


def _storage(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The job's storage volumes, with the API's default claims where the manifest names none."""
    from flashrl_api.spec import DEFAULT_CLAIMS

    storage = (manifest.get("spec") or {}).get("storage")
    if not storage:
        return [{"claimName": claim} for claim in DEFAULT_CLAIMS.values()]
    return [v for v in storage.values() if isinstance(v, Mapping)]


def _event_lines(server: EmulatedApiServer, namespace: str) -> list[str]:
    lines = []
    for plural, ns, event_name in server.creations:
        if plural == "events" and ns == namespace:
            obj = server.objects[EVENTS_RESOURCE, ns, event_name]
            lines.append(str(obj.get("message", "")))
    return lines


def _describe(status: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in status.items() if v)


def run_demo(
    manifest_path: str | Path | Traversable | None,
    out: TextIO,
    err: TextIO,
    stall_s: float = DEFAULT_STALL_S,
    experiment_report: Path | None = None,
    full: bool = False,
) -> int:
    """Run the demo; 0 when the lifecycle completed, 1 when it did not, 2 for an invalid manifest.
    ``full`` prints the whole RayJob and the whole scrape instead of what a reader needs of them.
    ``stall_s``: seconds in which nothing moved before a wait gives up (no total time limit).

    ``manifest_path`` ``None`` runs the packaged example (:data:`EXAMPLE`). With
    ``experiment_report``, the demo goes on with an emulated two-variant experiment and writes its
    report there (:mod:`flashrl_operator.sim.experiment_demo`).
    """
    path: Path | Traversable = EXAMPLE
    if isinstance(manifest_path, str):
        path = Path(manifest_path)
    elif manifest_path is not None:
        path = manifest_path
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
    with held_logs() as held:
        try:
            asyncio.run(_lifecycle(dict(docs[0]), out, stall_s, held, full))
        except DemoFailedError as exc:
            print(f"\nFAILED: the lifecycle did not complete: {exc}", file=err)
            print("The operator's log:\n" + "\n".join(held.lines[-60:]), file=err)
            return 1
    elapsed = time.monotonic() - started
    print(
        f"\nOK: the job went Pending -> Starting -> Running, failed past a checkpoint, resumed from it in a "
        f"second attempt and Succeeded in {elapsed:.1f}s.",
        file=out,
    )
    if experiment_report is None:
        return 0
    from flashrl_operator.sim.experiment_demo import run_experiment_demo

    return run_experiment_demo(out, err, experiment_report, stall_s=stall_s)
