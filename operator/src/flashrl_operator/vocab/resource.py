"""Where a kind lives in the Kubernetes REST API (pure, no dependencies).

One small value type shared by the kind registry (:mod:`flashrl_operator.vocab.kinds`), the KubeRay
vocabulary (:mod:`flashrl_operator.vocab.kuberay`) and the I/O layer (:mod:`flashrl_operator.client.kube`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """A namespaced kind: its ``apiVersion``, ``kind`` and REST plural."""

    api_version: str
    kind: str
    plural: str

    @property
    def group(self) -> str:
        """The API group (``""`` for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """The API version within the group (``v1``)."""
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path of the collection, an object, or one of its subresources; ``namespace`` ``None``:
        a cluster-scoped kind's, or a namespaced kind's collection in every namespace."""
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        path = (
            f"{base}/{self.plural}" if namespace is None else f"{base}/namespaces/{namespace}/{self.plural}"
        )
        if name is not None:
            path += f"/{name}"
            if subresource is not None:
                path += f"/{subresource}"
        return path

    def describe(self, namespace: str, name: str) -> str:
        """``Kind namespace/name`` for messages."""
        return f"{self.kind} {namespace}/{name}"
