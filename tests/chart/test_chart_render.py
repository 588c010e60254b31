"""Render the chart with several value sets; every core object validates against Kubernetes' schemas."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_support import CRD_FILES, NAMESPACE, find, one

pytestmark = pytest.mark.chart

# Oldest supported (Chart.yaml kubeVersion) and newest schema set bundled with kubernetes-validate.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())

VALUE_SETS: dict[str, dict[str, str]] = {
    "defaults": {},
    "namespace-scoped": {"watchNamespaces": "{team-a,team-b}"},
    "service-monitor": {
        "metrics.serviceMonitor.enabled": "true",
        "metrics.serviceMonitor.labels.release": "prom",
    },
    "crds-disabled": {"crds.enabled": "false"},
    "monitoring": {
        "metrics.serviceMonitor.enabled": "true",
        "monitoring.podMonitor.enabled": "true",
        "monitoring.prometheusRule.enabled": "true",
        "monitoring.dashboard.enabled": "true",
    },
    "custom-image": {
        "image.repository": "registry.example.com/flashrl/operator",
        "image.tag": "9.9.9",
        "image.digest": "sha256:" + "a" * 64,
        "image.pullPolicy": "Always",
    },
    "no-rbac-no-service": {
        "rbac.create": "false",
        "rbac.aggregateToDefaultRoles": "false",
        "serviceAccount.create": "false",
        "serviceAccount.name": "existing",
        "metrics.service.enabled": "false",
    },
}

#: Kinds with no schema in kubernetes-validate; checked by dedicated tests instead.
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_validate_strictly(name: str, render: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render(VALUE_SETS[name])
    assert docs, "nothing rendered"
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} invalid for {version}: {exc}")


def test_default_objects(default_docs: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in default_docs)
    assert kinds == sorted(
        [
            "ClusterRole",  # operator
            "ClusterRole",  # editor (aggregated)
            "ClusterRole",  # viewer (aggregated)
            "ClusterRoleBinding",
            "CustomResourceDefinition",  # FlashRLJob
            "CustomResourceDefinition",  # FlashRLExperiment
            "Deployment",
            "Pod",  # helm test
            "Service",
            "ServiceAccount",
        ]
    )
    for doc in default_docs:
        if doc["kind"] not in {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]


def test_deployment_security_and_shape(default_docs: list[dict[str, Any]]) -> None:
    deploy = one(default_docs, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(container["resources"]) == {"requests", "limits"}
    for part in ("requests", "limits"):
        assert set(container["resources"][part]) >= {"cpu", "memory"}
    # The only writable path is an emptyDir at /tmp.
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == "/tmp"
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"] and "emptyDir" in volume
    # Probes hit the health endpoint on the health port.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["args"] == [
        "--log-format=json",
        "--metrics-port=8080",
        "--health-port=8081",
        "--max-concurrent-reconciles=16",
        "--default-trainer-image=ghcr.io/flashrl-dev/flashrl-trainer:0.1.0",
        "--network-policy-kuberay-namespace=kuberay-system",
        "--network-policy-monitoring-namespace=monitoring",
        "--network-policy-metrics-port=8080",
    ]
    assert pod["serviceAccountName"] == one(default_docs, "ServiceAccount")["metadata"]["name"]


def test_args_follow_values(render: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render(
        {
            "logFormat": "plain",
            "ports.metrics": "9090",
            "ports.health": "9091",
            "watchNamespaces": "{a,b}",
            "maxConcurrentReconciles": "4",
            "verlCheckSlots": "3",
        }
    )
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == [
        "--log-format=plain",
        "--metrics-port=9090",
        "--health-port=9091",
        "--max-concurrent-reconciles=4",
        "--verl-check-slots=3",
        "--default-trainer-image=ghcr.io/flashrl-dev/flashrl-trainer:0.1.0",
        "--namespace=a",
        "--namespace=b",
        "--network-policy-kuberay-namespace=kuberay-system",
        "--network-policy-monitoring-namespace=monitoring",
        "--network-policy-metrics-port=8080",
    ]
    service = one(docs, "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"metrics": 9090, "health": 9091}


def test_service_selects_the_operator_pod(default_docs: list[dict[str, Any]]) -> None:
    service = one(default_docs, "Service")
    pod_labels = one(default_docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics", "health"]


def test_service_monitor_only_when_enabled(
    default_docs: list[dict[str, Any]], render: Callable[..., list[dict[str, Any]]]
) -> None:
    assert not find(default_docs, "ServiceMonitor")
    docs = render(VALUE_SETS["service-monitor"])
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    service = one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


@pytest.mark.parametrize("crd_file", CRD_FILES, ids=lambda p: p.name)
def test_crd_is_the_generated_file_plus_labels_and_keep(
    default_docs: list[dict[str, Any]], crd_file: Path
) -> None:
    generated = next(d for d in yaml.safe_load_all(crd_file.read_text(encoding="utf-8")) if d)
    crd = one(default_docs, "CustomResourceDefinition", generated["metadata"]["name"])
    assert crd["metadata"]["name"] == crd_file.name.removesuffix(".yaml")
    # The spec (schema, CEL rules, printer columns) is carried over unchanged.
    assert crd["spec"] == generated["spec"]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_crd_keep_can_be_turned_off(render: Callable[..., list[dict[str, Any]]]) -> None:
    crds = find(render({"crds.keep": "false"}), "CustomResourceDefinition")
    assert len(crds) == len(CRD_FILES)
    for crd in crds:
        assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})


def test_crds_disabled_renders_no_crd(render: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render(VALUE_SETS["crds-disabled"])
    assert not find(docs, "CustomResourceDefinition")
    assert find(docs, "Deployment")


def test_helm_test_pod_checks_health_and_metrics(default_docs: list[dict[str, Any]]) -> None:
    pod = one(default_docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    deploy_image = one(default_docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["image"] == deploy_image
    script = container["args"][0]
    assert ":8081/healthz" in script and ":8080/metrics" in script
    compile(script, "helm-test", "exec")  # the embedded check is valid Python
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


class _GoYaml11Loader(yaml.SafeLoader):
    """PyYAML plus the YAML 1.1 booleans Go's YAML decoders (and so helm and kubectl) also accept.

    PyYAML reads ``n`` and ``y`` as strings; sigs.k8s.io/yaml reads them as false and true, so an
    unquoted ``n:`` property name reaches the API server as ``"false"``.
    """

    def construct_yaml_bool(self, node: yaml.Node) -> bool:  # type: ignore[override]
        return str(self.construct_scalar(node)).lower() in {"y", "yes", "on", "true"}  # type: ignore[arg-type]


_GoYaml11Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:y|Y|n|N|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|true|True|TRUE|false|False|FALSE)$"),
    list("yYnNtTfFoO"),
)
_GoYaml11Loader.add_constructor("tag:yaml.org,2002:bool", _GoYaml11Loader.construct_yaml_bool)


@pytest.mark.parametrize("crd_file", CRD_FILES, ids=lambda p: p.name)
def test_crd_reads_the_same_under_go_yaml_rules(default_docs: list[dict[str, Any]], crd_file: Path) -> None:
    """Every key and value in the CRD means the same to Go's YAML 1.1 decoder as to PyYAML."""
    text = crd_file.read_text(encoding="utf-8")
    python_view = next(d for d in yaml.safe_load_all(text) if d)
    go_view = next(d for d in yaml.load_all(text, Loader=_GoYaml11Loader) if d)
    assert go_view == python_view, "quote y/n/yes/no/on/off keys and values in the generated CRD"


def test_the_operator_gets_a_default_trainer_image(
    render: Callable[..., list[dict[str, Any]]], default_docs: list[dict[str, Any]], pins: dict[str, Any]
) -> None:
    def flag(docs: list[dict[str, Any]]) -> str:
        (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
        (arg,) = [a for a in container["args"] if a.startswith("--default-trainer-image=")]
        return str(arg.split("=", 1)[1])

    trainer = pins["images"]["trainer"]
    assert flag(default_docs) == f"{trainer['repository']}:{trainer['tag']}"
    assert flag(render({"defaultTrainerImage": "registry.example/t:1"})) == "registry.example/t:1"


def test_security_contexts_are_values_for_platforms_that_assign_uids(
    render: Callable[..., list[dict[str, Any]]],
) -> None:
    """OpenShift's restricted SCC assigns the UID: the fixed IDs can be dropped, the rest stays."""
    docs = render(
        {
            "podSecurityContext.runAsUser": "null",
            "podSecurityContext.runAsGroup": "null",
            "podSecurityContext.fsGroup": "null",
        }
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_service_monitor_additional_labels_and_namespace(render: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render(
        {
            "metrics.serviceMonitor.enabled": "true",
            "metrics.serviceMonitor.additionalLabels.release": "prometheus",
            "metrics.serviceMonitor.namespace": "monitoring",
        }
    )
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["metadata"]["namespace"] == "monitoring"
    # It still scrapes the Service in the release's namespace.
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_two_replicas_elect_a_leader(render: Callable[..., list[dict[str, Any]]]) -> None:
    docs = render({"replicas": "2", "leaderElection.leaseDurationSeconds": "20"})
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"] == {"type": "RollingUpdate"}
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-election" in args and "--lease-duration=20" in args
    role = next(r for r in find(docs, "Role") if r["metadata"]["name"].endswith("-leader-election"))
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    ]
    binding = next(b for b in find(docs, "RoleBinding") if b["metadata"]["name"].endswith("-leader-election"))
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    for doc in docs:
        if doc["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)
