"""The batch/v1 Job controller, the kubelet and ``flashrl-launch stage``, played for the staging Job.

There is no Job controller in the emulated API server: :class:`StagingStandIn` writes what it would
(``status.conditions`` ``Complete``/``Failed``, counts), the pod a failed run leaves with the stage
command's termination message (as the kubelet reports it), and ``status.staging`` progress as the
stage command reports it from inside the pod. Each write names its actor, so the demo's timeline
says who did what.
"""

from __future__ import annotations

from typing import Any, Final

from flashrl_api.times import now_rfc3339
from flashrl_jobs import contract
from flashrl_operator.render.staging import JOB_NAME_LABEL, STAGE_CONTAINER
from flashrl_operator.sim.apiserver import JOBS_RESOURCE, KUBELET, PODS_RESOURCE, ApiClient, resource_key
from flashrl_operator.vocab.kinds import JOB as BATCH_JOB

JOB_CONTROLLER: Final = "Job controller (emulated)"
STAGER: Final = "flashrl-launch stage (emulated)"
BATCH_JOBS_RESOURCE: Final = resource_key(BATCH_JOB)


class StagingStandIn:
    """Drives a staging Job to its end the way Kubernetes and the stage command would."""

    def __init__(self, api: ApiClient) -> None:
        self._controller = api.as_actor(JOB_CONTROLLER)
        self._kubelet = api.as_actor(KUBELET)
        self._stager = api.as_actor(STAGER)

    async def report_progress(
        self, namespace: str, job: str, files: int, files_total: int, done: int, total: int
    ) -> None:
        """What the stage command reports after each verified file: ``status.staging`` only."""
        staging = {
            "files": files,
            "filesTotal": files_total,
            "bytes": done,
            "bytesTotal": total,
            "updateTime": now_rfc3339(),
        }
        await self._stager.patch(
            JOBS_RESOURCE, namespace, job, {"status": {"staging": staging}}, subresource="status"
        )

    async def succeed(self, namespace: str, name: str) -> None:
        """The stage command exited 0: the Job controller marks the Job complete."""
        now = now_rfc3339()
        status = {
            "succeeded": 1,
            "active": 0,
            "startTime": now,
            "completionTime": now,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastTransitionTime": now},
            ],
        }
        await self._controller.patch(
            BATCH_JOBS_RESOURCE, namespace, name, {"status": status}, subresource="status"
        )

    async def fail(self, namespace: str, name: str, reason: str) -> None:
        """The stage command failed with ``reason``: its pod ends with exit code 76 and that message,
        and the Job's pod failure policy fails the Job at once."""
        now = now_rfc3339()
        pod_name = f"{name}-x7k2p"
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace, "labels": {JOB_NAME_LABEL: name}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": STAGE_CONTAINER, "image": "trainer"}]},
        }
        await self._kubelet.create(PODS_RESOURCE, pod)
        terminated = {
            "exitCode": contract.EXIT_STAGING_FAILED,
            "reason": "Error",
            "message": reason,
            "finishedAt": now,
        }
        status = {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": STAGE_CONTAINER,
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
        await self._kubelet.patch(
            PODS_RESOURCE, namespace, pod_name, {"status": status}, subresource="status"
        )
        message = (
            f"Container {STAGE_CONTAINER} for pod {namespace}/{pod_name} failed with exit code "
            f"{contract.EXIT_STAGING_FAILED} matching FailJob rule at index 0"
        )
        job_status: dict[str, Any] = {
            "failed": 1,
            "active": 0,
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": message,
                    "lastTransitionTime": now,
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": message,
                    "lastTransitionTime": now,
                },
            ],
        }
        await self._controller.patch(
            BATCH_JOBS_RESOURCE, namespace, name, {"status": job_status}, subresource="status"
        )
