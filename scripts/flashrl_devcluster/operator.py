"""``flashrl operator`` started as the chart runs it (the tests and ``make dev-cluster``): the
Deployment's own arguments (ports made free) and a token of the chart's ServiceAccount, so the API server
applies the chart's RBAC to every request. Stopped by its process group, also when the test failed."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from flashrl_devcluster.chart import NAMESPACE as CHART_NAMESPACE
from flashrl_devcluster.chart import deployment
from flashrl_devcluster.control_plane import ControlPlane, Process, free_ports


class OperatorProcess:
    """``flashrl operator`` with the chart's Deployment arguments (ports made free) and its token."""

    def __init__(
        self,
        plane: ControlPlane,
        name: str,
        extra: tuple[str, ...] = (),
        source: Path | None = None,
        token_duration: str = "2h",
    ) -> None:
        """``source``: run the operator from that checkout's ``operator/src`` and ``jobs/src`` (another
        commit's code, for a benchmark's before and after) instead of this one's. ``token_duration``: how
        long the ServiceAccount token it runs with is valid (a dev cluster lives longer than a test)."""
        container = deployment(plane)["spec"]["template"]["spec"]["containers"][0]
        metrics, health = free_ports(2)
        self.metrics_port = metrics
        self.health_port = health
        kubeconfig = plane.token_kubeconfig(
            container_service_account(plane), CHART_NAMESPACE, name, token_duration
        )
        env = plane.env(kubeconfig) | {"POD_NAME": name, "POD_NAMESPACE": CHART_NAMESPACE}
        if source is not None:
            env["PYTHONPATH"] = f"{source / 'operator' / 'src'}:{source / 'jobs' / 'src'}"
        argv = operator_argv(container["args"], metrics, health, extra)
        self.process = Process.start(name, argv, plane.root / "logs" / f"{name}.log", env)
        self.popen = self.process.popen

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """``sig`` to its process group (SIGKILL after 20 s)."""
        self.process.stop(sig, grace_s=20.0)

    def tail(self) -> str:
        """The last lines of its log."""
        return self.process.tail(40)


def operator_argv(
    chart_args: list[str], metrics_port: int, health_port: int, extra: tuple[str, ...] = ()
) -> list[str]:
    """``flashrl operator`` with the chart's arguments, but its endpoints on the free ports given and on
    loopback: a pod listens on every address for its probes and Prometheus, a process on a developer's
    machine only where that machine's own clients reach it."""
    own = ("--metrics-port=", "--health-port=", "--log-format=", "--bind-address=")
    args = [a for a in chart_args if not a.startswith(own)]
    return [
        sys.executable, "-m", "flashrl_operator.cli", "operator", *args, *extra,
        f"--metrics-port={metrics_port}", f"--health-port={health_port}", "--bind-address=127.0.0.1",
        "--log-format=plain",
    ]  # fmt: skip


def container_service_account(plane: ControlPlane) -> str:
    """The ServiceAccount the chart's Deployment runs the operator as."""
    return str(deployment(plane)["spec"]["template"]["spec"]["serviceAccountName"])
