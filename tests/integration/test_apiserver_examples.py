"""The examples and the rendered pods, judged by the real API server.

* Every file in ``examples/`` is accepted by ``kubectl apply --dry-run=server`` with strict field
  validation (the quick start's namespace, claims and Secret are applied for real first).
* ``flashrl validate`` reads files as kubectl does: kubectl's own decoding of each example, and of a
  document full of YAML 1.1 traps, is exactly what ``flashrl_api.kubectl_yaml`` reads.
* docs/security.md's Pod Security table is the server's verdict: each pod the examples render (Ray head,
  workers, KubeRay's submitter, the staging Job) is created by server dry run in namespaces labelled
  ``restricted``, ``baseline`` and ``privileged``, and the strictest that admits it is its level.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from envtest.chart import ready_for_jobs
from envtest.control_plane import ControlPlane
from flashrl_api import load_job_file, parse_job
from flashrl_api.kubectl_yaml import load_all
from flashrl_operator.render import render
from rendered_pods import documented_levels, pods

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
JOB_EXAMPLES = sorted((REPO / "examples").glob("flashrljob*.yaml"))
CLUSTER_FILES = ("namespace.yaml", "storage.yaml", "hf-token.yaml")
LEVELS = ("restricted", "baseline", "privileged")

TRAPS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: traps, namespace: default}
data:
  quoted: 'n'
  date: 2024-01-02
  word: off
extra:
  y: 1
  N: [yes, no, On, n]
  nested: {true: 1, off: 2}
"""


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> ControlPlane:
    plane = ready_for_jobs(control_plane)
    cluster_dir = REPO / "examples" / "cluster"
    for name in CLUSTER_FILES:
        text = (cluster_dir / name).read_text().replace("STORAGE_CLASS", "standard")
        plane.kubectl("apply", "-f", "-", stdin=text)
    return plane


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_each_example_is_accepted_by_the_api_server(cluster: ControlPlane, path: Path) -> None:
    out = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(path))
    assert "(server dry run)" in out.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_kubectl_reads_each_example_as_flashrl_validate_does(cluster: ControlPlane, path: Path) -> None:
    sent = json.loads(cluster.kubectl("create", "--dry-run=client", "-o", "json", "-f", str(path)).stdout)
    items = sent["items"] if sent.get("kind") == "List" else [sent]
    ours = [json.loads(json.dumps(d)) for d in load_all(path.read_text()) if d]
    assert items == ours


def test_kubectl_and_flashrl_read_yaml_1_1_traps_alike(cluster: ControlPlane) -> None:
    # --validate=false: the document has fields a ConfigMap lacks; only the decoding is compared.
    sent = json.loads(
        cluster.kubectl(
            "create", "--dry-run=client", "--validate=false", "-o", "json", "-f", "-", stdin=TRAPS
        ).stdout
    )
    (ours,) = load_all(TRAPS)
    assert sent == json.loads(json.dumps(ours))
    assert sent["extra"]["false"] == [
        True,
        False,
        True,
        False,
    ]  # the key N and its values, as kubectl sends them


def _level_namespaces(plane: ControlPlane) -> dict[str, str]:
    names = {}
    for level in LEVELS:
        name = f"pss-{level}"
        plane.kubectl("create", "namespace", name, check=False)
        plane.kubectl(
            "label", "--overwrite", "namespace", name, f"pod-security.kubernetes.io/enforce={level}"
        )
        names[level] = name
    return names


def _server_level(plane: ControlPlane, namespaces: dict[str, str], name: str, spec: dict[str, Any]) -> str:
    """The strictest level whose namespace admits the pod (server dry run)."""
    pod_spec = copy.deepcopy(spec)
    pod_spec["serviceAccountName"] = "default"  # the job's own account exists only once the operator made it
    if pod_spec.get("priorityClassName"):  # a class the example names exists in its cluster (the admin's)
        plane.apply_json(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pod_spec["priorityClassName"]},
                "value": 1000,
            }
        )
    for level in LEVELS:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": re.sub(r"[^a-z0-9-]", "-", name)[:63], "namespace": namespaces[level]},
            "spec": pod_spec,
        }
        out = cluster_create(plane, pod)
        if out.returncode == 0:
            return level
        assert "violates PodSecurity" in out.stderr, out.stderr
    raise AssertionError(f"{name}: not even privileged admits it")


def cluster_create(plane: ControlPlane, obj: dict[str, Any]) -> Any:
    return plane.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(obj), check=False)


def test_the_pod_security_table_is_the_api_servers_verdict(cluster: ControlPlane) -> None:
    namespaces = _level_namespaces(cluster)
    documented = documented_levels()
    assert set(documented) == {f"examples/{p.name}" for p in JOB_EXAMPLES}
    for path in JOB_EXAMPLES:
        judged = {
            role: _server_level(cluster, namespaces, f"{path.stem}-{role}", spec)
            for role, spec in pods(load_job_file(path)).items()
        }
        assert judged == documented[f"examples/{path.name}"], path.name


@pytest.mark.parametrize(
    "name", ["a" * 63, "qwen3-8b-dapo-fp8-blockwise-tis-cap2-h20-node-pool-a-run-000001"]
)
def test_every_child_of_a_63_character_job_is_accepted_by_the_api_server(
    cluster: ControlPlane, name: str
) -> None:
    """Every object the operator would create for a job with the longest name a FlashRLJob may have
    (staging Job included: hf:// sources), created by server dry run: names, labels, everything."""
    job = parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": name, "namespace": "rl", "uid": "0c8e5d3a-1111-4222-8333-444455556666"},
            "spec": {},
        }
    )
    objects = render(job)
    assert {"RayJob", "Job", "ConfigMap", "ServiceAccount", "Role", "RoleBinding"} <= {
        o["kind"] for o in objects
    }
    for obj in objects:
        out = cluster_create(cluster, obj)
        assert out.returncode == 0, f"{obj['kind']} {obj['metadata']['name']}: {out.stderr}"


SEPARATE_ASYNC = REPO / "examples" / "flashrljob-separate-async.yaml"


@pytest.mark.parametrize(
    ("field", "value", "refusal"),
    [
        (("training", "miniBatchSize"), 16, "spec.training.promptBatchSize: Invalid value"),
        (
            ("training", "async", "checkpointEngine"),
            "naive",
            "spec.training.async.checkpointEngine: Invalid value",
        ),
        (("rollout", "pool", "nodes"), 0, "spec.rollout.pool.nodes: Invalid value"),
        (("rollout", "pool", "gpuProduct"), "NVIDIA-L40S", "spec.rollout.pool.gpuProduct: Invalid value"),
    ],
    ids=["batch-invariant", "naive-engine", "zero-node-pool", "mixed-products"],
)
def test_admission_refuses_a_broken_separate_async_job_at_its_field(
    cluster: ControlPlane, field: tuple[str, ...], value: object, refusal: str
) -> None:
    obj = load_all(SEPARATE_ASYNC.read_text())[0]
    node = obj["spec"]
    for part in field[:-1]:
        node = node[part]
    node[field[-1]] = value
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(obj), check=False)
    assert out.returncode != 0
    assert refusal in out.stderr, out.stderr
