"""KubeRay, the scheduler, the kubelet and the launcher, played for the emulated API server.

There is no KubeRay here: :class:`KubeRayStandIn` patches RayJob status the way KubeRay would
(``jobDeploymentStatus``, ``jobStatus``, ``reason``, ``message``), creates the RayJob's RayCluster
and walks its status through pod startup (conditions, replica counts, mirrored into the RayJob's
``status.rayClusterStatus``), and reports training progress the way the launcher in the head pod
would. The RayCluster status is made up step by step by whoever drives it; pods exist only when it
is told to make one that cannot start (:meth:`KubeRayStandIn.stuck_pod`, with the status the
scheduler or the kubelet would have written). When a RayJob ends it runs the RayJob's own teardown as
KubeRay does (:func:`due_teardown`): its ``deletionStrategy.deletionRules`` (the rendered ones delete
the GPU workers at once and the cluster after ``ttlSeconds``), or ``shutdownAfterJobFinishes`` with
``ttlSecondsAfterFinished``. Each write names who would have made it (KubeRay, the
scheduler, the kubelet, the launcher), so the emulator's record and the demo's timeline say so.
Every name of KubeRay's it writes comes from :mod:`flashrl_operator.vocab.kuberay`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from flashrl_api.exported_metrics import status_metric_names
from flashrl_api.times import now_rfc3339
from flashrl_jobs.progress import step_status
from flashrl_jobs.run_metrics import RunState
from flashrl_jobs.run_observer import step_report
from flashrl_operator.sim.apiserver import (
    GARBAGE_COLLECTOR,
    JOBS_RESOURCE,
    KUBELET,
    KUBERAY,
    LAUNCHER,
    PODS_RESOURCE,
    RAY_CLUSTERS_RESOURCE,
    RAY_JOBS_RESOURCE,
    SCHEDULER,
    ApiClient,
    EmulatedApiServer,
    NotFoundError,
    resource_key,
)
from flashrl_operator.vocab.kuberay import (
    CLUSTER_LABEL,
    CLUSTER_STATE_READY,
    GROUP_LABEL,
    HEAD_GROUP,
    NODE_TYPE_LABEL,
    ORIGINATED_FROM_CRD,
    ORIGINATED_FROM_NAME,
    RAY_CLUSTER,
    RAY_JOB,
    ClusterConditionReason,
    ClusterConditionType,
    DeletionPolicy,
    DeploymentStatus,
    JobStatus,
    NodeType,
    desired_worker_replicas,
    worker_selector,
)
from flashrl_operator.vocab.owners import owner_uids
from flashrl_operator.vocab.resource import Resource

#: KubeRay's RayJob status at each step of a normal run (see docs/operator.md for the mapping).
CLUSTER_STARTING: Final = {"jobDeploymentStatus": DeploymentStatus.INITIALIZING, "jobStatus": JobStatus.NEW}
SUBMITTED: Final = {"jobDeploymentStatus": DeploymentStatus.RUNNING, "jobStatus": JobStatus.PENDING}
TRAINING: Final = {"jobDeploymentStatus": DeploymentStatus.RUNNING, "jobStatus": JobStatus.RUNNING}
SUCCEEDED: Final = {"jobDeploymentStatus": DeploymentStatus.COMPLETE, "jobStatus": JobStatus.SUCCEEDED}
SUSPENDED: Final = {"jobDeploymentStatus": DeploymentStatus.SUSPENDED, "jobStatus": JobStatus.NEW}


def failed(reason: str, message: str) -> dict[str, Any]:
    """KubeRay's status for a failed RayJob."""
    return {
        "jobDeploymentStatus": DeploymentStatus.FAILED,
        "jobStatus": JobStatus.FAILED,
        "reason": reason,
        "message": message,
    }


#: The characters Kubernetes' ``rand.String`` (and so KubeRay's cluster-name suffix) draws from.
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"


def _condition(ctype: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_rfc3339(),
    }


def cluster_status(
    desired_workers: int,
    *,
    head_created: bool = False,
    head_ready: bool = False,
    ready_workers: int = 0,
    provisioned: bool = False,
    replica_failure: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A RayCluster ``status`` as KubeRay writes it during startup (emulated, no pods behind it).

    ``provisioned`` is sticky in KubeRay (``RayClusterProvisioned`` never flips back); callers pass
    it along once every pod was ready. ``replica_failure`` is ``(reason, message)`` of a pod KubeRay
    could not create.
    """
    all_ready = head_ready and ready_workers >= desired_workers
    if not head_created:
        head = _condition(
            ClusterConditionType.HEAD_POD_READY,
            False,
            ClusterConditionReason.HEAD_POD_NOT_FOUND,
            "Head Pod not found",
        )
    elif head_ready:
        head = _condition(
            ClusterConditionType.HEAD_POD_READY, True, ClusterConditionReason.HEAD_POD_RUNNING_AND_READY, ""
        )
    else:
        head = _condition(
            ClusterConditionType.HEAD_POD_READY,
            False,
            "ContainersNotReady",
            "containers with unready status: [ray-head]",
        )
    if provisioned or all_ready:
        prov = _condition(
            ClusterConditionType.PROVISIONED,
            True,
            ClusterConditionReason.ALL_PODS_READY_FIRST_TIME,
            "All Ray Pods are ready for the first time",
        )
    else:
        prov = _condition(
            ClusterConditionType.PROVISIONED,
            False,
            ClusterConditionReason.PODS_PROVISIONING,
            "RayCluster Pods are being provisioned for first time",
        )
    conditions = [head, prov]
    if replica_failure is not None:
        conditions.append(_condition(ClusterConditionType.REPLICA_FAILURE, True, *replica_failure))
    status: dict[str, Any] = {
        "desiredWorkerReplicas": desired_workers,
        "minWorkerReplicas": desired_workers,
        "maxWorkerReplicas": desired_workers,
        "readyWorkerReplicas": ready_workers,
        "availableWorkerReplicas": ready_workers,
        "conditions": conditions,
        "lastUpdateTime": now_rfc3339(),
    }
    if all_ready:
        status["state"] = CLUSTER_STATE_READY
    return status


def unschedulable(message: str) -> dict[str, Any]:
    """A pod status as the scheduler leaves it when no node fits."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": now_rfc3339(),
    }
    return {"phase": "Pending", "conditions": [condition]}


def image_pull_backoff(container: str, image: str) -> dict[str, Any]:
    """A pod status as the kubelet leaves it when the image cannot be pulled."""
    message = f'Back-off pulling image "{image}"'
    waiting = {"reason": "ImagePullBackOff", "message": message}
    return {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": container, "ready": False, "restartCount": 0, "state": {"waiting": waiting}}
        ],
    }


#: The scheduler named by pods the stand-in plays (no real scheduler answers to it).
PLAYED_SCHEDULER: Final = "flashrl-played-scheduler"


#: KubeRay runs the most impactful overdue rule first (``selectMostImpactfulRule``).
_IMPACT: Final = (DeletionPolicy.DELETE_SELF, DeletionPolicy.DELETE_CLUSTER, DeletionPolicy.DELETE_WORKERS)


def due_teardown(ray_job: Mapping[str, Any], elapsed: float) -> DeletionPolicy | None:
    """What KubeRay does to a finished RayJob's cluster ``elapsed`` seconds after its end: the most
    impactful deletion rule that matches its status and whose ``ttlSeconds`` has passed, or, without
    rules, ``DeleteCluster`` once ``ttlSecondsAfterFinished`` has passed with ``shutdownAfterJobFinishes``.
    ``None``: nothing (yet), or the RayJob has not ended."""
    spec = ray_job.get("spec") or {}
    status = ray_job.get("status") or {}
    if status.get("jobDeploymentStatus") not in (DeploymentStatus.COMPLETE, DeploymentStatus.FAILED):
        return None
    rules = (spec.get("deletionStrategy") or {}).get("deletionRules") or []
    if rules:
        due = set()
        for rule in rules:
            condition = rule.get("condition") or {}
            if "jobStatus" in condition:
                matched = condition["jobStatus"] == status.get("jobStatus")
            else:
                matched = condition.get("jobDeploymentStatus") == status.get("jobDeploymentStatus")
            if matched and int(condition.get("ttlSeconds") or 0) <= elapsed:
                due.add(rule.get("policy"))
        return next((policy for policy in _IMPACT if policy in due), None)
    if spec.get("shutdownAfterJobFinishes") and int(spec.get("ttlSecondsAfterFinished") or 0) <= elapsed:
        return DeletionPolicy.DELETE_CLUSTER
    return None


class KubeRayStandIn:
    """Plays KubeRay's (and the launcher's) part: tests patch RayJob status the way KubeRay would.

    Like KubeRay, it creates a RayCluster named ``<rayjob>-<5 random characters>`` labelled with the
    RayJob it came from, reports its pods' startup in the RayCluster's status, and mirrors that
    status into the RayJob's ``status.rayClusterStatus`` (which is what makes the RayJob change, and
    so reach the operator, while the cluster starts).
    """

    def __init__(self, api: ApiClient) -> None:
        self._api = api.as_actor(KUBERAY)
        self._scheduler = api.as_actor(SCHEDULER)
        self._kubelet = api.as_actor(KUBELET)
        self._launcher = api.as_actor(LAUNCHER)

    async def set_status(
        self, namespace: str, ray_job: str, status: Mapping[str, Any], *, teardown: bool = True
    ) -> None:
        """Patch a RayJob's status; cluster name, dashboard and times are filled in as KubeRay does.

        ``Initializing`` creates the RayCluster (no pods ready yet); ``Running`` first makes all its
        pods ready (KubeRay submits only then); ``Suspended`` deletes it, as KubeRay does. ``Complete``
        and ``Failed`` then run what the RayJob's teardown makes due at once (:meth:`teardown`; the
        rendered rules: delete the GPU workers); ``teardown=False`` holds it, for a test to play a
        cluster that outlives its job.
        """
        full = dict(status)
        deployment = full.get("jobDeploymentStatus")
        cluster: dict[str, Any] | None = None
        if deployment in (DeploymentStatus.INITIALIZING, DeploymentStatus.RUNNING):
            cluster = await self._ensure_cluster(namespace, ray_job)
            running = deployment == DeploymentStatus.RUNNING
            if running and (cluster.get("status") or {}).get("state") != CLUSTER_STATE_READY:
                workers = int((cluster.get("status") or {}).get("desiredWorkerReplicas") or 0)
                cluster = await self._patch_cluster(
                    namespace,
                    cluster,
                    cluster_status(workers, head_created=True, head_ready=True, ready_workers=workers),
                )
        elif deployment in (DeploymentStatus.COMPLETE, DeploymentStatus.FAILED):
            cluster = await self._find_cluster(namespace, ray_job)
        elif deployment == DeploymentStatus.SUSPENDED:
            found = await self._find_cluster(namespace, ray_job)
            if found is not None:
                await self._api.delete(RAY_CLUSTERS_RESOURCE, namespace, found["metadata"]["name"])
            full.update({"rayClusterName": None, "dashboardURL": None, "rayClusterStatus": None})
        if cluster is not None:
            name = cluster["metadata"]["name"]
            full.setdefault("rayClusterName", name)
            full.setdefault("dashboardURL", f"{name}-head-svc.{namespace}.svc.cluster.local:8265")
            full.setdefault("rayClusterStatus", cluster.get("status") or {})
        if deployment == DeploymentStatus.RUNNING:
            full.setdefault("startTime", now_rfc3339())
        if deployment in (DeploymentStatus.COMPLETE, DeploymentStatus.FAILED):
            full.setdefault("endTime", now_rfc3339())
        await self._api.patch(RAY_JOBS_RESOURCE, namespace, ray_job, {"status": full}, subresource="status")
        if teardown and deployment in (DeploymentStatus.COMPLETE, DeploymentStatus.FAILED):
            await self.teardown(namespace, ray_job, 0.0)

    async def teardown(self, namespace: str, ray_job: str, elapsed: float) -> DeletionPolicy | None:
        """Run what the RayJob's teardown makes due ``elapsed`` seconds after its end (:func:`due_teardown`):
        ``DeleteWorkers`` suspends every worker group and deletes the worker pods (the head stays),
        ``DeleteCluster`` deletes the RayCluster. Returns what it ran."""
        owner = await self._api.get(RAY_JOBS_RESOURCE, namespace, ray_job)
        policy = due_teardown(owner or {}, elapsed)
        cluster = await self._find_cluster(namespace, ray_job)
        if policy is None or cluster is None:
            return None
        try:
            return await self._tear_down(namespace, cluster, policy)
        except NotFoundError:
            return None  # deleted meanwhile (a retry frees a failed attempt's cluster at once)

    async def _tear_down(
        self, namespace: str, cluster: Mapping[str, Any], policy: DeletionPolicy
    ) -> DeletionPolicy | None:
        name = cluster["metadata"]["name"]
        if policy == DeletionPolicy.DELETE_WORKERS:
            groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
            if groups and all(g.get("suspend") is True for g in groups):
                return None  # done before (KubeRay checks the same)
            suspended = [{**g, "suspend": True} for g in groups]
            await self._api.patch(
                RAY_CLUSTERS_RESOURCE, namespace, name, {"spec": {"workerGroupSpecs": suspended}}
            )
            selector = dict(part.split("=", 1) for part in worker_selector(name).split(","))
            for pod in await self._api.list(PODS_RESOURCE, namespace):
                labels = (pod.get("metadata") or {}).get("labels") or {}
                if all(labels.get(k) == v for k, v in selector.items()):
                    await self._api.delete(PODS_RESOURCE, namespace, pod["metadata"]["name"])
            old = cluster.get("status") or {}
            if old:
                status = {**old, "readyWorkerReplicas": 0, "availableWorkerReplicas": 0}
                await self._api.patch(
                    RAY_CLUSTERS_RESOURCE, namespace, name, {"status": status}, subresource="status"
                )
        elif policy in (DeletionPolicy.DELETE_CLUSTER, DeletionPolicy.DELETE_SELF):
            await self._api.delete(RAY_CLUSTERS_RESOURCE, namespace, name)
        return policy

    async def cluster_pods(
        self, namespace: str, ray_job: str, *, head_ready: bool, ready_workers: int
    ) -> dict[str, Any]:
        """Report the RayJob's cluster pods as KubeRay would: the head and ``ready_workers`` ready.

        Returns the RayCluster. Clears any ReplicaFailure (KubeRay removes it once pods are created).
        """
        cluster = await self._ensure_cluster(namespace, ray_job)
        old = cluster.get("status") or {}
        workers = int(old.get("desiredWorkerReplicas") or 0)
        provisioned = any(
            c.get("type") == ClusterConditionType.PROVISIONED and c.get("status") == "True"
            for c in old.get("conditions") or []
        )
        new = cluster_status(
            workers,
            head_created=True,
            head_ready=head_ready,
            ready_workers=ready_workers,
            provisioned=provisioned,
        )
        return await self._patch_cluster(namespace, cluster, new, ray_job)

    async def replica_failure(
        self, namespace: str, ray_job: str, reason: str, message: str
    ) -> dict[str, Any]:
        """KubeRay could not create a pod (quota, admission webhook, ...): ``ReplicaFailure`` True."""
        cluster = await self._ensure_cluster(namespace, ray_job)
        old = cluster.get("status") or {}
        head_ready = any(
            c.get("type") == ClusterConditionType.HEAD_POD_READY and c.get("status") == "True"
            for c in old.get("conditions") or []
        )
        new = cluster_status(
            int(old.get("desiredWorkerReplicas") or 0),
            head_created=head_ready,
            head_ready=head_ready,
            ready_workers=int(old.get("readyWorkerReplicas") or 0),
            replica_failure=(reason, message),
        )
        return await self._patch_cluster(namespace, cluster, new, ray_job)

    async def stuck_pod(
        self,
        namespace: str,
        ray_job: str,
        pod_status: Mapping[str, Any],
        *,
        node_type: str = NodeType.WORKER,
        by: str | None = None,
    ) -> str:
        """A pod of the RayJob's cluster that cannot start, as KubeRay names and labels it.

        ``pod_status`` is what the scheduler or the kubelet wrote (see :func:`unschedulable` and
        :func:`image_pull_backoff`); neither exists here, so the stand-in writes it, as ``by``
        (default: the scheduler when the pod is unscheduled, else the kubelet). Returns the name.
        """
        cluster = await self._ensure_cluster(namespace, ray_job)
        cluster_name = cluster["metadata"]["name"]
        suffix = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
        head = node_type == NodeType.HEAD
        group = "head" if head else "gpu-worker"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{cluster_name}-{group}-{suffix}",
                "namespace": namespace,
                "labels": {
                    CLUSTER_LABEL: cluster_name,
                    NODE_TYPE_LABEL: node_type,
                    GROUP_LABEL: HEAD_GROUP if head else "gpu",
                },
            },
            # The stand-in plays the scheduler for this pod: a real scheduler (the tests' control plane)
            # must not schedule it or write its own reasons over the played ones.
            "spec": {
                "schedulerName": PLAYED_SCHEDULER,
                "containers": [{"name": f"ray-{node_type}", "image": "trainer"}],
            },
        }
        created = await self._api.create(PODS_RESOURCE, pod)
        name = str(created["metadata"]["name"])
        scheduled = not any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            for c in pod_status.get("conditions") or []
        )
        writer = {SCHEDULER: self._scheduler, KUBELET: self._kubelet}.get(
            by or (KUBELET if scheduled else SCHEDULER), self._scheduler
        )
        await writer.patch(PODS_RESOURCE, namespace, name, {"status": dict(pod_status)}, subresource="status")
        return name

    async def delete_pods(self, namespace: str, ray_job: str) -> None:
        """Delete every pod of the RayJob's cluster (e.g. once the cause is fixed KubeRay recreates them)."""
        cluster = await self._find_cluster(namespace, ray_job)
        if cluster is None:
            return
        for pod in await self._api.list(PODS_RESOURCE, namespace):
            if ((pod.get("metadata") or {}).get("labels") or {}).get(CLUSTER_LABEL) == cluster["metadata"][
                "name"
            ]:
                await self._api.delete(PODS_RESOURCE, namespace, pod["metadata"]["name"])

    async def _find_cluster(self, namespace: str, ray_job: str) -> dict[str, Any] | None:
        for item in await self._api.list(RAY_CLUSTERS_RESOURCE, namespace):
            labels = (item.get("metadata") or {}).get("labels") or {}
            if (
                labels.get(ORIGINATED_FROM_NAME) == ray_job
                and labels.get(ORIGINATED_FROM_CRD) == RAY_JOB.kind
            ):
                return item
        return None

    async def _ensure_cluster(self, namespace: str, ray_job: str) -> dict[str, Any]:
        """The RayJob's RayCluster, created from its ``rayClusterSpec`` the way KubeRay does."""
        found = await self._find_cluster(namespace, ray_job)
        if found is not None:
            return found
        owner = await self._api.get(RAY_JOBS_RESOURCE, namespace, ray_job)
        if owner is None:
            raise LookupError(f"RayJob {namespace}/{ray_job} does not exist")
        meta = owner.get("metadata") or {}
        suffix = "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
        cluster = {
            "apiVersion": RAY_CLUSTER.api_version,
            "kind": RAY_CLUSTER.kind,
            "metadata": {
                "name": f"{ray_job}-{suffix}",
                "namespace": namespace,
                "labels": {
                    **(meta.get("labels") or {}),
                    ORIGINATED_FROM_NAME: ray_job,
                    ORIGINATED_FROM_CRD: RAY_JOB.kind,
                },
                "ownerReferences": [
                    {
                        "apiVersion": RAY_JOB.api_version,
                        "kind": RAY_JOB.kind,
                        "name": ray_job,
                        "uid": meta.get("uid"),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": (owner.get("spec") or {}).get("rayClusterSpec") or {},
        }
        created = await self._api.create(RAY_CLUSTERS_RESOURCE, cluster)
        return await self._patch_cluster(namespace, created, cluster_status(desired_worker_replicas(owner)))

    async def _patch_cluster(
        self,
        namespace: str,
        cluster: Mapping[str, Any],
        status: Mapping[str, Any],
        mirror_to: str | None = None,
    ) -> dict[str, Any]:
        """Write the RayCluster's status; with ``mirror_to``, copy it into that RayJob's status too."""
        name = cluster["metadata"]["name"]
        # A merge patch would keep keys the new status drops (state, the ReplicaFailure condition):
        # null them explicitly, as a full status update by KubeRay would.
        old = cluster.get("status") or {}
        patch = {**{k: None for k in old if k not in status}, **status}
        updated = await self._api.patch(
            RAY_CLUSTERS_RESOURCE, namespace, name, {"status": patch}, subresource="status"
        )
        if mirror_to is not None:
            mirrored = {"rayClusterName": name, "rayClusterStatus": {**patch}}
            await self._api.patch(
                RAY_JOBS_RESOURCE, namespace, mirror_to, {"status": mirrored}, subresource="status"
            )
        return updated

    async def report_metrics(
        self, namespace: str, job: str, state: RunState, attempt: int | None = None
    ) -> None:
        """What the launcher does after each training step read from verl's metrics file: one merge patch
        of ``progress``, ``metrics`` and ``validationScore``, built by the launcher's own code."""
        patch = {"status": step_status(replace(step_report(state), attempt=attempt), datetime.now(UTC))}
        await self._launcher.patch(JOBS_RESOURCE, namespace, job, patch, subresource="status")

    async def report_goodput_step(
        self,
        namespace: str,
        job: str,
        state: RunState,
        now: float,
        attempt: int,
        gpus: int,
        checkpoint: Mapping[str, Any] | None = None,
    ) -> None:
        """What the launcher does after each step with its goodput clock: progress, metrics,
        ``launcherPhases`` (and the checkpoint verl saved with the step) in one merge patch, built by the
        launcher's own code from ``state`` (whose clock has seen the step at ``now``)."""
        report = replace(step_report(state), attempt=attempt, phases=state.phases_wire(now, attempt, gpus))
        patch = {"status": step_status(report, datetime.now(UTC))}
        if checkpoint is not None:
            patch["status"]["checkpoint"] = dict(checkpoint)
        await self._launcher.patch(JOBS_RESOURCE, namespace, job, patch, subresource="status")

    async def report_progress(
        self, namespace: str, job: str, step: int, total: int, attempt: int | None = None
    ) -> None:
        """What the launcher does after each training step: patch ``status.progress`` only."""
        progress: dict[str, Any] = {"step": step, "totalSteps": total, "updateTime": now_rfc3339()}
        if attempt is not None:
            progress["attempt"] = attempt
        patch = {"status": {"progress": progress}}
        await self._launcher.patch(JOBS_RESOURCE, namespace, job, patch, subresource="status")

    async def report_named_metrics(
        self, namespace: str, job: str, step: int, total: int, data: Mapping[str, Any]
    ) -> None:
        """What the launcher does after a step once verl's metrics are in: progress and ``status.metrics``
        (the names the launcher reports, :func:`~flashrl_api.exported_metrics.status_metric_names`, as
        ``{name, value, step}``) in one status patch."""
        metrics = [{"name": n, "value": data[n], "step": step} for n in status_metric_names(data)]
        progress = {"step": step, "totalSteps": total, "updateTime": now_rfc3339()}
        patch = {"status": {"progress": progress, "metrics": metrics}}
        await self._launcher.patch(JOBS_RESOURCE, namespace, job, patch, subresource="status")

    async def report_validations(
        self, namespace: str, job: str, entries: Sequence[Mapping[str, Any]]
    ) -> None:
        """What the launcher does after a validation's dump appeared: patch ``status.validationProblems``
        (the newest per-problem summaries, from :class:`flashrl_jobs.validation_watch.ValidationWatch`)."""
        patch = {"status": {"validationProblems": [dict(e) for e in entries]}}
        await self._launcher.patch(JOBS_RESOURCE, namespace, job, patch, subresource="status")

    async def report_checkpoint(
        self, namespace: str, job: str, step: int, path: str, attempt: int | None = None
    ) -> None:
        """What the launcher's ledger does when verl finished a checkpoint: patch ``status.checkpoint``."""
        checkpoint: dict[str, Any] = {"step": step, "time": now_rfc3339(), "path": path}
        if attempt is not None:
            checkpoint["attempt"] = attempt
        patch = {"status": {"checkpoint": checkpoint}}
        await self._launcher.patch(JOBS_RESOURCE, namespace, job, patch, subresource="status")


class GarbageCollectorStandIn:
    """Kubernetes' garbage collector, played: deletes objects whose owners are gone.

    The emulated API server deletes only what it is asked to; in a cluster the controller manager's
    garbage collector then deletes every object whose ``ownerReferences`` name a deleted owner (by
    uid), and what those owned in turn. :meth:`collect` does one full pass, as often as it is called.
    """

    def __init__(self, server: EmulatedApiServer, api: ApiClient) -> None:
        self._server = server
        self._api = api.as_actor(GARBAGE_COLLECTOR)

    async def collect(self) -> list[str]:
        """Delete every orphan, repeating until none is left; returns ``kind namespace/name`` of each."""
        deleted: list[str] = []
        while True:
            live = {
                str((obj.raw.get("metadata") or {}).get("uid"))
                for obj in self._server.objects.values()
                if not obj.deleted
            }
            orphans = [
                (key, obj.raw)
                for key, obj in list(self._server.objects.items())
                if not obj.deleted and (owners := owner_uids(obj.raw)) and not owners & live
            ]
            if not orphans:
                return deleted
            for (resource, namespace, name), raw in orphans:
                key = resource_key(
                    Resource(str(raw.get("apiVersion")), str(raw.get("kind")), str(resource.plural))
                )
                await self._api.delete(key, str(namespace), name)
                deleted.append(f"{raw.get('kind')} {namespace}/{name}")


#: Shares of a step's wall-clock per verl 0.9.1 ``timing_s/*`` key, for a stand-in verl whose steps take
#: the time they take (the emulated runs last seconds, not hours): FP8 rollout generates faster than BF16
#: but re-quantizes at every weight sync. The rest of ``timing_s/step`` is verl's own bookkeeping.
STEP_SHARES: Final[Mapping[str, Mapping[str, float]]] = {
    "fp8": {
        "timing_s/gen": 0.46,
        "timing_s/update_weights": 0.12,
        "timing_s/reward": 0.02,
        "timing_s/old_log_prob": 0.09,
        "timing_s/ref": 0.05,
        "timing_s/adv": 0.01,
        "timing_s/update_actor": 0.17,
    },
    "bf16": {
        "timing_s/gen": 0.58,
        "timing_s/update_weights": 0.03,
        "timing_s/reward": 0.02,
        "timing_s/old_log_prob": 0.08,
        "timing_s/ref": 0.04,
        "timing_s/adv": 0.01,
        "timing_s/update_actor": 0.16,
    },
}


#: A separate-async step as verl 0.9.1's V1 trainer logs it: its ``timing_s/gen`` is the trainer's wait for
#: the rollout pool's samples (``replay_buffer.sample``), a third of the step here; the samples lag the
#: policy by a version or two and the off-policy limit drops a few (``trainer_base.py``,
#: ``replay_buffer.py``).
SEPARATE_ASYNC: Final[Mapping[str, float]] = {
    "timing_s/gen": 0.33,
    "training/off_policy/trajectory_staleness/mean": 1.4,
    "training/off_policy/trajectory_staleness/max": 3.0,
    "training/off_policy/evicted_samples": 2.0,
}


def timed_verl_step(
    window: float,
    *,
    quantization: str = "fp8",
    save: bool = False,
    validate: bool = False,
    separate_async: bool = False,
) -> dict[str, float]:
    """verl's ``timing_s/*`` for a step that took ``window`` seconds of wall-clock (validation and a
    checkpoint save included when asked), with dynamic sampling's discarded groups (4 of 36);
    ``separate_async``: the V1 trainer's async figures too (:data:`SEPARATE_ASYNC`)."""
    testing = 0.1 * window if validate else 0.0
    step = 0.97 * window - testing
    saving = 0.08 * step if save else 0.0
    body = step - saving
    values = {key: share * body for key, share in STEP_SHARES[quantization].items()}
    if separate_async:
        values.update({k: v * body if k.startswith("timing_s/") else v for k, v in SEPARATE_ASYNC.items()})
    values["timing_s/step"] = step
    if saving:
        values["timing_s/save_checkpoint"] = saving
    if testing:
        values["timing_s/testing"] = testing
    values["training/filter_groups/evicted_samples"] = 4.0
    return values


def verl_step_metrics(step: int, total: int) -> dict[str, float]:
    """One training step's metrics as verl 0.9.1 logs them (names from ``trainer/ppo/metric_utils.py``,
    ``trainer/ppo/rollout_corr_helper.py``, ``utils/debug/metrics.py``), with values of the size an
    8xH20 Qwen3-8B DAPO step with FP8 rollout has: minutes per step, most of it generation, responses
    growing, the mismatch small and slowly rising. Validation (``val-core``) on the first and last step."""
    values = {
        "timing_s/step": 412.0 + 3.0 * step,
        "timing_s/gen": 251.0 + 2.5 * step,
        "timing_s/update_weights": 9.8,
        "timing_s/old_log_prob": 31.5,
        "timing_s/update_actor": 118.0,
        "response_length/mean": 1850.0 + 40.0 * step,
        "response_length/max": 20480.0,
        "response_length/clip_ratio": 0.012 + 0.002 * step,
        "perf/throughput": 1830.0 - 4.0 * step,
        "actor/pg_loss": -0.012,
        "actor/entropy": 0.41,
        "critic/score/mean": 0.12 + 0.01 * step,
        "rollout_corr/kl": 0.011 + 0.0015 * step,
        "rollout_corr/k3_kl": 0.0105 + 0.0014 * step,
        "rollout_corr/rollout_is_eff_sample_size": 0.93,
        "rollout_corr/rollout_is_mean": 1.0004,
        "rollout_corr/rollout_is_ratio_fraction_high": 0.0021,
        "training/rollout_probs_diff_mean": 0.0042,
    }
    if step in (1, total):
        values["val-core/aime-2024/acc/mean@1"] = 0.133 + 0.01 * step
    return values
