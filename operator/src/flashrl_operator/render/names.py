"""Deterministic names for the children of a FlashRLJob (pure).

Kubernetes and KubeRay bound names differently: a RayJob must be a DNS-1035 label of at most 47
characters (KubeRay derives RayCluster, Service and pod names from it by appending suffixes), while
ConfigMaps, ServiceAccounts and RBAC objects may be DNS-1123 subdomains of up to 253 characters.
A name that does not fit is cut and suffixed with a hash of the full original, so it stays stable
across reconciles and two long names that share a prefix still get different children.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from flashrl_api import FlashRLJob
from flashrl_api.k8s_names import (
    DNS_1035_LABEL_RE,
    DNS_LABEL_RE,
    LABEL_VALUE_RE,
    NOT_DNS_LABEL_CHAR_RE,
    NOT_LABEL_VALUE_CHAR_RE,
)

#: KubeRay's limit for RayJob names (a RayCluster may have 53; KubeRay appends ``-xxxxx``).
MAX_RAY_JOB_NAME: Final = 47
#: DNS-1123 subdomain limit (ConfigMap, ServiceAccount, Role, RoleBinding, NetworkPolicy).
MAX_SUBDOMAIN: Final = 253
#: A batch Job's name becomes the ``batch.kubernetes.io/job-name`` label of its pods (a label value),
#: so the API server refuses Job names over 63 characters.
MAX_JOB_NAME: Final = 63
#: Label values are at most 63 characters.
MAX_LABEL_VALUE: Final = 63
#: Hex digits of sha256 appended to a shortened name.
HASH_LENGTH: Final = 8

_DNS_1035 = DNS_1035_LABEL_RE
_DNS_1123_LABEL = DNS_LABEL_RE
_LABEL_VALUE = LABEL_VALUE_RE
_NOT_NAME_CHAR = NOT_DNS_LABEL_CHAR_RE


def short_hash(text: str) -> str:
    """First :data:`HASH_LENGTH` hex digits of the sha256 of ``text``: stable across processes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LENGTH]


def is_dns1035_label(name: str, max_length: int = 63) -> bool:
    """Whether ``name`` is a DNS-1035 label (starts with a letter) of at most ``max_length``."""
    return len(name) <= max_length and _DNS_1035.fullmatch(name) is not None


def _hashed(name: str, max_length: int, suffix: str = "") -> str:
    """``<sanitised prefix>-<hash of name>[-suffix]`` within ``max_length``, starting with a letter."""
    tail = f"-{short_hash(name)}" + (f"-{suffix}" if suffix else "")
    prefix = _NOT_NAME_CHAR.sub("-", name.lower()).lstrip("-0123456789")
    prefix = prefix[: max_length - len(tail)].rstrip("-")
    return (prefix or "frj") + tail


def ray_job_name(job_name: str) -> str:
    """The RayJob's name: the FlashRLJob's own name when KubeRay accepts it, else a hashed short form."""
    if is_dns1035_label(job_name, MAX_RAY_JOB_NAME):
        return job_name
    return _hashed(job_name, MAX_RAY_JOB_NAME)


def derived_name(job_name: str, suffix: str, max_length: int = MAX_SUBDOMAIN) -> str:
    """``<job name>-<suffix>`` as a DNS-1123 name of at most ``max_length`` (the child kind's limit),
    hash-shortened (keeping the suffix) when it does not fit."""
    full = f"{job_name}-{suffix}"
    if len(full) <= max_length and _DNS_1123_LABEL.fullmatch(full):
        return full
    return _hashed(job_name, max_length, suffix)


def label_value(value: str) -> str:
    """``value`` as a valid label value (<= 63 characters), hash-shortened when it does not fit."""
    if len(value) <= MAX_LABEL_VALUE and _LABEL_VALUE.fullmatch(value):
        return value
    prefix = NOT_LABEL_VALUE_CHAR_RE.sub("-", value)[: MAX_LABEL_VALUE - HASH_LENGTH - 1]
    prefix = prefix.strip("-_.")
    return f"{prefix}-{short_hash(value)}" if prefix else short_hash(value)


@dataclass(frozen=True)
class ChildNames:
    """Names of every object rendered for one FlashRLJob."""

    ray_job: str
    config_map: str
    service_account: str
    role: str
    role_binding: str
    network_policy: str


def child_names(job: FlashRLJob) -> ChildNames:
    """The deterministic names of a job's children (the same on every reconcile)."""
    launcher = derived_name(job.name, "launcher")
    return ChildNames(
        ray_job=ray_job_name(job.name),
        config_map=derived_name(job.name, "spec"),
        service_account=launcher,
        role=launcher,
        role_binding=launcher,
        network_policy=derived_name(job.name, "ray"),
    )
