"""Synthetic verl metrics with the shapes of the origin experiment, for tests, the demo and the docs.

SYNTHETIC: none of these numbers was measured. They imitate what the origin recipe's runs look like
(DAPO on Qwen3-8B-Base, 8 GPUs, 32 prompts x 16 responses per step) closely enough to exercise the
report: the validation score climbs noisily (30 AIME problems, so each validation is a binomial
draw), responses grow longer, generation dominates the step, FP8 generates about 12 % faster early
on and loses the advantage late in the run (the origin's "FP8 throughput is overtaken in later
stages"), blockwise FP8's weight sync is slower (the trainer quantizes at every sync), and the
rollout/trainer mismatch of the FP8 runs drifts upward while BF16's stays flat.

Records use verl 0.9.1's metric names (:mod:`flashrl_api.verl_metrics`) and its file-logger line
format, ``{"step": n, "data": {...}}``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from flashrl_api import verl_metrics as vm

#: The validation score's name in these records (AIME-2024, one sample per problem).
SCORE_KEY: Final = "val-core/aime-2024/acc/mean@1"
PROMPTS_PER_STEP: Final = 32 * 16
GPUS: Final = 8
AIME_PROBLEMS: Final = 30


@dataclass(frozen=True)
class Profile:
    """How one rollout precision behaves in the synthetic runs."""

    #: Generation speed-up over bf16 early in the run, and at its end.
    speedup_early: float
    speedup_late: float
    #: Seconds per weight sync.
    weight_sync_s: float
    #: Mismatch KL at the start and at the end of the run (None: no rollout log-probs).
    kl_start: float | None
    kl_end: float | None
    #: Validation score at the end of the run (they all start near 0.05).
    final_score: float


PROFILES: Final[dict[str, Profile]] = {
    "blockwise-fp8": Profile(1.13, 0.97, 9.5, 0.0011, 0.0036, 0.31),
    "channel-fp8": Profile(1.09, 1.0, 7.8, 0.0019, 0.0047, 0.29),
    "bf16": Profile(1.0, 1.0, 6.2, 0.00025, 0.00028, 0.32),
}


def records(
    precision: str, steps: int = 150, *, seed: int = 0, mismatch: bool = True, test_every: int = 5
) -> Iterator[dict[str, Any]]:
    """verl file-logger records for one synthetic run: step 0 (initial validation), then 1..steps.

    ``seed`` drives everything the variants share (data order, response lengths, dynamic sampling), so
    runs of one experiment differ only by their precision's profile, as in a real twin run.
    """
    profile = PROFILES[precision]
    shared = random.Random(seed)  # noqa: S311 (synthetic data, not security)
    own = random.Random(f"{seed}-{precision}")  # noqa: S311
    yield {"step": 0, "data": {SCORE_KEY: _score(own, 0.05)}}
    for step in range(1, steps + 1):
        progress = step / steps
        length = 1800 + 3400 * (1 - math.exp(-3 * progress)) + shared.gauss(0, 160) + own.gauss(0, 120)
        gen_batches = 1 + shared.random() * 0.8  # dynamic sampling: extra prompt batches generated
        response_tokens = PROMPTS_PER_STEP * length
        bf16_ms_per_token = 0.12 * (1 + 0.25 * progress) * (1 + shared.gauss(0, 0.03))
        speedup = (
            profile.speedup_early
            + (profile.speedup_late - profile.speedup_early) * max(0.0, progress - 0.4) / 0.6
        )
        ms_per_token = bf16_ms_per_token / speedup * (1 + own.gauss(0, 0.025))
        gen = ms_per_token * response_tokens * gen_batches / 1000
        sync = profile.weight_sync_s * (1 + own.gauss(0, 0.05))
        old_log_prob = response_tokens * 2.1e-5 * (1 + own.gauss(0, 0.04))
        update_actor = old_log_prob * 2.6
        reward = 2.5 + own.random()
        adv = 0.05
        save = 85.0 + own.gauss(0, 5) if step % 5 == 0 else 0.0
        step_time = gen + sync + old_log_prob + update_actor + reward + adv + save + 1.5
        prompt_tokens = PROMPTS_PER_STEP * 160
        data: dict[str, Any] = {
            "training/global_step": step,
            vm.CRITIC_SCORE_MEAN: -0.6 + 0.5 * progress + own.gauss(0, 0.05),
            vm.RESPONSE_LENGTH_MEAN: length,
            vm.RESPONSE_LENGTH_CLIP_RATIO: max(0.0, 0.01 + 0.03 * progress + own.gauss(0, 0.005)),
            "timing_s/gen": gen,
            "timing_s/update_weights": sync,
            "timing_s/reward": reward,
            "timing_s/old_log_prob": old_log_prob,
            "timing_s/adv": adv,
            "timing_s/update_actor": update_actor,
            vm.TIMING_STEP: step_time,
            vm.GEN_MS_PER_TOKEN: gen * 1000 / response_tokens,
            vm.TOTAL_TOKENS: prompt_tokens + response_tokens,
            vm.TIME_PER_STEP: step_time,
            vm.THROUGHPUT: (prompt_tokens + response_tokens) / (step_time * GPUS),
        }
        if save:
            data["timing_s/save_checkpoint"] = save
        if mismatch and profile.kl_start is not None and profile.kl_end is not None:
            kl = (profile.kl_start + (profile.kl_end - profile.kl_start) * progress) * (
                1 + own.gauss(0, 0.12)
            )
            data.update(
                {
                    vm.MISMATCH_KL: kl,
                    vm.MISMATCH_K3_KL: kl * 0.98,
                    vm.LOG_PPL_ABS_DIFF: kl * 1.7,
                    vm.IS_MEAN: 1.0 + own.gauss(0, 0.002),
                    vm.IS_ESS: max(0.0, min(1.0, 1 - 9 * kl + own.gauss(0, 0.002))),
                    vm.IS_CLIP_FRACTION: kl * 0.8,
                    vm.PROBS_DIFF_MEAN: 2.4 * math.sqrt(kl) * 0.1 * (1 + own.gauss(0, 0.05)),
                    vm.PROBS_DIFF_MAX: min(1.0, 0.6 + 40 * kl),
                    vm.PROBS_PEARSON: 1 - kl,
                    "training/rollout_probs_diff_valid": 1,
                }
            )
        if test_every > 0 and (step % test_every == 0 or step == steps):
            data[SCORE_KEY] = _score(
                own, 0.05 + (profile.final_score - 0.05) * (1 - math.exp(-2.2 * progress)) / 0.889
            )
            data[vm.TIMING_TESTING] = 150 + own.gauss(0, 10)
        yield {"step": step, "data": data}


def _score(rng: random.Random, p: float) -> float:
    p = min(max(p, 0.0), 1.0)
    return sum(rng.random() < p for _ in range(AIME_PROBLEMS)) / AIME_PROBLEMS


def jsonl(
    precision: str,
    steps: int = 150,
    *,
    seed: int = 0,
    mismatch: bool = True,
    stop_at: int | None = None,
    truncate: bool = False,
) -> str:
    """One run as verl's file logger writes it; ``stop_at`` ends it early (a failed run) and
    ``truncate`` cuts its last line in half (a run killed while writing)."""
    lines = [
        json.dumps(r, separators=(",", ":"))
        for r in records(precision, steps, seed=seed, mismatch=mismatch)
        if stop_at is None or r["step"] <= stop_at
    ]
    if truncate and lines:
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
        return "\n".join(lines)
    return "\n".join(lines) + "\n"


__all__ = ["PROFILES", "SCORE_KEY", "Profile", "jsonl", "records"]
