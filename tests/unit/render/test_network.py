"""The job's NetworkPolicy: who may reach its Ray pods, checked against the pods it must cover.

Besides the shape, a small evaluator of NetworkPolicy ingress semantics (peers by pod and namespace
labels, ports) answers "may this pod reach that port" for the cases that matter: the job's own pods,
another job, a pod in another namespace, KubeRay, Prometheus.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from flashrl_api import FlashRLJob, parse_job
from flashrl_operator.render import render
from flashrl_operator.render.network import DASHBOARD_PORT, NetworkSettings, network_policy

K8S_VERSION = "1.32"


def _job(name: str = "j", namespace: str = "rl") -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": name, "namespace": namespace, "uid": "0c8e5d3a-1111-4222-8333-444455556666"},
            "spec": {},
        }
    )


def _ray_pod_labels(job: FlashRLJob) -> dict[str, dict[str, str]]:
    ray_job = next(o for o in render(job) if o["kind"] == "RayJob")
    cluster = ray_job["spec"]["rayClusterSpec"]
    return {
        "head": cluster["headGroupSpec"]["template"]["metadata"]["labels"],
        "worker": cluster["workerGroupSpecs"][0]["template"]["metadata"]["labels"],
        "submitter": ray_job["spec"]["submitterPodTemplate"]["metadata"]["labels"],
    }


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def allowed(
    policy: dict[str, Any],
    target: dict[str, str],
    source: dict[str, str],
    source_namespace: str,
    port: int,
) -> bool:
    """Whether ``policy`` admits a connection from the source pod to ``port`` on the target pod."""
    spec = policy["spec"]
    if not _matches(spec["podSelector"], target):
        return True  # not selected: the policy says nothing about this pod
    own_namespace = policy["metadata"]["namespace"]
    for rule in spec.get("ingress") or []:
        ports = rule.get("ports")
        if ports and port not in {p["port"] for p in ports}:
            continue
        for peer in rule.get("from") or []:
            namespaces = peer.get("namespaceSelector")
            if namespaces is None:
                in_scope = source_namespace == own_namespace
            else:
                in_scope = _matches(namespaces, {"kubernetes.io/metadata.name": source_namespace})
            pods = peer.get("podSelector")
            if in_scope and (pods is None or _matches(pods, source)):
                return True
    return False


def test_every_ray_pod_is_selected() -> None:
    job = _job()
    policy = network_policy(job)
    for name, pod_labels in _ray_pod_labels(job).items():
        assert _matches(policy["spec"]["podSelector"], pod_labels), name


@pytest.mark.parametrize("port", [6379, DASHBOARD_PORT, 10001, 52365, 8080, 41234])
def test_the_jobs_own_pods_reach_every_port(port: int) -> None:
    job = _job()
    policy = network_policy(job)
    labels = _ray_pod_labels(job)
    for source in labels.values():
        assert allowed(policy, labels["head"], source, "rl", port)
        assert allowed(policy, labels["worker"], source, "rl", port)


@pytest.mark.parametrize("port", [6379, DASHBOARD_PORT, 10001, 52365, 41234])
def test_other_pods_reach_nothing(port: int) -> None:
    job, other = _job("j"), _job("other")
    policy = network_policy(job)
    target = _ray_pod_labels(job)["head"]
    assert not allowed(policy, target, _ray_pod_labels(other)["head"], "rl", port)  # another job
    assert not allowed(policy, target, {"app": "curl"}, "rl", port)  # any pod of the namespace
    assert not allowed(policy, target, _ray_pod_labels(job)["head"], "elsewhere", port)  # same labels


def test_kuberay_reaches_only_the_dashboard_and_prometheus_only_metrics() -> None:
    job = _job()
    settings = NetworkSettings(
        kuberay_namespace="ray-system", monitoring_namespace="obs", metrics_ports=(8080, 9090)
    )
    policy = network_policy(job, settings)
    head = _ray_pod_labels(job)["head"]
    assert allowed(policy, head, {"app": "kuberay"}, "ray-system", DASHBOARD_PORT)
    assert not allowed(policy, head, {"app": "kuberay"}, "ray-system", 6379)
    assert allowed(policy, head, {"app": "prometheus"}, "obs", 9090)
    assert not allowed(policy, head, {"app": "prometheus"}, "obs", DASHBOARD_PORT)
    assert not allowed(policy, head, {"app": "kuberay"}, "kuberay-system", DASHBOARD_PORT)


def test_egress_is_open_unless_cidrs_are_given() -> None:
    open_policy = network_policy(_job())
    assert open_policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in open_policy["spec"]
    closed = network_policy(_job(), NetworkSettings(egress_cidrs=("10.0.0.1/32",)))
    assert closed["spec"]["policyTypes"] == ["Ingress", "Egress"]
    egress = closed["spec"]["egress"]
    assert {"ipBlock": {"cidr": "10.0.0.1/32"}} in egress[-1]["to"]
    assert any(p["port"] == 53 for rule in egress for p in rule.get("ports", []))


def test_no_monitoring_namespace_admits_no_scraper() -> None:
    policy = network_policy(_job(), NetworkSettings(monitoring_namespace=""))
    assert len(policy["spec"]["ingress"]) == 2


@pytest.mark.parametrize(
    "settings",
    [NetworkSettings(), NetworkSettings(egress_cidrs=()), NetworkSettings(egress_cidrs=("0.0.0.0/0",))],
)
def test_the_policy_passes_kubernetes_validate_strict(settings: NetworkSettings) -> None:
    policy = network_policy(_job("a" * 63), settings)
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert policy["metadata"]["ownerReferences"][0]["controller"] is True
