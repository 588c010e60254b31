"""Fields of the FlashRLJob spec that were renamed or removed since v1alpha1 began, and where they went.

An old manifest still spelling ``model.path`` is refused (the API server prunes or refuses unknown
fields, and so does :mod:`flashrl_api.manifest`), but "unknown field" sends its author to the
documentation; the row here names the field to write instead. Rows come from the history of
``flashrl_api/spec.py`` (``git log -p -- jobs/src/flashrl_api/spec.py``); one row per old path, and a
rename adds one row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class RenamedField:
    """One field that is no longer spelled this way."""

    #: The old path, relative to ``spec`` (camelCase, dotted).
    old: str
    #: The path to write instead, relative to ``spec``; ``None`` when the field was removed outright.
    new: str | None
    #: What the new field takes, or why the old one went.
    hint: str


RENAMED_FIELDS: Final[tuple[RenamedField, ...]] = (
    # 6bf380a: the model comes from the Hugging Face Hub or a path on the model cache.
    RenamedField("model.path", "model.source", "hf://ORG/NAME or a path"),
    # f334be0: checkpointing got its own section.
    RenamedField("training.saveFrequency", "checkpoint.interval", "training steps between checkpoints"),
    RenamedField("training.resumeMode", "checkpoint.resumeMode", "auto or disable"),
    # YAML 1.1 (kubectl, helm) reads a bare n key as the boolean false: the group size got a real name.
    RenamedField("rollout.n", "rollout.samplesPerPrompt", "responses sampled per prompt"),
    RenamedField(
        "rollout.false",
        "rollout.samplesPerPrompt",
        "the key n was renamed, and YAML 1.1, as kubectl and helm read files, turns a bare n into the "
        "boolean false",
    ),
    # a1decba: verl 0.9.1 ignores max_num_gen_batches under DAPO filtering.
    RenamedField(
        "training.dynamicSampling.maxGenerationBatches",
        None,
        "verl 0.9.1 ignores it under DAPO filtering; training.generationBatchSize sets the prompt "
        "batches generated concurrently",
    ),
)

_BY_OLD: Final = {row.old: row for row in RENAMED_FIELDS}


def renamed_hint(path: str, prefix: str = "spec") -> str | None:
    """The message for an unknown field at ``path`` (relative to ``spec``) that is an old name, or None.

    ``prefix`` is where the spec sits in the input (``spec``, or a variant's spec in an experiment), so
    the message names the new field as the author would write it.
    """
    row = _BY_OLD.get(path)
    if row is None:
        return None
    if row.new is None:
        return f"removed: {row.hint}"
    return f"renamed: use {prefix}.{row.new} ({row.hint})"
