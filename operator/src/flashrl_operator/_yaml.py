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


def dump(document: Any) -> str:
    """One YAML document, without a leading ``---``."""
    return yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True
    )


def dump_all(documents: Iterable[Any]) -> str:
    """A YAML stream: each document starts with ``---``."""
    return "".join(f"---\n{dump(doc)}" for doc in documents)
