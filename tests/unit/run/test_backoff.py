"""Transient API errors and failed attempts are retried with exponential backoff, bounded and jittered.

Jitter is drawn from each job's identity (seeded, not from the clock), so these tests check its bounds
and spread over many keys, and that two jobs failing together wait differently; never timings.
"""

import datetime
import statistics

import pytest

from flashrl_operator.client.errors import (
    MAX_RETRY_AFTER_SECONDS,
    TransientError,
    classify,
    retry_after_seconds,
)
from flashrl_operator.job.retry_policy import (
    BACKOFF_CAP_SECONDS,
    JITTER_FRACTION,
    backoff_seconds,
    jitter,
)
from flashrl_operator.run.handlers import backoff_delay

KEYS = [f"team-{i}/job-{i}" for i in range(500)]


def test_backoff_grows_per_retry_from_the_base_within_the_jitter() -> None:
    for retry, full in enumerate([5.0, 10.0, 20.0, 40.0, 80.0]):
        delay = backoff_delay(5.0, retry, 300.0, "ns/job")
        assert full * (1 - JITTER_FRACTION) <= delay <= full


def test_backoff_is_capped_even_after_many_retries() -> None:
    assert backoff_delay(5.0, 7, 300.0, "ns/job") <= 300.0
    assert backoff_delay(5.0, 10_000, 300.0, "ns/job") >= 300.0 * (1 - JITTER_FRACTION)


def test_jitter_stays_in_its_bounds_and_spreads_over_them() -> None:
    draws = [jitter(key, 3) for key in KEYS]
    assert all(0.0 <= d < 1.0 for d in draws)
    # Spread over the whole interval, not clustered: each tenth of it gets some of 500 draws.
    assert all(any(t / 10 <= d < (t + 1) / 10 for d in draws) for t in range(10))
    assert 0.4 < statistics.mean(draws) < 0.6


def test_jobs_failing_together_do_not_retry_in_lockstep() -> None:
    delays = [backoff_delay(1.0, 4, 600.0, key) for key in KEYS]
    assert len(set(delays)) > 490
    assert min(delays) >= 16.0 * (1 - JITTER_FRACTION) and max(delays) <= 16.0
    waits = [backoff_seconds(2, key=key) for key in KEYS[:2]]
    assert waits[0] != waits[1]


def test_the_same_job_draws_the_same_wait_each_time() -> None:
    assert backoff_seconds(2, key="uid-1") == backoff_seconds(2, key="uid-1")
    assert backoff_seconds(2, key="uid-1") != backoff_seconds(3, key="uid-1") / 2


def test_attempt_backoff_never_exceeds_its_cap() -> None:
    assert all(backoff_seconds(50, key=k) <= BACKOFF_CAP_SECONDS for k in KEYS[:50])


NOW = datetime.datetime(2026, 10, 21, 7, 28, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("Wed, 21 Oct 2026 07:30:00 GMT", 120.0),
        ("Wednesday, 21-Oct-26 07:28:30 GMT", 30.0),  # RFC 850, obsolete but allowed
        ("Wed Oct 21 07:28:05 2026", 5.0),  # asctime
        ("Wed, 21 Oct 2026 07:00:00 GMT", 0.0),  # already past
        ("999999", MAX_RETRY_AFTER_SECONDS),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_is_read_in_both_forms(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header, NOW) == seconds


def test_an_http_date_retry_after_is_a_floor_for_the_retry() -> None:
    error = classify("get x", 503, "ServiceUnavailable", "busy", "Wed, 21 Oct 2026 07:29:00 GMT", 1.0, NOW)
    assert isinstance(error, TransientError) and error.delay == 60.0
    assert classify("get x", 429, "TooMany", "slow", "garbage", 2.0, NOW).delay == 2.0  # type: ignore[attr-defined]
