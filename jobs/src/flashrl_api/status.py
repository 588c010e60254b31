"""The FlashRLJob status and its vocabulary: phases, condition types and reasons.

Every condition type and every reason the project writes is a member of :class:`ConditionType` or
:class:`Reason`, kept here next to the status model as Kubeflow Trainer keeps its constants next to
its types (``pkg/apis/trainer/v1alpha1/trainjob_types.go``). Nothing else spells them: the operator's
status mapping, its Events, the launcher's exit-code mapping and the CRD's description of
``status.reason`` (generated from :class:`Reason`) all refer to these members.

Adding a reason is one edit: a member of :class:`Reason` with its comment (the comment becomes its
documentation in the CRD); then, at most, the one rule that produces it. A reason that should also be
announced as a Warning Event goes in :data:`WARNING_REASONS`.

The launcher's failures are one table, :data:`LAUNCHER_FAILURES`: each row gives a reason its exit code,
whether a new attempt may pass, and its severity. The launcher's exit codes
(``flashrl_jobs.contract``), the operator's reading of a Ray job message
(``flashrl_operator.job.status.launcher_failure``), its retry policy
(``flashrl_operator.job.retry_policy.NON_RETRYABLE``), the CRD's description of ``status.reason`` and
the table in docs/operator.md all come from it (``tests/unit/api/test_status_launcher_failures.py``).

KubeRay's own failure reasons (``DeadlineExceeded``, ``SubmissionFailed``, ...) are copied verbatim
into ``status.reason`` and are not members: KubeRay owns that list
(``flashrl_operator.vocab.kuberay.KubeRayReason``), and a newer KubeRay may add to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import Field

from flashrl_api._base import ApiModel
from flashrl_api.exported_metrics import MAX_STATUS_METRICS
from flashrl_api.goodput import MAX_PHASES, GoodputPhase
from flashrl_api.history import MAX_STEP
from flashrl_api.validation_summary import MAX_STATUS_PROBLEMS, STATUS_VALIDATIONS
from flashrl_api.verl_metrics import MAX_METRIC_NAME, METRIC_NAME_PATTERN

Phase = Literal["Pending", "Staging", "Starting", "Running", "Succeeded", "Failed", "Suspended"]
PHASES: tuple[Phase, ...] = ("Pending", "Staging", "Starting", "Running", "Succeeded", "Failed", "Suspended")
TERMINAL_PHASES: frozenset[Phase] = frozenset({"Succeeded", "Failed"})


class ConditionType(StrEnum):
    """The conditions the operator maintains, in the order it writes them.

    ``Accepted`` and ``ClusterReady`` carry information the phase does not. ``Running``,
    ``Succeeded``, ``Failed`` and ``Suspended`` restate the phase on purpose: ``kubectl wait
    --for=condition=Succeeded`` and tools built for batch/v1 Jobs (``Complete``/``Failed``/
    ``Suspended`` conditions) wait on conditions, not on a phase string. They are derived from the
    phase by one rule (``flashrl_operator.phase.phase_conditions``), so they cannot disagree with it.
    """

    ACCEPTED = "Accepted"
    STAGED = "Staged"
    CLUSTER_READY = "ClusterReady"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    #: spec.correction.guard: True while a mismatch metric has been out of bounds long enough.
    ROLLOUT_MISMATCH = "RolloutMismatch"
    #: spec.correction.guard.action FallbackToBF16: True once an attempt was ended for drift and the
    #: next one runs BF16 rollout (the message names the metric, its value, the threshold and the step).
    ROLLOUT_FALLBACK = "RolloutFallback"


class Reason(StrEnum):
    """Every reason the project writes in a condition, ``status.reason`` or an Event.

    Grouped by who decides it. The comment after each member is its documentation (in the CRD too).
    """

    # The spec and the children (Accepted).
    ACCEPTED = "Accepted"  #: the spec is valid and its objects are in place
    INVALID_SPEC = "InvalidSpec"  #: the spec breaks a rule; the message lists each field path
    CHILD_REJECTED = "ChildRejected"  #: the API server refused a child object (RBAC, admission)
    IMMUTABLE_FIELD_CHANGED = "ImmutableFieldChanged"  #: a field that cannot change on a live job was edited
    POLICY_VIOLATION = "PolicyViolation"  #: the spec breaks the cluster admin's policy (see the message)
    CHILD_CONFLICT = "ChildConflict"  #: an object with a child's name is not this job's; the job waits

    # The cluster as it is, judged before anything is created (flashrl_operator.job.fits; the same
    # judgement as flashrl preflight's). Final: nodes, claims and PriorityClasses added later are not waited
    # for.
    #: The job's GPU pods can never fit on the cluster's nodes (GPU product, node selector, taints,
    #: allocatable GPUs); the message says what it needs and what the cluster offers.
    NEVER_FITS = "NeverFits"
    CLAIM_NOT_FOUND = "ClaimNotFound"  #: a claim the job mounts does not exist; the message names it
    #: The PriorityClass the job's pods name does not exist: the API server would refuse every one of
    #: them, and Kueue queues no workload for it; the message names it and its field path.
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    #: The job fits the cluster, but pods of others hold the GPUs its pods need now: they wait (no queue,
    #: spec.scheduling.queueName, holds them back); the message names whose pods hold the GPUs.
    WAITING_FOR_GPUS = "WaitingForGPUs"

    # The model and data (Staged; a staging failure is also status.reason).
    STAGING = "Staging"  #: the staging Job downloads the Hugging Face sources (no GPU requested yet)
    STAGED = "Staged"  #: the staging Job downloaded and verified every source
    ALREADY_STAGED = "AlreadyStaged"  #: every source was staged on its claim before (no Job needed)
    NOTHING_TO_STAGE = "NothingToStage"  #: the model and data are paths on the job's volumes
    STAGING_FAILED = "StagingFailed"  #: the staging Job failed; the message names the cause

    # Phases with no more specific reason.
    CREATING = "Creating"  #: the RayJob is being created
    WAITING_FOR_KUBERAY = "WaitingForKubeRay"  #: the RayJob exists; KubeRay has not acted on it
    SUBMITTED = "Submitted"  #: the Ray cluster is ready and the job was submitted
    RUNNING = "Running"  #: verl is training
    RETRYING = "Retrying"  #: a failed attempt is retried with a new Ray cluster, from the newest checkpoint
    SUCCEEDED = "Succeeded"  #: training finished
    STOPPED = "Stopped"  #: the Ray job was stopped
    QUEUED = "Queued"  #: waiting for Kueue to admit the job
    SUSPENDED = "Suspended"  #: suspended by spec.lifecycle.suspend

    # The Ray cluster (ClusterReady).
    CLUSTER_NOT_CREATED = "ClusterNotCreated"  #: the RayJob does not exist yet
    CLUSTER_STARTING = "ClusterStarting"  #: the Ray cluster's pods are starting
    CLUSTER_READY = "ClusterReady"  #: the Ray cluster is ready (from the RayJob)
    ALL_PODS_READY = "AllPodsReady"  #: KubeRay saw every pod of the cluster running and ready
    CLUSTER_SUSPENDED = "ClusterSuspended"  #: the Ray cluster is deleted while the job is suspended
    REPLICA_FAILURE = "ReplicaFailure"  #: KubeRay cannot create or delete a pod (quota, admission)
    JOB_FINISHED = "JobFinished"  #: the job finished

    # Why a pod of the Ray cluster does not start (status.reason while Starting).
    POD_UNSCHEDULABLE = "PodUnschedulable"  #: no node can take a pod (GPUs, selectors, taints)
    IMAGE_PULL_FAILED = "ImagePullFailed"  #: an image cannot be pulled
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"  #: a missing Secret or ConfigMap key, a bad volume
    CONTAINER_CRASH_LOOPING = "ContainerCrashLooping"  #: a container keeps restarting

    # The launcher's failures, from its exit code (flashrl_jobs.contract).
    LAUNCHER_USAGE = "LauncherUsage"  #: the launcher was started with bad arguments
    INVALID_CONFIG = "InvalidConfig"  #: verl's config did not compose or failed verl's checks
    RAY_UNREACHABLE = "RayUnreachable"  #: the launcher could not reach Ray
    GPU_WAIT_TIMEOUT = "GPUWaitTimeout"  #: not every GPU joined Ray before the deadline
    TRAINER_FAILED = "TrainerFailed"  #: verl exited non-zero
    STOPPED_EARLY = "StoppedEarly"  #: verl exited 0 before the last step
    CHECKPOINT_UNWRITABLE = "CheckpointUnwritable"  #: the checkpoint directory cannot be written

    # The operator's retry policy (flashrl_operator.job.retry_policy).
    NO_PROGRESS = "NoProgress"  #: attempts from the same checkpoint keep failing without saving a newer one
    RAY_JOB_DELETED = "RayJobDeleted"  #: the RayJob of a running attempt was deleted: a failed attempt

    # The rollout/trainer mismatch guard (RolloutMismatch; flashrl_api.guard).
    MISMATCH_DRIFT = "MismatchDrift"  #: a mismatch metric stayed out of spec.correction.guard's bounds
    MISMATCH_WITHIN_BOUNDS = "MismatchWithinBounds"  #: every guarded mismatch metric is within bounds
    FELL_BACK_TO_BF16 = "FellBackToBF16"  #: the guard ended an FP8 attempt; the next one runs BF16 rollout

    # The phase conditions when they do not hold.
    JOB_RUNNING = "JobRunning"  #: Running=True
    NOT_RUNNING = "NotRunning"  #: Running=False before the job ran
    JOB_SUCCEEDED = "JobSucceeded"  #: Succeeded=True
    NOT_SUCCEEDED = "NotSucceeded"  #: Succeeded=False
    NOT_FAILED = "NotFailed"  #: Failed=False
    NOT_SUSPENDED = "NotSuspended"  #: Suspended=False


class Severity(StrEnum):
    """Who has to act on a launcher failure."""

    #: A bug: the operator rendered bad launcher arguments, or the operator and the image disagree.
    BUG = "bug"
    #: The user: the spec, its data or its volume must change before the job can pass.
    USER = "user"
    #: The cluster or the training run: a new attempt may pass.
    TRANSIENT = "transient"


@dataclass(frozen=True)
class LauncherExit:
    """One way ``flashrl-launch`` fails: its exit code, the reason the FlashRLJob shows, whether the
    operator retries it, its severity, and when it happens (the docs' text)."""

    #: The launcher's exit code; ``None`` for verl's own code, which the launcher passes through.
    exit_code: int | None
    reason: Reason
    retryable: bool
    severity: Severity
    when: str


#: Every launcher failure, one row each. A new one is a row here plus the ``LaunchError`` that raises it.
LAUNCHER_FAILURES: Final[tuple[LauncherExit, ...]] = (
    LauncherExit(64, Reason.LAUNCHER_USAGE, False, Severity.BUG, "bad launcher arguments (a rendering bug)"),
    LauncherExit(
        65,
        Reason.INVALID_CONFIG,
        False,
        Severity.USER,
        "verl refused an override, its config did not compose, or the operator and the image disagree",
    ),
    LauncherExit(69, Reason.RAY_UNREACHABLE, True, Severity.TRANSIENT, "the Ray head did not answer"),
    LauncherExit(
        70, Reason.STOPPED_EARLY, False, Severity.USER, "verl exited 0 before the last step (not a success)"
    ),
    LauncherExit(
        73,
        Reason.CHECKPOINT_UNWRITABLE,
        False,
        Severity.USER,
        "the checkpoint directory cannot be written (a read-only claim, a full volume)",
    ),
    LauncherExit(
        75, Reason.GPU_WAIT_TIMEOUT, True, Severity.TRANSIENT, "not every GPU joined Ray before the deadline"
    ),
    LauncherExit(
        76,
        Reason.STAGING_FAILED,
        False,
        Severity.USER,
        "`flashrl-launch stage` could not stage a source (the staging Job; its retries are its own)",
    ),
    LauncherExit(
        None, Reason.TRAINER_FAILED, True, Severity.TRANSIENT, "verl exited non-zero (NCCL, OOM, a lost node)"
    ),
)


def exit_codes(rows: Iterable[LauncherExit]) -> dict[Reason, int]:
    """The launcher's exit code per reason (verl's own passed-through code has none)."""
    codes: dict[Reason, int] = {}
    for row in rows:
        if row.exit_code is None:
            continue
        if row.exit_code in codes.values() or row.reason in codes:
            raise ValueError(f"{row.reason} or exit code {row.exit_code} has two rows")
        codes[row.reason] = row.exit_code
    return codes


def reasons_by_exit_code(rows: Iterable[LauncherExit]) -> dict[int, Reason]:
    """The reason per launcher exit code."""
    return {code: reason for reason, code in exit_codes(rows).items()}


def not_retryable(rows: Iterable[LauncherExit]) -> frozenset[Reason]:
    """The launcher failures a new attempt cannot fix."""
    return frozenset(row.reason for row in rows if not row.retryable)


#: Reasons that make the job's failure one the user can fix by editing the spec: not final.
RECOVERABLE_FAILURES: Final[frozenset[Reason]] = frozenset(
    {Reason.INVALID_SPEC, Reason.CHILD_REJECTED, Reason.POLICY_VIOLATION}
)

#: Reasons that explain, while the job is Starting, why its pods do not start (shown in status.reason).
POD_PROBLEMS: Final[frozenset[Reason]] = frozenset(
    {
        Reason.POD_UNSCHEDULABLE,
        Reason.IMAGE_PULL_FAILED,
        Reason.CONTAINER_CONFIG_ERROR,
        Reason.CONTAINER_CRASH_LOOPING,
    }
)

#: Reasons announced as a Warning Event when a condition turns to them (besides every Failed phase).
WARNING_REASONS: Final[frozenset[Reason]] = frozenset(
    {
        Reason.IMMUTABLE_FIELD_CHANGED,
        Reason.CHILD_CONFLICT,
        Reason.REPLICA_FAILURE,
        Reason.MISMATCH_DRIFT,
        Reason.WAITING_FOR_GPUS,
        Reason.FELL_BACK_TO_BF16,
        *POD_PROBLEMS,
    }
)


def _reason_description(rows: Iterable[LauncherExit] = LAUNCHER_FAILURES) -> str:
    ours = ", ".join(Reason)
    codes: Mapping[Reason, int] = exit_codes(rows)
    launcher = ", ".join(f"{code} {reason}" for reason, code in codes.items())
    return (
        "Why the job failed, or (while Starting) what keeps its Ray pods from starting, or (while Pending) "
        f"{Reason.QUEUED}: Kueue has not admitted it (it holds no GPU). Either KubeRay's "
        "own reason copied verbatim (AppFailed, DeadlineExceeded, PreRunningDeadlineExceeded, "
        f"SubmissionFailed, ...) or one of the project's: {ours}. The launcher's exit codes: {launcher}; "
        f"verl's own code is {Reason.TRAINER_FAILED}."
    )


class Condition(ApiModel):
    """A Kubernetes-style condition (metav1.Condition without observedGeneration per condition)."""

    type: str = Field(min_length=1, max_length=316, description=f"One of {', '.join(ConditionType)}.")

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

    percent: int | None = Field(default=None, ge=0, le=100)
    """Whole percent of totalSteps completed."""

    estimated_remaining_seconds: int | None = Field(default=None, ge=0)
    """Seconds until the last step at the recent pace (mean of the last 10 steps' ``timing_s/step``)."""


class MetricValue(ApiModel):
    """The newest value of one verl metric (the shape of Kubeflow Trainer's ``trainerStatus.metrics``)."""

    name: str = Field(min_length=1, max_length=MAX_METRIC_NAME, pattern=METRIC_NAME_PATTERN)
    """verl's name for it, e.g. ``rollout_corr/kl`` or ``val-core/aime-2024/acc/mean@1``."""

    value: float
    """Its newest value (verl's NaN values are never reported)."""

    step: int = Field(ge=0, le=MAX_STEP)
    """The training step it was logged at (0: the validation before training; at most
    spec.training.totalSteps' own maximum)."""


class GuardStreak(ApiModel):
    """A mismatch metric out of spec.correction.guard's bounds since ``since``."""

    metric: str = Field(min_length=1, max_length=256)
    """verl's name of the metric, e.g. rollout_corr/kl."""

    since: int = Field(ge=0)
    """First step seen out of bounds."""

    step: int = Field(ge=0)
    """Newest step seen out of bounds."""

    value: float
    """Its value at that step."""


class StagingProgress(ApiModel):
    """Download progress reported by the staging Job (``flashrl-launch stage``)."""

    files: int = Field(default=0, ge=0)
    """Files downloaded and verified (or found staged)."""

    files_total: int = Field(default=0, ge=0)
    """Files to stage."""

    bytes: int = Field(default=0, ge=0)
    """Bytes of those files."""

    bytes_total: int = Field(default=0, ge=0)
    """Bytes to stage."""

    update_time: str | None = None
    """When it was last reported (RFC 3339)."""


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


class PhaseSeconds(ApiModel):
    """Wall-clock and GPU-seconds one phase took (docs/observability.md defines each phase)."""

    phase: str = Field(min_length=1, max_length=64, description=f"One of {', '.join(GoodputPhase)}.")

    seconds: float = Field(default=0.0, ge=0)
    """Wall-clock seconds."""

    gpu_seconds: float = Field(default=0.0, ge=0, alias="gpuSeconds")
    """Seconds × the GPUs the attempt held (0 for the phases that hold none: staging, queued, backoff)."""


class PoolGoodput(ApiModel):
    """One GPU pool's share of the job's GPU-seconds (separate-async: the trainer's and the rollout's)."""

    name: Literal["trainer", "rollout"]
    """trainer (spec.resources) or rollout (spec.rollout.pool)."""

    gpus: int = Field(ge=0)
    """GPUs the pool holds (nodes × gpusPerNode)."""

    held_gpu_seconds: float = Field(default=0.0, ge=0, alias="heldGPUSeconds")
    """The pool's GPUs × the seconds the job held GPUs."""

    training_gpu_seconds: float = Field(default=0.0, ge=0, alias="trainingGPUSeconds")
    """The pool's share of trainingGPUSeconds."""

    waiting_for: Literal["samples", "weights"] = Field(alias="waitingFor")
    """What the pool waits for: the trainer for the rollout pool's samples (verl timing_s/gen), the
    rollout pool for the trainer's weights (verl timing_s/update_weights)."""

    waiting_gpu_seconds: float = Field(default=0.0, ge=0, alias="waitingGPUSeconds")
    """The pool's GPU-seconds spent waiting for the other pool."""


#: Attempts kept in ``status.attempts`` (the operator drops the oldest beyond it).
MAX_ATTEMPTS: Final = 10


class PrecisionGoodput(ApiModel):
    """The attempts that ran one rollout precision: their GPU-seconds and steps."""

    precision: str = Field(min_length=1, max_length=64)
    """The weights' precision, with the KV cache's when not the engine's default (blockwise-fp8,
    bf16/kv-bf16, blockwise-fp8/kv-fp8-e4m3)."""

    attempts: list[int] = Field(default_factory=list, max_length=MAX_ATTEMPTS)
    """The attempts that ran it."""

    held_gpu_seconds: float = Field(default=0.0, ge=0, alias="heldGPUSeconds")
    """GPU-seconds those attempts held."""

    training_gpu_seconds: float = Field(default=0.0, ge=0, alias="trainingGPUSeconds")
    """GPU-seconds of their kept steps."""

    steps: int = Field(default=0, ge=0)
    """Training steps their launchers saw complete."""


class Goodput(ApiModel):
    """Where the job's GPU-seconds went, over all its attempts (written by the operator)."""

    held_gpu_seconds: float = Field(default=0.0, ge=0, alias="heldGPUSeconds")
    """GPU-seconds from each attempt's RayJob creation (or admission by Kueue) to its Ray cluster's
    deletion."""

    training_gpu_seconds: float = Field(default=0.0, ge=0, alias="trainingGPUSeconds")
    """GPU-seconds of the steps that were kept: generation of the kept samples, weight sync, log-prob
    and reference passes, actor update, reward and the rest of the step (not checkpoints, validation,
    discarded samples or lost steps)."""

    productive_fraction: float | None = Field(default=None, ge=0, le=1)
    """trainingGPUSeconds / heldGPUSeconds."""

    by_phase: list[PhaseSeconds] = Field(default_factory=list, max_length=MAX_PHASES)
    """Each phase with time in it, in the order a job goes through them."""

    pools: list[PoolGoodput] = Field(default_factory=list, max_length=2)
    """separate-async: each GPU pool's share, the trainer's first, with the GPU-seconds it waited for the
    other pool (a trainer starved of samples, a rollout pool waiting for weights). Empty for one pool."""

    by_precision: list[PrecisionGoodput] = Field(default_factory=list, max_length=MAX_ATTEMPTS)
    """Each rollout precision the attempts ran, in the order first run: after the guard's
    FallbackToBF16, the FP8 stretch and the BF16 one. Empty until an attempt records its precision."""


class LauncherPhases(ApiModel):
    """The launcher's split of its own wall-clock in the current attempt (written by the launcher after
    each step; the operator folds it into status.goodput)."""

    attempt: int | None = Field(default=None, ge=1)
    """The attempt whose launcher reported it."""

    launch_time: str
    """When the launcher started (RFC 3339, fractional seconds)."""

    report_time: str
    """The end of the split (RFC 3339, fractional seconds)."""

    steps: int = Field(default=0, ge=0)
    """Training steps this launcher saw complete."""

    phases: list[PhaseSeconds] = Field(default_factory=list, max_length=MAX_PHASES)
    """Seconds per phase from launchTime to reportTime (they add up to the difference)."""


class ValidationProblems(ApiModel):
    """One validation's per-problem counts, as the launcher summarised verl's dump of it; the operator
    copies them into the job's ``<job>-metrics`` ConfigMap, where ``flashrl report --experiment`` reads
    them for its paired verdict."""

    step: int = Field(ge=0)
    """The training step the validation ran at (0: before training)."""

    attempt: int | None = Field(default=None, ge=1)
    """The attempt whose launcher summarised it (a later attempt's summary of a step wins)."""

    measure: str = Field(default="", max_length=16)
    """Which field a sample's correctness came from: ``acc``, else ``score`` (> 0 is correct)."""

    problems: dict[str, list[int]] = Field(default_factory=dict, max_length=MAX_STATUS_PROBLEMS)
    """Per problem id (the first 12 hex digits of the SHA-256 of its prompt): ``[samples, correct]``."""


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

    admit_time: str | None = None
    """When the operator first saw its RayJob not suspended (RFC 3339): Kueue admitted it, or at once
    without a queue. Its GPUs are held from here on."""

    release_time: str | None = None
    """When the operator saw its Ray cluster gone after it ended (RFC 3339): its GPUs were released."""

    gpus: int | None = Field(default=None, ge=1)
    """GPUs its Ray cluster held (resources.nodes × resources.gpusPerNode)."""

    launcher: LauncherPhases | None = None
    """The launcher's newest status.launcherPhases of this attempt, kept when it ended."""

    quantization: str | None = Field(default=None, max_length=32)
    """Its rollout weight precision (spec.rollout.quantization, or bf16 after the guard's
    FallbackToBF16)."""

    kv_cache: str | None = Field(default=None, max_length=32)
    """Its rollout KV-cache precision (spec.rollout.kvCache, or bf16 after FallbackToBF16)."""


class RolloutFallback(ApiModel):
    """spec.correction.guard.action FallbackToBF16, once it acted: why the FP8 attempt ended and where
    the BF16 one resumes."""

    attempt: int = Field(ge=1)
    """The first attempt with BF16 rollout (the one before it was ended)."""

    step: int = Field(ge=0)
    """The training step at which the guard tripped."""

    checkpoint_step: int = Field(default=0, ge=0)
    """The checkpoint the BF16 attempt resumes from (0: from the start)."""

    metric: str = Field(min_length=1, max_length=256)
    """verl's name of the metric out of bounds, e.g. rollout_corr/kl."""

    value: float
    """Its value at that step."""

    threshold: float
    """The bound it crossed (spec.correction.guard)."""

    from_quantization: str = Field(max_length=32)
    """The weight precision before (spec.rollout.quantization)."""

    from_kv_cache: str = Field(max_length=32)
    """The KV-cache precision before (spec.rollout.kvCache)."""

    time: str
    """When the operator ended the FP8 attempt (RFC 3339)."""


Writer = Literal["operator", "launcher"]


@dataclass(frozen=True)
class WrittenBy:
    """Who writes a status key, marked on its field of :class:`FlashRLJobStatus` (``Annotated``; the
    generated CRD does not see it).

    The operator writes its keys in one merge patch per reconcile, and only those
    (``flashrl_operator.job.status.mapping.OWNED_KEYS`` is derived from these marks), so a patch
    never clears what the launcher in the job's pods reported; the launcher PATCHes its own keys.
    Every field carries exactly one mark (``tests/unit/api/test_status_writers.py``): a new status
    field is one field here, written by whoever its mark names.
    """

    writer: Writer


OPERATOR: Final = WrittenBy("operator")
LAUNCHER: Final = WrittenBy("launcher")


# Each field is marked with who writes it (WrittenBy; the docstring below is the CRD's description).
class FlashRLJobStatus(ApiModel):
    """Observed state of a FlashRLJob, written by the operator."""

    phase: Annotated[Phase | None, OPERATOR] = None
    """Pending, Starting, Running, Succeeded, Failed or Suspended."""

    progress: Annotated[Progress | None, LAUNCHER] = None
    """Training progress."""

    staging: Annotated[StagingProgress | None, LAUNCHER] = None
    """Model and data download progress, while the staging Job runs."""

    conditions: Annotated[list[Condition], OPERATOR] = Field(
        default_factory=list, description=f"{', '.join(ConditionType)}."
    )

    observed_generation: Annotated[int | None, OPERATOR] = None
    """The metadata.generation this status describes."""

    ray_job_name: Annotated[str | None, OPERATOR] = None
    """The KubeRay RayJob that runs this job."""

    ray_cluster_name: Annotated[str | None, OPERATOR] = None
    """The RayCluster KubeRay created for it."""

    dashboard_url: Annotated[str | None, OPERATOR] = None
    """Ray dashboard address (reachable in-cluster or via kubectl port-forward)."""

    start_time: Annotated[str | None, OPERATOR] = None
    """When verl started running (RFC 3339)."""

    completion_time: Annotated[str | None, OPERATOR] = None
    """When the job finished (RFC 3339)."""

    reason: Annotated[str | None, OPERATOR] = Field(default=None, description=_reason_description())

    message: Annotated[str | None, OPERATOR] = None
    """Human-readable detail for the phase or failure."""

    checkpoint: Annotated[CheckpointRecord | None, LAUNCHER] = None
    """The newest checkpoint, reported by the launcher after each step (a retry resumes from it)."""

    metrics: Annotated[list[MetricValue], LAUNCHER] = Field(
        default_factory=list, max_length=MAX_STATUS_METRICS
    )
    """Newest values of a curated set of verl metrics, reported by the launcher after each step:
    validation scores (``val-core/.../mean@N``), response length, throughput, step and phase times,
    the rollout/trainer mismatch (``rollout_corr/*``, ``training/rollout_probs_diff_mean``), and the
    rest of what the job's per-step history keeps (training score, entropy, tokens).
    Every metric is on the job's Prometheus endpoint (docs/observability.md)."""

    mismatch_guard_step: Annotated[int | None, OPERATOR] = Field(default=None, ge=0)
    """The newest step of status.metrics the mismatch guard has judged."""

    mismatch_guard: Annotated[list[GuardStreak] | None, OPERATOR] = Field(default=None, max_length=8)
    """Metrics of spec.correction.guard currently out of bounds, and since which step (the operator
    keeps them here so a restart does not forget a streak)."""

    validation_score: Annotated[MetricValue | None, LAUNCHER] = None
    """The headline validation score: the first ``val-core/<data source>/<variable>/mean@N``."""

    attempt: Annotated[int | None, OPERATOR] = Field(default=None, ge=1)
    """The current attempt (Ray cluster), from 1; each retry is a new one."""

    attempts: Annotated[list[AttemptRecord] | None, OPERATOR] = Field(default=None, max_length=MAX_ATTEMPTS)
    """The last attempts, oldest first; the current one last."""

    lost_steps: Annotated[int | None, OPERATOR] = Field(default=None, ge=0)
    """Training steps all failures so far cost: completed after the newest checkpoint, then redone."""

    next_attempt_time: Annotated[str | None, OPERATOR] = None
    """While a retry waits out its backoff: when the next attempt's Ray cluster will be created."""

    launcher_phases: Annotated[LauncherPhases | None, LAUNCHER] = None
    """The current attempt's launcher: its wall-clock split by phase (the operator reads it)."""

    validation_problems: Annotated[list[ValidationProblems] | None, LAUNCHER] = Field(
        default=None, max_length=STATUS_VALIDATIONS
    )
    """The newest validations' per-problem counts, reported by the launcher after each validation;
    the operator keeps every one in the job's ``<job>-metrics`` ConfigMap (docs/observability.md)."""

    goodput: Annotated[Goodput | None, OPERATOR] = None
    """Where the GPU-seconds went, by phase, over every attempt (docs/observability.md)."""

    quantization: Annotated[str | None, OPERATOR] = Field(default=None, max_length=32)
    """The rollout weight precision now in use: spec.rollout.quantization, or bf16 once the guard's
    FallbackToBF16 acted (the QUANTIZATION printer column)."""

    kv_cache: Annotated[str | None, OPERATOR] = Field(default=None, max_length=32)
    """The rollout KV-cache precision now in use: spec.rollout.kvCache, or bf16 after FallbackToBF16."""

    rollout_fallback: Annotated[RolloutFallback | None, OPERATOR] = None
    """Set once spec.correction.guard.action FallbackToBF16 ended an FP8 attempt: every later attempt
    runs BF16 rollout (the RolloutFallback condition says why)."""

    @classmethod
    def keys_written_by(cls, writer: Writer) -> tuple[str, ...]:
        """The keys (wire names, in field order) whose :class:`WrittenBy` mark names ``writer``."""
        return tuple(
            field.alias or name
            for name, field in cls.model_fields.items()
            if WrittenBy(writer) in field.metadata
        )
