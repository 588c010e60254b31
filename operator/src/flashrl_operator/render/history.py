"""The job's ``<job>-metrics`` history ConfigMap (pure): a child the reconcile writes like the others,
from the data the job's history fold produced (:mod:`flashrl_operator.job.history`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flashrl_api import FlashRLJob
from flashrl_api.history import history_name
from flashrl_operator.render.labels import object_meta


def history_config_map(job: FlashRLJob, data: Mapping[str, str]) -> dict[str, Any]:
    """The history ConfigMap holding ``data``, owned (as controller) by the job."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(job, history_name(job.name), "history"),
        "data": dict(data),
    }
