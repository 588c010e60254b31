"""The staging Job: a CPU-only batch/v1 Job that runs ``flashrl-launch stage`` before the RayJob (pure).

A job whose model or data are Hugging Face references (:func:`flashrl_api.staging.staging_plan`)
gets this Job; the reconciler applies the RayJob only after it succeeded, so no GPU is requested
while anything downloads. It runs the trainer image (which has ``huggingface_hub`` and ``pyarrow``)
with:

* the job's spec from its ConfigMap (the same file the launcher reads in the head pod);
* the volumes that receive sources, mounted writable whatever ``readOnly`` says for the Ray pods;
* ``HF_TOKEN`` from ``spec.huggingFace.tokenSecret`` as an *optional* secretKeyRef: a missing Secret
  means an anonymous download, never a pod stuck in ``CreateContainerConfigError``;
* ``spec.env`` (``HF_ENDPOINT`` for a mirror, ``HF_HUB_OFFLINE``, proxies) and the launcher's
  ServiceAccount, whose Role lets it report progress to ``status.staging``;
* no GPU: ``NVIDIA_VISIBLE_DEVICES=void``, the Ray head's node selector and tolerations (a CPU pool);
* the Ray pods' hardening (``security.py``): no privilege escalation, no capabilities, RuntimeDefault
  seccomp, non-root ``images.runAsUser`` with that ``fsGroup``, so the claims it writes are the Ray
  pods' group's (``fsGroupChangePolicy: OnRootMismatch``) and the files it stages readable by them.

The job's NetworkPolicy (``network.py``) selects only the Ray pods: the staging pod serves nothing,
and its egress to the Hub (or ``HF_ENDPOINT``) is never restricted by it.

Retries: ``backoffLimit`` covers lost nodes and network trouble, while a ``podFailurePolicy`` fails
the Job at once on the launcher's exit codes that are not retryable (bad spec, staging failure):
retrying a missing column or a gated repository cannot help.
"""

from __future__ import annotations

from typing import Any, Final

from flashrl_api import FlashRLJob
from flashrl_api.spec import TOKEN_KEY
from flashrl_api.staging import VOLUME_NAMES, staging_plan
from flashrl_api.status import LAUNCHER_FAILURES, exit_codes
from flashrl_jobs import contract
from flashrl_jobs.engine_env import pod_env
from flashrl_operator.render.labels import labels, object_meta
from flashrl_operator.render.names import MAX_JOB_NAME, child_names, derived_name
from flashrl_operator.render.pod import SPEC_VOLUME, common_pod_spec
from flashrl_operator.render.security import container_security_context

STAGE_CONTAINER: Final = "stage"
#: ``flashrl-launch stage`` on the mounted spec.
COMMAND: Final = ("flashrl-launch", "stage", "--spec", contract.DEFAULT_SPEC_PATH)
#: Downloads and hashing: one core is plenty; memory for huggingface_hub and a parquet footer.
RESOURCES: Final = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
#: Pod retries for failures outside the command (a lost node, an evicted pod, a killed download).
BACKOFF_LIMIT: Final = 3
#: Exit codes that fail the Job at once: the launcher's codes its failure table marks not retryable
#: (a retry would decide the same). The stage command returns only some of them (usage, invalid config,
#: staging failed); the others cannot occur here, and listing them keeps one rule, read from one table.
FINAL_EXIT_CODES: Final = tuple(
    sorted(exit_codes(row for row in LAUNCHER_FAILURES if not row.retryable).values())
)
#: The label the Job controller puts on its pods (Kubernetes 1.27+).
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"


def staging_job_name(job: FlashRLJob) -> str:
    """``<job>-stage`` (hashed when too long, like every child name)."""
    return derived_name(job.name, "stage", MAX_JOB_NAME)


def staging_job(job: FlashRLJob) -> dict[str, Any] | None:
    """The staging Job, or None when every source is a path (nothing to download)."""
    spec = job.spec
    plan = staging_plan(spec)
    if not plan:
        return None
    names = child_names(job)
    storage = {"modelCache": spec.storage.model_cache, "data": spec.storage.data}
    targets = sorted({item.volume for item in plan})
    volumes: list[dict[str, Any]] = [{"name": SPEC_VOLUME, "configMap": {"name": names.config_map}}]
    mounts: list[dict[str, Any]] = [{"name": SPEC_VOLUME, "mountPath": contract.SPEC_DIR, "readOnly": True}]
    for key in targets:
        volume = storage[key]
        # The rules refuse a staged source on a volume without a claim.
        volumes.append({"name": VOLUME_NAMES[key], "persistentVolumeClaim": {"claimName": volume.claim_name}})
        mounts.append({"name": VOLUME_NAMES[key], "mountPath": volume.mount_path})
    values = {
        **pod_env(spec),
        **{var.name: var.value for var in spec.env},
        "NVIDIA_VISIBLE_DEVICES": "void",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    token = spec.hugging_face.token_secret
    if token:
        # The Secret's token wins: a second HF_TOKEN from spec.env would make the container list
        # the variable twice (server-side apply refuses duplicate keys).
        values.pop(TOKEN_KEY, None)
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    if token:
        env.append(
            {
                "name": TOKEN_KEY,
                "valueFrom": {"secretKeyRef": {"name": token, "key": TOKEN_KEY, "optional": True}},
            }
        )
    container: dict[str, Any] = {
        "name": STAGE_CONTAINER,
        "image": spec.images.trainer,
        "imagePullPolicy": spec.images.pull_policy,
        "command": list(COMMAND),
        "env": env,
        "resources": {k: dict(v) for k, v in RESOURCES.items()},
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(),
    }
    head = spec.resources.head
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": names.service_account,
        "containers": [container],
        "volumes": volumes,
        **common_pod_spec(spec),
    }
    if head.node_selector:
        pod["nodeSelector"] = dict(head.node_selector)
    if head.tolerations:
        pod["tolerations"] = [t.to_wire() for t in head.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(job, staging_job_name(job), "staging"),
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": STAGE_CONTAINER,
                            "operator": "In",
                            "values": list(FINAL_EXIT_CODES),
                        },
                    },
                    # A pod evicted or preempted does not count against backoffLimit.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
            "template": {"metadata": {"labels": labels(job, "staging")}, "spec": pod},
        },
    }
