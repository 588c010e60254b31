"""``make dev-cluster``: its script brings the cluster up, the README's quick start steps 2-5 pass
against it as written, a job's run is played to ``Succeeded``, and ``make dev-cluster-down`` leaves
no process behind.

The steps are read from README.md's quick start block (the lines after ``# 2.`` up to the last), and
run with ``bash`` from the clone with the printed ``KUBECONFIG``: ``<that class>`` becomes the dev
cluster's storage class, ``<your token>`` a made-up token (step 4 is optional; it is run to show it
works). Without the binaries it is skipped, as the other real-control-plane tests are, except under
``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    require_binaries(KWOK_CLUSTER, "make dev-cluster")
    state = tmp_path / "dev-cluster"
    try:
        up = _devcluster(state, "up")
        assert up.returncode == 0, up.stderr + up.stdout
        names = {name for name, _ in recorded(state)}
        assert {"etcd", "kube-apiserver", "kuberay-operator", "kwok", "kueue", "flashrl-operator"} <= names
        (line,) = up.stdout.strip().splitlines()
        assert line.startswith("export KUBECONFIG=")
        yield state, line.removeprefix("export KUBECONFIG=")
    finally:
        down = _devcluster(state, "down")
        assert down.returncode == 0, down.stderr
    assert not recorded(state), f"still running after down: {recorded(state)}"
    assert not _processes_under(state), _processes_under(state)


def test_the_readme_steps_run_against_make_dev_cluster(dev_cluster: tuple[Path, str]) -> None:
    state, kubeconfig = dev_cluster
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "-m flashrl_devcluster" in makefile and "up $(if $(NODES)" in makefile  # the target's script
    flashrl = str(Path(sys.executable).with_name("flashrl"))
    outputs: dict[str, str] = {}
    for step in _readme_steps(2, 5):
        command = (
            step.replace("<that class>", STORAGE_CLASS)
            .replace("<your token>", "hf_not_a_real_token")
            .replace(".venv/bin/flashrl", flashrl)
        )
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            env=_env({"KUBECONFIG": kubeconfig}),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
        assert done.returncode == 0, f"{step}\n{done.stderr}{done.stdout}"
        outputs[step.split("  ")[0]] = done.stdout
    preflight = next(v for k, v in outputs.items() if " preflight " in k)
    assert 'the cluster has what FlashRLJob "qwen3-8b-dapo-fp8" needs in rl' in preflight
    listing = next(v for k, v in outputs.items() if k.startswith("kubectl get flashrljobs"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    columns = re.search(r"kubectl get flashrljobs -n rl +# (.*)", readme)
    assert columns is not None
    assert listing.splitlines()[0].split() == columns.group(1).split()  # the README's columns are real

    played = _devcluster(state, "play", "-n", "rl", "qwen3-8b-dapo-fp8")
    assert played.returncode == 0, played.stderr
    assert played.stdout.strip() == "qwen3-8b-dapo-fp8: Succeeded"
