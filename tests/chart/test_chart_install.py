"""The chart on the real API server: ``helm install`` with the defaults, ``helm upgrade`` with every optional
feature on, ``helm uninstall`` (the CRDs stay), as the README and docs/install.md tell a user to.

The Prometheus Operator's CRDs (v0.93.0, from its Go module: ``make tools``) are installed first, so the
PodMonitor, ServiceMonitor and PrometheusRule are judged by their real schemas.
"""

from __future__ import annotations

from envtest.chart import CRD_NAMES, NAMESPACE, RELEASE, install, installed
from envtest.control_plane import ControlPlane
from envtest.upstream import prometheus_operator_crds

EVERY_FEATURE = (
    "--set", "replicas=2",
    "--set", "leaderElection.enabled=true",
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "monitoring.podMonitor.enabled=true",
    "--set", "monitoring.prometheusRule.enabled=true",
    "--set", "monitoring.dashboard.enabled=true",
    "--set", "networkPolicy.enabled=true",
    "--set", "policy.allowedRegistries={ghcr.io/flashrl-dev}",
    "--set", "policy.allowedPriorityClasses={rl-high}",
    "--set", "policy.allowedRdmaResources={rdma/hca_shared_devices_a}",
    "--set", "policy.forbidKeylessExistsTolerations=true",
    "--set", "watchNamespaces={rl,team-a}",
)  # fmt: skip


def _names(plane: ControlPlane, kind: str, namespace: str = NAMESPACE) -> set[str]:
    found = plane.get_json(kind, "-n", namespace, "-l", f"app.kubernetes.io/instance={RELEASE}")
    return {item["metadata"]["name"] for item in found["items"]}


def test_install_upgrade_with_every_feature_and_uninstall_keep_the_crds(control_plane: ControlPlane) -> None:
    plane = control_plane
    for crd_dir in prometheus_operator_crds():
        plane.kubectl("apply", "--server-side", "-f", str(crd_dir))
    for ns in ("rl", "team-a"):
        plane.kubectl("create", "namespace", ns, check=False)

    install(plane)
    assert installed(plane)
    established = plane.get_json("crd", *CRD_NAMES)["items"]
    assert {c["metadata"]["name"] for c in established} == set(CRD_NAMES)
    assert _names(plane, "deployment") and _names(plane, "serviceaccount")
    cluster_roles = {r["metadata"]["name"] for r in plane.get_json("clusterrole")["items"]}
    assert any(RELEASE in name for name in cluster_roles)

    install(plane, *EVERY_FEATURE)
    assert installed(plane)
    selector = f"app.kubernetes.io/instance={RELEASE}"
    (deployment,) = plane.get_json("deployment", "-n", NAMESPACE, "-l", selector)["items"]
    assert deployment["spec"]["replicas"] == 2
    assert _names(plane, "podmonitor") and _names(plane, "prometheusrule") and _names(plane, "servicemonitor")
    assert _names(plane, "role")  # the Lease role for leader election, and the watched namespaces' roles
    assert _names(plane, "role", "rl") and _names(plane, "role", "team-a")
    dashboards = plane.get_json("configmap", "-n", NAMESPACE, "-l", "grafana_dashboard")["items"]
    assert dashboards, "the dashboard ConfigMap"

    plane.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    assert not installed(plane)
    kept = plane.get_json("crd", *CRD_NAMES)["items"]
    assert {c["metadata"]["name"] for c in kept} == set(CRD_NAMES), "crds.keep: the CRDs outlive the release"
    assert not _names(plane, "deployment")

    install(plane)  # the defaults again, for the tests that run the operator as the chart sets it up
    assert installed(plane)
