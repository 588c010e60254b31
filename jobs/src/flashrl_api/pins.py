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
    #: The real control plane and kwok the tests run (scripts/get-kube-tools.sh).
    kubernetes: str | None = None
    kwok: str | None = None
    ray: str
    verl: str
    sglang: str
    python: str


class E2ETools(_Frozen):
    """The kind release and node image the e2e (tests/e2e/run.sh, its CI workflow) runs on."""

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
