"""``python -m flashrl_devcluster up|down|play|dashboard`` (``make dev-cluster``, ``make dev-cluster-down``,
``make dev-cluster-play``).

``up`` starts, from this clone, the cluster the tests use: the real control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler), KubeRay's own operator, Kueue's manager with a queue of the
nodes' GPUs (:mod:`flashrl_devcluster.kueue`), kwok with nodes labelled as GPU
Feature Discovery labels an 8 x H20 machine, a storage class ``flashrl-dev`` with ReadWriteMany volumes
made ahead for the claims, this project's chart (``helm upgrade --install``), and ``flashrl operator``
run from the clone with a token of the chart's ServiceAccount. Every process is recorded with its pid
and start time under the state directory; ``down`` ends exactly those. ``play`` plays one job's run
to its end the way the kwok e2e does (kwok runs no container, so no verl).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from flashrl_devcluster.chart import NAMESPACE as CHART_NAMESPACE
from flashrl_devcluster.chart import install
from flashrl_devcluster.control_plane import (
    KWOK_CLUSTER,
    REPO,
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


def up(state: Path, nodes: int) -> int:
    """Start everything; print the ``export KUBECONFIG=`` line."""
    missing = missing_binaries(KWOK_CLUSTER)
    if missing:
        print(f"dev-cluster: missing {', '.join(missing)}: run `make tools`", file=sys.stderr)
        return 1
    if recorded(state):
        print(f"dev-cluster: already running from {state} (make dev-cluster-down first)", file=sys.stderr)
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
        plane.apply_json(
            [storage_class(), *(volume(f"{STORAGE_CLASS}-{i}", STORAGE_CLASS) for i in range(VOLUMES))]
        )
        install(plane)
        # Kueue's queue of the nodes' GPUs, and its LocalQueue in the namespace the README uses.
        plane.apply_json([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": QUEUE_NAMESPACE}}])
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
        "Stop it with `make dev-cluster-down`. Use it with:",
        file=sys.stderr,
    )
    print(f"export KUBECONFIG={plane.kubeconfig}")
    return 0


def down(state: Path) -> int:
    """End every process ``up`` recorded, by its pid."""
    stopped = stop_recorded(state)
    print(f"dev-cluster: stopped {', '.join(stopped) or 'nothing (not running)'}", file=sys.stderr)
    return 0


def dashboard(port: int, states: Path) -> int:
    """Serve the Ray dashboard stand-in until ended (a process of the dev cluster)."""
    RayDashboard(port, states).server.serve_forever()
    return 0


def play(state: Path, namespace: str, job: str, fail: str | None) -> int:
    """Play one job's run to its end, as the kwok e2e does: the staging Job's pod exits 0; once the job
    is Running the launcher reports the last step (with the job's own ServiceAccount token), the Ray job
    ends (SUCCEEDED, or FAILED with ``fail``) and KubeRay's submitter pod exits."""
    plane = ControlPlane.attach(state)
    launcher: Path | None = None
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = plane.get_json("flashrljob", job, "-n", namespace, check=False)
        if found is None:
            print(f"dev-cluster: no FlashRLJob {namespace}/{job}", file=sys.stderr)
            return 1
        status = found.get("status") or {}
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            print(f"{job}: {phase} {status.get('reason') or ''}".rstrip())
            return 0
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
    print(f"dev-cluster: {job} did not end within {WAIT_S:.0f} s", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    """The commands."""
    parser = argparse.ArgumentParser(prog="python -m flashrl_devcluster", description=__doc__)
    parser.add_argument(
        "--state", type=Path, default=DEFAULT_STATE, help="state directory (pids, logs, kubeconfig)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the dev cluster")
    p_up.add_argument("--nodes", type=int, default=1, help="kwok nodes of 8 NVIDIA-H20 (default 1)")
    sub.add_parser("down", help="stop every process `up` started")
    p_play = sub.add_parser("play", help="play one job's run to its end (kwok runs no verl)")
    p_play.add_argument("-n", "--namespace", default="rl")
    p_play.add_argument("--fail", metavar="MESSAGE", help="the Ray job fails with this message instead")
    p_play.add_argument("job")
    p_dash = sub.add_parser("dashboard", help="(internal) the Ray dashboard stand-in")
    p_dash.add_argument("--port", type=int, required=True)
    p_dash.add_argument("--states", type=Path, required=True)
    args = parser.parse_args(argv)
    state = args.state.resolve()
    try:
        if args.command == "up":
            return up(state, args.nodes)
        if args.command == "down":
            return down(state)
        if args.command == "play":
            return play(state, args.namespace, args.job, args.fail)
        return dashboard(args.port, args.states)
    except ControlPlaneError as exc:
        print(f"dev-cluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
