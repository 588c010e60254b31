"""The ConfigMap the launcher reads: the validated job and the exact verl overrides (pure).

The operator has already validated and defaulted the spec, so the pod receives the full defaulted
spec (not the user's sparse one): the launcher and verl see exactly the values the operator saw,
even if the defaults change in a later release of the image. The overrides are rendered here too,
so ``kubectl get configmap <job>-spec -o yaml`` shows the command verl will run before it runs.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from flashrl_api import API_VERSION, KIND, FlashRLJob
from flashrl_jobs.contract import OVERRIDES_FILE, SPEC_FILE
from flashrl_jobs.verl_args import verl_overrides
from flashrl_operator.render.labels import object_meta
from flashrl_operator.render.names import child_names


def job_document(job: FlashRLJob) -> dict[str, Any]:
    """The FlashRLJob as the launcher reads it: identity plus the full defaulted spec."""
    metadata: dict[str, Any] = {"name": job.name, "namespace": job.namespace}
    if job.uid is not None:
        metadata["uid"] = job.uid
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": job.spec.to_wire()}


def config_map(job: FlashRLJob) -> dict[str, Any]:
    """ConfigMap holding :data:`SPEC_FILE` (YAML) and :data:`OVERRIDES_FILE` (JSON list)."""
    # UTF-8 as is (no \\u escapes), so a character costs at most 4 bytes of the 1 MiB a ConfigMap may hold.
    spec_yaml = yaml.safe_dump(
        job_document(job), sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    overrides_json = json.dumps(verl_overrides(job), indent=2, ensure_ascii=False) + "\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(job, child_names(job).config_map, "spec"),
        "data": {SPEC_FILE: spec_yaml, OVERRIDES_FILE: overrides_json},
    }
