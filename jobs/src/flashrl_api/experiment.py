"""The FlashRLExperiment API: several FlashRLJobs that differ in one deliberate way, as one object.

An experiment is a FlashRLJob spec (``spec.template``) and a list of variants, each a name and a
partial spec merged over the template (JSON merge patch, RFC 7386: mappings merge key by key, lists
and scalars replace). The operator creates one FlashRLJob per variant, ``<experiment>-<variant>``,
owned by the experiment. Without ``spec.variants`` the experiment is the origin recipe's comparison:
blockwise-FP8, per-channel-FP8 (where the trainer image has SGLang's ``flash_rl`` loader) and BF16
rollout.

A comparison means something only when the runs differ in what is being compared. So the fields a
variant may change are split in two (:data:`FREE_FIELDS`, :data:`SETUP_FIELDS`): the rollout's
precision and engine settings, the correction, the training mode (with its async settings and
rollout pool: how generation and training share time and GPUs, which the report weighs in time per
step, time to a validation score and GPU-hours), images, storage, scheduling and pod placement may
differ freely; the model, the data, the algorithm and its hyperparameters, the sampling, the GPU
count and type, checkpointing (it is part of the measured step time), dry runs and raw verl overrides
change what the comparison measures and need ``allowSetupChanges: true`` on that variant. Every spec
field is in exactly one of the two lists (a test walks the models), so a new field forces a decision.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from flashrl_api._base import ApiModel
from flashrl_api.cel import cel_string
from flashrl_api.exported_metrics import MAX_STATUS_METRICS
from flashrl_api.k8s_names import DNS_LABEL_PATTERN
from flashrl_api.manifest import (
    API_VERSION,
    KIND,
    MAX_NAME_LENGTH,
    NAME_MESSAGE,
    NAME_PATTERN,
    ApiObject,
    FlashRLJob,
    Problem,
    SpecError,
    header_problems,
    model_problem,
    moved_suggestion,
    namespace_problems,
    spec_problems,
    unknown_field_problems,
    without_nulls,
)
from flashrl_api.pins import default_trainer_image
from flashrl_api.spec import FlashRLJobSpec
from flashrl_api.status import Condition, Phase, Reason

EXPERIMENT_KIND: Final = "FlashRLExperiment"
EXPERIMENT_PLURAL: Final = "flashrlexperiments"
EXPERIMENT_SINGULAR: Final = "flashrlexperiment"
EXPERIMENT_SHORT_NAMES: Final = ("frx",)

#: Labels the operator puts on each variant's FlashRLJob.
EXPERIMENT_LABEL: Final = "flashrl.dev/experiment"
VARIANT_LABEL: Final = "flashrl.dev/variant"
#: The replica index (0, 1, ...) of a variant's FlashRLJob, when the experiment has several replicas.
REPLICA_LABEL: Final = "flashrl.dev/replica"

#: At most this many replicas: one digit in the job name's ``-r<k>``.
MAX_REPLICAS: Final = 8
#: Characters ``-r<k>`` adds to a job name when the experiment has more than one replica.
REPLICA_SUFFIX_LENGTH: Final = 3

MAX_VARIANTS: Final = 8
#: Variant names are short: the job is ``<experiment>-<variant>``, a DNS-1035 label of at most 63.
MAX_VARIANT_NAME: Final = 24

#: Spec paths (camelCase, relative to the job spec) a variant may change without changing what the
#: comparison means: the treatment (rollout precision and engine settings, the correction, the training
#: mode) and operations (images, volumes, lifecycle, queueing, pod placement and sizes, credentials,
#: tracking). The mode is a treatment with its settings and its rollout pool: "separate-async + FP8"
#: against "sync + FP8" is the comparison issue 35 asks for; the pool's extra GPUs are no hidden
#: difference, since ``flashrl report`` sets time per step and to a score beside each run's GPU-hours.
FREE_FIELDS: Final[tuple[str, ...]] = (
    "rollout.quantization",
    "rollout.tensorParallelSize",
    "rollout.gpuMemoryUtilization",
    "correction",
    "training.mode",
    "training.async",
    "rollout.pool",
    "images",
    "storage",
    "lifecycle",
    "scheduling",
    "secretRefs",
    "huggingFace",
    "env",
    "resources.cpu",
    "resources.memory",
    "resources.sharedMemory",
    "resources.rdma",
    "resources.nodeSelector",
    "resources.tolerations",
    "resources.head",
    "training.projectName",
    "training.experimentName",
    "training.loggers",
)

#: Spec paths whose change makes the variants differ in more than the treatment: what is trained, on
#: what, how, on which hardware and for how long. A variant setting one needs ``allowSetupChanges``.
SETUP_FIELDS: Final[dict[str, str]] = {
    "model": "the model",
    "data": "the data",
    "training.recipe": "the algorithm",
    "training.promptBatchSize": "the batch geometry",
    "training.generationBatchSize": "the batch geometry",
    "training.miniBatchSize": "the batch geometry",
    "training.maxPromptLength": "the sequence lengths",
    "training.maxResponseLength": "the sequence lengths",
    "training.totalSteps": "the number of steps",
    "training.learningRate": "the optimiser",
    "training.warmupSteps": "the optimiser",
    "training.weightDecay": "the optimiser",
    "training.gradClip": "the optimiser",
    "training.clipRatioLow": "the algorithm",
    "training.clipRatioHigh": "the algorithm",
    "training.clipRatioC": "the algorithm",
    "training.ulyssesSequenceParallelSize": "the trainer's parallelism",
    "training.overlongBuffer": "the reward",
    "training.dynamicSampling": "the sampling of training prompts",
    "training.validateBeforeTrain": "the validation schedule",
    "training.testFrequency": "the validation schedule",
    "training.seed": "the seed (data order and sampling; replicas vary it, paired across variants)",
    "validation": "the validation sampling",
    "rollout.engine": "the rollout engine",
    "rollout.samplesPerPrompt": "the sampling",
    "rollout.temperature": "the sampling",
    "rollout.topP": "the sampling",
    "rollout.topK": "the sampling",
    "resources.nodes": "the GPU count",
    "resources.gpusPerNode": "the GPU count",
    "resources.gpuProduct": "the GPU type",
    "checkpoint": "the checkpoint schedule (its saves are part of the measured step time)",
    "dryRun": "whether it trains at all",
    "overrides": "verl's configuration directly (overrides can change anything)",
}


#: A variant's FlashRLJob's phase (``Staging`` included), or ``Waiting`` before that job is created.
class ExperimentReason(StrEnum):
    """Every reason the experiment controller writes in a FlashRLExperiment's status and conditions (a
    variant's ``reason`` is its FlashRLJob's, or ``JobDeleted``). The comment is its documentation."""

    ACCEPTED = "Accepted"  #: Accepted=True: the spec is valid and names its variants
    INVALID_SPEC = "InvalidSpec"  #: the spec breaks a rule; the message lists each problem
    WAITING_FOR_VARIANTS = "WaitingForVariants"  #: no variant is running yet
    VARIANTS_RUNNING = "VariantsRunning"  #: at least one variant runs or finished, none failed
    ALL_VARIANTS_SUCCEEDED = "AllVariantsSucceeded"  #: every variant succeeded
    #: At least one variant failed; the message names them. Also the Warning Event when one fails.
    VARIANT_FAILED = "VariantFailed"
    #: A variant's FlashRLJob was deleted after the experiment created it (it is not created again).
    JOB_DELETED = "JobDeleted"
    #: A FlashRLJob with a variant's name exists and is not this experiment's (another experiment's,
    #: or a user's): it is left alone, never adopted, and the variant waits.
    JOB_NAME_TAKEN = "JobNameTaken"
    JOB_REJECTED = "JobRejected"  #: the API server refused a variant's FlashRLJob
    #: A variant waits for a running one to finish (``spec.parallelism``); its message names them.
    WAITING_FOR_SLOT = "WaitingForSlot"
    #: A variant waits for a finished variant's GPU workers to be deleted (its GPUs released): created
    #: earlier, it could not be scheduled and its startup deadline would count a queue. The same word
    #: as a FlashRLJob's own wait for GPUs other pods hold (one vocabulary).
    WAITING_FOR_GPUS = Reason.WAITING_FOR_GPUS.value
    # Events on the experiment (each on a variant's transition; the message names the variant).
    VARIANT_STARTED = "VariantStarted"  #: the variant's FlashRLJob was created
    VARIANT_WAITING = "VariantWaiting"  #: the variant waits for a slot, or now for GPUs
    VARIANT_FINISHED = "VariantFinished"  #: the variant's FlashRLJob Succeeded
    NOT_SUCCEEDED = "NotSucceeded"  #: Succeeded=False
    NOT_FAILED = "NotFailed"  #: Failed=False


VariantPhase = Literal["Waiting", Phase]
ExperimentPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
EXPERIMENT_PHASES: Final[tuple[ExperimentPhase, ...]] = ("Pending", "Running", "Succeeded", "Failed")


class VariantBase(ApiModel):
    """A variant's name and flag (its partial spec is :class:`Variant`'s ``spec``)."""

    name: str = Field(min_length=1, max_length=MAX_VARIANT_NAME, pattern=DNS_LABEL_PATTERN)
    """Variant name; its FlashRLJob is <experiment>-<name>."""

    allow_setup_changes: bool = False
    """Let this variant change what the comparison measures (model, data, algorithm, sampling, GPUs,
    steps, checkpointing, dry run or verl overrides); without it such a change is refused."""


class Variant(VariantBase):
    """One run of the experiment: a partial FlashRLJob spec merged over the template."""

    spec: dict[str, Any] = Field(default_factory=dict)
    """The fields this variant changes, as in a FlashRLJob spec (camelCase), merged over spec.template:
    mappings merge key by key, lists and values replace."""


class FlashRLExperimentSpec(ApiModel):
    """Desired state of a FlashRLExperiment: the runs to compare."""

    template: FlashRLJobSpec = Field(default_factory=FlashRLJobSpec)
    """The FlashRLJob spec every variant starts from (same seed, data and steps)."""

    variants: list[Variant] | None = Field(default=None, min_length=2, max_length=MAX_VARIANTS)
    """The runs, each a name and the fields it changes. Omitted: the origin's precisions,
    blockwise-fp8, channel-fp8 (when images.trainer is the pinned trainer image, whose SGLang has the
    flash_rl loader) and bf16."""

    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    """Runs of each variant. Replica k of every variant has training.seed = the template's seed + k (data
    order, shuffling and rollout sampling), so variants are compared replica by replica and the spread
    across replicas is seed-to-seed noise, shown beside the precision effect by flashrl report. Above 1,
    each job is <experiment>-<variant>-r<k>."""

    parallelism: int | None = Field(default=None, ge=1, le=MAX_VARIANTS * MAX_REPLICAS)
    """Variants running at once; omitted: all at once (with a Kueue queue in the template, all are
    queued together and Kueue admits them as quota allows). 1 runs them one after another on the same
    pool, so they share the hardware."""


class VariantMetric(ApiModel):
    """One of a variant's latest metrics, as its FlashRLJob reports it (verl's name)."""

    name: str = Field(min_length=1, max_length=256)
    """verl's metric name, e.g. val-core/aime-2024/acc/mean@1 or rollout_corr/kl."""

    value: float
    """Its latest value."""

    step: int | None = Field(default=None, ge=0)
    """The training step it was logged at."""


class VariantStatus(ApiModel):
    """One variant as the operator last saw its FlashRLJob."""

    name: str
    """Variant name."""

    replica: int = Field(default=0, ge=0)
    """Which replica of the variant (0 to spec.replicas - 1; 0 with one replica). With name, the key of
    this list: one entry per FlashRLJob."""

    job_name: str | None = None
    """Its FlashRLJob."""

    phase: VariantPhase = "Waiting"
    """Waiting (not created yet: parallelism), then the job's phase."""

    step: int | None = Field(default=None, ge=0)
    """Last completed training step."""

    total_steps: int | None = Field(default=None, ge=0)
    """Steps the job will run."""

    reason: str | None = None
    """The job's reason, when it failed; ``WaitingForSlot`` or ``WaitingForGPUs`` while it waits."""

    message: str | None = Field(default=None, max_length=1024)
    """What a waiting variant waits for (which variants run, or whose GPUs are not released yet)."""

    metrics: list[VariantMetric] = Field(default_factory=list, max_length=MAX_STATUS_METRICS)
    """The job's latest metrics (validation score, throughput, mismatch ...), copied from its status."""

    held_gpu_hours: float | None = Field(default=None, ge=0, alias="heldGPUHours")
    """GPU-hours its FlashRLJob held so far (status.goodput.heldGPUSeconds / 3600)."""

    productive_fraction: float | None = Field(default=None, ge=0, le=1)
    """Share of them spent in the training steps that were kept (status.goodput.productiveFraction)."""

    end_to_end_speedup: float | None = Field(default=None, ge=0)
    """Held GPU-seconds per completed step of the baseline (the first bf16 variant) over this variant's:
    weight sync, start-up, restarts and every other phase counted."""

    generation_speedup: float | None = Field(default=None, ge=0)
    """The same ratio over generation alone."""

    speedup_phase: str | None = Field(default=None, max_length=64)
    """The goodput phase that separates the two speed-ups most (e.g. weight_sync)."""


class FlashRLExperimentStatus(ApiModel):
    """Observed state of a FlashRLExperiment, written by the operator."""

    phase: ExperimentPhase | None = None
    """Pending, Running, Succeeded (every variant succeeded) or Failed (every variant finished, at least
    one failed; or the spec was refused)."""

    finished: str | None = None
    """Variants finished out of all, e.g. 1/3."""

    variants: list[VariantStatus] = Field(default_factory=list)
    """Per-variant phase, step and latest metrics."""

    reason: str | None = Field(
        default=None, description=f"Why the experiment failed or waits: {', '.join(ExperimentReason)}."
    )

    message: str | None = None
    """Details for a human."""

    conditions: list[Condition] = Field(default_factory=list)
    """Accepted, Succeeded, Failed."""

    observed_generation: int | None = None
    """The metadata.generation this status describes."""


class FlashRLExperiment(ApiObject):
    """A whole FlashRLExperiment object as stored by Kubernetes."""

    spec: FlashRLExperimentSpec
    status: FlashRLExperimentStatus | None = None


# --- variants ------------------------------------------------------------------------------------


def supports_channel_fp8(trainer_image: str) -> bool:
    """Whether the trainer image is known to run per-channel FP8 rollout.

    Per-channel FP8 needs SGLang's ``flash_rl`` loader (SGLang 0.5.6.post2 and later); upstream verl
    has only the blockwise path. The pinned trainer image carries SGLang 0.5.12 (images/pins.yaml); any
    other image is unknown, so the default variants leave channel-fp8 out rather than fail mid-run.
    """
    return trainer_image == default_trainer_image()


def default_variants(template: FlashRLJobSpec) -> list[Variant]:
    """The origin experiment's precisions, channel-fp8 only where the trainer image supports it."""
    precisions = ["blockwise-fp8", "bf16"]
    if supports_channel_fp8(template.images.trainer):
        precisions.insert(1, "channel-fp8")
    return [Variant(name=p, spec={"rollout": {"quantization": p}}) for p in precisions]


def variants_of(spec: FlashRLExperimentSpec) -> list[Variant]:
    """The experiment's variants: its own, or the defaults."""
    return list(spec.variants) if spec.variants is not None else default_variants(spec.template)


def merge_patch(target: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386), as ``kubectl patch --type merge`` applies it.

    Hand-written: it is a few lines, and the API package depends on pydantic and PyYAML only (it runs
    in the trainer image). The one departure: a ``null`` in the patch is ignored rather than deleting
    the key, because the API server prunes nulls from a structural schema before the operator sees
    the object, and ``flashrl validate`` must agree with what the operator will do.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            continue
        out[key] = merge_patch(out.get(key), value)
    return out


def set_paths(partial: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The leaf paths a partial spec sets (camelCase, dotted); a list or scalar is one leaf."""
    paths: list[str] = []
    for key, value in partial.items():
        if value is None:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            paths.extend(set_paths(value, path + "."))
        else:
            paths.append(path)
    return paths


def _covering(path: str, table: Sequence[str]) -> str | None:
    """The entry of ``table`` that is ``path`` or one of its ancestors or descendants."""
    for entry in table:
        if path == entry or path.startswith(entry + ".") or entry.startswith(path + "."):
            return entry
    return None


def setup_changes(partial: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(path, what it changes)`` for each setup field a partial spec sets."""
    found: list[tuple[str, str]] = []
    for path in set_paths(partial):
        entry = _covering(path, tuple(SETUP_FIELDS))
        if entry is not None:
            found.append((path, SETUP_FIELDS[entry]))
    return found


def _setup_cel_term(path: str) -> str:
    parts = path.split(".")
    checks = [f"has(v.spec.{'.'.join(parts[: i + 1])})" for i in range(len(parts))]
    return "(" + " && ".join(checks) + ")" if len(checks) > 1 else checks[0]


#: CEL on ``spec``: no variant sets a setup field unless it allows setup changes.
SETUP_CHANGES_CEL: Final = (
    "!has(self.variants) || self.variants.all(v, v.allowSetupChanges || !("
    + " || ".join(_setup_cel_term(p) for p in SETUP_FIELDS)
    + "))"
)
SETUP_CHANGES_MESSAGE: Final = (
    "a variant may change the rollout precision and engine settings, the correction, images, storage, "
    "scheduling and placement; changing the model, data, algorithm, sampling, GPUs, steps, checkpoints, "
    "dryRun or overrides changes what the comparison measures and needs allowSetupChanges: true"
)


def setup_changes_allowed(spec: Mapping[str, Any]) -> bool:
    """The Python side of :data:`SETUP_CHANGES_CEL`, on the raw (wire) experiment spec."""
    variants = spec.get("variants") or []
    return all(
        not isinstance(v, Mapping)
        or v.get("allowSetupChanges") is True
        or not setup_changes(v.get("spec") or {})
        for v in variants
    )


def _child_name_fits_cel() -> str:
    longest_default = max(len(p) for p in ("blockwise-fp8", "channel-fp8", "bf16"))
    limit = MAX_NAME_LENGTH - 1
    suffix = f"(has(self.spec.replicas) && self.spec.replicas > 1 ? {REPLICA_SUFFIX_LENGTH} : 0)"
    return (
        "has(self.spec.variants) ? "
        f"self.spec.variants.all(v, size(self.metadata.name) + size(v.name) + {suffix} <= {limit}) : "
        f"size(self.metadata.name) + {longest_default} + {suffix} <= {limit}"
    )


@dataclass(frozen=True)
class ObjectRule:
    """A rule on the whole experiment object (CEL at the schema root, ``self`` is the object)."""

    name: str
    path: str
    cel: str
    message: str


#: Rules on the whole object: its name, and its variants' job names, are DNS-1035 labels of at most 63.
OBJECT_RULES: Final[tuple[ObjectRule, ...]] = (
    ObjectRule(
        "name-is-dns-1035-label",
        "metadata.name",
        f"self.metadata.name.size() <= {MAX_NAME_LENGTH} && "
        f"self.metadata.name.matches({cel_string(NAME_PATTERN)})",
        NAME_MESSAGE,
    ),
    ObjectRule(
        "variant-job-names-fit",
        "spec.variants",
        _child_name_fits_cel(),
        f"<experiment name>-<variant name> (and -r<k> with several replicas) names each variant's "
        f"FlashRLJob and must be at most {MAX_NAME_LENGTH} characters",
    ),
)

#: CEL on ``spec`` (``self`` is the experiment spec), each paired with :func:`setup_changes_allowed`.
SPEC_RULES: Final[tuple[tuple[str, str, str], ...]] = (
    ("setup-changes-need-the-flag", "variants", SETUP_CHANGES_CEL),
)


# --- children --------------------------------------------------------------------------------------


def job_name(experiment: str, variant: str, replica: int | None = None) -> str:
    """The FlashRLJob of one variant (of one replica of it, when the experiment has several)."""
    name = f"{experiment}-{variant}"
    return name if replica is None else f"{name}-r{replica}"


def replicas_of(spec: FlashRLExperimentSpec) -> list[int | None]:
    """The replica indices jobs are made for: ``[None]`` (no suffix, the seed as set) with one replica."""
    return [None] if spec.replicas == 1 else list(range(spec.replicas))


def run_label(variant: str, replica: int | None) -> str:
    """How ``flashrl report`` labels one run: the variant, ``<variant>#<k>`` for replica k."""
    return variant if replica is None else f"{variant}#{replica}"


def variant_spec(
    template: Mapping[str, Any], variant: Variant, experiment: str, replica: int | None = None
) -> dict[str, Any]:
    """One variant's whole job spec (wire form): the template, the variant merged over it, the tracker
    run name made unique (it also names the checkpoint directory, which must not be shared), and for
    replica k the seed + k (every variant's replica k gets the same seed: the runs pair up)."""
    merged: dict[str, Any] = merge_patch(template, variant.spec)
    training = dict(merged.get("training") or {})
    variant_training = (
        variant.spec.get("training") if isinstance(variant.spec.get("training"), Mapping) else {}
    )
    if "experimentName" not in (variant_training or {}):
        base = training.get("experimentName")
        training["experimentName"] = (
            f"{base}-{variant.name}" + ("" if replica is None else f"-r{replica}")
            if base
            else job_name(experiment, variant.name, replica)
        )
    elif replica is not None:
        training["experimentName"] = f"{training['experimentName']}-r{replica}"
    if replica is not None:
        seed = training.get("seed", 0)
        training["seed"] = (seed if isinstance(seed, int) else 0) + replica
    merged["training"] = training
    return merged


def _template_wire(experiment: FlashRLExperiment, raw_template: Mapping[str, Any] | None) -> dict[str, Any]:
    if raw_template is not None:
        return dict(raw_template)
    return experiment.spec.template.model_dump(
        mode="json", by_alias=True, exclude_unset=True, exclude_none=True
    )


def variant_jobs(
    experiment: FlashRLExperiment, raw_template: Mapping[str, Any] | None = None
) -> list[FlashRLJob]:
    """The FlashRLJob of every variant, in order: labelled, and owned by the experiment when it has a
    uid (deleting the experiment deletes them). Pure; the specs were validated by :func:`parse_experiment`."""
    template = _template_wire(experiment, raw_template)
    jobs: list[FlashRLJob] = []
    for variant, replica in experiment_runs(experiment.spec):
        name = job_name(experiment.name, variant.name, replica)
        labels = {
            EXPERIMENT_LABEL: experiment.name,
            VARIANT_LABEL: variant.name,
            "app.kubernetes.io/part-of": "flashrl",
        }
        if replica is not None:
            labels[REPLICA_LABEL] = str(replica)
        metadata: dict[str, Any] = {"name": name, "namespace": experiment.namespace, "labels": labels}
        if experiment.uid:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": API_VERSION,
                    "kind": EXPERIMENT_KIND,
                    "name": experiment.name,
                    "uid": experiment.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        # Nulls are absent, as the API server prunes them from a FlashRLJob's spec before defaulting.
        wire = without_nulls(variant_spec(template, variant, experiment.name, replica))
        spec = FlashRLJobSpec.model_validate(wire, strict=True)
        jobs.append(FlashRLJob(api_version=API_VERSION, kind=KIND, metadata=metadata, spec=spec))
    return jobs


def experiment_runs(spec: FlashRLExperimentSpec) -> list[tuple[Variant, int | None]]:
    """Every run the experiment makes, in job order: each variant's replicas together."""
    return [(variant, replica) for variant in variants_of(spec) for replica in replicas_of(spec)]


# --- parsing ---------------------------------------------------------------------------------------


def _sets(partial: Mapping[str, Any], rest: str) -> bool:
    return any(
        rest == path or rest.startswith((path + ".", path + "[")) or path.startswith(rest + ".")
        for path in set_paths(partial)
    )


def variant_field_path(
    index: int, spec_path: str, partial: Mapping[str, Any], template: Mapping[str, Any] | None = None
) -> str:
    """Where a problem of a merged spec belongs: the variant's field when it set it, the template's when
    the template set it (or no ``template`` is given), else the variant's: a field neither set is
    missing because of the variant (a variant switching to separate-async without ``rollout.pool``).

    ``spec`` itself (verl refused the configuration without naming a field) belongs to the overrides
    that reached it, the only free-form input: the variant's when it sets them, else the template's.
    """
    if spec_path == "spec":
        if _sets(partial, "overrides"):
            return f"spec.variants[{index}].spec.overrides"
        if template is not None and _sets(template, "overrides"):
            return "spec.template.overrides"
        return f"spec.variants[{index}].spec" if partial else "spec.template"
    rest = spec_path.removeprefix("spec.")
    if _sets(partial, rest) or (template is not None and not _sets(template, rest)):
        return f"spec.variants[{index}].spec.{rest}"
    return f"spec.template.{rest}"


def _comparable(spec: FlashRLJobSpec) -> dict[str, Any]:
    wire = spec.to_wire()
    wire.get("training", {}).pop("experimentName", None)
    return wire


def experiment_problems(
    raw: Mapping[str, Any],
) -> tuple[FlashRLExperiment | None, list[Problem]]:
    """Validate a whole FlashRLExperiment; every problem has its field path."""
    metadata, name, problems = header_problems(raw, EXPERIMENT_KIND)
    problems.extend(namespace_problems(metadata))
    problems.extend(unknown_field_problems(raw))
    raw_spec = raw.get("spec") if raw.get("spec") is not None else {}
    if not isinstance(raw_spec, Mapping):
        return None, [*problems, Problem("spec", f"must be a mapping, got {type(raw_spec).__name__}")]
    raw_template = raw_spec.get("template") if raw_spec.get("template") is not None else {}
    template, template_problems = spec_problems(raw_template, prefix="spec.template")
    problems.extend(template_problems)
    shell = {k: v for k, v in raw_spec.items() if k != "template"}
    try:
        parsed = FlashRLExperimentSpec.model_validate(
            {**shell, "template": template or FlashRLJobSpec()}, strict=True
        )
    except ValidationError as exc:
        problems.extend(
            model_problem(e, FlashRLExperimentSpec, "spec", f"{EXPERIMENT_SINGULAR}.spec")
            for e in exc.errors(include_url=False)
            if not (e["loc"] and e["loc"][0] == "template")
        )
        return None, problems
    if template is None:
        return None, problems
    variants = variants_of(parsed)
    template_wire = dict(raw_template) if isinstance(raw_template, Mapping) else {}
    template_paths = {p.path for p in template_problems}
    seen_names: dict[str, int] = {}
    merged_specs: list[tuple[int, FlashRLJobSpec]] = []
    for i, variant in enumerate(variants):
        where = f"spec.variants[{i}]"
        if variant.name in seen_names:
            problems.append(
                Problem(f"{where}.name", f"{variant.name!r} is already variant {seen_names[variant.name]}")
            )
        seen_names.setdefault(variant.name, i)
        last = None if parsed.replicas == 1 else parsed.replicas - 1
        child = job_name(name, variant.name, last) if name else variant.name
        if name and len(child) > MAX_NAME_LENGTH:
            problems.append(
                Problem(
                    f"{where}.name",
                    f"the variant's FlashRLJob {child!r} would be {len(child)} characters; "
                    f"<experiment>-<variant>{'' if last is None else '-r<k>'} must be at most "
                    f"{MAX_NAME_LENGTH}",
                )
            )
        if not variant.allow_setup_changes:
            for path, what in setup_changes(variant.spec):
                problems.append(
                    Problem(
                        f"{where}.spec.{path}",
                        f"changes {what}, so the variants would differ in more than what is compared; "
                        f"set {where}.allowSetupChanges: true to compare them anyway",
                    )
                )
        merged, merged_problems = spec_problems(
            variant_spec(template_wire, variant, name or "x"), prefix="spec"
        )
        for problem in merged_problems:
            path = variant_field_path(i, problem.path, variant.spec, template_wire)
            rest = problem.path.removeprefix("spec.")
            if path in template_paths or (
                f"spec.template.{rest}" in template_paths and not _sets(variant.spec, rest)
            ):
                continue  # the template's own problem, already reported once
            suffix = "" if path.startswith(where) else f" (in variant {variant.name!r})"
            message = moved_suggestion(problem.message, "spec.", path[: len(path) - len(rest)])
            problems.append(Problem(path, message + suffix))
        if merged is not None and not merged_problems:
            merged_specs.append((i, merged))
    for pos, (i, spec_i) in enumerate(merged_specs):
        for j, spec_j in merged_specs[:pos]:
            if _comparable(spec_i) == _comparable(spec_j):
                problems.append(
                    Problem(
                        f"spec.variants[{i}]",
                        f"runs exactly what variant {variants[j].name!r} runs: variants must differ "
                        "(in the rollout precision, the correction, ...)",
                    )
                )
                break
    experiment = FlashRLExperiment(
        api_version=API_VERSION,
        kind=EXPERIMENT_KIND,
        metadata=dict(metadata),
        spec=parsed,
        status=_status(raw.get("status")),
    )
    return (None if problems else experiment), problems


def _status(raw: Any) -> FlashRLExperimentStatus | None:
    if not isinstance(raw, Mapping):
        return None
    try:
        return FlashRLExperimentStatus.model_validate(raw)
    except ValidationError:
        return None  # status is the operator's to rewrite


def parse_experiment(raw: Any) -> FlashRLExperiment:
    """A validated FlashRLExperiment, or :class:`SpecError` with every problem."""
    if not isinstance(raw, Mapping):
        raise SpecError(
            [Problem("", f"a {EXPERIMENT_KIND} must be a YAML mapping, got {type(raw).__name__}")]
        )
    experiment, problems = experiment_problems(raw)
    if problems or experiment is None:
        raise SpecError(problems)
    return experiment


__all__ = [
    "EXPERIMENT_KIND",
    "EXPERIMENT_LABEL",
    "EXPERIMENT_PHASES",
    "EXPERIMENT_PLURAL",
    "EXPERIMENT_SHORT_NAMES",
    "EXPERIMENT_SINGULAR",
    "FREE_FIELDS",
    "MAX_REPLICAS",
    "MAX_VARIANTS",
    "OBJECT_RULES",
    "REPLICA_LABEL",
    "SETUP_CHANGES_CEL",
    "SETUP_FIELDS",
    "SPEC_RULES",
    "VARIANT_LABEL",
    "ExperimentPhase",
    "FlashRLExperiment",
    "FlashRLExperimentSpec",
    "FlashRLExperimentStatus",
    "Variant",
    "VariantMetric",
    "VariantPhase",
    "VariantStatus",
    "default_variants",
    "experiment_runs",
    "job_name",
    "merge_patch",
    "parse_experiment",
    "replicas_of",
    "run_label",
    "set_paths",
    "setup_changes",
    "setup_changes_allowed",
    "supports_channel_fp8",
    "variant_field_path",
    "variant_jobs",
    "variant_spec",
    "variants_of",
]
