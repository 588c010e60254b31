"""One attempt of a FlashRLJob on the real control plane, its Ray job run here by verl's own trainer.

The operator renders and creates the job's RayJob, ConfigMap and ServiceAccount; this module does what
the rest of a cluster would do with them. KubeRay is played on the real API server
(:class:`flashrl_operator.sim.KubeRayStandIn`: the RayCluster, its pods ready, the RayJob's status); the
kubelet's part is done for the head pod: the ConfigMap the RayJob mounts is written where its container
would read it, the container's environment is the RayJob's head template's, and the ServiceAccount
directory holds a token of the job's own ServiceAccount from the TokenRequest API (``kubectl create
token``), the cluster's CA and the namespace, with ``KUBERNETES_SERVICE_HOST``/``PORT`` naming the real
kube-apiserver on loopback. The API server then applies the RBAC the operator rendered to every report
the launcher sends. Ray's part is a local Ray head started from that environment, and the launcher runs
as the RayJob's entrypoint with it. When the launcher ends, KubeRay's report of the Ray job is played:
``Complete``/``SUCCEEDED``, or ``Failed`` with Ray's own message (the entrypoint's exit code and its last
lines), which is what the operator reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from operator_harness import NAMESPACE, Cluster
from trainer_env import REPO, TrainerRun, plugin_path

from envtest.control_plane import ControlPlane
from flashrl_operator.sim import (
    CONFIG_MAPS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SUCCEEDED,
    TRAINING,
    failed,
    free_port,
)
from flashrl_operator.vocab.kuberay import KubeRayReason, entrypoint_failed_message

#: Seconds a whole run may take before it is killed and the test fails (a run takes 2-5 min here).
WATCHDOG_S = 900.0
#: The tail of the entrypoint's output Ray's job message carries (``ENTRYPOINT_LOG_LIMIT``).
MESSAGE_CHARS = 20_000


@dataclasses.dataclass
class Attempt:
    """What one attempt left: the launcher's exit code and log, and its ``/metrics`` while verl ran."""

    ray_job: str
    code: int
    log: str
    #: Every scrape of the launcher's ``/metrics`` answered while the launcher was running.
    scrapes: list[str]
    #: The status the operator had computed when the launcher ended (before KubeRay's end was played).
    status_at_end: dict[str, Any]
    #: Each ``status.checkpoint`` the job showed while the launcher ran, in order (read every second).
    checkpoints_seen: list[dict[str, Any]]


def head_template(ray_job: dict[str, Any]) -> dict[str, Any]:
    return dict(ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"])


async def mount_config_maps(cluster: Cluster, template: dict[str, Any], root: Path) -> dict[str, Path]:
    """Each ConfigMap volume of the head container written under ``root`` (as the kubelet mounts it);
    the map of mount paths to where they are here."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes") or []}
    container = template["spec"]["containers"][0]
    mounted: dict[str, Path] = {}
    for mount in container.get("volumeMounts") or []:
        source = volumes.get(mount["name"], {}).get("configMap")
        if source is None:
            continue
        config_map = await cluster.api.get(CONFIG_MAPS_RESOURCE, NAMESPACE, source["name"])
        assert config_map is not None, f"ConfigMap {source['name']} the RayJob mounts does not exist"
        here = root / mount["mountPath"].strip("/").replace("/", "-")
        here.mkdir(parents=True)
        for key, text in (config_map.get("data") or {}).items():
            (here / key).write_text(text)
        mounted[mount["mountPath"]] = here
    return mounted


def container_env(template: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The head container's environment as the kubelet sets it from the template (values, and the
    downward API fields a pod of that name in the namespace has)."""
    fields = {"metadata.name": pod_name, "metadata.namespace": NAMESPACE}
    env: dict[str, str] = {}
    for entry in template["spec"]["containers"][0].get("env") or []:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        field = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        assert field in fields, f"the head container's env {entry} is not one this tier can set"
        env[entry["name"]] = fields[field]
    return env


def service_account_dir(plane: ControlPlane, template: dict[str, Any], root: Path) -> Path:
    """The kubelet's projected ServiceAccount volume: a token of the pod's ServiceAccount (TokenRequest
    API), the cluster's CA and the namespace."""
    account = template["spec"]["serviceAccountName"]
    token = plane.kubectl("create", "token", account, "-n", NAMESPACE, "--duration=2h").stdout.strip()
    assert token, f"no token for ServiceAccount {account}"
    sa = root / "serviceaccount"
    sa.mkdir(parents=True)
    (sa / "token").write_text(token)
    (sa / "ca.crt").write_bytes(plane.ca.read_bytes())
    (sa / "namespace").write_text(NAMESPACE)
    return sa


def scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return None


async def run_attempt(
    cluster: Cluster,
    plane: ControlPlane,
    job: str,
    ray_job_name: str,
    workdir: Path,
    stop_when: Callable[[], bool] | None = None,
) -> Attempt:
    """The attempt whose RayJob is ``ray_job_name``, to the launcher's end (or until ``stop_when`` says,
    when the whole pod is killed), then KubeRay's report of it."""
    ray_job = await cluster.wait_for(RAY_JOBS_RESOURCE, ray_job_name)
    template = head_template(ray_job)
    mounted = await mount_config_maps(cluster, template, workdir)
    entrypoint = ray_job["spec"]["entrypoint"].split()
    assert entrypoint[:3] == ["flashrl-launch", "train", "--spec"], entrypoint
    spec_dir, spec_name = os.path.split(entrypoint[3])
    spec = mounted[spec_dir] / spec_name
    sa = service_account_dir(plane, template, workdir)
    metrics_port = free_port()
    base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env = {
        **base,
        **container_env(template, f"{ray_job_name}-head"),
        "PATH": f"{REPO / '.trainer-env' / 'bin'}{os.pathsep}{base.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(plugin_path(workdir / "plugins")),
        "RAY_USAGE_STATS_ENABLED": "0",
        # The kubelet mounts the directory at /var/run/secrets/kubernetes.io/serviceaccount; here it is
        # elsewhere, and the launcher's documented override names it.
        "FLASHRL_SERVICEACCOUNT_DIR": str(sa),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(plane.api_port),
        "FLASHRL_METRICS_PORT": str(metrics_port),
        "FLASHRL_TERMINATION_LOG": str(workdir / "termination-log"),
    }
    await cluster.kuberay.set_status(NAMESPACE, ray_job_name, TRAINING)
    await cluster.wait_phase(job, "Running")
    run = TrainerRun(workdir / "run", env)
    scrapes: list[str] = []
    checkpoints: list[dict[str, Any]] = []
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        await asyncio.to_thread(run.start_head)
        launcher = run.launch("train", "--spec", str(spec))
        deadline = time.monotonic() + WATCHDOG_S
        while launcher.poll() is None:
            text = await asyncio.to_thread(scrape, url)
            if text is not None and launcher.poll() is None:
                scrapes.append(text)
            checkpoint = (await cluster.status(job)).get("checkpoint")
            if checkpoint and (not checkpoints or checkpoints[-1] != checkpoint):
                checkpoints.append(checkpoint)
            if stop_when is not None and stop_when():
                # The pod goes away. The launcher is killed and reaped here first, for its exit code:
                # the session's kill below waits for what it kills, and a child reaped there would
                # read as exit code 0 to ``Popen``.
                launcher.kill()
                launcher.wait(30)
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the run passed its watchdog of {WATCHDOG_S:.0f} s:\n{run.tail()}")
            await asyncio.sleep(1.0)
    finally:
        await asyncio.to_thread(run.stop)  # the pod goes: Ray's daemons, verl's workers, the launcher
    code = launcher.wait(30)
    status_at_end = await cluster.status(job)
    log = run.tail(200_000)
    if code == 0:
        await cluster.kuberay.set_status(NAMESPACE, ray_job_name, SUCCEEDED)
    else:
        lines = [line for line in log[-MESSAGE_CHARS:].splitlines() if line.strip()]
        message = entrypoint_failed_message(code, *lines)
        await cluster.kuberay.set_status(NAMESPACE, ray_job_name, failed(KubeRayReason.APP_FAILED, message))
    return Attempt(ray_job_name, code, log, scrapes, status_at_end, checkpoints)
