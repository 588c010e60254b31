"""The FlashRLJob status: phase, progress, conditions and what the user needs to act on a failure."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flashrl_api._base import ApiModel

Phase = Literal["Pending", "Starting", "Running", "Succeeded", "Failed", "Suspended"]
PHASES: tuple[Phase, ...] = ("Pending", "Starting", "Running", "Succeeded", "Failed", "Suspended")
TERMINAL_PHASES: frozenset[Phase] = frozenset({"Succeeded", "Failed"})

ConditionType = Literal["Accepted", "ClusterReady", "Running", "Succeeded", "Failed", "Suspended"]


class Condition(ApiModel):
    """A Kubernetes-style condition (metav1.Condition without observedGeneration per condition)."""

    type: str = Field(min_length=1, max_length=316)
    """Accepted, ClusterReady, Running, Succeeded, Failed or Suspended."""

    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""

    reason: str = Field(min_length=1, max_length=1024)
    """CamelCase machine-readable reason."""

    message: str = Field(default="", max_length=32768)
    """Human-readable explanation."""

    last_transition_time: str
    """When status last changed (RFC 3339)."""


class Progress(ApiModel):
    """Training progress reported from inside the job."""

    step: int = Field(default=0, ge=0)
    """Last completed training step."""

    total_steps: int = Field(default=0, ge=0)
    """Steps the job will run."""

    update_time: str | None = None
    """When the step was last reported (RFC 3339)."""

    attempt: int | None = Field(default=None, ge=1)
    """The attempt (Ray cluster) that completed the step."""


class CheckpointRecord(ApiModel):
    """The newest checkpoint verl finished, as the launcher read it from verl's tracker file."""

    step: int = Field(ge=0)
    """Training step the checkpoint holds (verl's ``latest_checkpointed_iteration.txt``)."""

    time: str
    """When verl finished writing it (the tracker file's modification time, RFC 3339)."""

    path: str = Field(max_length=4096)
    """Its directory inside the pods, ``<checkpoint mount>/<project>/<experiment>/global_step_<step>``."""

    attempt: int | None = Field(default=None, ge=1)
    """The attempt (Ray cluster) whose launcher reported it."""


class AttemptRecord(ApiModel):
    """One attempt: a Ray cluster that ran (or tried to run) the job."""

    attempt: int = Field(ge=1)
    """1 for the first Ray cluster, then one more per retry."""

    start_step: int = Field(default=0, ge=0)
    """The checkpoint step it resumed from (0: from the start)."""

    end_step: int | None = Field(default=None, ge=0)
    """The last training step it completed."""

    checkpoint_step: int | None = Field(default=None, ge=0)
    """The newest checkpoint when it ended."""

    reason: str | None = Field(default=None, max_length=1024)
    """Why it ended, when it failed."""

    start_time: str | None = None
    """When its RayJob was created (RFC 3339)."""

    end_time: str | None = None
    """When it ended (RFC 3339); absent for the current attempt."""


class FlashRLJobStatus(ApiModel):
    """Observed state of a FlashRLJob, written by the operator."""

    phase: Phase | None = None
    """Pending, Starting, Running, Succeeded, Failed or Suspended."""

    progress: Progress | None = None
    """Training progress."""

    conditions: list[Condition] = Field(default_factory=list)
    """Accepted, ClusterReady, Running, Succeeded, Failed, Suspended."""

    observed_generation: int | None = None
    """The metadata.generation this status describes."""

    ray_job_name: str | None = None
    """The KubeRay RayJob that runs this job."""

    ray_cluster_name: str | None = None
    """The RayCluster KubeRay created for it."""

    dashboard_url: str | None = None
    """Ray dashboard address (reachable in-cluster or via kubectl port-forward)."""

    start_time: str | None = None
    """When verl started running (RFC 3339)."""

    completion_time: str | None = None
    """When the job finished (RFC 3339)."""

    reason: str | None = None
    """Failure reason, copied from KubeRay (AppFailed, DeadlineExceeded, PreRunningDeadlineExceeded,
    SubmissionFailed, ...) or our own (InvalidSpec, ImmutableFieldChanged, ...); or, while Starting,
    what keeps the Ray pods from starting (PodUnschedulable, ImagePullFailed, ContainerConfigError,
    ContainerCrashLooping)."""

    message: str | None = None
    """Human-readable detail for the phase or failure."""

    checkpoint: CheckpointRecord | None = None
    """The newest checkpoint, reported by the launcher after each step (a retry resumes from it)."""

    attempt: int | None = Field(default=None, ge=1)
    """The current attempt (Ray cluster), from 1; each retry is a new one."""

    attempts: list[AttemptRecord] = Field(default_factory=list, max_length=10)
    """The last attempts, oldest first; the current one last."""

    lost_steps: int | None = Field(default=None, ge=0)
    """Training steps all failures so far cost: completed after the newest checkpoint, then redone."""

    next_attempt_time: str | None = None
    """While a retry waits out its backoff: when the next attempt's Ray cluster will be created."""
