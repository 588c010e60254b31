"""Sources already staged, recorded on their claims (pure).

The staging Job's outcome decides the ``Staged`` condition (:mod:`flashrl_operator.job.status.staging`),
and the RayJob is applied only once it holds. How the operator knows that sources are *already*
staged, so a second job using the same model on the same claim starts no Job at all: after a
staging Job succeeded, the operator writes one annotation per source on the PersistentVolumeClaim it
was staged into (``staged.flashrl.dev/<hash of source and directory>``, value: the source, its
directory, the commit the stage command resolved, when and by which job). Why the claim:

* the record lives and dies with the volume: a recreated claim (a new, empty volume) has no record,
  so its sources are staged again; nothing else has to be cleaned up;
* the operator cannot look inside a volume, and mounting it just to look would cost a pod start
  (pulling the multi-GB trainer image) per job, which is the cost skipping avoids;
* it is visible and editable with kubectl (``kubectl annotate pvc hf-cache staged.flashrl.dev/...-``
  forces a new download), and needs only ``get`` and ``patch`` on claims.

The stage command's own marker files stay the ground truth inside the volume: a Job that does run
skips every source whose marker matches, so a stale or missing annotation costs at most one quick
Job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from flashrl_api.staging import StagedSource
from flashrl_operator.render.names import short_hash

#: Prefix of the per-source annotations on a claim.
ANNOTATION_PREFIX: Final = "staged.flashrl.dev/"


def annotation_key(item: StagedSource) -> str:
    """``staged.flashrl.dev/<hash>`` for one source in one directory."""
    return ANNOTATION_PREFIX + short_hash(f"{item.source.uri}|{item.directory}")


def record_patches(
    plan: Sequence[StagedSource], job: str, now: str, commits: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per claim, the merge patch recording its staged sources."""
    patches: dict[str, dict[str, Any]] = {}
    for item in plan:
        if not item.claim_name:
            continue
        value = {"source": item.source.uri, "path": item.directory, "stagedAt": now, "job": job}
        commit = (commits or {}).get(item.source.uri)
        if commit:
            value["commit"] = commit
        annotations = patches.setdefault(item.claim_name, {"metadata": {"annotations": {}}})
        annotations["metadata"]["annotations"][annotation_key(item)] = json.dumps(value, sort_keys=True)
    return patches


def recorded(plan: Sequence[StagedSource], claims: Mapping[str, Mapping[str, Any] | None]) -> bool:
    """Whether every source of the plan is recorded on its claim (``claims``: name -> live claim)."""
    for item in plan:
        claim = claims.get(item.claim_name or "")
        annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
        if annotation_key(item) not in annotations:
            return False
    return bool(plan)
