"""What a FlashRLJob needs from the cluster besides what its manifest says, and checking it (pure parts).

``flashrl validate`` checks everything a manifest can show offline; what only the cluster knows
(namespace, claims, Secrets, GPU nodes, KubeRay) is listed by :func:`offline_limits`, in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flashrl_api import FlashRLJob
from flashrl_api.spec import GPU_PRODUCT_LABEL
from flashrl_api.staging import staging_plan


@dataclass(frozen=True)
class ClusterNeeds:
    """The cluster objects a job refers to."""

    namespace: str
    #: Claim name -> ``spec.storage`` entries mounting it (``modelCache``, ``data``, ``checkpoints``).
    claims: dict[str, list[str]]
    #: Claims a staging Job writes into.
    staged_claims: list[str]
    #: Secrets that must exist (``secretRefs``, image pull Secrets).
    secrets: list[str]
    #: Secrets used when present (the Hub token).
    optional_secrets: list[str]


def cluster_needs(job: FlashRLJob) -> ClusterNeeds:
    """What ``job`` refers to in its namespace (pure)."""
    spec = job.spec
    claims: dict[str, list[str]] = {}
    volumes = (
        ("modelCache", spec.storage.model_cache),
        ("data", spec.storage.data),
        ("checkpoints", spec.storage.checkpoints),
    )
    for key, volume in volumes:
        if volume.claim_name:
            claims.setdefault(volume.claim_name, []).append(key)
    plan = staging_plan(spec)
    staged = sorted({item.claim_name for item in plan if item.claim_name})
    secrets = list(dict.fromkeys([*spec.secret_refs, *spec.images.pull_secrets]))
    token = spec.hugging_face.token_secret
    optional = [token] if plan and token and token not in secrets else []
    return ClusterNeeds(job.namespace or "default", claims, staged, secrets, optional)


def with_namespace(job: FlashRLJob, namespace: str | None) -> FlashRLJob:
    """The job as it will be applied with ``-n namespace`` (its own namespace when not given)."""
    if not namespace:
        return job
    return job.model_copy(update={"metadata": {**job.metadata, "namespace": namespace}})


def offline_limits(job: FlashRLJob, skipped: Sequence[str] = ()) -> str:
    """One line: what validation without a cluster could not check, and the command that checks it.

    ``skipped``: verl's checks that could not run offline (the model-dependent ones without the model's
    files), as ``flashrl_jobs.verl_config.check_config`` lists them.
    """
    needs = cluster_needs(job)
    parts = [f"namespace {needs.namespace}"]
    if needs.claims:
        parts.append(f"claims {', '.join(needs.claims)} (bound; ReadWriteMany when shared by several pods)")
    if needs.secrets:
        parts.append(f"Secrets {', '.join(needs.secrets)} (must exist, or the pods cannot start)")
    if needs.optional_secrets:
        parts.append(f"optional Secret {', '.join(needs.optional_secrets)} (Hub token)")
    r = job.spec.resources
    parts.append(f"{r.nodes} node(s) with {r.gpus_per_node} allocatable {r.gpu_product}")
    parts.append("KubeRay's CRDs")
    parts.extend(skipped)
    return (
        f"not checked offline: {'; '.join(parts)}; `flashrl preflight -n {needs.namespace} FILE` checks "
        "them with your kubeconfig"
    )


# --- checking against a cluster (flashrl preflight) ------------------------------------------------

#: RayJob spec fields the renderer writes: a RayJob CRD without one of them is older than the pinned
#: KubeRay (its CRD carries no version of its own), or a different API.
RAY_JOB_SPEC_FIELDS: tuple[str, ...] = (
    "entrypoint",
    "submissionMode",
    "submitterPodTemplate",
    "shutdownAfterJobFinishes",
    "ttlSecondsAfterFinished",
    "deletionStrategy",
    "preRunningDeadlineSeconds",
    "activeDeadlineSeconds",
    "backoffLimit",
    "suspend",
    "rayClusterSpec",
)
KUBERAY_CRDS: tuple[str, ...] = ("rayjobs.ray.io", "rayclusters.ray.io")
KUBERAY_OPERATOR_LABEL = "app.kubernetes.io/name=kuberay-operator"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class ClusterFacts:
    """What preflight read from the cluster (``None``: the object does not exist)."""

    namespace: dict[str, Any] | None
    claims: dict[str, dict[str, Any] | None]
    secrets: dict[str, dict[str, Any] | None]
    nodes: list[dict[str, Any]]
    crds: dict[str, dict[str, Any] | None]
    #: Images of KubeRay operator Deployments found by label (any namespace).
    kuberay_images: list[str]


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def products_carried(nodes: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The ``nvidia.com/gpu.product`` values the nodes carry (GPU Feature Discovery's labels), each with
    how many nodes carry it, most common first: what ``resources.gpuProduct`` can match."""
    counts: dict[str, int] = {}
    for node in nodes:
        value = ((node.get("metadata") or {}).get("labels") or {}).get(GPU_PRODUCT_LABEL)
        if isinstance(value, str) and value:
            counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def cluster_problems(job: FlashRLJob, facts: ClusterFacts, kuberay_version: str) -> list[str]:
    """One line per thing in the cluster that would stop ``job`` (pure)."""
    needs = cluster_needs(job)
    spec = job.spec
    problems: list[str] = []
    if facts.namespace is None:
        problems.append(
            f"namespace {needs.namespace} does not exist (kubectl apply -f examples/cluster/namespace.yaml)"
        )
    staged = set(needs.staged_claims)
    pods = spec.resources.nodes + 1  # the head and one pod per GPU node (plus the staging Job's)
    volumes = {
        "modelCache": spec.storage.model_cache,
        "data": spec.storage.data,
        "checkpoints": spec.storage.checkpoints,
    }
    for claim, uses in needs.claims.items():
        found = facts.claims.get(claim)
        where = ", ".join(f"storage.{u}" for u in uses)
        if found is None:
            problems.append(
                f"claim {claim} ({where}) does not exist in {needs.namespace} (examples/cluster/storage.yaml)"
            )
            continue
        phase = (found.get("status") or {}).get("phase")
        if phase != "Bound":
            problems.append(
                f"claim {claim} ({where}) is {phase or 'not bound'}, not Bound: check its storage class"
            )
        modes = set((found.get("spec") or {}).get("accessModes") or [])
        read_only = all(volumes[u].read_only for u in uses) and claim not in staged
        if "ReadWriteMany" not in modes and not (read_only and "ReadOnlyMany" in modes):
            need = "ReadOnlyMany or ReadWriteMany" if read_only else "ReadWriteMany"
            writer = " and the staging Job writes to it" if claim in staged else ""
            shown = ", ".join(sorted(modes)) or "none"
            problems.append(
                f"claim {claim} ({where}) has access modes {shown}: {pods} pods on different nodes mount "
                f"it{writer}, so it must be {need}"
            )
    for secret in needs.secrets:
        if facts.secrets.get(secret) is None:
            why = "images.pullSecrets" if secret in spec.images.pull_secrets else "secretRefs"
            problems.append(
                f"Secret {secret} ({why}) does not exist in {needs.namespace}: the pods cannot start"
            )
    res = spec.resources
    wanted = {GPU_PRODUCT_LABEL: res.gpu_product, **res.node_selector}
    fitting = [
        n
        for n in facts.nodes
        if all(((n.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items())
        and _quantity(((n.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))
        >= res.gpus_per_node
    ]
    if len(fitting) < res.nodes:
        labels = ", ".join(f"{k}={v}" for k, v in wanted.items())
        carried = products_carried(facts.nodes)
        if res.gpu_product not in carried:
            shown = ", ".join(f"{p} ({n} node(s))" for p, n in carried.items()) or "none"
            listing = f"; the nodes carry {GPU_PRODUCT_LABEL}: {shown} (set resources.gpuProduct to one)"
        else:
            listing = ""
        problems.append(
            f"{len(fitting)} node(s) labelled {labels} with {res.gpus_per_node} allocatable {GPU_RESOURCE}; "
            f"the job needs {res.nodes}{listing}"
        )
    for name in KUBERAY_CRDS:
        crd = facts.crds.get(name)
        if crd is None:
            problems.append(
                f"CRD {name} is not installed: install KubeRay {kuberay_version} (docs/install.md)"
            )
            continue
        if name == "rayjobs.ray.io":
            versions = (crd.get("spec") or {}).get("versions") or []
            v1 = next((v for v in versions if v.get("name") == "v1"), None)
            fields = (
                (((v1 or {}).get("schema") or {}).get("openAPIV3Schema") or {})
                .get("properties", {})
                .get("spec", {})
            ).get("properties", {})
            missing = [f for f in RAY_JOB_SPEC_FIELDS if f not in fields]
            if v1 is None or missing:
                problems.append(
                    f"CRD {name} is not KubeRay {kuberay_version}'s: "
                    + ("it serves no ray.io/v1" if v1 is None else f"its RayJob has no {', '.join(missing)}")
                )
    wrong = [i for i in facts.kuberay_images if not i.split("@")[0].endswith(f":v{kuberay_version}")]
    if wrong:
        problems.append(f"the KubeRay operator runs {', '.join(wrong)}, not v{kuberay_version}")
    return problems


async def gather(kube: Any, job: FlashRLJob) -> ClusterFacts:
    """Read what :func:`cluster_problems` needs through the operator's
    :class:`~flashrl_operator.client.kube.KubeClient`."""
    from urllib.parse import quote

    from flashrl_operator.vocab.kinds import PERSISTENT_VOLUME_CLAIM

    needs = cluster_needs(job)
    ns = needs.namespace
    claims = {c: await kube.get(PERSISTENT_VOLUME_CLAIM, ns, c) for c in needs.claims}
    secrets = {s: await kube.read_path(f"/api/v1/namespaces/{ns}/secrets/{s}") for s in needs.secrets}
    nodes = ((await kube.read_path("/api/v1/nodes")) or {}).get("items") or []
    crds = {
        c: await kube.read_path(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{c}")
        for c in KUBERAY_CRDS
    }
    deployments = (
        (await kube.read_path(f"/apis/apps/v1/deployments?labelSelector={quote(KUBERAY_OPERATOR_LABEL)}"))
        or {}
    ).get("items") or []
    images = [
        str(c.get("image"))
        for d in deployments
        for c in ((((d.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])
    ]
    return ClusterFacts(
        namespace=await kube.read_path(f"/api/v1/namespaces/{ns}"),
        claims=claims,
        secrets=secrets,
        nodes=[n for n in nodes if isinstance(n, dict)],
        crds=crds,
        kuberay_images=images,
    )
