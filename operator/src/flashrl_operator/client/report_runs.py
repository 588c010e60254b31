"""The cluster I/O of ``flashrl report --experiment/--job``: read the FlashRLJobs and their history
ConfigMaps with the user's kubeconfig, through the operator's own client.

Turning what was read into runs is the report's (:mod:`flashrl_report.cluster`, pure); this module is
only the reading, so the report tool imports nothing of the operator. It is used by ``flashrl report``
(:mod:`flashrl_operator.cli.report`) and the demo's experiment act, and is never imported by the
operator itself (the report tool is not in the operator image).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from flashrl_api.experiment import EXPERIMENT_KIND, parse_experiment
from flashrl_api.history import history_name
from flashrl_operator.client.kube import KubeClient
from flashrl_operator.client.login import CredentialError, Credentials
from flashrl_operator.vocab.kinds import CONFIG_MAP, FLASHRL_EXPERIMENT, FLASHRL_JOB
from flashrl_report.cluster import (
    JobObjects,
    experiment_jobs,
    runs_from_objects,
    validation_from_objects,
    variant_statuses,
)
from flashrl_report.data import MetricsInputError, RunMetrics
from flashrl_report.validation import ValidationSamples


async def fetch_runs(
    client: Any, namespace: str, experiment: str | None, jobs: Sequence[str]
) -> tuple[list[RunMetrics], list[ValidationSamples], str]:
    """Read the experiment's (or the named) jobs and their histories: the runs, their validation
    samples (per problem, for the paired verdict), and a title for the page."""
    pairs: list[tuple[str, str]] = [(name, name) for name in jobs]
    title = f"FlashRL comparison: {', '.join(jobs)}"
    variants: dict[str, Mapping[str, Any]] = {}
    parallelism: int | None = None
    if experiment is not None:
        raw = await client.get(FLASHRL_EXPERIMENT, namespace, experiment)
        if raw is None:
            raise MetricsInputError(f"{EXPERIMENT_KIND} {namespace}/{experiment} does not exist")
        parsed = parse_experiment(raw)
        pairs = experiment_jobs(parsed) + pairs
        title = f"FlashRL experiment {namespace}/{experiment}"
        variants = variant_statuses(raw, parsed.spec.replicas)
        parallelism = parsed.spec.parallelism

    async def one(label: str, name: str) -> JobObjects:
        job, history = await asyncio.gather(
            client.get(FLASHRL_JOB, namespace, name), client.get(CONFIG_MAP, namespace, history_name(name))
        )
        variant = variants.get(label)
        return JobObjects(label, name, job, history, variant, parallelism if variant is not None else None)

    objects = await asyncio.gather(*(one(label, name) for label, name in pairs))
    return runs_from_objects(namespace, objects), validation_from_objects(namespace, objects), title


def load_cluster_runs(
    namespace: str, experiment: str | None, jobs: Sequence[str], server: str | None = None
) -> tuple[list[RunMetrics], list[ValidationSamples], str]:
    """Connect like kubectl (``$KUBECONFIG`` and its current context, exec plugins included; or
    ``server``), read the runs, disconnect. The same client layer as the operator's
    (:mod:`flashrl_operator.client.login`, :mod:`flashrl_operator.client.kube`)."""

    async def main() -> tuple[list[RunMetrics], list[ValidationSamples], str]:
        try:
            client = await KubeClient.connect(Credentials(server))
        except CredentialError as exc:
            raise MetricsInputError(f"{exc}: set KUBECONFIG or run inside a cluster") from exc
        try:
            return await fetch_runs(client, namespace, experiment, jobs)
        finally:
            await client.close()

    return asyncio.run(main())
