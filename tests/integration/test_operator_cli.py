"""``flashrl operator`` as a process (kubeconfig credentials, --namespace) and ``flashrl demo``.

On the real API server, but for a token rotation (an old token refused from one moment on), which
kmock's emulator plays."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import kmock
import pytest
import yaml
from operator_harness import NAMESPACE, Cluster, StartOperator, job_manifest

from flashrl_operator.sim import JOBS_RESOURCE, RAY_JOBS_RESOURCE, ApiClient, eventually, free_port
from flashrl_operator.sim.demo import run_demo

REPO = Path(__file__).resolve().parents[2]


def write_kubeconfig(path: Path, server: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "emulated",
                "contexts": [
                    {"name": "other", "context": {"cluster": "nowhere", "user": "u"}},
                    {"name": "emulated", "context": {"cluster": "kmock", "user": "u"}},
                ],
                "clusters": [
                    {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}},
                    {"name": "kmock", "cluster": {"server": server}},
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )


async def stop_operator_process(proc: subprocess.Popen[bytes]) -> bytes:
    """SIGTERM the operator and return its output; kill it (and fail) if it does not stop in time."""
    proc.send_signal(signal.SIGTERM)
    try:
        output, _ = await asyncio.to_thread(proc.communicate, timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"flashrl operator did not stop on SIGTERM:\n{output.decode()[-2000:]}")
    return bytes(output)


def with_a_second_context(kubeconfig: Path, out: Path) -> None:
    """``kubeconfig`` with another context (to a dead port) before its own: the current one must win."""
    config = yaml.safe_load(kubeconfig.read_text())
    config["contexts"].insert(0, {"name": "other", "context": {"cluster": "nowhere", "user": "u"}})
    config["clusters"].insert(0, {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}})
    out.write_text(yaml.safe_dump(config))


async def test_operator_command_uses_kubeconfig_and_watches_one_namespace(
    cluster: Cluster, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with_a_second_context(cluster.real.operator_kubeconfig, kubeconfig)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    cmd = [
        sys.executable,
        "-m",
        "flashrl_operator.cli",
        "operator",
        "--metrics-port",
        str(free_port()),
        "--health-port",
        str(free_port()),
        "--log-format",
        "json",
        "--namespace",
        NAMESPACE,
        # This cluster has no GPU node nor the default claims: the fit check would fail the job.
        "--no-fit-check",
    ]
    proc = subprocess.Popen(  # noqa: ASYNC220  (started once; waited for in a thread)
        cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        await cluster.api.create(JOBS_RESOURCE, job_manifest("from-cli"))
        await cluster.wait_for(RAY_JOBS_RESOURCE, "from-cli", deadline_s=30)
        status = await cluster.wait_ray_job_named("from-cli", "Pending")
        assert status["rayJobName"] == "from-cli"
    finally:
        output = await stop_operator_process(proc)
    assert proc.returncode == 0, output.decode()[-2000:]
    assert b'"message"' in output  # --log-format json


#: A kubeconfig credential plugin, as EKS's `aws eks get-token` behaves: prints an ExecCredential
#: with the current token (from a file the test rotates) and counts its calls.
TOKEN_PLUGIN = """
import json, pathlib
here = pathlib.Path(__file__).parent
with (here / "calls").open("a") as calls:
    calls.write("x")
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": (here / "token").read_text().strip(),
                             "expirationTimestamp": "2099-01-01T00:00:00Z"}}))
"""


@pytest.mark.kmock(reason="a token refused from one moment on (rotation), as a cloud's IAM would")
async def test_operator_command_gets_tokens_from_a_kubeconfig_exec_plugin(
    cluster: Cluster, tmp_path: Path
) -> None:
    """An EKS/GKE-style kubeconfig: no token in it, a command that prints one; then the token rotates."""
    plugin = tmp_path / "get-token"
    plugin.write_text(f"#!{sys.executable}\n{TOKEN_PLUGIN}")
    plugin.chmod(0o755)
    (tmp_path / "token").write_text("token-1")
    write_kubeconfig(tmp_path / "kubeconfig", cluster.url.rstrip("/"))
    config = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    config["users"] = [
        {
            "name": "u",
            "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "./get-token"}},
        }
    ]
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    # The emulated API server now checks bearer tokens; the test itself uses an admin token.
    cluster.emulator.accepted_tokens = frozenset({"admin", "token-1"})
    admin = ApiClient(cluster.url, token="admin")
    as_admin = dataclasses.replace(cluster, api=admin)
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig")}
    cmd = [
        sys.executable,
        "-m",
        "flashrl_operator.cli",
        "operator",
        "--metrics-port",
        str(free_port()),
        "--no-fit-check",
    ]
    cmd += ["--health-port", str(free_port())]
    proc = subprocess.Popen(  # noqa: ASYNC220  (started once; waited for in a thread)
        cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        await admin.create(JOBS_RESOURCE, job_manifest("before-rotation"))
        await as_admin.wait_phase("before-rotation", "Pending")
        assert (tmp_path / "calls").read_text()  # the plugin was run

        # The token rotates: the old one is refused from now on, the plugin hands out the new one.
        (tmp_path / "token").write_text("token-2")
        cluster.emulator.accepted_tokens = frozenset({"admin", "token-2"})
        await admin.create(JOBS_RESOURCE, job_manifest("after-rotation"))
        await as_admin.wait_for(RAY_JOBS_RESOURCE, "after-rotation", deadline_s=30)
        await as_admin.wait_phase("after-rotation", "Pending")
        # The operator's own client (not only kopf's) moved to the new token.
        by_operator = [
            r.headers.get("Authorization")
            for r in cluster.emulator[kmock.resource(RAY_JOBS_RESOURCE)]
            if r.headers.get("User-Agent") == "flashrl-operator"
        ]
        assert by_operator[0] == "Bearer token-1" and "Bearer token-2" in by_operator
    finally:
        await admin.close()
        output = await stop_operator_process(proc)
    assert proc.returncode == 0, output.decode()[-3000:]
    assert len((tmp_path / "calls").read_text()) >= 2, output.decode()[-3000:]


async def test_namespaced_operator_ignores_others(cluster: Cluster, start_operator: StartOperator) -> None:
    await start_operator(namespaces=(NAMESPACE,))
    elsewhere = job_manifest("elsewhere")
    elsewhere["metadata"]["namespace"] = "other-team"
    await cluster.api.create(JOBS_RESOURCE, elsewhere)
    await cluster.api.create(JOBS_RESOURCE, job_manifest("here"))
    await cluster.wait_phase("here", "Pending")
    assert ("rayjobs", NAMESPACE, "here") in cluster.creations()
    assert ("rayjobs", "other-team", "elsewhere") not in cluster.creations()
    other = await cluster.api.get(JOBS_RESOURCE, "other-team", "elsewhere")
    assert other is not None and "status" not in other


def test_demo_runs_the_whole_lifecycle() -> None:
    out, err = io.StringIO(), io.StringIO()
    # No total time limit: about 10 s alone, several times that on a busy machine.
    rc = run_demo(REPO / "examples" / "flashrljob.yaml", out, err)
    text = out.getvalue()
    assert rc == 0, err.getvalue() + text[-2000:]
    assert "EMULATED" in text
    for phase in ("Staging", "Pending", "Starting", "Running", "Succeeded"):
        assert f"-> {phase}" in text
    # The staging Job runs, and succeeds, before the RayJob exists.
    assert text.index("created job rl/qwen3-8b-dapo-fp8-stage") < text.index("the staging Job completed")
    assert text.index("the staging Job completed") < text.index("created rayjob rl/qwen3-8b-dapo-fp8")
    assert "The RayJob the operator applied" in text
    # A GPU node is lost after step 7, past the checkpoint of step 5: attempt 2 resumes from step 5.
    assert "step 7/10 (attempt 1)" in text
    assert "Warning Retrying: attempt 1 failed after a checkpoint of step 5" in text
    assert "2 step(s) since the checkpoint of step 5 lost" in text
    assert "created rayjob rl/qwen3-8b-dapo-fp8-2" in text
    assert "step 6/10 (attempt 2)" in text
    assert "attempt 2, 2 step(s) lost to the failure" in text
    # attempt 2 ran to the end and saved its last checkpoint (verl saves after the last step).
    assert 'flashrl_checkpoint_step{job="qwen3-8b-dapo-fp8",namespace="rl"} 10.0' in text
    assert "attempt 2: from step 5 to step 10, newest checkpoint 10" in text
    # The stuck GPU worker is named with the scheduler's reason, then the cluster comes up.
    assert "condition ClusterReady=False (PodUnschedulable)" in text
    assert "Warning PodUnschedulable" in text
    # The goodput ledger of both attempts: every phase a line, the lost ones among them.
    assert "status.goodput:" in text and "GPU-seconds held" in text
    for phase in ("pods_starting", "generation", "weight_sync", "lost_steps", "teardown"):
        assert f"  {phase} " in text, phase


#: A busy loop that ends on its own after this many seconds, should the test's ``finally`` never run.
BUSY_BOUND_S = 900


def test_flashrl_demo_passes_while_other_processes_keep_every_core_busy(tmp_path: Path) -> None:
    """``flashrl demo`` as a user runs it, the experiment and its report included, on a machine whose
    cores are all taken by other work: its waits are bounded by progress, so it is slower, not failed."""
    busy_loop = f"import time\nend = time.monotonic() + {BUSY_BOUND_S}\nwhile time.monotonic() < end: pass\n"
    hogs = [
        subprocess.Popen([sys.executable, "-c", busy_loop], stdin=subprocess.DEVNULL)
        for _ in range(max(2, os.cpu_count() or 2))
    ]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "flashrl_operator.cli", "demo", "--report", str(tmp_path / "report")],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=BUSY_BOUND_S,
        )
        assert all(h.poll() is None for h in hogs), "a busy loop ended before the demo did"
    finally:
        for hog in hogs:
            if hog.poll() is None:
                os.kill(hog.pid, signal.SIGKILL)
            hog.wait(30)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    assert "OK: the job went Pending -> Starting -> Running" in done.stdout
    assert "OK: the experiment ran both variants" in done.stdout
    assert (tmp_path / "report" / "report.html").is_file()


def test_demo_rejects_an_invalid_manifest(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(job_manifest("bad", {"rollout": {"samplesPerPrompt": 0}})))
    err = io.StringIO()
    assert run_demo(bad, io.StringIO(), err) == 2
    assert "spec.rollout.samplesPerPrompt" in err.getvalue()


async def test_eventually_reports_what_it_waited_for() -> None:
    async def never() -> None:
        return None

    with pytest.raises(TimeoutError, match="the impossible"):
        await eventually(never, "the impossible", deadline_s=0.2)


@pytest.mark.skipif(
    Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists(),
    reason="runs inside a pod with a token",
)
def test_operator_without_credentials_fails_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(tmp_path)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flashrl_operator.cli",
            "operator",
            "--metrics-port",
            "0",
            "--health-port",
            "0",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "no Kubernetes credentials" in result.stderr
    assert "Traceback" not in result.stderr
