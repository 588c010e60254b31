"""The rollout-mismatch guard as a pure function: thresholds, streaks counted in steps, resets."""

from __future__ import annotations

import pytest

from flashrl_api.guard import evaluate
from flashrl_api.spec import MismatchGuardSpec
from flashrl_api.status import GuardStreak, MetricValue

KL = "rollout_corr/kl"
ESS = "rollout_corr/rollout_is_eff_sample_size"
DIFF = "training/rollout_probs_diff_mean"


def m(name: str, value: float, step: int) -> MetricValue:
    return MetricValue(name=name, value=value, step=step)


def streak(metric: str, since: int, step: int, value: float) -> GuardStreak:
    return GuardStreak(metric=metric, since=since, step=step, value=value)


DEFAULT = MismatchGuardSpec()


def test_defaults_are_verls_documented_warning_levels() -> None:
    assert (DEFAULT.max_kl, DEFAULT.min_effective_sample_size, DEFAULT.max_probs_diff_mean) == (
        0.1,
        0.3,
        None,
    )
    assert (DEFAULT.consecutive_steps, DEFAULT.action) == (3, "Alert")


CASES = [
    # (name, guard, metrics, previous streaks, expected streaks, tripped metrics)
    ("within bounds", DEFAULT, [m(KL, 0.05, 4), m(ESS, 0.9, 4)], [], [], []),
    ("first breach starts a streak", DEFAULT, [m(KL, 0.2, 4)], [], [streak(KL, 4, 4, 0.2)], []),
    ("negative KL counts by magnitude", DEFAULT, [m(KL, -0.2, 4)], [], [streak(KL, 4, 4, -0.2)], []),
    ("KL at the threshold is within bounds", DEFAULT, [m(KL, 0.1, 4)], [], [], []),
    (
        "third consecutive step trips",
        DEFAULT,
        [m(KL, 0.3, 6)],
        [streak(KL, 4, 5, 0.2)],
        [streak(KL, 4, 6, 0.3)],
        [KL],
    ),
    (
        "steps the operator did not see still count (4..7 is four steps)",
        DEFAULT,
        [m(KL, 0.3, 7)],
        [streak(KL, 4, 4, 0.2)],
        [streak(KL, 4, 7, 0.3)],
        [KL],
    ),
    ("a value back in bounds ends the streak", DEFAULT, [m(KL, 0.01, 6)], [streak(KL, 4, 5, 0.2)], [], []),
    (
        "the same step seen again changes nothing",
        DEFAULT,
        [m(KL, 0.01, 5)],
        [streak(KL, 4, 5, 0.2)],
        [streak(KL, 4, 5, 0.2)],
        [],
    ),
    (
        "a metric missing this time keeps its streak",
        DEFAULT,
        [m(ESS, 0.9, 6)],
        [streak(KL, 4, 5, 0.2)],
        [streak(KL, 4, 5, 0.2)],
        [],
    ),
    (
        "an earlier step (a resumed attempt) starts over",
        DEFAULT,
        [m(KL, 0.5, 2)],
        [streak(KL, 4, 9, 0.2)],
        [streak(KL, 2, 2, 0.5)],
        [],
    ),
    ("low ESS is a breach", DEFAULT, [m(ESS, 0.1, 3)], [], [streak(ESS, 3, 3, 0.1)], []),
    (
        "one step is enough when asked",
        MismatchGuardSpec(consecutive_steps=1),
        [m(ESS, 0.1, 3), m(KL, 0.01, 3)],
        [],
        [streak(ESS, 3, 3, 0.1)],
        [ESS],
    ),
    ("probs diff is unchecked by default", DEFAULT, [m(DIFF, 0.9, 3)], [], [], []),
    (
        "probs diff checked when set",
        MismatchGuardSpec(max_probs_diff_mean=0.05, consecutive_steps=1),
        [m(DIFF, 0.06, 3)],
        [],
        [streak(DIFF, 3, 3, 0.06)],
        [DIFF],
    ),
    (
        "an unset threshold drops its streak",
        MismatchGuardSpec(max_kl=None),
        [m(KL, 5.0, 9)],
        [streak(KL, 1, 8, 4.0)],
        [],
        [],
    ),
]


@pytest.mark.parametrize(
    ("guard", "metrics", "previous", "expected", "tripped"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_guard_table(
    guard: MismatchGuardSpec,
    metrics: list[MetricValue],
    previous: list[GuardStreak],
    expected: list[GuardStreak],
    tripped: list[str],
) -> None:
    result = evaluate(guard, metrics, previous)
    assert list(result.streaks) == expected
    assert [b.check.metric for b in result.breaches] == tripped
    assert result.tripped == bool(tripped)


def test_the_message_names_metric_value_threshold_and_field() -> None:
    result = evaluate(DEFAULT, [m(KL, 0.31, 6)], [streak(KL, 4, 5, 0.2)])
    assert result.breaches[0].message() == (
        "rollout_corr/kl = 0.31 at step 6, |value| above the threshold 0.1 "
        "(spec.correction.guard.maxKL) for 3 consecutive steps since step 4"
    )
    ess = evaluate(MismatchGuardSpec(consecutive_steps=1), [m(ESS, 0.2, 2)]).breaches[0]
    assert "below the threshold 0.3 (spec.correction.guard.minEffectiveSampleSize)" in ess.message()
