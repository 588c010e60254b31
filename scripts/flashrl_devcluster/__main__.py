"""``python -m flashrl_devcluster up|down|play|dashboard`` (``make dev-cluster``, ``make dev-cluster-down``,
``make dev-cluster-play``).

``up`` starts, from this clone, the cluster the tests use: the real control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler), KubeRay's own operator, Kueue's manager with a queue of the
nodes' GPUs (:mod:`flashrl_devcluster.kueue`), kwok with nodes labelled as GPU
Feature Discovery labels an 8 x H20 machine, a storage class ``flashrl-dev`` with ReadWriteMany volumes
made ahead for the claims, this project's chart (``helm upgrade --install``), and ``flashrl operator``
run from the clone with a token of the chart's ServiceAccount. Every process is recorded with its pid
and start time under the state directory; ``down`` ends exactly those. ``play`` plays one job's run
to its end the way the kwok e2e does (kwok runs no container, so no verl), or each variant of an
experiment as the operator creates it; while it waits it says what for.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flashrl_devcluster.chart import NAMESPACE as CHART_NAMESPACE
from flashrl_devcluster.chart import install
from flashrl_devcluster.control_plane import (
    KWOK_CLUSTER,
    REPO,
    TOOLS,
    ControlPlane,
    ControlPlaneError,
    Process,
    free_ports,
    missing_binaries,
    recorded,
    stop_recorded,
)
from flashrl_devcluster.kuberay_kwok import (
    EXIT_LABEL,
    RayDashboard,
    add_h20_nodes,
    apply_kuberay_crds,
    set_state,
    start_kuberay,
    start_kwok,
    volume,
)
from flashrl_devcluster.kueue import CLUSTER_QUEUE, LOCAL_QUEUE, queue_objects, start_kueue
from flashrl_devcluster.operator import OperatorProcess

DEFAULT_STATE = REPO / ".dev-cluster"
STORAGE_CLASS = "flashrl-dev"
KUBERAY_NAMESPACE = "kuberay-system"
#: The namespace of Kueue's LocalQueue: the README's.
QUEUE_NAMESPACE = "rl"
#: The README's step 3 applies this file (the namespace :data:`QUEUE_NAMESPACE`).
NAMESPACE_FILE = REPO / "examples" / "cluster" / "namespace.yaml"
#: Volumes made ahead for claims of :data:`STORAGE_CLASS` (three jobs' worth of the three claims).
VOLUMES = 9
WAIT_S = 240.0
STATES = "ray-jobs.json"


def storage_class() -> dict[str, Any]:
    """A class whose volumes are made ahead (no provisioner), bound as soon as a claim asks."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "Immediate",
        "reclaimPolicy": "Retain",
    }


def _wait(what: str, probe: Any, processes: list[Process]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        for proc in processes:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"timed out after {WAIT_S:.0f} s waiting for {what}")
        time.sleep(0.5)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def up(state: Path, nodes: int, pools: tuple[str, ...] = ()) -> int:
    """Start everything; print the lines a shell evaluates to use it (:func:`shell_lines`)."""
    missing = missing_binaries(KWOK_CLUSTER)
    if missing:
        print(f"dev-cluster: missing {', '.join(missing)}: run `make tools`", file=sys.stderr)
        return 1
    if recorded(state):
        return grow(state, nodes, pools)
    if len(pools) > nodes:
        print(f"dev-cluster: {len(pools)} pools need as many nodes (NODES={len(pools)})", file=sys.stderr)
        return 1
    if state.is_dir() and any(state.iterdir()) and not (state / "pki").is_dir():
        print(
            f"dev-cluster: {state} is not a dev cluster's state directory: choose an empty one",
            file=sys.stderr,
        )
        return 1
    shutil.rmtree(state, ignore_errors=True)  # a fresh cluster every time (only a former one's state)
    plane = ControlPlane(state)
    processes: list[Process] = []
    try:
        plane.start()
        print(f"dev-cluster: control plane {plane.version} at {plane.server}", file=sys.stderr)
        (port,) = free_ports(1)
        scripts = str(Path(__file__).resolve().parents[1])
        env = plane.env() | {
            "PYTHONPATH": os.pathsep.join(filter(None, [scripts, os.environ.get("PYTHONPATH")]))
        }
        argv = [
            sys.executable,
            "-m",
            "flashrl_devcluster",
            "dashboard",
            f"--port={port}",
            f"--states={state / STATES}",
        ]
        processes.append(Process.start("ray-dashboard", argv, state / "logs" / "ray-dashboard.log", env))
        plane.record(processes[-1])
        processes.append(start_kwok(plane, state))
        plane.record(processes[-1])
        plane.kubectl("create", "namespace", KUBERAY_NAMESPACE)
        apply_kuberay_crds(plane)
        processes.append(start_kuberay(plane, port, KUBERAY_NAMESPACE))
        plane.record(processes[-1])
        processes.append(start_kueue(plane, state))
        plane.record(processes[-1])
        names = tuple(f"h20-{i}" for i in range(nodes))
        add_h20_nodes(plane, names)
        label_pools(plane, names, pools)
        plane.apply_json(
            [storage_class(), *(volume(f"{STORAGE_CLASS}-{i}", STORAGE_CLASS) for i in range(VOLUMES))]
        )
        install(plane)
        # Kueue's queue of the nodes' GPUs, and its LocalQueue in the namespace the README uses: created
        # from the README's own file, applied as its step 3 applies it (client-side), so that step finds
        # it as kubectl apply left it and says nothing but "unchanged".
        plane.kubectl("apply", "-f", str(NAMESPACE_FILE))
        plane.apply_json(queue_objects(nodes, QUEUE_NAMESPACE))
        operator = OperatorProcess(plane, "flashrl-operator", token_duration="24h")
        processes.append(operator.process)
        plane.record(operator.process)
        lease = ("lease", "ray-operator-leader", "-n", KUBERAY_NAMESPACE)
        _wait("KubeRay's operator to hold its Lease", lambda: plane.get_json(*lease, check=False), processes)
        _wait("the FlashRL operator to be healthy", lambda: _healthy(operator.health_port), processes)
    except BaseException:
        for proc in reversed(processes):
            proc.stop()
        plane.stop()
        raise
    print(
        f"dev-cluster: up, state in {state}; {nodes} kwok node(s) of 8 NVIDIA-H20 ({', '.join(names)}), "
        f"storage class {STORAGE_CLASS} ({VOLUMES} ReadWriteMany volumes), KubeRay's operator, Kueue "
        f"(LocalQueue {LOCAL_QUEUE} in namespace {QUEUE_NAMESPACE}, ClusterQueue {CLUSTER_QUEUE}: "
        f"spec.scheduling.queueName: {LOCAL_QUEUE}), the chart "
        f"in {CHART_NAMESPACE} and the operator from this clone (logs in {state / 'logs'}). "
        "Stop it with `make dev-cluster-down`. Use it with the lines below "
        '(or `eval "$(make -s dev-cluster)"`):',
        file=sys.stderr,
    )
    print("\n".join(shell_lines(plane.kubeconfig)), flush=True)
    return 0


#: The node label the separate-async example's pools select (examples/flashrljob-separate-async.yaml).
POOL_LABEL = "flashrl.dev/pool"
#: The taint the example's rollout pool tolerates (its nodes are dedicated to rollout).
ROLLOUT_TAINT = "dedicated=rollout:NoSchedule"


def label_pools(plane: ControlPlane, names: Sequence[str], pools: Sequence[str]) -> None:
    """Label the first nodes ``flashrl.dev/pool=<pool>``, one pool a node in order (``training,rollout``:
    what the separate-async example selects); a ``rollout`` node also gets the taint its pool tolerates."""
    for node, pool in zip(names, pools, strict=False):
        plane.kubectl("label", "node", node, f"{POOL_LABEL}={pool}", "--overwrite")
        if pool == "rollout":
            plane.kubectl("taint", "node", node, ROLLOUT_TAINT, "--overwrite")


def grow(state: Path, nodes: int | None, pools: Sequence[str]) -> int:
    """A running dev cluster: add nodes up to ``nodes`` and label ``pools``, keeping everything it holds
    (nodes are added, never removed: fewer needs `make dev-cluster-down` first, which wipes it)."""
    plane = ControlPlane.attach(state)
    listed = plane.get_json("node", "-l", "type=kwok") or {}
    have = sorted(str(n["metadata"]["name"]) for n in listed.get("items") or [])
    nodes = len(have) if nodes is None else nodes
    if nodes < len(have):
        print(
            f"dev-cluster: already running from {state} with {len(have)} node(s); it cannot shrink to "
            f"{nodes} (`make dev-cluster-down` first, which wipes what it holds)",
            file=sys.stderr,
        )
        return 1
    if len(pools) > max(nodes, len(have)):
        print(f"dev-cluster: {len(pools)} pools need as many nodes (NODES={len(pools)})", file=sys.stderr)
        return 1
    added = tuple(f"h20-{i}" for i in range(len(have), nodes))
    if added:
        add_h20_nodes(plane, added)
        # The queue's quota is the nodes' GPUs: it grows with them.
        plane.apply_json(queue_objects(nodes, QUEUE_NAMESPACE))
    names = (*have, *added)
    label_pools(plane, names, pools)
    said = [f"added {', '.join(added)}" if added else f"{len(names)} node(s), none added"]
    if pools:
        said.append(
            "labelled " + ", ".join(f"{n} {POOL_LABEL}={p}" for n, p in zip(names, pools, strict=False))
        )
    print(
        f"dev-cluster: already running from {state}: {'; '.join(said)}; what it holds is kept. Use it with:",
        file=sys.stderr,
    )
    print("\n".join(shell_lines(plane.kubeconfig)), flush=True)
    return 0


def shell_lines(kubeconfig: Path) -> list[str]:
    """What a shell needs to use the dev cluster as the README's steps do: its kubeconfig, and the
    clone's ``.tools/bin`` first on PATH (the helm and kubectl the cluster was started with, not another
    version the machine may have, nor none at all)."""
    return [
        f"export KUBECONFIG={shlex.quote(str(kubeconfig))}",
        f"export PATH={shlex.quote(str(TOOLS))}:$PATH",
    ]


def down(state: Path) -> int:
    """End every process ``up`` recorded, by its pid."""
    stopped = stop_recorded(state)
    print(f"dev-cluster: stopped {', '.join(stopped) or 'nothing (not running)'}", file=sys.stderr)
    return 0


def dashboard(port: int, states: Path) -> int:
    """Serve the Ray dashboard stand-in until ended (a process of the dev cluster)."""
    RayDashboard(port, states).server.serve_forever()
    return 0


#: Seconds between the lines ``play`` prints while what it waits for does not change.
SAY_EVERY_S = 15.0


class _Waiting:
    """What ``play`` waits for, said when it changes and again every :data:`SAY_EVERY_S` seconds, and
    how long nothing changed (``play`` gives up after :data:`WAIT_S` seconds without a change)."""

    def __init__(self) -> None:
        self.what = ""
        self.changed = time.monotonic()
        self.said = 0.0

    def now(self, what: str) -> None:
        """Wait for ``what`` (a new ``what`` is progress and is said at once)."""
        clock = time.monotonic()
        if what != self.what:
            self.what, self.changed, self.said = what, clock, 0.0
        if clock - self.said >= SAY_EVERY_S:
            quiet = clock - self.changed
            since = f" (unchanged for {quiet:.0f} s; giving up after {WAIT_S:.0f} s)" if quiet >= 1 else ""
            print(f"dev-cluster: waiting for {what}{since}", file=sys.stderr, flush=True)
            self.said = clock

    def stalled(self) -> bool:
        """Whether nothing changed for :data:`WAIT_S` seconds."""
        return time.monotonic() - self.changed > WAIT_S


def _job_waiting_for(job: str, status: dict[str, Any]) -> str:
    """What a played job waits for, from its status: its phase, and the reason and message that say why."""
    phase = status.get("phase") or "no phase yet"
    why = ": ".join(str(p) for p in (status.get("reason"), status.get("message")) if p)
    return f"{job} to end: it is {phase}" + (f" ({why})" if why else "")


def play_job(plane: ControlPlane, state: Path, namespace: str, job: str, fail: str | None) -> str | None:
    """Play one job's run to its end; its line (``<job>: <phase> [<reason>]``), or ``None`` (said why on
    stderr) when the job does not exist or nothing changed for :data:`WAIT_S` seconds."""
    launcher: Path | None = None
    waiting = _Waiting()
    while not waiting.stalled():
        found = plane.get_json("flashrljob", job, "-n", namespace, check=False)
        if found is None:
            print(
                f"dev-cluster: no FlashRLJob {namespace}/{job} (`kubectl get flashrljobs -n {namespace}` "
                "lists them; an experiment's variants: `make dev-cluster-play EXPERIMENT=<name>`)",
                file=sys.stderr,
            )
            return None
        status = found.get("status") or {}
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            return f"{job}: {phase} {status.get('reason') or ''}".rstrip()
        waiting.now(_job_waiting_for(job, status))
        ray_job = status.get("rayJobName")
        pods = [f"batch.kubernetes.io/job-name={job}-stage"]
        if phase == "Running" and ray_job:
            if launcher is None:
                total = (status.get("progress") or {}).get("totalSteps") or (
                    (found.get("spec") or {}).get("training") or {}
                ).get("totalSteps", 150)
                launcher = plane.token_kubeconfig(f"{job}-launcher", namespace, f"{job}-launcher")
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                patch = {"status": {"progress": {"step": total, "totalSteps": total, "updateTime": now}}}
                if fail is None:
                    plane.kubectl(
                        "patch", "flashrljob", job, "-n", namespace, "--subresource=status",
                        "--type=merge", "-p", json.dumps(patch), kubeconfig=launcher,
                    )  # fmt: skip
                set_state(state / STATES, ray_job, "FAILED" if fail else "SUCCEEDED", fail or "")
            pods.append(f"batch.kubernetes.io/job-name={ray_job}")
        for selector in pods:
            listed = plane.get_json("pod", "-n", namespace, "-l", selector, check=False) or {}
            for pod in listed.get("items") or []:
                labels = pod["metadata"].get("labels") or {}
                if pod["status"].get("phase") == "Running" and EXIT_LABEL not in labels:
                    plane.kubectl("label", "pod", pod["metadata"]["name"], "-n", namespace, f"{EXIT_LABEL}=0")
        time.sleep(0.5)
    print(
        f"dev-cluster: gave up: nothing changed for {WAIT_S:.0f} s while waiting for {waiting.what}",
        file=sys.stderr,
    )
    return None


def play(state: Path, namespace: str, job: str, fail: str | None) -> int:
    """Play one job's run to its end, as the kwok e2e does: the staging Job's pod exits 0; once the job
    is Running the launcher reports the last step (with the job's own ServiceAccount token), the Ray job
    ends (SUCCEEDED, or FAILED with ``fail``) and KubeRay's submitter pod exits."""
    line = play_job(ControlPlane.attach(state), state, namespace, job, fail)
    if line is None:
        return 1
    print(line, flush=True)
    return 0


def play_experiment(state: Path, namespace: str, experiment: str, fail: str | None) -> int:
    """Play each variant of an experiment to its end as the operator creates it (``parallelism`` may
    hold the next ones back until one ends), a line per variant, then the experiment's own line."""
    plane = ControlPlane.attach(state)
    played: set[str] = set()
    waiting = _Waiting()
    while not waiting.stalled():
        found = plane.get_json("flashrlexperiment", experiment, "-n", namespace, check=False)
        if found is None:
            print(
                f"dev-cluster: no FlashRLExperiment {namespace}/{experiment} "
                f"(`kubectl get flashrlexperiments -n {namespace}` lists them)",
                file=sys.stderr,
            )
            return 1
        status = found.get("status") or {}
        variants = status.get("variants") or []
        ready = [str(v["jobName"]) for v in variants if v.get("jobName") and v.get("phase") != "Waiting"]
        ready = [name for name in ready if name not in played]
        if ready:
            line = play_job(plane, state, namespace, ready[0], fail)
            if line is None:
                return 1
            print(line, flush=True)
            played.add(ready[0])
            waiting = _Waiting()
            continue
        phase = status.get("phase")
        if (
            phase in ("Succeeded", "Failed")
            and variants
            and all(v.get("jobName") in played or v.get("phase") in ("Succeeded", "Failed") for v in variants)
        ):
            finished = status.get("finished")
            print(
                f"{experiment}: {phase}" + (f" ({finished} variants finished)" if finished else ""),
                flush=True,
            )
            return 0
        held = [str(v.get("name")) for v in variants if v.get("phase") == "Waiting"]
        waiting.now(
            f"the operator to create the next variant of {experiment} ({', '.join(held)} waiting)"
            if held
            else f"{experiment}'s status (it is {phase or 'new'})"
        )
        time.sleep(0.5)
    print(
        f"dev-cluster: gave up: nothing changed for {WAIT_S:.0f} s while waiting for {waiting.what}",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    """The commands."""
    parser = argparse.ArgumentParser(prog="python -m flashrl_devcluster", description=__doc__)
    parser.add_argument(
        "--state", type=Path, default=DEFAULT_STATE, help="state directory (pids, logs, kubeconfig)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the dev cluster")
    p_up.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="kwok nodes of 8 NVIDIA-H20 (default 1); on a running cluster, grow it to this many",
    )
    p_up.add_argument(
        "--pools",
        default="",
        metavar="POOL,...",
        help="label the first nodes flashrl.dev/pool=<pool>, in order (training,rollout: the "
        "separate-async example's pools; a rollout node is also tainted dedicated=rollout:NoSchedule)",
    )
    sub.add_parser("down", help="stop every process `up` started")
    p_play = sub.add_parser(
        "play", help="play a job's run, or each variant of an experiment, to its end (kwok runs no verl)"
    )
    p_play.add_argument("-n", "--namespace", default="rl")
    p_play.add_argument("--fail", metavar="MESSAGE", help="the Ray job fails with this message instead")
    p_play.add_argument(
        "--experiment", metavar="NAME", help="play each variant of this FlashRLExperiment as it is created"
    )
    p_play.add_argument("job", nargs="?", help="the FlashRLJob to play")
    p_dash = sub.add_parser("dashboard", help="(internal) the Ray dashboard stand-in")
    p_dash.add_argument("--port", type=int, required=True)
    p_dash.add_argument("--states", type=Path, required=True)
    args = parser.parse_args(argv)
    state = args.state.resolve()
    try:
        if args.command == "up":
            pools = tuple(p for p in args.pools.split(",") if p)
            if recorded(state):
                return grow(state, args.nodes, pools)
            return up(state, args.nodes or 1, pools)
        if args.command == "down":
            return down(state)
        if args.command == "play":
            if (args.job is None) == (args.experiment is None):
                parser.error("play: name a job, or an experiment with --experiment (one of them)")
            if args.experiment is not None:
                return play_experiment(state, args.namespace, args.experiment, args.fail)
            return play(state, args.namespace, args.job, args.fail)
        return dashboard(args.port, args.states)
    except ControlPlaneError as exc:
        print(f"dev-cluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
