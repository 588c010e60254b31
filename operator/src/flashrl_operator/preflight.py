"""What a FlashRLJob needs from the cluster besides what its manifest says, and checking it (pure parts).

``flashrl validate`` checks everything a manifest can show offline; what only the cluster knows
(namespace, claims, Secrets, GPU nodes, KubeRay) is listed by :func:`offline_limits`, in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flashrl_api import FlashRLJob
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
    return f"not checked offline: {'; '.join(parts)}"
