"""What a FlashRLJob needs from the cluster besides what its manifest says, and checking it (pure parts).

``flashrl validate`` checks everything a manifest can show offline; what only the cluster knows
(namespace, claims, Secrets, GPU nodes, KubeRay) is listed by :func:`offline_limits`, in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flashrl_api import FlashRLJob
from flashrl_api.pools import GpuPool, gpu_pools, held_gpus
from flashrl_api.spec import GPU_PRODUCT_LABEL
from flashrl_api.staging import staging_plan
from flashrl_api.times import parse_rfc3339
from flashrl_operator.job.fits import (
    MissingClaim,
    NodeOffer,
    capacity,
    field_path,
    matches,
    missing_claims,
    missing_priority_classes,
    named_priority_classes,
    pod_gpus,
    priority_classes_message,
)


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
    #: PriorityClass name -> the field paths naming it (cluster-scoped; every pod of the job names it).
    priority_classes: dict[str, tuple[str, ...]] = field(default_factory=dict)


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
    return ClusterNeeds(
        job.namespace or "default", claims, staged, secrets, optional, named_priority_classes(spec)
    )


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
    if needs.priority_classes:
        parts.append(f"PriorityClass {', '.join(needs.priority_classes)} (must exist)")
    pools = gpu_pools(job.spec)
    for pool in pools:
        whose = f" for the {pool.name} pool" if len(pools) > 1 else ""
        parts.append(
            f"{pool.nodes} node(s) with {pool.gpus_per_node} allocatable and free {pool.gpu_product}{whose}"
        )
    parts.append("KubeRay's CRDs and running operator")
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
GPU_RESOURCE = "nvidia.com/gpu"
#: Clock skew allowed between this machine and the KubeRay operator that renews its Lease.
LEASE_SLACK_S = 10.0
#: Pod phases that no longer hold their node's resources.
TERMINATED_PHASES = ("Succeeded", "Failed")


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
    #: KubeRay operator Deployments found by :data:`~flashrl_operator.vocab.kuberay.OPERATOR_LABEL`
    #: (any namespace); ``None``: the user may not list Deployments cluster-wide.
    kuberay_deployments: list[dict[str, Any]] | None = field(default_factory=list)
    #: Leases named :data:`~flashrl_operator.vocab.kuberay.OPERATOR_LEASE` (any namespace); ``None``: the
    #: user may not list Leases cluster-wide.
    kuberay_leases: list[dict[str, Any]] | None = field(default_factory=list)
    #: Node name -> GPUs requested by its pods that have not terminated; ``None``: pods not readable.
    gpus_in_use: dict[str, int] | None = None
    #: When the facts were read (seconds since the epoch), for the Lease's freshness.
    now: float = 0.0
    #: Whether the user may list nodes (``False``: ``nodes`` is empty because it could not be read).
    nodes_readable: bool = True
    #: The PriorityClasses the job's pods name (``None``: it does not exist); a class the user may not
    #: read (they are cluster-scoped) has no key.
    priority_classes: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: The PriorityClasses the user may not read.
    priority_classes_unread: tuple[str, ...] = ()


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


def gpus_in_use(pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Node name -> GPUs held by the pods bound to it that have not terminated (pure)."""
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINATED_PHASES:
            continue
        used[node] = used.get(node, 0) + pod_gpus(pod)
    return used


@dataclass(frozen=True)
class GpuNode:
    """A node that matches a job's labels, with its GPUs."""

    name: str
    allocatable: int
    #: Allocatable minus what non-terminated pods request; ``None`` when pods could not be read.
    free: int | None


def pool_nodes(pool: GpuPool, facts: ClusterFacts) -> list[GpuNode]:
    """The nodes a pool's pods may go to: its GPU product and node selector labels, and no taint its pods
    do not tolerate (:func:`flashrl_operator.job.fits.matches`, the operator's judgement) (pure)."""
    found: list[GpuNode] = []
    for node in facts.nodes:
        offer = NodeOffer.of(node)
        if not matches(pool, offer):
            continue
        used = facts.gpus_in_use.get(offer.name, 0) if facts.gpus_in_use is not None else 0
        free = None if facts.gpus_in_use is None else offer.gpus - used
        found.append(GpuNode(offer.name, offer.gpus, free))
    return found


def matching_nodes(job: FlashRLJob, facts: ClusterFacts) -> list[GpuNode]:
    """The nodes of any of the job's GPU pools (pure); each node once."""
    seen: dict[str, GpuNode] = {}
    for pool in gpu_pools(job.spec):
        for node in pool_nodes(pool, facts):
            seen.setdefault(node.name, node)
    return list(seen.values())


def _slots(gpus: int, per_pod: int) -> int:
    """How many GPU pods of ``per_pod`` GPUs fit in ``gpus``."""
    return max(gpus, 0) // per_pod if per_pod > 0 else 0


def _wanted(pool: GpuPool) -> dict[str, str]:
    return {GPU_PRODUCT_LABEL: pool.gpu_product, **pool.node_selector}


def _labels(pool: GpuPool) -> str:
    return ", ".join(f"{k}={v}" for k, v in _wanted(pool).items())


def _free_listing(nodes: Sequence[GpuNode]) -> str:
    return ", ".join(f"{n.name}: {n.free} of {n.allocatable} free" for n in nodes[:8]) + (
        ", ..." if len(nodes) > 8 else ""
    )


def _free_problem(pool: GpuPool, nodes: Sequence[GpuNode], needed: int, what: str) -> str | None:
    """A line when ``needed`` pods of ``pool``'s shape fit in the allocatable GPUs of ``nodes`` but not in
    their free ones; ``None`` otherwise (a shortage of allocatable GPUs has its own line)."""
    if sum(_slots(n.allocatable, pool.gpus_per_node) for n in nodes) < needed:
        return None
    free = sum(_slots(n.free or 0, pool.gpus_per_node) for n in nodes)
    if free >= needed:
        return None
    return (
        f"GPUs in use: {free} of the {needed} GPU pod(s) of {pool.gpus_per_node} {GPU_RESOURCE} {what} "
        f"fit in the free GPUs of the node(s) labelled {_labels(pool)} now ({_free_listing(nodes)}; "
        "free = allocatable minus the requests of pods that have not terminated): the pods would wait "
        "for those GPUs"
    )


def _shape(pool: GpuPool) -> tuple[str, tuple[tuple[str, str], ...], int]:
    """What decides where a pool's pods can go: its node labels (GPU product, selector) and pod size."""
    return (pool.gpu_product, tuple(sorted(pool.node_selector.items())), pool.gpus_per_node)


def capacity_problems(jobs: Sequence[FlashRLJob], facts: ClusterFacts, who: str) -> list[str]:
    """A line per pod shape (GPU product, node selector, GPUs per pod) whose pods, summed over every
    pool of ``jobs`` started together, do not fit in the allocatable GPUs of their matching nodes, or fit
    there but not in the GPUs free now (``who`` names the jobs in the line). Both pools of a
    separate-async job count, each on the nodes of its own labels, as :func:`cluster_problems` counts one
    job's; two pools of one shape (the same labels and pod size) share those nodes. Shapes are counted
    apart: a node matching two shapes' labels is counted for each (pure)."""
    if not jobs or not facts.nodes_readable:
        return []
    shapes: dict[tuple[str, tuple[tuple[str, str], ...], int], tuple[GpuPool, int, list[str]]] = {}
    for job in jobs:
        for pool in gpu_pools(job.spec):
            first, needed, names = shapes.get(_shape(pool), (pool, 0, []))
            shapes[_shape(pool)] = (first, needed + pool.nodes, list(dict.fromkeys([*names, pool.name])))
    two_pools = any(len(gpu_pools(job.spec)) > 1 for job in jobs)
    problems: list[str] = []
    for pool, needed, names in shapes.values():
        plural = "s" if len(names) > 1 else ""
        what = f"of the {' and '.join(names)} pool{plural} of {who}" if two_pools else f"of {who}"
        nodes = pool_nodes(pool, facts)
        slots = sum(_slots(n.allocatable, pool.gpus_per_node) for n in nodes)
        if slots < needed:
            problems.append(
                f"GPUs too few: {slots} of the {needed} GPU pod(s) of {pool.gpus_per_node} {GPU_RESOURCE} "
                f"{what} fit in the allocatable GPUs of the node(s) labelled {_labels(pool)}"
            )
        elif facts.gpus_in_use is not None:
            busy = _free_problem(pool, nodes, needed, what)
            if busy:
                problems.append(busy)
    return problems


@dataclass(frozen=True)
class PoolFit:
    """One GPU pool of a job against the cluster's nodes: the nodes it may use (those an earlier pool of
    the same job does not take) and how many of them can hold one of its pods."""

    pool: GpuPool
    nodes: list[GpuNode]
    fitting: int

    def describe(self) -> str:
        """``trainer pool: 1x8 NVIDIA-H20 on the node(s) labelled ...: 1 fit``, a line of preflight's
        verdict."""
        p = self.pool
        return (
            f"{p.name} pool: {p.nodes}x{p.gpus_per_node} {p.gpu_product} on the node(s) labelled "
            f"{_labels(p)}: {self.fitting} fit"
        )


def pool_fits(job: FlashRLJob, facts: ClusterFacts) -> list[PoolFit]:
    """Each of the job's GPU pools, the trainer's first; a node that holds an earlier pool's pod is not
    counted again for a later one (the two pools' pods run at once, one per node) (pure)."""
    taken: set[str] = set()
    fits: list[PoolFit] = []
    for pool in gpu_pools(job.spec):
        nodes = [n for n in pool_nodes(pool, facts) if n.name not in taken]
        fitting = [n for n in nodes if n.allocatable >= pool.gpus_per_node]
        taken.update(n.name for n in fitting[: pool.nodes])
        fits.append(PoolFit(pool, nodes, len(fitting)))
    return fits


def _lease_held(lease: Mapping[str, Any], now: float) -> bool:
    spec = lease.get("spec") or {}
    renew_time = parse_rfc3339(spec.get("renewTime"))
    if not spec.get("holderIdentity") or renew_time is None:
        return False
    renewed = renew_time.timestamp()
    return renewed + _quantity(spec.get("leaseDurationSeconds", 15)) + LEASE_SLACK_S >= now


def kuberay_operator_problem(facts: ClusterFacts, kuberay_version: str) -> str | None:
    """A line when neither sign of a running KubeRay operator is found: a Deployment labelled as KubeRay's
    Helm chart labels it with a ready replica, or its leader-election Lease renewed within its duration.
    ``None`` when one is found, or when the user may read neither (:func:`cluster_notes` says so)."""
    from flashrl_operator.vocab.kuberay import OPERATOR_LABEL, OPERATOR_LEASE

    deployments, leases = facts.kuberay_deployments, facts.kuberay_leases
    if deployments is None and leases is None:
        return None
    if any(_quantity((d.get("status") or {}).get("readyReplicas", 0)) >= 1 for d in deployments or []):
        return None
    if any(_lease_held(lease, facts.now) for lease in leases or []):
        return None
    seen = [
        f"{(d.get('metadata') or {}).get('namespace')}/{(d.get('metadata') or {}).get('name')} "
        f"(0 of {_quantity((d.get('spec') or {}).get('replicas', 1))} ready)"
        for d in deployments or []
    ]
    checked = []
    if deployments is not None:
        found = f" (found: {', '.join(seen)})" if seen else ""
        checked.append(f"no Deployment labelled {OPERATOR_LABEL} has a ready replica{found}")
    if leases is not None:
        checked.append(f"no Lease {OPERATOR_LEASE} (KubeRay's leader election) is held")
    return (
        f"KubeRay's operator is not running: {' and '.join(checked)}, in any namespace; nothing would "
        f"create the Ray cluster. Install KubeRay {kuberay_version} (docs/install.md) or start its operator"
    )


def cluster_notes(facts: ClusterFacts) -> list[str]:
    """What preflight could not check with the user's RBAC (printed, never a failure)."""
    notes = []
    if not facts.nodes_readable:
        notes.append("not checked: GPU nodes and their GPUs (your user may not list nodes)")
    elif facts.gpus_in_use is None:
        notes.append("not checked: free GPUs (your user may not list pods on the GPU nodes)")
    if facts.priority_classes_unread:
        notes.append(
            f"not checked: whether PriorityClass {', '.join(facts.priority_classes_unread)} exists "
            "(your user may not get priorityclasses)"
        )
    if facts.kuberay_deployments is None and facts.kuberay_leases is None:
        notes.append(
            "not checked: whether KubeRay's operator runs (your user may list neither Deployments nor "
            "Leases in every namespace)"
        )
    return notes


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
    # The head and one pod per GPU node of each pool (plus the staging Job's).
    pods = sum(pool.nodes for pool in gpu_pools(spec)) + 1
    volumes = {
        "modelCache": spec.storage.model_cache,
        "data": spec.storage.data,
        "checkpoints": spec.storage.checkpoints,
    }
    absent = {m.name: m for m in missing_claims(needs.claims, facts.claims, needs.namespace)}
    for claim, uses in needs.claims.items():
        found = facts.claims.get(claim)
        where = ", ".join(f"storage.{u}" for u in uses)
        if claim in absent or found is None:
            gone = absent.get(claim) or MissingClaim(claim, tuple(uses), needs.namespace)
            problems.append(f"{gone.line()} (examples/cluster/storage.yaml)")
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
    missing_classes = missing_priority_classes(needs.priority_classes, facts.priority_classes)
    if missing_classes:
        # The operator's own judgement (PriorityClassNotFound), word for word.
        problems.append(str(priority_classes_message(missing_classes)))
    for secret in needs.secrets:
        if facts.secrets.get(secret) is None:
            why = "images.pullSecrets" if secret in spec.images.pull_secrets else "secretRefs"
            problems.append(
                f"Secret {secret} ({why}) does not exist in {needs.namespace}: the pods cannot start"
            )
    fits = pool_fits(job, facts)
    never = capacity(gpu_pools(spec), facts.nodes) if facts.nodes_readable else None
    if never is not None and not never.fits:
        # The operator's own judgement (NeverFits), word for word.
        problems.extend(f"never fits: {line}" for line in never.problems())
    for fit in fits:
        pool = fit.pool
        prefix = f"{pool.name} pool ({field_path(pool)}): " if len(fits) > 1 else ""
        if never is not None and not never.fits:
            continue
        if facts.gpus_in_use is not None and facts.nodes_readable:
            what = "of the job" if len(fits) == 1 else f"of the job's {pool.name} pool"
            busy = _free_problem(pool, fit.nodes, pool.nodes, what)
            if busy:
                problems.append(prefix + busy)
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
    stopped = kuberay_operator_problem(facts, kuberay_version)
    if stopped:
        problems.append(stopped)
    return problems


@dataclass(frozen=True)
class ExperimentCheck:
    """``flashrl preflight`` of a FlashRLExperiment: lines shared by every variant, each variant's own,
    and whether the variants started together (``parallelism``) fit in the free GPUs."""

    shared: list[str]
    #: Variant name -> the problems only that variant has.
    variants: dict[str, list[str]]
    #: One line per pod shape whose pods, of the variants run at once, do not fit (:func:`capacity_problems`).
    capacity: list[str]
    #: How many variants run at once.
    at_once: int

    @property
    def ok(self) -> bool:
        """Nothing would stop the experiment."""
        return not self.shared and not any(self.variants.values()) and not self.capacity


def experiment_check(
    variants: Sequence[tuple[str, FlashRLJob]],
    parallelism: int | None,
    facts: ClusterFacts,
    kuberay_version: str,
) -> ExperimentCheck:
    """Each variant's problems (a line every variant has is shown once), and, when several variants run
    at once, whether the ``parallelism`` of them holding the most GPUs (both pools' for separate-async)
    fit in the allocatable and the free GPUs together (:func:`capacity_problems`) (pure)."""
    each = {name: cluster_problems(job, facts, kuberay_version) for name, job in variants}
    shared = [p for p in next(iter(each.values()), []) if all(p in lines for lines in each.values())]
    own = {name: [p for p in lines if p not in shared] for name, lines in each.items()}
    at_once = min(parallelism or len(variants), len(variants))
    capacity: list[str] = []
    if at_once > 1:
        jobs = sorted((job for _, job in variants), key=lambda j: -held_gpus(j.spec))[:at_once]
        capacity = capacity_problems(jobs, facts, f"{at_once} variants run at once (spec.parallelism)")
        if capacity:
            capacity[-1] += "; spec.parallelism: 1 runs them one after another"
    return ExperimentCheck(shared, own, capacity, at_once)
