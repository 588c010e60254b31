"""The Prometheus series ``flashrl-launch train`` exports from verl's metrics, in one place.

The launcher serves them on the Ray head pod at ``/metrics`` (docs/observability.md); the chart's
dashboard and alert rules query them by these names, and a test checks that every PromQL expression in
the chart names a series defined here or by the operator (``flashrl_operator.vocab.metrics``).

Every series carries the labels ``namespace`` and ``job`` (the FlashRLJob), for a scrape without the
chart. The chart's PodMonitor does not trust them (the head pod runs the tenant's code): it sets both
from the pod itself (its namespace and its ``flashrl.dev/job`` label) and drops what the series claimed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from flashrl_api import history
from flashrl_api import verl_metrics as verl

NAMESPACE_LABEL: Final = "namespace"
JOB_LABEL: Final = "job"

# --- progress -------------------------------------------------------------------------------------------

#: Last completed training step (verl's ``step`` of the newest record).
TRAINING_STEP: Final = "flashrl_training_step"
#: Steps the run will take (verl's ``Total training steps``, else ``spec.training.totalSteps``).
TRAINING_TOTAL_STEPS: Final = "flashrl_training_total_steps"
#: Seconds of the last training step (verl's ``timing_s/step``).
TRAINING_STEP_SECONDS: Final = "flashrl_training_step_seconds"
#: Unix time at which the launcher saw the last step complete: the stall alert compares it with now.
TRAINING_LAST_STEP_TIMESTAMP: Final = "flashrl_training_last_step_timestamp_seconds"
#: Seconds left at the recent step rate (the same estimate as ``status.progress.estimatedRemainingSeconds``).
TRAINING_REMAINING_SECONDS: Final = "flashrl_training_estimated_remaining_seconds"
#: Seconds of the last step spent in each phase, one series per ``timing_s/<phase>`` verl reports.
PHASE_SECONDS: Final = "flashrl_phase_seconds"
PHASE_LABEL: Final = "phase"

# --- goodput ---------------------------------------------------------------------------------------------

#: GPU-seconds by goodput phase (label ``phase``, a :class:`flashrl_api.goodput.GoodputPhase`). The launcher
#: exports the phases it observes (:data:`flashrl_api.goodput.LAUNCHER_PHASES`: the gate, start-up and each
#: step's phases), the operator the ones around them (pods starting, the step in flight when an attempt
#: failed, teardown, GPUs held after the end), under the same name: ``sum by (phase)`` adds them up
#: without counting a second twice.
GPU_SECONDS: Final = "flashrl_gpu_seconds_total"
GOODPUT_PHASE_LABEL: Final = "phase"

# --- checkpoints ----------------------------------------------------------------------------------------

#: Step of the newest checkpoint verl would resume from (``latest_checkpointed_iteration.txt``, the same
#: entry as ``status.checkpoint.step``); no series until the launcher has seen one.
CHECKPOINT_STEP: Final = "flashrl_checkpoint_step"

# --- quality --------------------------------------------------------------------------------------------

#: ``val-core/<data_source>/<metric>``; labels ``data_source`` and ``metric`` (e.g. ``acc/mean@1``; the N
#: of mean@N is spec.validation.samplesPerProblem).
VALIDATION_SCORE: Final = "flashrl_validation_score"
DATA_SOURCE_LABEL: Final = "data_source"
METRIC_LABEL: Final = "metric"
#: ``response_length/{mean,max,clip_ratio}`` under the label ``stat``.
RESPONSE_LENGTH: Final = "flashrl_response_length_tokens"
STAT_LABEL: Final = "stat"
RESPONSE_LENGTH_STATS: Final[tuple[tuple[str, str], ...]] = (
    ("mean", verl.RESPONSE_LENGTH_MEAN),
    ("max", verl.RESPONSE_LENGTH_MAX),
    ("clip_ratio", verl.RESPONSE_LENGTH_CLIP_RATIO),
)

# --- speed ----------------------------------------------------------------------------------------------

#: ``perf/throughput``: tokens (prompt + response) per second per GPU over the whole step.
THROUGHPUT: Final = "flashrl_throughput_tokens_per_second_per_gpu"

# --- rollout/trainer mismatch ---------------------------------------------------------------------------

MISMATCH_KL: Final = "flashrl_rollout_mismatch_kl"
IS_ESS: Final = "flashrl_rollout_is_effective_sample_size"
IS_MEAN: Final = "flashrl_rollout_is_mean"
IS_CLIPPED_FRACTION: Final = "flashrl_rollout_is_clipped_fraction"
PROBS_DIFF_MEAN: Final = "flashrl_rollout_probs_diff_mean"

# --- asynchronous training (training.mode colocate-async / separate-async) --------------------------------

ASYNC_STALENESS_MEAN: Final = "flashrl_async_staleness_mean_versions"
ASYNC_STALENESS_MAX: Final = "flashrl_async_staleness_max_versions"
ASYNC_OFF_POLICY_EVICTED: Final = "flashrl_async_off_policy_evicted_samples"
ASYNC_TRAINER_IDLE: Final = "flashrl_async_trainer_idle"
#: separate-async only: the share of the last step the trainer waited for the rollout pool's samples
#: (verl ``timing_s/gen`` / ``timing_s/step``; in the async trainers ``gen`` times the replay buffer's
#: ``sample``). The alert FlashRLRolloutPoolStarvesTrainer watches it.
ASYNC_SAMPLE_WAIT_FRACTION: Final = "flashrl_async_sample_wait_fraction"

# --- GPU pools (written by the operator from status.goodput.pools, separate-async) ---------------------

#: GPU-seconds each pool held (label ``pool``: ``trainer`` or ``rollout``).
POOL_GPU_SECONDS: Final = "flashrl_pool_gpu_seconds_total"
#: GPU-seconds each pool waited for the other (labels ``pool`` and ``waiting_for``: samples or weights).
POOL_WAITING_GPU_SECONDS: Final = "flashrl_pool_waiting_gpu_seconds_total"
POOL_LABEL: Final = "pool"
WAITING_FOR_LABEL: Final = "waiting_for"

# --- everything else ------------------------------------------------------------------------------------

#: Every other numeric verl metric, under its verl name in the label ``key``: nothing is lost when verl
#: adds a metric.
VERL_METRIC: Final = "flashrl_verl_metric"
KEY_LABEL: Final = "key"

#: verl metrics that have a series of their own (name, help), besides the patterns above
#: (``timing_s/*``, ``val-core/*``, ``response_length/*``).
DIRECT: Final[dict[str, tuple[str, str]]] = {
    verl.TIMING_STEP: (TRAINING_STEP_SECONDS, "Seconds of the last training step (verl timing_s/step)."),
    verl.THROUGHPUT: (THROUGHPUT, "Tokens per second per GPU over the last step (verl perf/throughput)."),
    verl.MISMATCH_KL: (
        MISMATCH_KL,
        "Mean log-prob gap between the rollout and the trainer policy (verl rollout_corr/kl).",
    ),
    verl.IS_ESS: (
        IS_ESS,
        "Normalised effective sample size of the IS weights, 0..1 "
        "(verl rollout_corr/rollout_is_eff_sample_size).",
    ),
    verl.IS_MEAN: (IS_MEAN, "Mean truncated IS weight (verl rollout_corr/rollout_is_mean)."),
    verl.IS_CLIP_FRACTION: (
        IS_CLIPPED_FRACTION,
        "Fraction of IS weights above the cap (verl rollout_corr/rollout_is_ratio_fraction_high).",
    ),
    verl.PROBS_DIFF_MEAN: (
        PROBS_DIFF_MEAN,
        "Mean |p_rollout - p_trainer| over response tokens (verl training/rollout_probs_diff_mean).",
    ),
    verl.STALENESS_MEAN: (
        ASYNC_STALENESS_MEAN,
        "Model versions the last step's trajectories lag the policy, mean "
        "(verl training/off_policy/trajectory_staleness/mean).",
    ),
    verl.STALENESS_MAX: (
        ASYNC_STALENESS_MAX,
        "Model versions the last step's trajectories lag the policy, max "
        "(verl training/off_policy/trajectory_staleness/max).",
    ),
    verl.OFF_POLICY_EVICTED: (
        ASYNC_OFF_POLICY_EVICTED,
        "Samples dropped in the last step for being too off-policy "
        "(verl training/off_policy/evicted_samples).",
    ),
    verl.TRAINER_IDLE: (
        ASYNC_TRAINER_IDLE,
        "1 when the trainer idled waiting for samples in the last step (verl separate_async/switch/idle).",
    ),
}

#: Every family name the launcher can export (the dashboard test reads this).
ALL: Final[frozenset[str]] = frozenset(
    {
        TRAINING_STEP,
        TRAINING_TOTAL_STEPS,
        TRAINING_LAST_STEP_TIMESTAMP,
        TRAINING_REMAINING_SECONDS,
        PHASE_SECONDS,
        GPU_SECONDS,
        CHECKPOINT_STEP,
        VALIDATION_SCORE,
        RESPONSE_LENGTH,
        VERL_METRIC,
        ASYNC_SAMPLE_WAIT_FRACTION,
        *(name for name, _ in DIRECT.values()),
    }
)

#: The verl metrics ``status.metrics`` carries (latest value and the step it came from), in display order;
#: ``val-core/*/mean@N`` keys are added in front of them.
STATUS_METRICS: Final[tuple[str, ...]] = (
    verl.RESPONSE_LENGTH_MEAN,
    verl.RESPONSE_LENGTH_CLIP_RATIO,
    verl.THROUGHPUT,
    verl.TIMING_STEP,
    verl.TIMING_GEN,
    verl.TIMING_UPDATE_WEIGHTS,
    verl.MISMATCH_KL,
    verl.IS_ESS,
    verl.IS_MEAN,
    verl.IS_CLIP_FRACTION,
    verl.PROBS_DIFF_MEAN,
    verl.STALENESS_MEAN,
    verl.STALENESS_MAX,
    verl.OFF_POLICY_EVICTED,
    verl.TRAINER_IDLE,
)

#: ``status.metrics``' bound (``maxItems`` in both CRDs: a job's and an experiment variant's copy).
MAX_STATUS_METRICS: Final = 64


_NAME: Final = re.compile(verl.METRIC_NAME_PATTERN)


def _is_mean(name: str) -> bool:
    match = verl.VAL_CORE_PATTERN.match(name)
    return match is not None and match["metric"].startswith("mean@")


def status_metric_names(reported: Iterable[str]) -> list[str]:
    """Which of verl's ``reported`` metric names the launcher puts in ``status.metrics``, in order: the
    validation ``mean@N`` scores, :data:`STATUS_METRICS`, then every other name the operator's per-step
    history keeps (:func:`flashrl_api.history.kept`; it copies them from ``status.metrics`` and
    ``flashrl report --experiment`` draws them, so a name missing here is a plot missing there); at
    most :data:`MAX_STATUS_METRICS`, and none the CRD would refuse (a name beyond
    :data:`~flashrl_api.verl_metrics.METRIC_NAME_PATTERN` would fail the whole status patch). The
    launcher and the emulated one both ask this function."""
    names = {n for n in reported if len(n) <= verl.MAX_METRIC_NAME and _NAME.fullmatch(n)}
    ordered = [n for n in verl.val_core_keys(names) if _is_mean(n)]
    ordered += [n for n in STATUS_METRICS if n in names]
    chosen = set(ordered)
    ordered += sorted(n for n in names if n not in chosen and history.keeps(n))
    return ordered[:MAX_STATUS_METRICS]
