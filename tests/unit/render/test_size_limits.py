"""The CRD's maxima add up: a spec at every maximum still renders objects Kubernetes stores.

The limits (Kubernetes' own): all annotations of an object together at most 256 KiB
(``TotalAnnotationSizeLimitB``), a ConfigMap's data at most 1 MiB, an object at most 1.5 MiB in etcd
(its default ``--max-request-bytes``). The spec below fills every string to its ``maxLength`` with the
character that costs the most bytes once encoded (control characters, a byte-order mark, an emoji,
quotes, HTML characters that Go's JSON escapes), and every list and map to its ``maxItems``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flashrl_api import FlashRLJob, parse_job
from flashrl_api.spec import MAX_OVERRIDE_LENGTH, MAX_OVERRIDES
from flashrl_operator.render import render
from flashrl_operator.render.children import spec_snapshot

ANNOTATIONS_LIMIT = 256 * 1024
CONFIG_MAP_LIMIT = 1024 * 1024
OBJECT_LIMIT = 1536 * 1024

#: Characters that cost the most bytes in one encoding or another (YAML, JSON as Python or Go writes it).
FILLS = ["x", "\x01", "\ufeff", "\U0001f600", '"', "<"]


def _subdomain(letter: str, suffix: str = "") -> str:
    return ((letter * 62 + ".") * 4)[: 253 - len(suffix)].rstrip(".") + suffix


def _label_key(i: int) -> str:
    return _subdomain("a", f"{i:03d}") + "/" + "c" * 63


def _toleration(i: int) -> dict[str, Any]:
    return {
        "key": _label_key(i),
        "operator": "Equal",
        "value": "v" * 63,
        "effect": "NoExecute",
        "tolerationSeconds": 2**31 - 1,
    }


def largest_spec(fill: str) -> dict[str, Any]:
    """Every field of the spec at its CRD maximum, strings made of ``fill``."""

    def text(n: int) -> str:
        return fill * n

    placement = {
        "nodeSelector": {_label_key(i): "v" * 63 for i in range(32)},
        "tolerations": [_toleration(i) for i in range(32)],
    }
    return {
        "model": {"source": "/" + text(1023)},
        "data": {"train": "/" + text(1023), "validation": "/" + text(1023), "promptKey": text(128)},
        "training": {
            "projectName": text(128),
            "experimentName": text(128),
            "dynamicSampling": {"metric": text(64)},
            "loggers": ["console", "wandb", "tensorboard", "mlflow"],
        },
        "resources": {
            **placement,
            "rdma": {"resourceName": _subdomain("r") + "/" + "c" * 63, "count": 64},
            "head": dict(placement),
        },
        "images": {"trainer": text(512), "pullSecrets": [_subdomain("s", f"{i:02d}") for i in range(16)]},
        "storage": {
            volume: {"claimName": _subdomain(volume[0]), "mountPath": f"/{volume[0]}" + text(510)}
            for volume in ("modelCache", "data", "checkpoints")
        },
        "scheduling": {"queueName": "q" * 63, "priorityClassName": _subdomain("p")},
        "secretRefs": [_subdomain("s", f"{i:02d}") for i in range(16)],
        "env": [{"name": f"E{i:03d}" + "_" * 252, "value": text(1024)} for i in range(64)],
        "overrides": [
            (head := f"+a.k{i:03d}=") + '"\\' * ((MAX_OVERRIDE_LENGTH - len(head)) // 2)
            for i in range(MAX_OVERRIDES)
        ],
    }


def largest_job(fill: str) -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {
                "name": "j" * 63,
                "namespace": "n" * 63,
                "uid": "0c8e5d3a-1111-4222-8333-444455556666",
            },
            "spec": largest_spec(fill),
        }
    )


def _go_json_size(obj: Any) -> int:
    """Bytes of ``obj`` as the API server stores it: UTF-8, control characters and <, >, & as \\u00XX."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    escaped = sum(text.count(c) for c in "<>&") + sum(text.count(chr(c)) for c in range(32))
    return len(text.encode("utf-8")) + 5 * escaped


@pytest.mark.parametrize("fill", FILLS, ids=[f"U+{ord(c):04X}" for c in FILLS])
def test_the_largest_spec_renders_objects_kubernetes_stores(fill: str) -> None:
    job = largest_job(fill)
    objects = {obj["kind"]: obj for obj in render(job)}
    data = objects["ConfigMap"]["data"]
    assert sum(len(k.encode()) + len(v.encode()) for k, v in data.items()) < CONFIG_MAP_LIMIT
    # The operator records the spec on the RayJob in one annotation (lists as digests).
    assert len(spec_snapshot(job.spec.to_wire()).encode()) < ANNOTATIONS_LIMIT // 2
    for obj in objects.values():
        assert _go_json_size(obj) < OBJECT_LIMIT, obj["kind"]


def test_the_largest_spec_really_is_at_the_maxima() -> None:
    """Guards the test above: one more item or character anywhere is refused."""
    spec = largest_spec("x")
    spec["overrides"].append("a.b=1")
    spec["env"][0]["value"] += "x"
    spec["model"]["source"] += "x"
    with pytest.raises(ValueError) as caught:
        largest_job_from(spec)
    paths = {p.path for p in caught.value.problems}  # type: ignore[attr-defined]
    assert {"spec.overrides", "spec.env[0].value", "spec.model.source"} <= paths


def largest_job_from(spec: dict[str, Any]) -> FlashRLJob:
    return parse_job(
        {"apiVersion": "flashrl.dev/v1alpha1", "kind": "FlashRLJob", "metadata": {"name": "j"}, "spec": spec}
    )


def test_a_stream_of_too_many_values_is_refused_before_objects_are_built() -> None:
    """Issue 18: 150,000 small values (2.7 MB, under the byte limit) are refused by counting the
    parser's events, not after building them all; an alias-free input, so only the count stops it."""
    from flashrl_api.manifest import MAX_NODES, SpecError, load_documents

    text = "".join(f"k{i}: [1, 2]\n" for i in range(MAX_NODES // 2 + 1))
    with pytest.raises(SpecError, match=f"holds more than {MAX_NODES} values"):
        load_documents(text, "big.yaml")
