"""``make dev-cluster``: it brings the cluster up and prints the lines a shell needs; in a shell whose
PATH has no ``helm`` and that evaluates only those lines, the README's quick start steps 2-5 pass as
written, a job's run is played to ``Succeeded``, the origin experiment is played variant by variant
(``make dev-cluster-play EXPERIMENT=...``) to ``Succeeded`` and its report shows the status's step and
says the runs carry no training metrics; ``helm test`` ends with a result within 150 s; the cluster
grows (``NODES=``, ``POOLS=``) keeping what it holds; ``make dev-cluster-down`` leaves no process behind.

The steps are read from README.md's quick start block (the lines after ``# 2.`` up to the last) and
its dev-cluster block, and run with ``bash`` from the clone: ``<that class>`` becomes the dev
cluster's storage class, ``<your token>`` a made-up token (step 4 is optional; it is run to show it
works). ``make`` is run as a user runs it, with ``DEV_CLUSTER_STATE`` pointing at the test's own state
directory. Without the binaries it is skipped, as the other real-control-plane tests are, except under
``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envtest.control_plane import KWOK_CLUSTER, REPO, TOOLS, require_binaries
from flashrl_devcluster.__main__ import STORAGE_CLASS
from flashrl_devcluster.control_plane import recorded

pytestmark = pytest.mark.kwok

SCRIPTS = REPO / "scripts"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "KUBECONFIG"))}
    env["PATH"] = f"{TOOLS}:{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(SCRIPTS)
    return env | (extra or {})


def _devcluster(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flashrl_devcluster", "--state", str(state), *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )


def _user_path() -> str:
    """A user's PATH without this clone's tools and without any helm: what the printed lines must make
    enough (a kubectl of another version may stay on it: the printed PATH must put the clone's first)."""
    dirs = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and Path(d).resolve() != TOOLS.resolve() and not (Path(d) / "helm").exists()
    ]
    path = os.pathsep.join(dirs)
    assert shutil.which("helm", path=path) is None and shutil.which("make", path=path) is not None
    return path


def _user_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KUBERNETES_", "KUBECONFIG", "PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"))
    }
    env["PATH"] = _user_path()
    return env | (extra or {})


def _make(state: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``make -s ARGS`` as a user runs it from the clone, on the test's dev cluster."""
    return subprocess.run(
        ["make", "-s", *args, f"DEV_CLUSTER_STATE={state}"],
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def _in_shell(lines: str, command: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``command`` in a bash that evaluated only ``lines`` (what ``make dev-cluster`` printed)."""
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'eval "$DEV_CLUSTER_LINES"\n{command}'],
        env=_user_env({"DEV_CLUSTER_LINES": lines}),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def _dev_cluster_block() -> list[str]:
    """The commands of the README's dev-cluster block (after its ``eval`` line)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("### Without a GPU cluster")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.DOTALL)
    assert block is not None
    lines = [raw.split("  #")[0].strip() for raw in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _readme_steps(first: int, last: int) -> list[str]:
    """The quick start's commands of steps ``first`` to ``last``, continuation lines joined."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", text[text.index("Quick start") :], re.DOTALL)
    assert block is not None
    steps: list[str] = []
    number = -1
    pending = ""
    for raw in block.group(1).splitlines():
        line = raw.split("  #")[0].rstrip()
        heading = re.match(r"# (\d)\. ", line)
        if heading:
            number = int(heading.group(1))
            continue
        if not line or line.startswith("#") or not first <= number <= last:
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        steps.append(pending + line)
        pending = ""
    return steps


def _processes_under(state: Path) -> list[str]:
    """Processes whose command line or environment names the state directory."""
    found = []
    needle = str(state).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "cmdline").read_bytes() or needle in (proc / "environ").read_bytes():
                stat = (proc / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
        except OSError:
            continue
    return found


@pytest.fixture
def dev_cluster(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """``make -s dev-cluster`` on a state directory of the test's own: (state, the lines it printed)."""
    require_binaries(KWOK_CLUSTER, "make dev-cluster")
    state = tmp_path / "dev-cluster"
    try:
        up = _make(state, "dev-cluster")
        assert up.returncode == 0, up.stderr + up.stdout
        names = {name for name, _ in recorded(state)}
        assert {"etcd", "kube-apiserver", "kuberay-operator", "kwok", "kueue", "flashrl-operator"} <= names
        printed = up.stdout.strip().splitlines()
        assert [line.split("=", 1)[0] for line in printed] == ["export KUBECONFIG", "export PATH"], up.stdout
        assert printed[0] == f"export KUBECONFIG={state / 'kubeconfig'}"
        assert printed[1] == f"export PATH={TOOLS}:$PATH"
        yield state, up.stdout
    finally:
        down = _devcluster(state, "down")
        assert down.returncode == 0, down.stderr
    assert not recorded(state), f"still running after down: {recorded(state)}"
    assert not _processes_under(state), _processes_under(state)


def test_the_readme_steps_run_against_make_dev_cluster(dev_cluster: tuple[Path, str]) -> None:
    state, lines = dev_cluster
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "-m flashrl_devcluster" in makefile and "up $(if $(NODES)" in makefile  # the target's script
    # Only the printed lines put helm and kubectl on PATH: the clone's, the versions the cluster runs.
    which = _in_shell(lines, "command -v helm kubectl")
    assert which.stdout.split() == [str(TOOLS / "helm"), str(TOOLS / "kubectl")], which.stderr
    flashrl = str(Path(sys.executable).with_name("flashrl"))
    outputs: dict[str, str] = {}
    for step in _readme_steps(2, 5):
        command = (
            step.replace("<that class>", STORAGE_CLASS)
            .replace("<your token>", "hf_not_a_real_token")
            .replace(".venv/bin/flashrl", flashrl)
        )
        done = _in_shell(lines, command, timeout=300)
        assert done.returncode == 0, f"{step}\n{done.stderr}{done.stdout}"
        # The namespace `make dev-cluster` made for its queue is the one step 3 applies, as kubectl
        # apply makes it: applying it again warns of nothing.
        assert "last-applied-configuration" not in done.stderr, f"{step}\n{done.stderr}"
        outputs[step.split("  ")[0]] = done.stdout
    preflight = next(v for k, v in outputs.items() if " preflight " in k)
    assert 'the cluster has what FlashRLJob "qwen3-8b-dapo-fp8" needs in rl' in preflight
    listing = next(v for k, v in outputs.items() if k.startswith("kubectl get flashrljobs"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    columns = re.search(r"kubectl get flashrljobs -n rl +# (.*)", readme)
    assert columns is not None
    assert listing.splitlines()[0].split() == columns.group(1).split()  # the README's columns are real

    # helm test, as the chart's NOTES suggest it, runs beside the plays: kwok runs no container, so the
    # pod's check never runs; the kubelet's deadline (played by kwok) fails it, within the 150 s.
    notes = _in_shell(lines, "helm get notes flashrl -n flashrl-system").stdout
    (helm_test,) = [line.split("#")[0].strip() for line in notes.splitlines() if "helm test" in line]
    started = time.monotonic()
    tested = subprocess.Popen(
        ["bash", "-c", f'eval "$DEV_CLUSTER_LINES"\n{helm_test}'],
        env=_user_env({"DEV_CLUSTER_LINES": lines}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    try:
        block = _dev_cluster_block()
        assert block[0].startswith('eval "$(make -s dev-cluster)"')
        (play_job,) = [c for c in block if c.startswith("make dev-cluster-play JOB=")]
        played = _make(state, *play_job.split()[1:])
        assert played.returncode == 0, played.stderr
        assert played.stdout.strip() == "qwen3-8b-dapo-fp8: Succeeded"

        # The origin experiment: applied, played variant by variant as the operator creates each.
        origin = "origin-fp8-vs-bf16"
        assert f"name: {origin}" in (REPO / "examples" / "flashrlexperiment.yaml").read_text()
        (apply,) = [c for c in block if c.startswith("kubectl apply -f examples/flashrlexperiment")]
        applied = _in_shell(lines, apply)
        assert applied.returncode == 0, applied.stderr
        (play_experiment,) = [c for c in block if c.startswith("make dev-cluster-play EXPERIMENT=")]
        assert play_experiment.endswith(f"EXPERIMENT={origin}")
        experiment = _make(state, *play_experiment.split()[1:], timeout=1200)
        assert experiment.returncode == 0, experiment.stderr
        assert experiment.stdout.strip().splitlines() == [
            f"{origin}-blockwise-fp8: Succeeded",
            f"{origin}-channel-fp8: Succeeded",
            f"{origin}-bf16: Succeeded",
            f"{origin}: Succeeded (3/3 variants finished)",
        ], experiment.stdout + experiment.stderr
        # parallelism 1 holds the next variant back: the play said what it waited for, never silent.
        assert "dev-cluster: waiting for " in experiment.stderr
        phase = _in_shell(
            lines, f"kubectl get flashrlexperiment {origin} -n rl -o jsonpath='{{.status.phase}}'"
        )
        assert phase.stdout == "Succeeded"

        (report,) = [c for c in block if " report --experiment " in c]
        reported = _in_shell(
            lines, report.replace(".venv/bin/flashrl", flashrl).replace("report/", str(state / "report"))
        )
        assert reported.returncode == 0, reported.stderr
        for variant in ("blockwise-fp8", "channel-fp8", "bf16"):
            assert f"{variant}: no training metrics (status at step 150/150)" in reported.stdout
        page = (state / "report" / "report.html").read_text(encoding="utf-8")
        assert "150/150" in page and "no training metrics" in page
    finally:
        try:
            helm_output, _ = tested.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            tested.kill()
            helm_output, _ = tested.communicate()
    assert time.monotonic() - started < 600  # ended by itself (the 150 s are helm's and the pod's bounds)
    assert tested.returncode != 0, helm_output  # nothing ran the check: it fails, saying so
    assert "failed" in helm_output and "timed out" not in helm_output, helm_output
    print(f"helm test ended after {time.monotonic() - started:.0f} s:\n{helm_output}")

    # Growing keeps what the cluster holds, and labels the separate-async example's pools.
    grown = _make(state, "dev-cluster", "NODES=2", "POOLS=training,rollout")
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout == lines
    kept = _in_shell(lines, "kubectl get flashrljobs -n rl -o name | wc -l")
    assert int(kept.stdout) == 4  # the job and the experiment's three variants
    labels = _in_shell(lines, "kubectl get nodes -L flashrl.dev/pool --no-headers")
    pools = {line.split()[0]: line.split()[-1] for line in labels.stdout.splitlines()}
    assert pools == {"h20-0": "training", "h20-1": "rollout"}
    shrink = _make(state, "dev-cluster", "NODES=1")
    assert shrink.returncode != 0 and "cannot shrink" in shrink.stderr
