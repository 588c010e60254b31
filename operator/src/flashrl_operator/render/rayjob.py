"""The KubeRay ``RayJob`` (``ray.io/v1``) that runs a FlashRLJob (pure).

One RayJob owns one RayCluster: a CPU-only head (GCS, dashboard, and the launcher as the Ray driver)
and a GPU worker group. verl's hybrid engine places SGLang rollout and the FSDP trainer on the same
GPUs and swaps between them at every weight sync, so the sync and colocate-async modes have no
separate rollout group; separate-async adds one (``rollout``) for ``spec.rollout.pool``.
The shape also satisfies Kueue: ``rayClusterSpec`` is inline, autoscaling is off and no worker group
is called ``head``.

When the Ray job ends its GPU workers go at once and the CPU head (its logs, the dashboard) stays for
``lifecycle.ttlSecondsAfterFinished``: KubeRay's ``deletionStrategy.deletionRules`` (see
:func:`deletion_rules`). KubeRay refuses those rules beside ``shutdownAfterJobFinishes`` and refuses
``suspend`` without ``shutdownAfterJobFinishes``, so a suspended or Kueue-queued RayJob (Kueue's webhook
also requires ``shutdownAfterJobFinishes``) is rendered with the whole-cluster TTL instead
(:func:`teardown`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api import FlashRLJob
from flashrl_api.pins import ray_version
from flashrl_api.pools import ROLLOUT_WORKER_GROUP as ROLLOUT_WORKER_GROUP
from flashrl_api.pools import TRAINER_WORKER_GROUP
from flashrl_jobs.contract import ATTEMPT_ENV, DEFAULT_SPEC_PATH, JOB_START_ENV
from flashrl_jobs.verl_args import check_key
from flashrl_operator.render.children import SPEC_ANNOTATION, VERL_CHECKED_ANNOTATION, spec_snapshot
from flashrl_operator.render.labels import ATTEMPT_LABEL, KUEUE_QUEUE_LABEL, object_meta
from flashrl_operator.render.names import MAX_RAY_JOB_NAME, child_names, short_hash
from flashrl_operator.render.pod import head_template, submitter_template, worker_template
from flashrl_operator.vocab import kuberay

#: The trainer's worker group, and the standalone rollout pool's (``spec.training.mode: separate-async``);
#: named in :mod:`flashrl_api.pools`, where the launcher's gate reads them back from Ray's node labels.
WORKER_GROUP: Final = TRAINER_WORKER_GROUP
#: Ray's token authentication, which KubeRay v1.7.0 sets up itself (``rayClusterSpec.authOptions``):
#: it creates the token Secret, gives it to the Ray containers (RAY_AUTH_MODE, RAY_AUTH_TOKEN), to the
#: submitter, and to its own dashboard client (``rayjob_controller.go``, ``dashboard_httpclient.go``),
#: so job submission on the dashboard port needs the token. Needs Ray >= 2.52 (validation.go).
AUTH_OPTIONS: Final = {"mode": "token"}
#: The launcher (``flashrl_jobs``) reads the mounted job; Ray's job supervisor sets RAY_ADDRESS for it.
ENTRYPOINT: Final = shlex.join(["flashrl-launch", "train", "--spec", DEFAULT_SPEC_PATH])
#: ``spec.dryRun``: everything up to and including the GPU gate, then exit without training.
DRY_RUN_ENTRYPOINT: Final = shlex.join(["flashrl-launch", "check", "--spec", DEFAULT_SPEC_PATH])


def entrypoint(job: FlashRLJob) -> str:
    """The shell-safe command ``ray job submit`` runs: ``flashrl-launch train`` (or ``check``)."""
    return DRY_RUN_ENTRYPOINT if job.spec.dry_run else ENTRYPOINT


@dataclass(frozen=True)
class AttemptContext:
    """Which attempt the RayJob runs, and what its launcher needs to know about the job.

    The operator retries by creating a new RayJob per attempt (``backoffLimit: 0``: KubeRay's own
    retries cannot wait for training progress; :mod:`flashrl_operator.job.retry_policy` decides).
    """

    attempt: int = 1
    """From 1; attempt ``k > 1`` has its own name and resumes from the newest checkpoint."""
    job_start: str | None = None
    """RFC 3339 start of the job (its creation), where ``lifecycle.activeDeadlineSeconds`` counts from."""
    deadline_seconds: int | None = None
    """``activeDeadlineSeconds`` of this attempt's RayJob: what is left of the job's deadline."""

    def env(self) -> dict[str, str]:
        """The launcher's per-attempt environment (``flashrl_jobs.contract``)."""
        env = {ATTEMPT_ENV: str(self.attempt)}
        if self.job_start:
            env[JOB_START_ENV] = self.job_start
        return env


def ray_cluster_spec(job: FlashRLJob, attempt: AttemptContext | None = None) -> dict[str, Any]:
    """The inline RayCluster: a CPU head and ``resources.nodes`` GPU workers (and ``rollout.pool.nodes``
    rollout workers with separate-async), fixed size."""
    attempt_env = (attempt or AttemptContext()).env()
    nodes = job.spec.resources.nodes
    pool = job.spec.rollout.pool
    return {
        "rayVersion": ray_version(),
        "authOptions": dict(AUTH_OPTIONS),
        # Fixed size: Kueue forbids the in-tree autoscaler (without workload slicing), and an RL run
        # needs every GPU from the first step anyway.
        "enableInTreeAutoscaling": False,
        "headGroupSpec": {
            # The head must not advertise GPUs; the dashboard must listen on the pod IP for the
            # submitter and the operator.
            "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},  # noqa: S104
            "template": head_template(job, attempt_env),
        },
        "workerGroupSpecs": [
            _worker_group(WORKER_GROUP, nodes, worker_template(job, attempt_env)),
            *(
                [_worker_group(ROLLOUT_WORKER_GROUP, pool.nodes, worker_template(job, attempt_env, pool))]
                if pool is not None
                else []
            ),
        ],
    }


def deletion_rules(ttl_seconds: int) -> list[dict[str, Any]]:
    """KubeRay deletion rules: the workers at once, the whole cluster ``ttl_seconds`` after the end.

    One pair per end KubeRay's CRD can name: ``jobStatus`` SUCCEEDED or FAILED, and
    ``jobDeploymentStatus: Failed`` for a RayJob that failed before its Ray job ran (no ``jobStatus``:
    a startup deadline, a failed submission) or was failed by ``activeDeadlineSeconds``. KubeRay
    requires the workers' TTL not to exceed the cluster's for one condition (0 <= ttl holds).
    """
    conditions: list[dict[str, str]] = [
        {"jobStatus": str(status)} for status in kuberay.DELETION_JOB_STATUSES
    ]
    conditions += [{"jobDeploymentStatus": str(status)} for status in kuberay.DELETION_DEPLOYMENT_STATUSES]
    rules: list[dict[str, Any]] = []
    for condition in conditions:
        rules.append(
            {
                "policy": str(kuberay.DeletionPolicy.DELETE_WORKERS),
                "condition": {**condition, "ttlSeconds": 0},
            }
        )
        rules.append(
            {
                "policy": str(kuberay.DeletionPolicy.DELETE_CLUSTER),
                "condition": {**condition, "ttlSeconds": ttl_seconds},
            }
        )
    return rules


def teardown(ttl_seconds: int, *, suspend: bool) -> dict[str, Any]:
    """The RayJob fields that say what happens to the Ray cluster when the Ray job ends.

    Not suspended: ``deletionRules`` (GPU workers at once, the head after ``ttl_seconds``), with
    ``shutdownAfterJobFinishes: false`` and ``ttlSecondsAfterFinished: 0`` written out (KubeRay refuses
    either beside the rules; 0 is the CRD's default, so the live object compares equal). Suspended (by
    ``lifecycle.suspend`` or a Kueue queue): KubeRay and Kueue require ``shutdownAfterJobFinishes``,
    which excludes the rules, so the whole cluster goes ``ttl_seconds`` after the end; ``deletionStrategy``
    is ``None`` so that a merge patch removes it when a running job is suspended.
    """
    if suspend:
        return {
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": ttl_seconds,
            "deletionStrategy": None,
        }
    return {
        "shutdownAfterJobFinishes": False,
        "ttlSecondsAfterFinished": 0,
        "deletionStrategy": {"deletionRules": deletion_rules(ttl_seconds)},
    }


def _worker_group(name: str, nodes: int, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "groupName": name,
        "replicas": nodes,
        "minReplicas": nodes,
        "maxReplicas": nodes,
        "numOfHosts": 1,
        # KubeRay derives num-gpus, num-cpus and memory from the container limits.
        "rayStartParams": {},
        "template": template,
    }


def attempt_ray_job_name(job: FlashRLJob, attempt: int) -> str:
    """Attempt 1 keeps the job's RayJob name; attempt ``k`` appends ``-k`` (hash-shortened to fit)."""
    base = child_names(job).ray_job
    if attempt <= 1:
        return base
    suffix = f"-{attempt}"
    if len(base) + len(suffix) <= MAX_RAY_JOB_NAME:
        return base + suffix
    tail = f"-{short_hash(job.name)}{suffix}"
    return base[: MAX_RAY_JOB_NAME - len(tail)].rstrip("-") + tail


def ray_job(job: FlashRLJob, attempt: AttemptContext | None = None) -> dict[str, Any]:
    """The RayJob of one attempt: submits :data:`ENTRYPOINT` once the cluster is ready; when it ends,
    the GPU workers go at once and the head after the TTL (:func:`teardown`).
    ``backoffLimit`` is 0: the operator decides about retries, each a new RayJob.

    Annotated with the immutable part of the spec (:data:`~flashrl_operator.render.children.SPEC_ANNOTATION`).
    """
    attempt = attempt or AttemptContext()
    lifecycle = job.spec.lifecycle
    queue = job.spec.scheduling.queue_name
    extra_labels = {ATTEMPT_LABEL: str(attempt.attempt)}
    if queue is not None:
        extra_labels[KUEUE_QUEUE_LABEL] = queue
    # With a queue, Kueue owns suspend: created suspended, admitted by clearing it.
    suspend = True if queue is not None else lifecycle.suspend
    spec: dict[str, Any] = {
        "entrypoint": entrypoint(job),
        "submissionMode": "K8sJobMode",
        **{
            key: value
            for key, value in teardown(lifecycle.ttl_seconds_after_finished, suspend=suspend).items()
            if value is not None
        },
        "preRunningDeadlineSeconds": lifecycle.startup_timeout_seconds,
        "backoffLimit": 0,
        "suspend": suspend,
        "rayClusterSpec": ray_cluster_spec(job, attempt),
        # Our own submitter pod instead of KubeRay's default, which would pull the trainer image
        # without the job's image pull Secrets and run without a security context (render/pod.py).
        "submitterPodTemplate": submitter_template(job),
    }
    deadline = attempt.deadline_seconds if attempt.attempt > 1 else lifecycle.active_deadline_seconds
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    meta = object_meta(job, attempt_ray_job_name(job, attempt.attempt), "ray-job", extra_labels)
    # The spec it was made from: later edits that a live RayJob cannot take are found against it; the
    # verl inputs it was made from (checked before it was created).
    meta["annotations"] = {
        SPEC_ANNOTATION: spec_snapshot(job.spec.to_wire()),
        VERL_CHECKED_ANNOTATION: check_key(job),
    }
    return {
        "apiVersion": kuberay.RAY_JOB.api_version,
        "kind": kuberay.RAY_JOB.kind,
        "metadata": meta,
        "spec": spec,
    }
