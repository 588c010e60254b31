"""YAML output shared by the generated CRD and ``flashrl render``: block style, stable key order.

Lists are indented under their key, as yamllint's default rules and most Kubernetes manifests do,
and keys keep the order the builders wrote them in, so generated files diff cleanly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """A safe dumper that indents block sequences under their parent key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


#: Plain scalars that Go's YAML 1.1 decoders (sigs.k8s.io/yaml, used by helm and kubectl) read as
#: booleans while PyYAML reads them as strings; PyYAML already quotes yes/no/on/off/true/false.
_GO_YAML_BOOLEANS = frozenset({"y", "Y", "n", "N"})


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """Quote ``n`` and ``y``: unquoted, kubectl and helm (YAML 1.1) would read them as booleans."""
    if value in _GO_YAML_BOOLEANS:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    return dumper.represent_str(value)


_Dumper.add_representer(str, _represent_str)


def dump(document: Any) -> str:
    """One YAML document, without a leading ``---``."""
    return yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True
    )


def dump_all(documents: Iterable[Any]) -> str:
    """A YAML stream: each document starts with ``---``."""
    return "".join(f"---\n{dump(doc)}" for doc in documents)
