"""The NetworkPolicy that closes a job's Ray cluster to the rest of the cluster network (pure).

Without it the head serves Ray's dashboard (job submission, 8265), GCS (6379) and client (10001) ports,
and every Ray pod its raylet and worker ports, to every pod in every namespace: anyone who can run a
pod could run code on the GPU workers with the job's Secrets. The policy admits, to the job's Ray pods
(head, GPU workers and KubeRay's submitter, which all carry the job's labels):

* anything from the job's own pods (Ray picks raylet, object-manager and worker ports at random, so
  the pods of one job must reach each other on every port);
* the dashboard port from the KubeRay operator's namespace (it submits nothing, but polls job status
  there; with Ray token authentication, see ``rayjob.AUTH_OPTIONS``, it also needs the token);
* the metrics ports from the monitoring namespace (Prometheus scraping Ray's metrics endpoint).

Egress stays open unless the operator is given a list of CIDRs (``--network-policy-egress-cidr``):
then only the job's own pods, cluster DNS and those CIDRs (the API server, the model hub, a registry
mirror...) are reachable. Kubelet probes come from the node and are not subject to the policy in the
common CNI plugins (Calico, Cilium), so KubeRay's probes keep working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from flashrl_api import FlashRLJob
from flashrl_operator.render.labels import JOB_LABEL, object_meta
from flashrl_operator.render.names import child_names, label_value

#: Ray's dashboard port (KubeRay ``DefaultDashboardPort``; our head template names it ``dashboard``).
DASHBOARD_PORT: Final = 8265
#: Ray's metrics export port (KubeRay ``DefaultMetricsPort``), which Prometheus scrapes.
RAY_METRICS_PORT: Final = 8080
#: The label the API server sets on every namespace (Kubernetes >= 1.21), naming it.
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
#: Cluster DNS pods (CoreDNS and kube-dns both carry it).
DNS_POD_LABELS: Final = {"k8s-app": "kube-dns"}
COMPONENT: Final = "ray-job"


@dataclass(frozen=True)
class NetworkSettings:
    """The operator's network settings (chart values ``networkPolicy.*`` -> operator flags)."""

    #: Render and apply a NetworkPolicy for every job.
    enabled: bool = True
    #: Namespace of the KubeRay operator (admitted to the dashboard port).
    kuberay_namespace: str = "kuberay-system"
    #: Namespace of Prometheus (admitted to the metrics ports); empty admits none.
    monitoring_namespace: str = "monitoring"
    #: Ports scraped for metrics on the Ray pods.
    metrics_ports: tuple[int, ...] = (RAY_METRICS_PORT,)
    #: None: egress open. A tuple (even empty): egress only to the job's pods, DNS and these CIDRs.
    egress_cidrs: tuple[str, ...] | None = None


def network_policy_name(job: FlashRLJob) -> str:
    """``<job>-ray``, hash-shortened when that is not a valid name."""
    return child_names(job).network_policy


def ray_pod_selector(job: FlashRLJob) -> dict[str, Any]:
    """The labels every Ray pod of this job carries (pod templates and the submitter template)."""
    return {"matchLabels": {JOB_LABEL: label_value(job.name), "app.kubernetes.io/component": COMPONENT}}


def _namespace(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}


def network_policy(job: FlashRLJob, settings: NetworkSettings | None = None) -> dict[str, Any]:
    """The job's NetworkPolicy (``networking.k8s.io/v1``)."""
    settings = settings or NetworkSettings()
    own = {"podSelector": ray_pod_selector(job)}
    ingress: list[dict[str, Any]] = [
        {"from": [own]},
        {
            "from": [_namespace(settings.kuberay_namespace)],
            "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}],
        },
    ]
    if settings.monitoring_namespace and settings.metrics_ports:
        ingress.append(
            {
                "from": [_namespace(settings.monitoring_namespace)],
                "ports": [{"protocol": "TCP", "port": port} for port in settings.metrics_ports],
            }
        )
    spec: dict[str, Any] = {
        "podSelector": ray_pod_selector(job),
        "policyTypes": ["Ingress"],
        "ingress": ingress,
    }
    if settings.egress_cidrs is not None:
        spec["policyTypes"] = ["Ingress", "Egress"]
        egress: list[dict[str, Any]] = [
            {"to": [own]},
            {
                "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": dict(DNS_POD_LABELS)}}],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
        ]
        if settings.egress_cidrs:
            egress.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in settings.egress_cidrs]})
        spec["egress"] = egress
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(job, network_policy_name(job), "network"),
        "spec": spec,
    }
