"""``flashrl operator`` started as the chart runs it: the Deployment's own arguments (ports made free)
and a token of the chart's ServiceAccount, so the API server applies the chart's RBAC to every request.
Stopped by its process group, also when the test failed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from envtest.chart import NAMESPACE as CHART_NAMESPACE
from envtest.chart import deployment
from envtest.control_plane import ControlPlane, free_ports


class OperatorProcess:
    """``flashrl operator`` with the chart's Deployment arguments (ports made free) and its token."""

    def __init__(self, plane: ControlPlane, name: str, extra: tuple[str, ...] = ()) -> None:
        container = deployment(plane)["spec"]["template"]["spec"]["containers"][0]
        metrics, health = free_ports(2)
        args = [
            a
            for a in container["args"]
            if not a.startswith(("--metrics-port=", "--health-port=", "--log-format="))
        ]
        kubeconfig = plane.token_kubeconfig(container_service_account(plane), CHART_NAMESPACE, name)
        env = plane.env(kubeconfig) | {"POD_NAME": name, "POD_NAMESPACE": CHART_NAMESPACE}
        self.log = plane.root / "logs" / f"{name}.log"
        argv = [
            sys.executable, "-m", "flashrl_operator.cli", "operator", *args, *extra,
            f"--metrics-port={metrics}", f"--health-port={health}", "--log-format=plain",
        ]  # fmt: skip
        with self.log.open("ab") as sink:
            self.popen = subprocess.Popen(
                argv,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(20)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])


def container_service_account(plane: ControlPlane) -> str:
    return str(deployment(plane)["spec"]["template"]["spec"]["serviceAccountName"])
