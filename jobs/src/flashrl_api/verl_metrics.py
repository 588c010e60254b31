"""The names of the verl 0.9.1 metrics this project reads, in one place.

verl logs one dict of metrics per training step (``trainer.logger``; its ``file`` logger writes
``{"step": n, "data": {...}}`` per line, ``verl/utils/tracking.py`` ``FileLogger``). The names below are
the ones the comparison report and the status summary use; each group cites the file that emits it in
the pinned wheel. Keeping them here, not scattered over the report and the launcher, means a verl
upgrade that renames a metric is one edit and one failing test.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

# --- trainer/ppo/v1/trainer_base.py (_validate): val-core/<data source>/<variable>/<metric>@N ---------------

#: Validation metrics verl marks as core: ``acc`` (else ``reward``) averaged ``mean@N`` / majority
#: ``maj@N`` / ``best@N`` at the largest N. The data source is the parquet's ``data_source`` column.
VAL_CORE_PREFIX: Final = "val-core/"
VAL_CORE_PATTERN: Final = re.compile(
    r"^val-core/(?P<source>.+)/(?P<var>[^/]+)/(?P<metric>(mean|maj|best)[^/]*)$"
)

# --- trainer/ppo/metric_utils.py (compute_data_metrics, compute_timing_metrics, compute_throughout_metrics)

RESPONSE_LENGTH_MEAN: Final = "response_length/mean"
RESPONSE_LENGTH_MAX: Final = "response_length/max"
RESPONSE_LENGTH_CLIP_RATIO: Final = "response_length/clip_ratio"
#: Tokens (prompt + response) per second per GPU over the whole step.
THROUGHPUT: Final = "perf/throughput"
TOTAL_TOKENS: Final = "perf/total_num_tokens"
TIME_PER_STEP: Final = "perf/time_per_step"
#: ``timing_s/<phase>``: seconds per step spent in each phase (``marked_timer`` in the trainers).
TIMING_PREFIX: Final = "timing_s/"
#: Milliseconds per response token spent generating (``timing_per_token_ms/gen``): the rollout engine's
#: speed, independent of how long the responses happen to be.
GEN_MS_PER_TOKEN: Final = "timing_per_token_ms/gen"  # noqa: S105 (a metric name, not a secret)
CRITIC_SCORE_MEAN: Final = "critic/score/mean"

# --- trainer/ppo/v1/trainer_base.py (_compute_old_log_prob): the policy's mean entropy over response tokens

ENTROPY: Final = "actor/entropy"

#: The phases of one step, in the order the v1 trainer runs them (``trainer_base.py`` step and
#: ``_step_once``, ``trainer_sync.py`` update_weights); ``step`` is the whole step and ``testing`` the
#: validation that follows it, outside ``step``.
TIMING_STEP: Final = "timing_s/step"
TIMING_TESTING: Final = "timing_s/testing"
TIMING_PHASES: Final[tuple[tuple[str, str], ...]] = (
    ("timing_s/gen", "generation"),
    ("timing_s/update_weights", "weight sync"),
    ("timing_s/reward", "reward"),
    ("timing_s/old_log_prob", "old log-prob"),
    ("timing_s/ref", "reference"),
    ("timing_s/values", "values"),
    ("timing_s/adv", "advantages"),
    ("timing_s/update_critic", "critic update"),
    ("timing_s/update_actor", "actor update"),
    ("timing_s/save_checkpoint", "checkpoint"),
)
TIMING_GEN: Final = "timing_s/gen"
TIMING_UPDATE_WEIGHTS: Final = "timing_s/update_weights"

# --- the asynchronous V1 trainers (trainer.v1.trainer_mode colocate_async / separate_async) ---------------

#: Model versions a trajectory lags behind the current policy (``trainer/ppo/v1/trainer_base.py``, the
#: off-policy staleness metrics of ``_compute_rollout_metrics``; the lower bound, from the freshest weights
#: it used): how stale the samples a step trained on were.
STALENESS_MEAN: Final = "training/off_policy/trajectory_staleness/mean"
STALENESS_MAX: Final = "training/off_policy/trajectory_staleness/max"
#: Samples the replay buffer dropped for exceeding ``max_off_policy_threshold`` versions
#: (``trainer/ppo/v1/replay_buffer.py``, ``max_off_policy_strategy: drop``).
OFF_POLICY_EVICTED: Final = "training/off_policy/evicted_samples"
#: 1 when the trainer waited for sampleable prompts longer than the buffer's poll interval in the step
#: (``trainer/ppo/v1/trainer_separate_async.py`` ``on_step_end``; logged with ``enable_switch``).
TRAINER_IDLE: Final = "separate_async/switch/idle"
#: Samples the trainer was short of when it began sampling, summed over the step (same place).
WAIT_SAMPLES: Final = "separate_async/switch/wait_samples"
#: In the async trainers ``timing_s/gen`` times ``replay_buffer.sample`` (``trainer_base.py``
#: ``_step_once``): the trainer's wait for samples, not generation itself (the rollout servers generate
#: meanwhile). ``timing_s/update_weights`` is the parameter sync to them.
TIMING_SAMPLE_WAIT: Final = TIMING_GEN

# --- trainer/ppo/rollout_corr_helper.py (compute_offpolicy_metrics, compute_rollout_correction_weights) -----

#: mean(log pi_rollout - log pi_train) over response tokens: the rollout/trainer mismatch.
MISMATCH_KL: Final = "rollout_corr/kl"
#: mean(r - log r - 1): the k3 estimator of the same KL, never negative.
MISMATCH_K3_KL: Final = "rollout_corr/k3_kl"
LOG_PPL_ABS_DIFF: Final = "rollout_corr/log_ppl_abs_diff"
#: 1 / mean((w / mean w)^2), in (0, 1]; verl's docs call a batch healthy at 0.3 or more.
IS_ESS: Final = "rollout_corr/rollout_is_eff_sample_size"
IS_MEAN: Final = "rollout_corr/rollout_is_mean"
#: Fraction of tokens whose weight was truncated at the cap (TIS clip fraction).
IS_CLIP_FRACTION: Final = "rollout_corr/rollout_is_ratio_fraction_high"

# --- utils/debug/metrics.py (calculate_debug_metrics) -------------------------------------------------

PROBS_DIFF_MEAN: Final = "training/rollout_probs_diff_mean"
PROBS_DIFF_MAX: Final = "training/rollout_probs_diff_max"
PROBS_PEARSON: Final = "training/rollout_actor_probs_pearson_corr"


#: The characters a metric name of ``status.metrics`` may hold (the CRD's pattern of its name): verl's
#: names are slash-separated words, with ``@`` in ``mean@N`` and the data source's own punctuation.
METRIC_NAME_PATTERN: Final = r"^[A-Za-z0-9_][A-Za-z0-9_./@:+=-]*$"
#: The longest such name (the CRD's maxLength).
MAX_METRIC_NAME: Final = 256


def val_core_keys(names: Iterable[str]) -> list[str]:
    """The ``val-core/...`` names among ``names``, ``mean@N`` first (the score the origin compared)."""
    found: list[tuple[bool, str]] = []
    for name in names:
        match = VAL_CORE_PATTERN.match(name)
        if match is not None:
            found.append((not match["metric"].startswith("mean"), name))
    return [name for _, name in sorted(found)]
