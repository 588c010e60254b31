"""Kubeconfig files for the client's unit tests: one context, one cluster, one user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    """Writes a kubeconfig whose current context joins ``cluster`` and ``user`` (their kubeconfig entries)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [{"name": "k", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path
