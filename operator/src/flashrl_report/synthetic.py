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
from pathlib import Path
from typing import Any, Final

from flashrl_api import verl_metrics as vm
from flashrl_api.report_metrics import ROWS

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
        kl_ends = (profile.kl_start, profile.kl_end) if mismatch else (None, None)
        at = _Step(
            progress, length, gen, step_time, GPUS, response_tokens, PROMPTS_PER_STEP * 160, own, kl_ends
        )
        data: dict[str, Any] = {"training/global_step": step}
        # Every metric the report reads is a row (flashrl_api.report_metrics); the step's phase timers
        # below are what the rows' curves are built on.
        for row in ROWS:
            value = row.synthetic(at) if row.synthetic is not None else None
            if value is not None:
                data[row.name] = value
        data.update(
            {
                "timing_s/gen": gen,
                "timing_s/update_weights": sync,
                "timing_s/reward": reward,
                "timing_s/old_log_prob": old_log_prob,
                "timing_s/adv": adv,
                "timing_s/update_actor": update_actor,
                vm.TIMING_STEP: step_time,
                vm.TIME_PER_STEP: step_time,
            }
        )
        if save:
            data["timing_s/save_checkpoint"] = save
        if at.kl is not None:
            # verl logs these beside the mismatch; the report does not read them.
            data[vm.PROBS_PEARSON] = 1 - at.kl
            data["training/rollout_probs_diff_valid"] = 1
        if test_every > 0 and (step % test_every == 0 or step == steps):
            data[SCORE_KEY] = _score(
                own, 0.05 + (profile.final_score - 0.05) * (1 - math.exp(-2.2 * progress)) / 0.889
            )
            data[vm.TIMING_TESTING] = 150 + own.gauss(0, 10)
        yield {"step": step, "data": data}


class _Step:
    """One synthetic step as the rows' curves see it (:class:`flashrl_api.report_metrics.SyntheticStep`).
    The mismatch KL is drawn when a curve first asks for it: the rows' order is the order of the draws."""

    def __init__(
        self,
        progress: float,
        length: float,
        gen: float,
        step_time: float,
        gpus: int,
        response_tokens: float,
        prompt_tokens: float,
        own: random.Random,
        kl_ends: tuple[float | None, float | None],
    ) -> None:
        self.progress = progress
        self.length = length
        self.gen = gen
        self.step_time = step_time
        self.gpus = gpus
        self.response_tokens = response_tokens
        self.prompt_tokens = prompt_tokens
        self._own = own
        self._kl_ends = kl_ends
        self._kl: float | None = None
        self._kl_drawn = False

    @property
    def kl(self) -> float | None:
        """The step's mismatch KL (None: the run logs no mismatch)."""
        start, end = self._kl_ends
        if start is None or end is None:
            return None
        if not self._kl_drawn:
            self._kl = (start + (end - start) * self.progress) * (1 + self._own.gauss(0, 0.12))
            self._kl_drawn = True
        return self._kl

    def noise(self, sd: float) -> float:
        """A draw of the run's own noise."""
        return self._own.gauss(0, sd)


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


#: The default validation file's shape: each AIME problem repeated this many times (one sample per row).
AIME_COPIES: Final = 32


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def problem_logits(seed: int, problems: int = AIME_PROBLEMS) -> list[float]:
    """Each problem's difficulty (log-odds of a correct answer at the start): the same for every variant
    and replica, as the validation set is."""
    rng = random.Random(f"problems-{seed}")  # noqa: S311
    return [rng.gauss(-2.6, 1.6) for _ in range(problems)]


def validation_rows(
    step: int,
    steps: int,
    *,
    seed: int = 0,
    run: str = "",
    shift: float = 0.0,
    shifts: dict[int, float] | None = None,
    problems: int = AIME_PROBLEMS,
    copies: int = AIME_COPIES,
    samples_per_row: int = 1,
) -> list[dict[str, Any]]:
    """One validation as verl 0.9.1 dumps it (``<step>.jsonl`` rows: ``input``, ``output``, ``gts``,
    ``score``, ``step`` and the dapo reward's ``acc``, ``pred``), each problem's accuracy
    ``sigmoid(difficulty + learning(step) + shift)``: ``shift`` (log-odds, every problem) and ``shifts``
    (per problem index) are the built-in effect of a variant, 0 for a null. ``run`` seeds the sampling
    noise, ``seed`` the problems; ``copies`` rows per problem, ``samples_per_row`` responses each
    (verl's ``val_kwargs.n``)."""
    rng = random.Random(f"{seed}-{run}-{step}")  # noqa: S311
    learned = 2.2 * (1 - math.exp(-2.2 * step / steps))
    rows: list[dict[str, Any]] = []
    for p, logit in enumerate(problem_logits(seed, problems)):
        prob = _sigmoid(logit + learned + shift + (shifts or {}).get(p, 0.0))
        answer = str(100 + 7 * p)
        for c in range(copies):
            for k in range(samples_per_row):
                correct = rng.random() < prob
                pred = answer if correct else str(rng.randrange(1000))
                rows.append(
                    {
                        "input": f"user\nSynthetic AIME-style problem {p + 1}: find N({p + 1}) mod 1000.",
                        "output": f"... the answer is \\boxed{{{pred}}}",
                        "gts": answer,
                        "score": 1.0 if correct else -1.0,
                        "step": step,
                        "reward": 1.0 if correct else -1.0,
                        "acc": correct,
                        "pred": pred,
                        "uid": f"p{p}c{c}_{k}_0",
                    }
                )
    return rows


def validation_steps(steps: int, test_every: int = 5) -> list[int]:
    """The steps verl validates at in :func:`records`: 0, every ``test_every`` and the last."""
    return [0, *(s for s in range(1, steps + 1) if s % test_every == 0 or s == steps)]


@dataclass(frozen=True)
class FixtureRun:
    """One run of a fixture: its label, the precision whose timings it borrows, its built-in effect."""

    label: str
    precision: str
    #: Log-odds added to every problem's accuracy from step 1 on (0: a null).
    shift: float = 0.0


#: The fixture's runs: the baseline, a variant with a known effect and a variant with none.
FIXTURE_RUNS: Final = (
    FixtureRun("bf16", "bf16"),
    FixtureRun("fp8-effect", "blockwise-fp8", 0.9),
    FixtureRun("fp8-null", "channel-fp8", 0.0),
)


def write_fixture(
    out: Path,
    *,
    steps: int = 40,
    seed: int = 0,
    replicas: int = 1,
    runs: tuple[FixtureRun, ...] = FIXTURE_RUNS,
    problems: int = AIME_PROBLEMS,
    copies: int = AIME_COPIES,
) -> dict[str, tuple[Path, Path]]:
    """Write ``out/metrics/<label>.jsonl`` and ``out/validation/<label>/<step>.jsonl`` for every run (and
    replica: ``<label>#<k>``, its metrics drawn with seed ``seed + k`` for every variant alike, its
    validation the same problems with other sampling noise); the metrics' validation score is the mean
    of that step's dump, as verl computes it. Returns label -> (metrics file, dump directory)."""
    written: dict[str, tuple[Path, Path]] = {}
    for k in range(replicas):
        for run in runs:
            label = run.label if replicas == 1 else f"{run.label}#{k}"
            dumps = out / "validation" / label
            dumps.mkdir(parents=True, exist_ok=True)
            scores: dict[int, float] = {}
            for step in validation_steps(steps):
                # The same problems for every replica (one validation set); other sampling noise.
                rows = validation_rows(
                    step,
                    steps,
                    seed=seed,
                    run=run.label if replicas == 1 else f"{run.label}-{k}",
                    shift=run.shift if step > 0 else 0.0,
                    problems=problems,
                    copies=copies,
                )
                scores[step] = sum(float(r["acc"]) for r in rows) / len(rows)
                (dumps / f"{step}.jsonl").write_text(
                    "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
                )
            lines = []
            for record in records(run.precision, steps, seed=seed + k):
                if SCORE_KEY in record["data"]:
                    record["data"][SCORE_KEY] = scores[record["step"]]
                lines.append(json.dumps(record, separators=(",", ":")))
            metrics = out / "metrics" / f"{label}.jsonl"
            metrics.parent.mkdir(parents=True, exist_ok=True)
            metrics.write_text("\n".join(lines) + "\n", encoding="utf-8")
            written[label] = (metrics, dumps)
    return written


__all__ = [
    "AIME_COPIES",
    "FIXTURE_RUNS",
    "PROFILES",
    "SCORE_KEY",
    "FixtureRun",
    "Profile",
    "jsonl",
    "problem_logits",
    "records",
    "validation_rows",
    "validation_steps",
    "write_fixture",
]
