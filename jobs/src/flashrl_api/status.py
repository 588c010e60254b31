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

    percent: int | None = Field(default=None, ge=0, le=100)
    """Whole percent of totalSteps completed."""

    estimated_remaining_seconds: int | None = Field(default=None, ge=0)
    """Seconds until the last step at the recent pace (mean of the last 10 steps' ``timing_s/step``)."""


class MetricValue(ApiModel):
    """The newest value of one verl metric (the shape of Kubeflow Trainer's ``trainerStatus.metrics``)."""

    name: str = Field(min_length=1, max_length=256)
    """verl's name for it, e.g. ``rollout_corr/kl`` or ``val-core/aime24/acc/mean@32``."""

    value: float
    """Its newest value (verl's NaN values are never reported)."""

    step: int = Field(ge=0)
    """The training step it was logged at (0: the validation before training)."""


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

    metrics: list[MetricValue] = Field(default_factory=list, max_length=64)
    """Newest values of a curated set of verl metrics, reported by the launcher after each step:
    validation scores (``val-core/.../mean@N``), response length, throughput, step and phase times,
    and the rollout/trainer mismatch (``rollout_corr/*``, ``training/rollout_probs_diff_mean``).
    Every metric is on the job's Prometheus endpoint (docs/observability.md)."""

    validation_score: MetricValue | None = None
    """The headline validation score: the first ``val-core/<data source>/<variable>/mean@N``."""
