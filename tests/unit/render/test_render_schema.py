"""Rendered objects against real schemas, with unknown fields rejected.

* The RayJob against KubeRay v1.7.0's own CRD ``openAPIV3Schema`` (test data in ``tests/data/crds``).
  Every object schema with ``properties`` and without ``x-kubernetes-preserve-unknown-fields`` is closed with
  ``additionalProperties: false``, which is what the API server's strict field validation does.
* The core objects (ServiceAccount, Role, RoleBinding, ConfigMap and the head and worker pod
  templates wrapped in a ``v1 Pod``) with ``kubernetes-validate --strict`` for Kubernetes 1.32.
* KubeRay's admission rules (``validation.go``) and Kueue's RayJob webhook rules, which no schema
  expresses, as explicit predicates.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from flashrl_api import FlashRLJob, load_job_file, parse_job
from flashrl_operator.render import render

REPO = Path(__file__).resolve().parents[3]
#: KubeRay v1.7.0's CRDs, public test data kept in the repository (tests/envtest/upstream.py says why).
CRD_DIR = REPO / "tests" / "data" / "crds" / "kuberay-v1.7.0"
RAYJOB_CRD = CRD_DIR / "ray.io_rayjobs.yaml"
K8S_VERSION = "1.32"


def make_job(spec: dict[str, Any] | None = None, name: str = "qwen3-8b-dapo-fp8") -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": name, "namespace": "rl", "uid": "0c8e5d3a-1111-4222-8333-444455556666"},
            "spec": spec or {},
        }
    )


JOBS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "two-node-rdma": {
        "resources": {"nodes": 2, "rdma": {"resourceName": "rdma/hca_shared_devices_a", "count": 1}},
    },
    "kueue": {"scheduling": {"queueName": "gpu-h20", "priorityClassName": "rl-batch"}},
    "everything": {
        "rollout": {"quantization": "channel-fp8"},
        "resources": {
            "nodes": 4,
            "gpusPerNode": 8,
            "rdma": {"resourceName": "nvidia.com/hostdev", "count": 8},
            "nodeSelector": {"cloud.google.com/gke-nodepool": "h20", "pool": ""},
            "head": {
                "cpu": "4",
                "nodeSelector": {"pool": "cpu"},
                "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            },
            "tolerations": [
                {"key": "dedicated", "value": "training", "effect": "NoSchedule"},
                {"key": "maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600},
            ],
        },
        "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}],
        "images": {"trainer": "registry.local/t:1", "pullPolicy": "Always", "pullSecrets": ["a", "b"]},
        "storage": {
            "modelCache": {"claimName": "hf", "mountPath": "/models"},
            "data": {"claimName": "data", "mountPath": "/data", "readOnly": True},
            "checkpoints": {"claimName": "ckpt", "mountPath": "/checkpoints"},
        },
        "lifecycle": {
            "suspend": True,
            "activeDeadlineSeconds": 7200,
            "maxRestarts": 2,
            "ttlSecondsAfterFinished": 0,
        },
        "scheduling": {"priorityClassName": "high"},
        "secretRefs": ["hf-token", "wandb"],
    },
}


#: The FlashRLJob examples (a FlashRLExperiment's variants are rendered from its jobs in test_experiment).
EXAMPLES = {
    f"example:{p.name}": p
    for p in sorted((REPO / "examples").glob("*.yaml"))
    if "\nkind: FlashRLJob\n" in p.read_text(encoding="utf-8")
}
CASES = sorted(JOBS) + sorted(EXAMPLES)


def rendered(case: str) -> dict[str, dict[str, Any]]:
    job = load_job_file(EXAMPLES[case]) if case in EXAMPLES else make_job(JOBS[case])
    return {o["kind"]: o for o in render(job)}


# --- the KubeRay CRD schema -----------------------------------------------------------------------

_COMBINATORS = ("allOf", "anyOf", "oneOf")


def strict_schema(node: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 structural schema as JSON Schema, closed like strict field validation."""
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: strict_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = strict_schema(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict_schema(out["additionalProperties"])
    for key in _COMBINATORS:
        if key in out:
            out[key] = [strict_schema(s) for s in out[key]]
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in out
    ):
        out["additionalProperties"] = False
    return out


@cache
def rayjob_crd_schema() -> dict[str, Any]:
    crd = yaml.load(
        RAYJOB_CRD.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    schema: dict[str, Any] = versions["v1"]["schema"]["openAPIV3Schema"]
    return schema


@cache
def rayjob_validator() -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(strict_schema(rayjob_crd_schema()))


def schema_errors(obj: dict[str, Any]) -> list[str]:
    return sorted(
        "/".join(str(p) for p in e.absolute_path) + ": " + e.message
        for e in rayjob_validator().iter_errors(obj)
    )


def cel_guarded_paths(node: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Instance paths (``*`` for list items and map values) whose schema carries CEL rules."""
    if node.get("x-kubernetes-validations"):
        yield path
    for name, child in node.get("properties", {}).items():
        yield from cel_guarded_paths(child, (*path, name))
    if isinstance(node.get("items"), dict):
        yield from cel_guarded_paths(node["items"], (*path, "*"))
    if isinstance(node.get("additionalProperties"), dict):
        yield from cel_guarded_paths(node["additionalProperties"], (*path, "*"))


def present(obj: Any, path: tuple[str, ...]) -> bool:
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "*":
        values = obj if isinstance(obj, list) else list(obj.values()) if isinstance(obj, dict) else []
        return any(present(v, rest) for v in values)
    return isinstance(obj, dict) and head in obj and present(obj[head], rest)


@pytest.mark.parametrize("case", CASES)
def test_rayjob_validates_against_the_kuberay_crd(case: str) -> None:
    assert schema_errors(rendered(case)["RayJob"]) == []


#: CEL-guarded paths the renderer sets on purpose, each with the CRD's rules restated and checked below.
CEL_CHECKED: tuple[tuple[str, ...], ...] = (
    ("spec", "deletionStrategy"),
    ("spec", "deletionStrategy", "deletionRules", "*", "condition"),
)


@pytest.mark.parametrize("case", CASES)
def test_rayjob_sets_no_field_guarded_by_cel(case: str) -> None:
    # CEL rules are not evaluated here; this proves none but the deletion strategy's can apply to what
    # we render, and restates those: rules without legacy onSuccess/onFailure, one status per condition.
    rayjob = rendered(case)["RayJob"]
    guarded = sorted(set(cel_guarded_paths(rayjob_crd_schema())))
    assert guarded, "the CRD was expected to carry some CEL rules"
    assert set(CEL_CHECKED) <= set(guarded)
    assert [p for p in guarded if present(rayjob, p) and p not in CEL_CHECKED] == []
    strategy = rayjob["spec"].get("deletionStrategy")
    if strategy is not None:
        assert set(strategy) == {"deletionRules"} and strategy["deletionRules"]
        for rule in strategy["deletionRules"]:
            assert ("jobStatus" in rule["condition"]) != ("jobDeploymentStatus" in rule["condition"])


def worker_container(rayjob: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"][
        "containers"
    ][0]
    return container


def head_pod_spec(rayjob: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    return pod


def _typo_top(rj: dict[str, Any]) -> None:
    rj["spec"]["shutdownAfterJobFinish"] = True


def _typo_container(rj: dict[str, Any]) -> None:
    worker_container(rj)["imagePullPolcy"] = "Always"


def _typo_volume(rj: dict[str, Any]) -> None:
    head_pod_spec(rj)["volumes"][0]["configMap"]["nmae"] = "x"


def _replicas_string(rj: dict[str, Any]) -> None:
    rj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "2"


def _quantity_list(rj: dict[str, Any]) -> None:
    worker_container(rj)["resources"]["limits"]["nvidia.com/gpu"] = [8]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_typo_top, "shutdownAfterJobFinish"),
        (_typo_container, "imagePullPolcy"),
        (_typo_volume, "nmae"),
        (_replicas_string, "workerGroupSpecs/0/replicas"),
        (_quantity_list, "limits/nvidia.com/gpu"),
    ],
)
def test_the_crd_check_rejects_broken_rayjobs(mutate: Any, expected: str) -> None:
    rayjob = copy.deepcopy(rendered("defaults")["RayJob"])
    mutate(rayjob)
    errors = schema_errors(rayjob)
    assert any(expected in e for e in errors), errors


def test_the_crd_check_accepts_int_or_string_quantities() -> None:
    rayjob = copy.deepcopy(rendered("defaults")["RayJob"])
    worker_container(rayjob)["resources"]["limits"]["nvidia.com/gpu"] = 8
    assert schema_errors(rayjob) == []


# --- KubeRay and Kueue admission rules ------------------------------------------------------------

_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def kuberay_and_kueue_problems(rayjob: dict[str, Any]) -> list[str]:
    """The subset of KubeRay's validation.go and Kueue's RayJob webhook that applies to our shape."""
    problems: list[str] = []
    spec = rayjob["spec"]
    name = rayjob["metadata"]["name"]
    if len(name) > 47 or not _DNS_1035.match(name):
        problems.append("RayJob name must be a DNS-1035 label of at most 47 characters")
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        problems.append("suspend requires shutdownAfterJobFinishes")
    if spec.get("ttlSecondsAfterFinished", 0) < 0:
        problems.append("ttlSecondsAfterFinished must be >= 0")
    for key in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if key in spec and spec[key] <= 0:
            problems.append(f"{key} must be > 0")
    if spec.get("backoffLimit", 0) < 0:
        problems.append("backoffLimit must be >= 0")
    if not spec.get("shutdownAfterJobFinishes") and spec.get("ttlSecondsAfterFinished", 0) > 0:
        problems.append("ttlSecondsAfterFinished needs shutdownAfterJobFinishes")
    if "deletionStrategy" in spec and spec.get("shutdownAfterJobFinishes"):
        problems.append("deletionRules exclude shutdownAfterJobFinishes")
    ttls: dict[tuple[str, str], dict[str, int]] = {}
    for rule in (spec.get("deletionStrategy") or {}).get("deletionRules", []):
        condition = rule["condition"]
        if ("jobStatus" in condition) == ("jobDeploymentStatus" in condition):
            problems.append("a deletion condition names exactly one of jobStatus, jobDeploymentStatus")
            continue
        key = (
            ("jobStatus", condition["jobStatus"])
            if "jobStatus" in condition
            else ("jobDeploymentStatus", condition["jobDeploymentStatus"])
        )
        if rule["policy"] in ttls.setdefault(key, {}):
            problems.append(f"duplicate deletion rule {rule['policy']} for {key}")
        ttls[key][rule["policy"]] = condition.get("ttlSeconds", 0)
    for key, by_policy in ttls.items():
        order = [by_policy[p] for p in ("DeleteWorkers", "DeleteCluster", "DeleteSelf") if p in by_policy]
        if order != sorted(order):
            problems.append(f"deletion TTLs for {key} must be Workers <= Cluster <= Self")
    cluster = spec.get("rayClusterSpec")
    if cluster is None or "clusterSelector" in spec:
        problems.append("Kueue needs rayClusterSpec and no clusterSelector")
        return problems
    queued = "kueue.x-k8s.io/queue-name" in (rayjob["metadata"].get("labels") or {})
    if queued and not spec.get("shutdownAfterJobFinishes"):
        problems.append("Kueue: a kueue managed job should delete the cluster after finishing")
    if cluster.get("enableInTreeAutoscaling"):
        problems.append("Kueue forbids the in-tree autoscaler")
    groups = [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]
    if len(groups) + 1 > 18:
        problems.append("Kueue allows at most 18 PodSets")
    for group in groups:
        containers = group["template"]["spec"].get("containers", [])
        if not containers:
            problems.append("every group needs a container")
        for res_key in ("num-cpus", "num-gpus", "memory"):
            if res_key in group.get("rayStartParams", {}) and "resources" in group:
                problems.append(f"{res_key} set both in rayStartParams and resources")
    for group in cluster.get("workerGroupSpecs", []):
        if group["groupName"] == "head":
            problems.append("Kueue forbids a worker group named head")
        low, high = group.get("minReplicas"), group.get("maxReplicas")
        if low is None or high is None or not 0 <= low <= high:
            problems.append("without autoscaling, 0 <= minReplicas <= maxReplicas must both be set")
    return problems


@pytest.mark.parametrize("case", CASES)
def test_rayjob_passes_kuberay_and_kueue_admission_rules(case: str) -> None:
    assert kuberay_and_kueue_problems(rendered(case)["RayJob"]) == []


def test_admission_rules_catch_a_bad_rayjob() -> None:
    rayjob = copy.deepcopy(rendered("defaults")["RayJob"])
    rayjob["spec"]["shutdownAfterJobFinishes"] = False
    rayjob["spec"]["suspend"] = True
    rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] = "head"
    rayjob["spec"]["ttlSecondsAfterFinished"] = 60
    rayjob["spec"]["deletionStrategy"]["deletionRules"][0]["condition"]["ttlSeconds"] = 7200
    assert len(kuberay_and_kueue_problems(rayjob)) == 4


# --- core objects with kubernetes-validate --------------------------------------------------------


def as_pods(rayjob: dict[str, Any]) -> Iterator[dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    templates = [("head", cluster["headGroupSpec"]["template"])]
    templates += [(g["groupName"], g["template"]) for g in cluster["workerGroupSpecs"]]
    templates.append(("submitter", rayjob["spec"]["submitterPodTemplate"]))
    for group, template in templates:
        yield {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{rayjob['metadata']['name']}-{group}", **template.get("metadata", {})},
            "spec": template["spec"],
        }


def core_objects(case: str) -> list[dict[str, Any]]:
    objs = rendered(case)
    core = [objs[k] for k in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "NetworkPolicy")]
    # The RayJob's metadata (the only part the CRD leaves open) checked as ObjectMeta.
    core.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": objs["RayJob"]["metadata"]})
    return core + list(as_pods(objs["RayJob"]))


@pytest.mark.parametrize("case", CASES)
def test_core_objects_pass_kubernetes_validate_strict(case: str) -> None:
    for obj in core_objects(case):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_kubernetes_validate_strict_rejects_a_misspelled_pod_field() -> None:
    pod = next(p for p in as_pods(rendered("defaults")["RayJob"]) if p["metadata"]["name"].endswith("-gpu"))
    pod["spec"]["containers"][0]["terminationMessagePolcy"] = "File"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
