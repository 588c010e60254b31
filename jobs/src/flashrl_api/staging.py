"""What a job must stage before its Ray cluster starts, and where verl finds each source (pure).

The staging Job (``flashrl-launch stage``), verl's arguments (``flashrl_jobs.verl_args``) and the
operator all derive the same plan from the spec, so the place a file is downloaded to and the place
verl reads it from cannot disagree. See :mod:`flashrl_api.sources` for the reference syntax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from flashrl_api.sources import MARKER_FILE, HfSource, parse_data_source, parse_model_source, staged_path
from flashrl_api.spec import FlashRLJobSpec, VolumeSpec

VolumeKey = Literal["modelCache", "data"]

#: Volume name (as the renderer names pod volumes) of each ``storage`` entry a source is staged into.
VOLUME_NAMES: Final[dict[VolumeKey, str]] = {"modelCache": "model-cache", "data": "data"}


@dataclass(frozen=True)
class StagedSource:
    """One Hugging Face source of a job and where it lands."""

    #: The spec field it comes from, relative to ``spec`` (``model.source``, ``data.train``, ...).
    field: str
    source: HfSource
    #: The ``spec.storage`` entry it is staged into.
    volume: VolumeKey
    #: The claim behind that volume (``None``: an emptyDir, refused by the rules for a staged source).
    claim_name: str | None
    mount_path: str

    @property
    def directory(self) -> str:
        """The repository's directory on the volume (holds the marker file)."""
        return self.source.directory(self.mount_path)

    @property
    def path(self) -> str:
        """What verl reads: the model directory or the data file."""
        return staged_path(self.source, self.mount_path)

    @property
    def marker(self) -> str:
        """The marker file, written last and atomically: ``<model dir>/.flashrl-staged.json`` or
        ``<data file>.flashrl-staged.json`` (two files of one dataset revision share a directory)."""
        if self.source.filename is None:
            return f"{self.directory}/{MARKER_FILE}"
        return f"{self.path}{MARKER_FILE}"


def _volume(spec: FlashRLJobSpec, key: VolumeKey) -> VolumeSpec:
    return spec.storage.model_cache if key == "modelCache" else spec.storage.data


def staging_plan(spec: FlashRLJobSpec) -> list[StagedSource]:
    """Every Hugging Face source of the spec, in a fixed order (model, train, validation)."""
    plan: list[StagedSource] = []
    entries: list[tuple[str, HfSource | None, VolumeKey]] = [
        ("model.source", parse_model_source(spec.model.source), "modelCache"),
        ("data.train", parse_data_source(spec.data.train), "data"),
        ("data.validation", parse_data_source(spec.data.validation), "data"),
    ]
    for field, source, key in entries:
        if source is None:
            continue
        volume = _volume(spec, key)
        plan.append(StagedSource(field, source, key, volume.claim_name, volume.mount_path))
    return plan


def model_location(spec: FlashRLJobSpec) -> str:
    """``actor_rollout_ref.model.path`` for verl: the staged directory, or the path as written."""
    source = parse_model_source(spec.model.source)
    return spec.model.source if source is None else staged_path(source, spec.storage.model_cache.mount_path)


def data_location(spec: FlashRLJobSpec, value: str) -> str:
    """``data.train_files`` / ``data.val_files`` for verl: the staged file, or the path as written."""
    source = parse_data_source(value)
    return value if source is None else staged_path(source, spec.storage.data.mount_path)
