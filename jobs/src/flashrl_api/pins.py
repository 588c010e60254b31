"""Pinned versions and image references, read from the project's single pins file.

``images/pins.yaml`` is the only place a version or image reference is written down; this
module, the Helm chart and the Dockerfile build arguments all read it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

UNRESOLVED = "unresolved"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Image(_Frozen):
    """An image reference: repository, tag and, for third-party bases, a digest."""

    repository: str
    tag: str
    digest: str | None = None

    @property
    def reference(self) -> str:
        """``repo:tag``, with ``@sha256:…`` appended when the digest is known."""
        ref = f"{self.repository}:{self.tag}"
        if self.digest and self.digest != UNRESOLVED:
            ref += f"@{self.digest}"
        return ref


class Versions(_Frozen):
    """Versions of the software the images and the cluster must agree on."""

    kuberay: str
    #: The kube-apiserver, controller-manager and scheduler the real-control-plane tests run.
    kubernetes: str
    #: The etcd the real-control-plane tests run as the API server's store (built from its Go module).
    etcd: str
    #: kwok, which plays the GPU nodes and their pods in the e2e on the real control plane.
    kwok: str
    #: Kueue, whose manager queues the e2e's and the dev cluster's RayJobs (built from its Go module).
    kueue: str
    #: The Prometheus Operator whose CRDs the chart's monitoring objects are checked against.
    prometheus_operator: str
    ray: str
    verl: str
    sglang: str
    python: str


class E2ETools(_Frozen):
    """What the e2e runs on: KubeRay's operator on the real control plane, and the kind release and node
    image of the Docker e2e (tests/e2e/run.sh, its CI workflow)."""

    kuberay_operator: str
    kind: str
    kind_node: Image


class Pins(_Frozen):
    """The whole pins file."""

    versions: Versions
    images: dict[str, Image]
    bases: dict[str, Image]
    e2e: E2ETools | None = None


@cache
def load_pins() -> Pins:
    """Parse the pins file shipped inside the package (a symlink to ``images/pins.yaml``)."""
    text = resources.files("flashrl_api").joinpath("pins.yaml").read_text(encoding="utf-8")
    data: Any = yaml.safe_load(text)
    return Pins.model_validate(data)


def default_trainer_image() -> str:
    """The trainer image (verl + SGLang + our launcher) the renderer uses unless the spec says otherwise."""
    return load_pins().images["trainer"].reference


def ray_version() -> str:
    """The Ray version inside the trainer image; KubeRay's ``rayVersion`` must match it."""
    return load_pins().versions.ray
