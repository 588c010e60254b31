"""A GPU product spelled as people say it (H20, h20, H100) is refused with the label value GPU Feature
Discovery writes; ``flashrl preflight`` lists the products the nodes carry when none matches."""

from __future__ import annotations

from typing import Any

import pytest

from flashrl_api import FlashRLJob, SpecError, parse_job, parse_spec
from flashrl_api.gpus import GFD_LABEL_VALUES, GFD_PRODUCT_LABELS, gpu_family, label_values_for
from flashrl_operator.job.preflight import ClusterFacts, cluster_problems, products_carried


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ("H20", ["NVIDIA-H20"]),
        ("h20", ["NVIDIA-H20"]),
        ("nvidia-h20", ["NVIDIA-H20"]),
        ("H100", ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"]),
        ("H100-PCIe", ["NVIDIA-H100-PCIe"]),
        ("l40s", ["NVIDIA-L40S"]),
    ],
)
def test_a_short_name_is_refused_naming_the_label_values(written: str, named: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"resources": {"gpuProduct": written}})
    assert [p.path for p in err.value.problems] == ["spec.resources.gpuProduct"]
    message = err.value.problems[0].message
    assert all(value in message for value in named)
    assert "flashrl preflight" in message


@pytest.mark.parametrize(
    "value", [*GFD_LABEL_VALUES, "NVIDIA-H20-3e", "NVIDIA-H100-80GB-HBM3-SHARED", "Some-Future-GPU"]
)
def test_label_values_and_unknown_products_are_accepted(value: str) -> None:
    assert parse_spec({"resources": {"gpuProduct": value}}).resources.gpu_product == value


def test_every_short_name_is_an_fp8_product_of_the_gpu_table() -> None:
    for short, values in GFD_PRODUCT_LABELS.items():
        for value in values:
            family = gpu_family(value)
            assert family is not None and family.has_fp8, (short, value)
            assert label_values_for(value) == ()
        assert label_values_for(short) == values


def _node(name: str, product: str | None, gpus: int = 8) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product} if product else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def _job(product: str) -> FlashRLJob:
    return parse_job(
        {
            "apiVersion": "flashrl.dev/v1alpha1",
            "kind": "FlashRLJob",
            "metadata": {"name": "j", "namespace": "rl"},
            "spec": {"resources": {"gpuProduct": product}},
        }
    )


def _facts(nodes: list[dict[str, Any]]) -> ClusterFacts:
    return ClusterFacts(namespace={}, claims={}, secrets={}, nodes=nodes, crds={}, kuberay_images=[])


NODES = [
    _node("a", "NVIDIA-H100-80GB-HBM3"),
    _node("b", "NVIDIA-H100-80GB-HBM3"),
    _node("c", "NVIDIA-L40S"),
    _node("cpu", None),
]


def test_products_carried_counts_each_label_value() -> None:
    assert products_carried(NODES) == {"NVIDIA-H100-80GB-HBM3": 2, "NVIDIA-L40S": 1}


def test_preflight_lists_the_products_the_nodes_carry_when_none_matches() -> None:
    (line,) = [p for p in cluster_problems(_job("NVIDIA-H20"), _facts(NODES), "1.7.0") if "never fits" in p]
    assert (
        "the nodes carry nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3 (2 nodes), NVIDIA-L40S (1 node)"
        in line
    )


def test_preflight_does_not_list_products_when_the_product_is_there_but_short_of_gpus() -> None:
    nodes = [_node("a", "NVIDIA-H20", gpus=4), _node("b", "NVIDIA-L40S")]
    (line,) = [p for p in cluster_problems(_job("NVIDIA-H20"), _facts(nodes), "1.7.0") if "never fits" in p]
    assert line == "never fits: needs 1 node x 8 NVIDIA-H20; 1 node matches, with 4"
