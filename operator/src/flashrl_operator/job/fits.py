"""Whether a job can ever start on the cluster as it is: one judgement for ``flashrl preflight`` and the
operator (pure).

A FlashRLJob whose GPU pods no node can ever take would otherwise be created, get part of its gang
scheduled (holding GPUs nobody can use) and wait out its whole startup deadline; one whose claim does
not exist would wait as long, and so would one whose pods name a PriorityClass that does not exist (the
API server's Priority admission refuses each of its pods; queued, Kueue creates no workload for it and
it waits for ever). All three are decided here from the nodes, claims and PriorityClasses as read,
before anything is created, and the answer is final: the operator fails the job (``NeverFits``,
``ClaimNotFound``, ``PriorityClassNotFound``) and ``flashrl preflight`` prints the same sentence.

A node can hold a pool's pod when it carries the pool's labels (``nvidia.com/gpu.product`` and the
pool's node selector, as the rendered pod's ``nodeSelector``), its pod tolerates each of the node's
``NoSchedule``/``NoExecute`` taints (the rendered tolerations: the GPU taint's, then the pool's), and
enough of its allocatable ``nvidia.com/gpu`` remain. The judgement is about the cluster as it is, not as
it is now: GPUs that other pods hold do not count against it (they are released when those pods end:
the job waits, ``WaitingForGPUs``), and neither do a cordon or the taints the node lifecycle controller
sets while a node is not ready (an administrator's or the node's own passing state). Nodes that join
later (a cluster autoscaler's, an administrator's) cannot be seen: the message says so, and the
operator's ``--no-fit-check`` (the chart's ``fitCheck: false``) turns the judgement off where GPU nodes
are only added on demand.

Several pods may share a node when its GPUs allow (nothing in the rendered pods keeps them apart), so a
pool's room is counted in pods per node; the two pools of a separate-async job are counted together on
the nodes both may use (:func:`_room`), exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api.pools import ROLLOUT_POOL, GpuPool
from flashrl_api.spec import GPU_PRODUCT_LABEL, FlashRLJobSpec
from flashrl_operator.render.labels import JOB_LABEL
from flashrl_operator.render.pod import GPU_TOLERATION

GPU_RESOURCE: Final = "nvidia.com/gpu"
#: Taint effects that keep a pod off a node (``PreferNoSchedule`` only discourages).
BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
#: Taints a node carries for a passing state (not ready, unreachable, cordoned, under pressure, not
#: initialised by its cloud provider): set and lifted by Kubernetes itself, never a reason a job can
#: never run there.
PASSING_TAINT_PREFIXES: Final = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
#: Nodes named in a message at most.
MAX_NAMED: Final = 6
#: What every never-fits message ends with.
LATER_NODES: Final = (
    "only the nodes there now count: nodes that join later are yours to add before applying the job "
    "(or ask for fewer or smaller GPU pods); delete this FlashRLJob and apply it again then"
)


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


@dataclass(frozen=True)
class NodeOffer:
    """One node as the judgement sees it."""

    name: str
    labels: Mapping[str, str]
    gpus: int
    """Allocatable ``nvidia.com/gpu``."""
    taints: tuple[Mapping[str, Any], ...]
    cordoned: bool

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeOffer:
        """The node as read from the API server."""
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        taints = tuple(t for t in spec.get("taints") or [] if isinstance(t, Mapping))
        labels = meta.get("labels") or {}
        return cls(
            str(meta.get("name") or "?"),
            {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
            _quantity(allocatable.get(GPU_RESOURCE, 0)),
            taints,
            bool(spec.get("unschedulable")),
        )


def wanted_labels(pool: GpuPool) -> dict[str, str]:
    """The labels a node needs for the pool's pods (the rendered ``nodeSelector``)."""
    return {**pool.node_selector, GPU_PRODUCT_LABEL: pool.gpu_product}


def pool_tolerations(pool: GpuPool) -> list[dict[str, Any]]:
    """The pool's pods' tolerations, as rendered: the GPU taint's, then the pool's own."""
    return [dict(GPU_TOLERATION), *(t.to_wire() for t in pool.tolerations)]


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (Kubernetes' rule: an empty effect matches
    every effect; ``Exists`` with no key matches every taint; ``Exists`` matches any value, ``Equal``
    the same value). By hand: the scheduler's rule (``Toleration.ToleratesTaint`` in ``k8s.io/api``) is
    Go, and no Python client library offers it."""
    for t in tolerations:
        effect = t.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        operator = t.get("operator") or "Equal"
        key = t.get("key")
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def blocking_taints(pool: GpuPool, node: NodeOffer) -> list[str]:
    """The node's taints that keep the pool's pods off it for good (passing states aside)."""
    tolerations = pool_tolerations(pool)
    return [
        _taint_text(t)
        for t in node.taints
        if t.get("effect") in BLOCKING_EFFECTS
        and not str(t.get("key") or "").startswith(PASSING_TAINT_PREFIXES)
        and not tolerates(tolerations, t)
    ]


def labelled(pool: GpuPool, node: NodeOffer) -> bool:
    """Whether the node carries every label the pool's pods select."""
    return all(node.labels.get(k) == v for k, v in wanted_labels(pool).items())


def matches(pool: GpuPool, node: NodeOffer) -> bool:
    """Whether the pool's pods may go to the node at all: its labels, and no taint they do not tolerate."""
    return labelled(pool, node) and not blocking_taints(pool, node)


def _room(pools: Sequence[GpuPool], nodes: Sequence[NodeOffer]) -> bool:
    """Whether every pool's pods fit together in the nodes' allocatable GPUs.

    One pool: the pods per node summed. Two (separate-async): exactly, by the most rollout pods that fit
    beside each count of trainer pods, node by node (a small dynamic programme: pods x nodes x pods a
    node holds)."""
    if not pools:
        return True
    first = pools[0]
    if len(pools) == 1:
        per = max(first.gpus_per_node, 1)
        return sum(n.gpus // per for n in nodes if matches(first, n)) >= first.nodes
    second = pools[1]
    need_a, per_a, per_b = first.nodes, max(first.gpus_per_node, 1), max(second.gpus_per_node, 1)
    unreachable = -1
    # best[k]: the most pods of the second pool that fit beside k pods of the first (k capped at need_a).
    best = [0] + [unreachable] * need_a
    for node in nodes:
        a_ok, b_ok = matches(first, node), matches(second, node)
        if not a_ok and not b_ok:
            continue
        step = [unreachable] * (need_a + 1)
        for k, b in enumerate(best):
            if b == unreachable:
                continue
            most_a = node.gpus // per_a if a_ok else 0
            for x in range(most_a + 1):
                left = node.gpus - x * per_a
                y = left // per_b if b_ok else 0
                j = min(need_a, k + x)
                step[j] = max(step[j], b + y)
        best = step
    return best[need_a] >= second.nodes


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _gpus_listing(nodes: Sequence[NodeOffer]) -> str:
    counts = sorted((n.gpus for n in nodes), reverse=True)
    if len(set(counts)) == 1:
        return f"with {counts[0]}" + (" each" if len(counts) > 1 else "")
    shown = [str(c) for c in counts[:MAX_NAMED]]
    if len(counts) > MAX_NAMED:
        return f"with {', '.join(shown)} and {len(counts) - MAX_NAMED} more"
    return f"with {', '.join(shown[:-1])} and {shown[-1]}"


def _products(nodes: Sequence[NodeOffer]) -> str:
    counts: dict[str, int] = {}
    for node in nodes:
        value = node.labels.get(GPU_PRODUCT_LABEL)
        if value:
            counts[value] = counts.get(value, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{p} ({_plural(n, 'node')})" for p, n in ordered) or "none"


def field_path(pool: GpuPool) -> str:
    """Where the pool is set in the spec."""
    return "rollout.pool" if pool.name == ROLLOUT_POOL else "resources"


@dataclass(frozen=True)
class PoolOffer:
    """One pool of a job against the cluster's nodes."""

    pool: GpuPool
    matching: tuple[NodeOffer, ...]
    """Nodes the pool's pods may go to (labels and taints)."""
    tainted: tuple[tuple[NodeOffer, tuple[str, ...]], ...]
    """Nodes with the pool's labels whose taints its pods do not tolerate, with those taints."""
    fits: bool
    """Whether the pool's pods fit in the matching nodes' allocatable GPUs (alone)."""

    def needs(self) -> str:
        """``needs 2 nodes x 8 NVIDIA-H20``, with the node selector when there is one."""
        p = self.pool
        selector = ", ".join(f"{k}={v}" for k, v in sorted(p.node_selector.items()))
        return f"needs {_plural(p.nodes, 'node')} x {p.gpus_per_node} {p.gpu_product}" + (
            f" labelled {selector}" if selector else ""
        )

    def offers(self, nodes: Sequence[NodeOffer]) -> str:
        """What the cluster offers the pool: ``1 node matches, with 8``, then why other nodes do not."""
        n = len(self.matching)
        text = (
            "no node matches"
            if n == 0
            else f"{_plural(n, 'node')} {'matches' if n == 1 else 'match'}, {_gpus_listing(self.matching)}"
        )
        if self.tainted:
            shown = "; ".join(
                f"{node.name}: {', '.join(taints)}" for node, taints in self.tainted[:MAX_NAMED]
            )
            text += (
                f" ({_plural(len(self.tainted), 'more node')} with its labels "
                f"{'has' if len(self.tainted) == 1 else 'have'} taints its pods do not tolerate: {shown}; "
                f"add tolerations in {field_path(self.pool)}.tolerations)"
            )
        if not any(node.labels.get(GPU_PRODUCT_LABEL) == self.pool.gpu_product for node in nodes):
            text += (
                f" (the nodes carry {GPU_PRODUCT_LABEL}: {_products(nodes)}; set "
                f"{field_path(self.pool)}.gpuProduct to one)"
            )
        return text

    def line(self, nodes: Sequence[NodeOffer], named: bool) -> str:
        """What the pool needs and what the cluster offers it, named when the job has two pools."""
        prefix = f"{self.pool.name} pool ({field_path(self.pool)}) " if named else ""
        return f"{prefix}{self.needs()}; {self.offers(nodes)}"


@dataclass(frozen=True)
class Capacity:
    """A job's pools against the cluster's nodes: what each needs and what the cluster offers."""

    pools: tuple[PoolOffer, ...]
    nodes: tuple[NodeOffer, ...]
    together: bool
    """Whether every pool fits at once (both pools of a separate-async job on the nodes they share)."""

    @property
    def fits(self) -> bool:
        """Whether the job can ever start on these nodes."""
        return self.together and all(p.fits for p in self.pools)

    def problems(self) -> list[str]:
        """A line per pool that can never fit (or one for the pools that fit apart but not together);
        none when the job fits."""
        named = len(self.pools) > 1
        lines = [p.line(self.nodes, named) for p in self.pools if not p.fits]
        if not lines and not self.together:
            needs = " and ".join(f"the {p.pool.name} pool {p.needs()}" for p in self.pools)
            shared = {n.name: n for p in self.pools for n in p.matching}
            lines.append(
                f"{needs}, at once; {_plural(len(shared), 'node')} "
                f"{'matches' if len(shared) == 1 else 'match'}, {_gpus_listing(list(shared.values()))}"
            )
        return lines

    def message(self) -> str | None:
        """The ``NeverFits`` message, or ``None`` when the job fits."""
        lines = self.problems()
        if not lines:
            return None
        later = LATER_NODES[0].upper() + LATER_NODES[1:]
        return f"The cluster can never hold this job: {'; '.join(lines)}. {later}"


def capacity(pools: Sequence[GpuPool], nodes: Sequence[Mapping[str, Any]]) -> Capacity:
    """Each pool against the nodes as read (pure): the one judgement of whether the job can ever start."""
    offers = [NodeOffer.of(n) for n in nodes]
    judged: list[PoolOffer] = []
    for pool in pools:
        matching = tuple(n for n in offers if matches(pool, n))
        tainted = tuple(
            (n, tuple(blocking_taints(pool, n)))
            for n in offers
            if labelled(pool, n) and blocking_taints(pool, n)
        )
        judged.append(PoolOffer(pool, matching, tainted, _room([pool], offers)))
    return Capacity(tuple(judged), tuple(offers), _room(list(pools), offers))


# --- a job that fits, waiting for GPUs others hold ----------------------------------------------------

#: Pod phases that no longer hold their node's resources.
ENDED_PHASES: Final = frozenset({"Succeeded", "Failed"})
#: Nodes whose pods are listed to name the holders, at most (one LIST each).
MAX_NODES_LOOKED_AT: Final = 8


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """The GPUs a pod holds on its node, as the scheduler counts them: its containers' requests (an
    extended resource's request defaults to its limit), or its largest init container's if larger."""

    def wanted(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(GPU_RESOURCE)
        if value is None:
            value = (resources.get("limits") or {}).get(GPU_RESOURCE, 0)
        return _quantity(value)

    spec = pod.get("spec") or {}
    running = sum(wanted(c) for c in spec.get("containers") or [])
    init = max((wanted(c) for c in spec.get("initContainers") or []), default=0)
    return max(running, init)


def holder_nodes(judged: Capacity) -> list[str]:
    """The nodes whose pods are worth listing to name whose pods hold the GPUs: the pools' matching nodes
    (at most :data:`MAX_NODES_LOOKED_AT`)."""
    names = list(dict.fromkeys(n.name for p in judged.pools for n in p.matching))
    return names[:MAX_NODES_LOOKED_AT]


def _holder(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    job = (meta.get("labels") or {}).get(JOB_LABEL)
    return f"FlashRLJob {namespace}/{job}" if job else f"pod {namespace}/{meta.get('name')}"


def gpu_holders(
    judged: Capacity, pods: Sequence[Mapping[str, Any]], own: tuple[str, str], *, queued: bool
) -> str | None:
    """Whose pods hold the GPUs of the nodes a job that fits the cluster waits for (pure): the
    ``WaitingForGPUs`` message, e.g. ``h20-0: 8 of 8 GPUs held by FlashRLJob rl/first``, or ``None`` when
    the job can never fit (that is ``NeverFits``'s) or no pod of another holds a GPU there. ``own``: the
    job's namespace and name (its own pods are not holders). ``queued``: the job has a Kueue queue
    (nothing to point to)."""
    if not judged.fits:
        return None
    looked = set(holder_nodes(judged))
    offers = {n.name: n for p in judged.pools for n in p.matching if n.name in looked}
    held: dict[str, dict[str, int]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in offers or (pod.get("status") or {}).get("phase") in ENDED_PHASES:
            continue
        if (meta.get("namespace"), (meta.get("labels") or {}).get(JOB_LABEL)) == own:
            continue
        gpus = pod_gpus(pod)
        if gpus > 0:
            who = held.setdefault(node, {})
            who[_holder(pod)] = who.get(_holder(pod), 0) + gpus
    if not held:
        return None
    parts = []
    for node, who in held.items():
        total = sum(who.values())
        by = ", ".join(f"{name} ({gpus})" if len(who) > 1 else name for name, gpus in who.items())
        parts.append(f"{node}: {total} of {offers[node].gpus} GPUs held by {by}")
    message = (
        "waiting for GPUs: the job fits the cluster, but pods of others hold the GPUs now ("
        + "; ".join(parts)
        + "); its pods start when those are released"
    )
    if not queued:
        message += (
            ", and the wait counts against its startup deadline (lifecycle.startupTimeoutSeconds): "
            "to wait holding no GPU, queue it (spec.scheduling.queueName, a Kueue LocalQueue)"
        )
    return message


@dataclass(frozen=True)
class MissingClaim:
    """A claim the job mounts that does not exist in its namespace."""

    name: str
    uses: tuple[str, ...]
    """The ``spec.storage`` entries mounting it (``modelCache``, ``data``, ``checkpoints``)."""
    namespace: str

    def line(self) -> str:
        """``claim NAME (storage.modelCache) does not exist in NAMESPACE``."""
        where = ", ".join(f"storage.{u}" for u in self.uses)
        return f"claim {self.name} ({where}) does not exist in {self.namespace}"


def missing_claims(
    claims: Mapping[str, Sequence[str]], found: Mapping[str, Mapping[str, Any] | None], namespace: str
) -> list[MissingClaim]:
    """The claims the job mounts (claim -> its uses) that were read and found missing (pure)."""
    return [
        MissingClaim(c, tuple(uses), namespace)
        for c, uses in claims.items()
        if c in found and found[c] is None
    ]


def claims_message(missing: Sequence[MissingClaim]) -> str | None:
    """The ``ClaimNotFound`` message, or ``None`` when every claim exists."""
    if not missing:
        return None
    lines = "; ".join(m.line() for m in missing)
    return (
        f"{lines}: no pod of the job (the staging Job's neither) can start without it. Create it "
        "(examples/cluster/storage.yaml) or name an existing one in spec.storage; delete this FlashRLJob and "
        "apply it again then"
    )


#: Where the PriorityClass of the job's pods is set (head, GPU workers, submitter, staging Job: one for all).
PRIORITY_CLASS_FIELD: Final = "spec.scheduling.priorityClassName"


def named_priority_classes(spec: FlashRLJobSpec) -> dict[str, tuple[str, ...]]:
    """The PriorityClasses the job's pods name, each with the field paths naming it (pure). One field
    today (:data:`PRIORITY_CLASS_FIELD`): every pod of the job, the staging Job's too, is rendered with it."""
    name = spec.scheduling.priority_class_name
    return {name: (PRIORITY_CLASS_FIELD,)} if name else {}


@dataclass(frozen=True)
class MissingPriorityClass:
    """A PriorityClass the job's pods name that does not exist in the cluster."""

    name: str
    fields: tuple[str, ...]
    """The field paths naming it (``spec.scheduling.priorityClassName``)."""

    def line(self) -> str:
        """``PriorityClass rl-batch (spec.scheduling.priorityClassName) does not exist``."""
        return f"PriorityClass {self.name} ({', '.join(self.fields)}) does not exist in the cluster"


def missing_priority_classes(
    named: Mapping[str, Sequence[str]], found: Mapping[str, Mapping[str, Any] | None]
) -> list[MissingPriorityClass]:
    """The PriorityClasses the job's pods name (class -> field paths) that were read and found missing
    (pure); one whose read was refused (no key in ``found``) is judged not at all."""
    return [
        MissingPriorityClass(c, tuple(fields))
        for c, fields in named.items()
        if c in found and found[c] is None
    ]


def priority_classes_message(missing: Sequence[MissingPriorityClass]) -> str | None:
    """The ``PriorityClassNotFound`` message, or ``None`` when every class the pods name exists."""
    if not missing:
        return None
    lines = "; ".join(m.line() for m in missing)
    fields = ", ".join(dict.fromkeys(f for m in missing for f in m.fields))
    return (
        f"{lines}: the API server refuses every pod that names it (the Ray head, its GPU workers, the "
        "staging Job's), and Kueue queues no workload for it. Create it (a cluster-scoped object, usually "
        "the cluster admin's; examples/cluster/kueue.yaml has one) or name an existing one (kubectl get "
        f"priorityclasses) in {fields}, or leave the field out; delete this FlashRLJob and apply it "
        "again then"
    )


__all__ = [
    "LATER_NODES",
    "PRIORITY_CLASS_FIELD",
    "Capacity",
    "MissingClaim",
    "MissingPriorityClass",
    "NodeOffer",
    "PoolOffer",
    "blocking_taints",
    "capacity",
    "claims_message",
    "gpu_holders",
    "holder_nodes",
    "matches",
    "missing_claims",
    "missing_priority_classes",
    "named_priority_classes",
    "pod_gpus",
    "priority_classes_message",
    "tolerates",
]
