"""The rollout-mismatch guard, as a pure function of ``status.metrics`` (the operator calls it).

``spec.correction.guard`` names thresholds on three of verl's mismatch metrics (``rollout_corr/kl``,
``rollout_corr/rollout_is_eff_sample_size``, ``training/rollout_probs_diff_mean``) and how many
consecutive training steps one must be out of bounds before the guard trips. The launcher reports
each metric's newest value with its step; the operator may not see every step (it reconciles on
events, which Kubernetes may coalesce), so a *streak* is counted in steps, not in observations: it
starts at the first step seen out of bounds, and lasts until a value seen within bounds. A streak from
step ``s`` whose newest out-of-bounds value is at step ``n`` spans ``n - s + 1`` steps. The streaks live
in ``status.mismatchGuard`` so an operator restart does not forget them.

The KL test is on ``|kl|``: verl's ``rollout_corr/kl`` is a signed mean of log-ratios
(``compute_offpolicy_metrics`` in ``verl/trainer/ppo/rollout_corr_helper.py``) and its docs' health check
(docs/algo/rollout_corr.md, "Conditional Alerting Based on Metrics") flags ``abs(kl) > 0.1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from flashrl_api import verl_metrics as verl
from flashrl_api.spec import MismatchGuardSpec
from flashrl_api.status import GuardStreak, MetricValue

Direction = Literal["above", "below"]


@dataclass(frozen=True)
class Check:
    """One threshold: the verl metric, which side is bad, and the spec field it comes from."""

    metric: str
    direction: Direction
    threshold: float
    field: str

    def breached(self, value: float) -> bool:
        """Out of bounds: ``|value|`` above an upper bound (KL is signed), or ``value`` below a lower one."""
        if self.direction == "above":
            return abs(value) > self.threshold
        return value < self.threshold


#: spec field (camelCase, under spec.correction.guard) for each verl metric the guard reads.
FIELDS: Final = {
    verl.MISMATCH_KL: "maxKL",
    verl.IS_ESS: "minEffectiveSampleSize",
    verl.PROBS_DIFF_MEAN: "maxProbsDiffMean",
}


def checks(guard: MismatchGuardSpec) -> list[Check]:
    """The thresholds the spec sets (an unset one is not checked)."""
    found: list[Check] = []
    if guard.max_kl is not None:
        found.append(Check(verl.MISMATCH_KL, "above", guard.max_kl, FIELDS[verl.MISMATCH_KL]))
    if guard.min_effective_sample_size is not None:
        found.append(Check(verl.IS_ESS, "below", guard.min_effective_sample_size, FIELDS[verl.IS_ESS]))
    if guard.max_probs_diff_mean is not None:
        found.append(
            Check(verl.PROBS_DIFF_MEAN, "above", guard.max_probs_diff_mean, FIELDS[verl.PROBS_DIFF_MEAN])
        )
    return found


@dataclass(frozen=True)
class Breach:
    """A streak long enough to trip the guard."""

    check: Check
    value: float
    since: int
    step: int

    @property
    def steps(self) -> int:
        """How many training steps the metric has been out of bounds."""
        return self.step - self.since + 1

    def message(self) -> str:
        """For the condition and the Warning Event: metric, value, threshold and how long."""
        side = "|value| above" if self.check.direction == "above" else "below"
        return (
            f"{self.check.metric} = {self.value:.6g} at step {self.step}, {side} the threshold "
            f"{self.check.threshold:g} (spec.correction.guard.{self.check.field}) for {self.steps} "
            f"consecutive steps since step {self.since}"
        )


@dataclass(frozen=True)
class GuardResult:
    """The streaks to store and the ones that trip the guard (empty: within bounds)."""

    streaks: tuple[GuardStreak, ...]
    breaches: tuple[Breach, ...]
    step: int = 0
    """The newest metrics step judged (the operator stores it: a newer report calls for a judgement)."""

    @property
    def tripped(self) -> bool:
        """At least one metric has been out of bounds for ``consecutiveSteps`` steps."""
        return bool(self.breaches)


def evaluate(
    guard: MismatchGuardSpec, metrics: Iterable[MetricValue], streaks: Sequence[GuardStreak] = ()
) -> GuardResult:
    """Advance the streaks with the newest metrics; pure (no clock, no I/O)."""
    latest = {m.name: m for m in metrics}
    previous = {s.metric: s for s in streaks}
    kept: list[GuardStreak] = []
    breaches: list[Breach] = []
    for check in checks(guard):
        old = previous.get(check.metric)
        seen = latest.get(check.metric)
        streak = old
        # A step before the streak began: a new attempt resumed from an older checkpoint; start over.
        fresh = old is None or (seen is not None and seen.step < old.since)
        if seen is not None and (fresh or (old is not None and seen.step > old.step)):
            if not check.breached(seen.value):
                streak = None
            elif fresh or old is None:
                streak = GuardStreak(metric=check.metric, since=seen.step, step=seen.step, value=seen.value)
            else:
                streak = GuardStreak(metric=check.metric, since=old.since, step=seen.step, value=seen.value)
        if streak is None:
            continue
        kept.append(streak)
        if streak.step - streak.since + 1 >= guard.consecutive_steps:
            breaches.append(Breach(check, streak.value, streak.since, streak.step))
    newest = max((m.step for m in latest.values()), default=0)
    return GuardResult(tuple(kept), tuple(breaches), newest)
