"""Confidence intervals by the bootstrap, and the one verdict rule every comparison of the report follows.

A difference is called one ("higher than bf16", "faster") only when its 95 % interval excludes the
value of no difference (0 for an accuracy difference, 1 for a speed-up); otherwise it is "no clear
difference", and the interval is always shown beside the verdict, with the n it rests on.

The bootstrap is a percentile bootstrap with numpy's generator and a fixed seed, so one set of files
always gives one page. For accuracy it is paired and two-level: problems are resampled with
replacement (the same problems for the variant and the baseline: both answered every one of them),
and within each drawn problem each run's samples are resampled, so both the choice of problems and
the sampling noise of a finite number of responses per problem widen the interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

#: Resamples per interval: enough for stable 2.5 % / 97.5 % percentiles at the page's three digits.
RESAMPLES: Final = 2000
#: Every interval's coverage.
LEVEL: Final = 0.95
#: The bootstrap's seed: fixed, so a report of the same files is the same report.
SEED: Final = 34


@dataclass(frozen=True)
class Interval:
    """An estimate with its bootstrap interval, the n it rests on, and the value meaning "no difference"."""

    estimate: float
    low: float
    high: float
    #: What was resampled: problems for accuracy, paired steps for a speed-up.
    n: int
    null: float = 0.0
    #: Its coverage (:data:`LEVEL`, or higher when several are read together).
    level: float = LEVEL

    @property
    def clear(self) -> bool:
        """Whether the interval excludes the value of no difference."""
        return self.low > self.null or self.high < self.null

    def verdict(self, above: str, below: str) -> str:
        """``above`` / ``below`` when the interval lies wholly on that side of the null, else
        "no clear difference"."""
        if self.low > self.null:
            return above
        if self.high < self.null:
            return below
        return "no clear difference"

    def text(self, digits: int = 3, unit: str = "", signed: bool = False) -> str:
        """``+0.083 (95 % CI +0.031 to +0.136)``."""
        sign = "+" if signed else ""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{self.estimate:{sign}.{digits}f}{unit} (n=1: no interval)"
        low, high = f"{self.low:{sign}.{digits}f}{unit}", f"{self.high:{sign}.{digits}f}{unit}"
        return f"{self.estimate:{sign}.{digits}f}{unit} ({100 * self.level:.4g} % CI {low} to {high})"


def _percentiles(draws: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def mean_interval(
    values: Sequence[float],
    *,
    null: float,
    seed: int = SEED,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> Interval | None:
    """The mean of ``values`` with a bootstrap interval over them (None when empty). A single value
    has no interval and is never called a difference (nothing to resample)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return None
    estimate = float(data.mean())
    if data.size == 1:
        return Interval(estimate, -np.inf, np.inf, 1, null, level)
    rng = np.random.default_rng(seed)
    draws = data[rng.integers(0, data.size, (resamples, data.size))].mean(axis=1)
    low, high = _percentiles(draws, level)
    return Interval(estimate, low, high, int(data.size), null, level)


def paired_difference(
    variant: Mapping[str, Sequence[float]],
    baseline: Mapping[str, Sequence[float]],
    *,
    seed: int = SEED,
    resamples: int = RESAMPLES,
) -> Interval | None:
    """Mean over the shared problems of (variant's accuracy − baseline's), with the paired two-level
    bootstrap interval; None when the two share no problem."""
    problems = sorted(p for p in variant if p in baseline and variant[p] and baseline[p])
    if not problems:
        return None
    rng = np.random.default_rng(seed)
    count = len(problems)
    diffs = np.empty((resamples, count))
    point = np.empty(count)
    for j, problem in enumerate(problems):
        v = np.asarray(variant[problem], dtype=float)
        b = np.asarray(baseline[problem], dtype=float)
        point[j] = v.mean() - b.mean()
        diffs[:, j] = v[rng.integers(0, v.size, (resamples, v.size))].mean(axis=1) - b[
            rng.integers(0, b.size, (resamples, b.size))
        ].mean(axis=1)
    drawn = rng.integers(0, count, (resamples, count))
    draws = np.take_along_axis(diffs, drawn, axis=1).mean(axis=1)
    low, high = _percentiles(draws)
    return Interval(float(point.mean()), low, high, count, 0.0)


__all__ = ["LEVEL", "RESAMPLES", "SEED", "Interval", "mean_interval", "paired_difference"]
