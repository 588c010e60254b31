"""Kubernetes' name and label grammars are written once, in flashrl_api.k8s_names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flashrl_api import k8s_names

ROOT = Path(__file__).resolve().parents[3]
SOURCES = sorted([*ROOT.glob("jobs/src/**/*.py"), *ROOT.glob("operator/src/**/*.py")])
#: Fragments only a spelled-out DNS-1123/1035 name or label grammar contains.
GRAMMAR_FRAGMENTS = ("[-a-z0-9]*[a-z0-9]", "[-A-Za-z0-9_.]")


def test_no_module_spells_a_name_or_label_grammar_of_its_own() -> None:
    home = Path(k8s_names.__file__).resolve()
    spelled = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in SOURCES
        if path.resolve() != home
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(fragment in line for fragment in GRAMMAR_FRAGMENTS)
    ]
    assert spelled == []


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (k8s_names.DNS_LABEL_PATTERN, ["a", "0a", "a-b"], ["", "-a", "a-", "A", "a.b"]),
        (k8s_names.DNS_SUBDOMAIN_PATTERN, ["a", "hf.token", "a-b.c"], ["a..b", ".a", "A"]),
        (k8s_names.DNS_1035_LABEL_PATTERN, ["a", "a-0"], ["0a", "a-", "a.b"]),
        (k8s_names.LABEL_KEY_PATTERN, ["app", "nvidia.com/gpu.product", "a/B_c"], ["/a", "a/", "a/-b"]),
        (k8s_names.LABEL_VALUE_PATTERN, ["", "NVIDIA-H20", "a_b.c"], ["-a", "a ", "a/b"]),
        (k8s_names.NONEMPTY_LABEL_VALUE_PATTERN, ["NVIDIA-H20"], ["", "-a"]),
        (k8s_names.EXTENDED_RESOURCE_PATTERN, ["rdma/hca_shared_devices_a"], ["rdma", "/x"]),
    ],
)
def test_each_grammar_accepts_and_refuses_what_kubernetes_does(
    pattern: str, good: list[str], bad: list[str]
) -> None:
    assert all(re.match(pattern, value) for value in good)
    assert not any(re.match(pattern, value) for value in bad)
