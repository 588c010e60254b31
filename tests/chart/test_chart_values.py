"""values.schema.json rejects unknown and mistyped values; the image defaults come from images/pins.yaml."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
import yaml
from chart_support import CHART, RELEASE, one, run_helm, set_args

pytestmark = pytest.mark.chart

SCHEMA = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))

BAD_VALUES = [
    pytest.param({"unknownKey": "1"}, "unknownKey", id="unknown-top-level"),
    pytest.param({"image.registry": "x"}, "registry", id="unknown-nested"),
    pytest.param({"metrics.serviceMonitor.enabeld": "true"}, "enabeld", id="typo"),
    pytest.param({"crds.enabled": "yes"}, "crds", id="string-for-bool"),
    pytest.param({"ports.metrics": "70000"}, "metrics", id="port-out-of-range"),
    pytest.param({"logFormat": "xml"}, "logFormat", id="bad-enum"),
    pytest.param({"maxConcurrentReconciles": "0"}, "maxConcurrentReconciles", id="no-reconciles"),
    pytest.param({"watchNamespaces": "Team_A"}, "watchNamespaces", id="string-for-list"),
    pytest.param({"watchNamespaces": "{Team_A}"}, "watchNamespaces", id="bad-namespace-name"),
    pytest.param({"image.tag": "latest"}, "tag", id="latest-tag"),
    pytest.param({"image.digest": "sha256:abc"}, "digest", id="short-digest"),
    pytest.param({"resources.limits.gpu": "1"}, "gpu", id="unknown-resource"),
]


@pytest.mark.parametrize(("values", "mentions"), BAD_VALUES)
def test_helm_rejects_bad_values(values: dict[str, str], mentions: str) -> None:
    proc = run_helm(
        "template", RELEASE, str(CHART), "--set", "crds.enabled=false", *set_args(values), check=False
    )
    assert proc.returncode != 0, f"helm accepted {values}"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert mentions in proc.stderr, proc.stderr


def test_schema_accepts_the_default_values() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    jsonschema.validate(values, SCHEMA)


def test_schema_forbids_additional_properties_everywhere() -> None:
    """Every object with declared properties closes itself: new keys must be added to the schema."""

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                assert node.get("additionalProperties") is False, f"{path} allows unknown keys"
            for key, child in node.items():
                walk(child, f"{path}.{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{path}[{i}]")

    walk(SCHEMA, "$")


def test_every_default_value_is_described_by_the_schema() -> None:
    """values.yaml and the schema list the same keys (nothing undocumented, nothing stale)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))

    def keys(node: dict[str, Any], schema: dict[str, Any], prefix: str) -> None:
        props = schema.get("properties", {})
        for key, value in node.items():
            assert key in props, f"{prefix}{key} is not in values.schema.json"
            child = props[key]
            if "$ref" in child:
                continue
            if isinstance(value, dict) and "properties" in child:
                keys(value, child, f"{prefix}{key}.")

    keys(values, SCHEMA, "")


def test_default_image_is_the_pinned_operator_image(
    default_docs: list[dict[str, Any]], pins: dict[str, Any]
) -> None:
    pinned = pins["images"]["operator"]
    image = one(default_docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"{pinned['repository']}:{pinned['tag']}"


def test_values_carry_no_copy_of_the_pins() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert values["image"]["repository"] == "" and values["image"]["tag"] == ""


def test_chart_version_follows_the_operator_image(pins: dict[str, Any]) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == pins["images"]["operator"]["tag"]


def test_custom_image_overrides_pins(render: Callable[..., list[dict[str, Any]]]) -> None:
    digest = "sha256:" + "b" * 64
    docs = render({"image.repository": "reg.example/op", "image.tag": "1.2.3", "image.digest": digest})
    containers = [
        one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0],
        one(docs, "Pod")["spec"]["containers"][0],
    ]
    for container in containers:
        assert container["image"] == f"reg.example/op:1.2.3@{digest}"


def test_notes_name_the_next_commands(pins: dict[str, Any]) -> None:
    proc = run_helm(
        "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", "flashrl-system", check=False
    )
    if proc.returncode != 0 and "missing" in proc.stderr:
        pytest.fail(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "kubectl apply" in notes and "kubectl get flashrljobs" in notes
    # The examples name their namespace (rl): `kubectl apply -n <other>` of them is refused.
    assert "kubectl apply -n" not in notes
    assert "kubectl apply -f flashrljob.yaml" in notes and "metadata.namespace" in notes
    # With no cluster, the RayJob API is absent: the notes say how to install the pinned KubeRay.
    assert f"--version {pins['versions']['kuberay']}" in notes
    # helm test ends with a result within 150 s: bounded by helm, and its pod by the kubelet before that.
    assert f"helm test {RELEASE} -n flashrl-system --timeout 150s" in notes


def test_the_helm_test_pod_ends_within_the_timeout_the_notes_give(
    render: Callable[..., list[dict[str, Any]]],
) -> None:
    from flashrl_devcluster.kuberay_kwok import TEST_POD_DEADLINE_S

    pod = one(render({}), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    deadline = pod["spec"]["activeDeadlineSeconds"]
    assert deadline + 30 <= 150  # the kubelet ends it, and helm reads the result, before --timeout 150s
    assert deadline == TEST_POD_DEADLINE_S  # the deadline the dev cluster's kwok plays the kubelet's for


def _operator_args(docs: list[dict[str, Any]]) -> list[str]:
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_policy_and_network_values_become_operator_flags(render: Callable[..., list[dict[str, Any]]]) -> None:
    args = _operator_args(
        render(
            {
                "policy.allowedRegistries": "{ghcr.io/org,registry.internal:5000}",
                "policy.allowedPriorityClasses": "{rl-batch}",
                "policy.allowedRdmaResources": "{rdma/hca_shared_devices_a}",
                "policy.forbidKeylessExistsTolerations": "true",
                "networkPolicy.egressCIDRs": "{10.0.0.1/32}",
                "networkPolicy.kuberayNamespace": "ray-system",
            }
        )
    )
    for flag in (
        "--allowed-registry=ghcr.io/org",
        "--allowed-registry=registry.internal:5000",
        "--allowed-priority-class=rl-batch",
        "--allowed-rdma-resource=rdma/hca_shared_devices_a",
        "--forbid-keyless-exists-tolerations",
        "--network-policy-kuberay-namespace=ray-system",
        "--network-policy-restrict-egress",
        "--network-policy-egress-cidr=10.0.0.1/32",
    ):
        assert flag in args, args
    from flashrl_operator.cli import build_parser

    parsed = build_parser().parse_args(["operator", *args])
    assert parsed.allowed_registry == ["ghcr.io/org", "registry.internal:5000"]
    assert parsed.network_policy_egress_cidr == ["10.0.0.1/32"]


def test_default_values_keep_egress_open_and_disabling_turns_the_policy_off(
    render: Callable[..., list[dict[str, Any]]],
) -> None:
    args = _operator_args(render())
    assert "--network-policy-restrict-egress" not in args and "--no-network-policy" not in args
    assert "--no-network-policy" in _operator_args(render({"networkPolicy.enabled": "false"}))
